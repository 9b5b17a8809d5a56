"""hf_srcfeat: source-feature neural machine translation models for Hugging Face Transformers.

Importing the package is quick: the names below load their modules (and torch, Transformers, Stanza) on first use,
and the zoo's model types join Transformers' Auto classes and `pipeline` as soon as those are loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from .auto_registration import register_with_transformers
from .version import __version__

#: Public name -> the module that defines it.
_MODULE_OF = {
    "AnnotatedSentence": "annotated_sentence",
    "AnnotatedWord": "annotated_sentence",
    "Annotator": "annotator",
    "SpacyAnnotator": "annotator_spacy",
    "StanzaAnnotator": "annotator_stanza",
    "ANNOTATORS": "annotators",
    "annotator_from_settings": "annotators",
    "make_annotator": "annotators",
    "ScoreModification": "attention",
    "SrcFeatAttention": "attention",
    "SrcFeatComposedConfig": "configuration_composed",
    "DepsSanConfig": "configuration_deps_san",
    "DiverseInputConfig": "configuration_diverse_input",
    "LatentFeedbackConfig": "configuration_latent_feedback",
    "PhraseRepConfig": "configuration_phrase_rep",
    "RelevanceFeaturesConfig": "configuration_relevance_features",
    "SrcFeatTransformerConfig": "configuration_srcfeat_transformer",
    "read_conllu": "conllu",
    "write_conllu": "conllu",
    "FeatureVocabularies": "feature_vocabulary",
    "FeatureVocabulary": "feature_vocabulary",
    "SrcFeatComposedForConditionalGeneration": "modeling_composed",
    "SrcFeatComposedModel": "modeling_composed",
    "DepsSanForConditionalGeneration": "modeling_deps_san",
    "DepsSanModel": "modeling_deps_san",
    "DiverseInputForConditionalGeneration": "modeling_diverse_input",
    "DiverseInputModel": "modeling_diverse_input",
    "LatentFeedbackForConditionalGeneration": "modeling_latent_feedback",
    "LatentFeedbackModel": "modeling_latent_feedback",
    "PhraseRepForConditionalGeneration": "modeling_phrase_rep",
    "PhraseRepModel": "modeling_phrase_rep",
    "RelevanceFeaturesForConditionalGeneration": "modeling_relevance_features",
    "RelevanceFeaturesModel": "modeling_relevance_features",
    "DecoderLayerContext": "modeling_srcfeat_transformer",
    "EncoderLayerContext": "modeling_srcfeat_transformer",
    "SrcFeatDecoder": "modeling_srcfeat_transformer",
    "SrcFeatDecoderLayer": "modeling_srcfeat_transformer",
    "SrcFeatEncoder": "modeling_srcfeat_transformer",
    "SrcFeatEncoderLayer": "modeling_srcfeat_transformer",
    "SrcFeatEncoderOutput": "modeling_srcfeat_transformer",
    "SrcFeatTransformerForConditionalGeneration": "modeling_srcfeat_transformer",
    "SrcFeatTransformerModel": "modeling_srcfeat_transformer",
    "SrcFeatTransformerPreTrainedModel": "modeling_srcfeat_transformer",
    "SourceFeatureTranslationPipeline": "pipeline_translation",
    "pipeline": "pipeline_translation",
    "register_pipeline": "pipeline_translation",
    "SOURCE_FEATURE_NAMES": "source_features",
    "SourceFeatures": "source_features",
    "SourceFeatureTokenizer": "tokenization_source_features",
    "train_source_feature_tokenizer": "tokenization_source_features",
    "PretrainedSourceFeatureTokenizer": "tokenization_pretrained_source_features",
    "load_tokenizer": "tokenization_pretrained_source_features",
    "SourceFeatureCollator": "data.batching",
}

if TYPE_CHECKING:  # the names for type checkers and editors
    from .annotated_sentence import AnnotatedSentence, AnnotatedWord
    from .annotator import Annotator
    from .annotator_spacy import SpacyAnnotator
    from .annotator_stanza import StanzaAnnotator
    from .annotators import ANNOTATORS, annotator_from_settings, make_annotator
    from .attention import ScoreModification, SrcFeatAttention
    from .configuration_composed import SrcFeatComposedConfig
    from .configuration_deps_san import DepsSanConfig
    from .configuration_diverse_input import DiverseInputConfig
    from .configuration_latent_feedback import LatentFeedbackConfig
    from .configuration_phrase_rep import PhraseRepConfig
    from .configuration_relevance_features import RelevanceFeaturesConfig
    from .configuration_srcfeat_transformer import SrcFeatTransformerConfig
    from .conllu import read_conllu, write_conllu
    from .data.batching import SourceFeatureCollator
    from .feature_vocabulary import FeatureVocabularies, FeatureVocabulary
    from .modeling_composed import SrcFeatComposedForConditionalGeneration, SrcFeatComposedModel
    from .modeling_deps_san import DepsSanForConditionalGeneration, DepsSanModel
    from .modeling_diverse_input import DiverseInputForConditionalGeneration, DiverseInputModel
    from .modeling_latent_feedback import LatentFeedbackForConditionalGeneration, LatentFeedbackModel
    from .modeling_phrase_rep import PhraseRepForConditionalGeneration, PhraseRepModel
    from .modeling_relevance_features import RelevanceFeaturesForConditionalGeneration, RelevanceFeaturesModel
    from .modeling_srcfeat_transformer import (
        DecoderLayerContext,
        EncoderLayerContext,
        SrcFeatDecoder,
        SrcFeatDecoderLayer,
        SrcFeatEncoder,
        SrcFeatEncoderLayer,
        SrcFeatEncoderOutput,
        SrcFeatTransformerForConditionalGeneration,
        SrcFeatTransformerModel,
        SrcFeatTransformerPreTrainedModel,
    )
    from .pipeline_translation import SourceFeatureTranslationPipeline, pipeline, register_pipeline
    from .source_features import SOURCE_FEATURE_NAMES, SourceFeatures
    from .tokenization_pretrained_source_features import PretrainedSourceFeatureTokenizer, load_tokenizer
    from .tokenization_source_features import SourceFeatureTokenizer, train_source_feature_tokenizer


def __getattr__(name: str) -> Any:
    if name == "MODEL_CLASSES":
        from .auto_registration import model_classes

        value: Any = model_classes()
    elif name == "MODEL_CLASSES_BY_TYPE":
        from .auto_registration import model_classes_by_type

        value = model_classes_by_type()
    elif name in _MODULE_OF:
        value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    elif "." not in name and not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # A submodule, as `hf_srcfeat.quantization.quantize_linear_layers` reads after `import hf_srcfeat`.
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF) | {"MODEL_CLASSES", "MODEL_CLASSES_BY_TYPE"})


register_with_transformers()

__all__ = [
    "ANNOTATORS",
    "SOURCE_FEATURE_NAMES",
    "__version__",
    "make_annotator",
    "AnnotatedSentence",
    "AnnotatedWord",
    "DepsSanConfig",
    "DepsSanForConditionalGeneration",
    "DepsSanModel",
    "DiverseInputConfig",
    "DiverseInputForConditionalGeneration",
    "DiverseInputModel",
    "FeatureVocabularies",
    "FeatureVocabulary",
    "SourceFeatureTokenizer",
    "SrcFeatComposedConfig",
    "SrcFeatComposedForConditionalGeneration",
    "SrcFeatComposedModel",
    "SourceFeatureTranslationPipeline",
    "StanzaAnnotator",
    "SpacyAnnotator",
    "Annotator",
    "annotator_from_settings",
    "LatentFeedbackConfig",
    "LatentFeedbackForConditionalGeneration",
    "LatentFeedbackModel",
    "PhraseRepConfig",
    "PhraseRepForConditionalGeneration",
    "PhraseRepModel",
    "RelevanceFeaturesConfig",
    "RelevanceFeaturesForConditionalGeneration",
    "RelevanceFeaturesModel",
    "pipeline",
    "register_pipeline",
    "read_conllu",
    "write_conllu",
    "train_source_feature_tokenizer",
    "PretrainedSourceFeatureTokenizer",
    "load_tokenizer",
    "SourceFeatureCollator",
    "DecoderLayerContext",
    "EncoderLayerContext",
    "ScoreModification",
    "SourceFeatures",
    "SrcFeatAttention",
    "SrcFeatDecoder",
    "SrcFeatDecoderLayer",
    "SrcFeatEncoder",
    "SrcFeatEncoderLayer",
    "SrcFeatEncoderOutput",
    "SrcFeatTransformerConfig",
    "SrcFeatTransformerForConditionalGeneration",
    "SrcFeatTransformerModel",
    "SrcFeatTransformerPreTrainedModel",
]
