"""hf_srcfeat: source-feature neural machine translation models for Hugging Face Transformers."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .attention import ScoreModification, SrcFeatAttention
from .configuration_srcfeat_transformer import SrcFeatTransformerConfig
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
from .source_features import SOURCE_FEATURE_NAMES, SourceFeatures

__version__ = "0.1.0"


def _register_auto_classes() -> None:
    AutoConfig.register(SrcFeatTransformerConfig.model_type, SrcFeatTransformerConfig, exist_ok=True)
    AutoModel.register(SrcFeatTransformerConfig, SrcFeatTransformerModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(SrcFeatTransformerConfig, SrcFeatTransformerForConditionalGeneration,
                                   exist_ok=True)


_register_auto_classes()

__all__ = [
    "SOURCE_FEATURE_NAMES",
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
