"""Several methods in one model. Each method's encoder, layer, context, output and decoder classes
override different extension points of the backbone and call `super()` where they share a hook
(`layer_contexts`), so the composed classes are the methods' own classes combined by inheritance, in the order of
`COMPONENT_CONFIGS`. Nothing of a method is re-implemented here."""

from __future__ import annotations

import functools
from dataclasses import make_dataclass

import torch

from .configuration_composed import COMPONENT_CONFIGS, SrcFeatComposedConfig
from .modeling_deps_san import DepsSanModel
from .modeling_diverse_input import DiverseInputModel
from .modeling_latent_feedback import (
    LatentFeedbackForConditionalGeneration,
    LatentFeedbackModel,
    lfe_embedding_ties,
)
from .modeling_phrase_rep import PhraseRepModel
from .modeling_relevance_features import RelevanceFeaturesForConditionalGeneration, RelevanceFeaturesModel
from .modeling_srcfeat_transformer import (
    SrcFeatDecoder,
    SrcFeatEncoder,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)

COMPONENT_MODELS: dict[str, type[SrcFeatTransformerModel]] = {
    "relevance_features": RelevanceFeaturesModel,
    "diverse_input": DiverseInputModel,
    "deps_san": DepsSanModel,
    "phrase_rep": PhraseRepModel,
    "latent_feedback": LatentFeedbackModel,
}


def combined_class(name: str, classes: list[type], backbone: type, dataclass: bool = False) -> type:
    """The backbone class when no component replaces it, the one replacement, or a class inheriting them all
    (a dataclass of all their fields for contexts and outputs)."""
    replacements = [cls for cls in dict.fromkeys(classes) if cls is not backbone]
    if not replacements:
        return backbone
    if len(replacements) == 1:
        return replacements[0]
    if dataclass:
        return make_dataclass(name, [], bases=tuple(replacements))
    return type(name, tuple(replacements), {})


def ordered(components: tuple[str, ...]) -> list[str]:
    return [name for name in COMPONENT_CONFIGS if name in components]


@functools.cache
def composed_encoder_class(components: tuple[str, ...]) -> type[SrcFeatEncoder]:
    encoders = [COMPONENT_MODELS[name].encoder_class for name in ordered(components)]
    if len(encoders) <= 1:
        return encoders[0] if encoders else SrcFeatEncoder
    title = "".join(encoder.__name__.removesuffix("Encoder") for encoder in encoders)
    return type(f"{title}Encoder", tuple(encoders), {
        "layer_class": combined_class(f"{title}EncoderLayer", [e.layer_class for e in encoders],
                                      SrcFeatEncoder.layer_class),
        "context_class": combined_class(f"{title}EncoderLayerContext", [e.context_class for e in encoders],
                                        SrcFeatEncoder.context_class, dataclass=True),
        "output_class": combined_class(f"{title}EncoderOutput", [e.output_class for e in encoders],
                                       SrcFeatEncoder.output_class, dataclass=True),
    })


@functools.cache
def composed_decoder_class(components: tuple[str, ...]) -> type[SrcFeatDecoder]:
    decoders = [COMPONENT_MODELS[name].decoder_class for name in ordered(components)]
    title = "".join(decoder.__name__.removesuffix("Decoder") for decoder in decoders)
    return combined_class(f"{title}Decoder", decoders, SrcFeatDecoder)


class SrcFeatComposedModel(SrcFeatTransformerModel):
    """Encoder-decoder whose encoder and decoder combine those of `config.components`."""

    config_class = SrcFeatComposedConfig

    @property
    def encoder_class(self) -> type[SrcFeatEncoder]:
        return composed_encoder_class(tuple(self.config.components))

    @property
    def decoder_class(self) -> type[SrcFeatDecoder]:
        return composed_decoder_class(tuple(self.config.components))

    def _embedding_ties(self) -> dict[str, str]:
        ties = super()._embedding_ties()
        if "latent_feedback" in self.config.components:
            ties.update(lfe_embedding_ties(self.config))  # type: ignore[arg-type]  # a composed config with LFE arguments
        return ties


class SrcFeatComposedForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    """Several methods in one translation model; see [`SrcFeatComposedConfig`]."""

    config_class = SrcFeatComposedConfig
    model_class = SrcFeatComposedModel

    def load_pretrained_parts(self) -> None:
        """Initialise a pre-trained latent feature encoder (`lfe_pretrained_from`), as the LFE model does."""
        if "latent_feedback" in self.config.components:
            # The component's method, run on this model: it has the LFE model's parts (composition by inheritance).
            LatentFeedbackForConditionalGeneration.load_pretrained_parts(self)  # type: ignore[arg-type]

    def load_lfe_from(self, pretrained_encoder: SrcFeatEncoder) -> None:
        LatentFeedbackForConditionalGeneration.load_lfe_from(self, pretrained_encoder)  # type: ignore[arg-type]

    def relevance_masks(self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                        **features) -> dict[str, torch.Tensor]:
        """The relevance masks of the source factors (with the relevance_features component), as
        [`RelevanceFeaturesForConditionalGeneration.relevance_masks`] gives them."""
        if "relevance_features" not in self.config.components:
            raise ValueError(f"Relevance masks come from the relevance_features component, which is not among "
                             f"this model's components {self.config.components}.")
        return RelevanceFeaturesForConditionalGeneration.relevance_masks(
            self, input_ids, inputs_embeds, **features)  # type: ignore[arg-type]


__all__ = ["SrcFeatComposedForConditionalGeneration", "SrcFeatComposedModel"]
