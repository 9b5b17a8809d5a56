"""hf_srcfeat: source-feature neural machine translation models for Hugging Face Transformers."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

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
from .tokenization_source_features import SourceFeatureTokenizer, train_source_feature_tokenizer
from .version import __version__

#: (config, base model, model with LM head) of every model of the zoo.
MODEL_CLASSES = (
    (SrcFeatTransformerConfig, SrcFeatTransformerModel, SrcFeatTransformerForConditionalGeneration),
    (DepsSanConfig, DepsSanModel, DepsSanForConditionalGeneration),
    (RelevanceFeaturesConfig, RelevanceFeaturesModel, RelevanceFeaturesForConditionalGeneration),
    (DiverseInputConfig, DiverseInputModel, DiverseInputForConditionalGeneration),
    (PhraseRepConfig, PhraseRepModel, PhraseRepForConditionalGeneration),
    (LatentFeedbackConfig, LatentFeedbackModel, LatentFeedbackForConditionalGeneration),
    (SrcFeatComposedConfig, SrcFeatComposedModel, SrcFeatComposedForConditionalGeneration),
)

MODEL_CLASSES_BY_TYPE = {config.model_type: generation for config, _, generation in MODEL_CLASSES}


def _register_auto_classes() -> None:
    for config_class, model_class, generation_class in MODEL_CLASSES:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
        AutoModelForSeq2SeqLM.register(config_class, generation_class, exist_ok=True)
        AutoTokenizer.register(config_class, tokenizer_class=SourceFeatureTokenizer, exist_ok=True)
    register_pipeline()


_register_auto_classes()

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
    "read_conllu",
    "write_conllu",
    "train_source_feature_tokenizer",
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
