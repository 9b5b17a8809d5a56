"""Configuration of a model that uses several methods of the zoo at once: each method touches its own
extension point of the backbone (source input, self-attention scores, extra sublayers, an auxiliary encoder), so
any methods on different extension points compose."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from .configuration_deps_san import DepsSanConfig
from .configuration_diverse_input import DiverseInputConfig
from .configuration_latent_feedback import LatentFeedbackConfig
from .configuration_phrase_rep import PhraseRepConfig
from .configuration_relevance_features import RelevanceFeaturesConfig
from .configuration_srcfeat_transformer import TOKENIZER_SIZE_ARGUMENTS, SrcFeatTransformerConfig

#: Every method that can be a component, by its model type, in the order they are composed: input representation
#: first, then what changes the encoder layers.
COMPONENT_CONFIGS: dict[str, type[SrcFeatTransformerConfig]] = {
    "relevance_features": RelevanceFeaturesConfig,
    "diverse_input": DiverseInputConfig,
    "deps_san": DepsSanConfig,
    "phrase_rep": PhraseRepConfig,
    "latent_feedback": LatentFeedbackConfig,
}
#: Where each method changes the backbone; two methods on one extension point cannot compose.
EXTENSION_POINTS = {
    "relevance_features": "the source input representation",
    "diverse_input": "the source input representation",
    "deps_san": "the encoder self-attention scores",
    "phrase_rep": "extra phrase-attention sublayers (encoder and decoder)",
    "latent_feedback": "the encoder self-attention input, fed by an auxiliary encoder",
}
BACKBONE_ARGUMENTS = [name for name in inspect.signature(SrcFeatTransformerConfig.__init__).parameters
                      if name not in ("self", "kwargs")]


def own_arguments(config_class: type[SrcFeatTransformerConfig]) -> list[str]:
    """The arguments a method's config adds to the backbone's."""
    parameters = inspect.signature(config_class.__init__).parameters
    return [name for name, parameter in parameters.items()
            if name != "self" and parameter.kind is parameter.POSITIONAL_OR_KEYWORD and name not in BACKBONE_ARGUMENTS]


#: Method -> the arguments its config adds to the backbone's.
COMPONENT_ARGUMENTS = {name: own_arguments(config_class) for name, config_class in COMPONENT_CONFIGS.items()}
#: Facts about the tokenizer (the keys of `FeatureVocabularies.sizes()`), accepted whether or not an enabled method
#: uses them.
VOCABULARY_SIZE_ARGUMENTS = TOKENIZER_SIZE_ARGUMENTS


class SrcFeatComposedConfig(SrcFeatTransformerConfig):
    r"""
    Configuration of [`SrcFeatComposedForConditionalGeneration`]: the backbone with several methods at once. Takes
    every argument of [`SrcFeatTransformerConfig`], plus:

    Args:
        components (`list[str]`, *optional*, defaults to `[]`):
            The methods to combine, by model type: any of `"relevance_features"` or `"diverse_input"` (both change
            the source input representation, so at most one), `"deps_san"`, `"phrase_rep"`, `"latent_feedback"`.
            No component is the baseline; one component is exactly that method's model (same parameters, same
            logits).
        **kwargs:
            The arguments of the components' configs ([`RelevanceFeaturesConfig`], [`DepsSanConfig`], ...), by
            their names; each component validates its own as it would alone. An argument of a method that is not
            among `components` is an error (the tokenizer's vocabulary sizes, `num_lemmas` ..., are accepted and
            left unused). A backbone argument that a component defaults differently (relevance features:
            `share_embeddings=False`) takes the component's default unless given.

    The components' properties (`scaled_layers`, `factor_widths`, ...) read through this config.
    """

    model_type = "srcfeat_composed"

    def __init__(self, components: Sequence[str] = (), **kwargs):
        self.components = list(components) if isinstance(components, (list, tuple)) else components
        check_components(self.components)
        backbone = {name: kwargs.pop(name) for name in BACKBONE_ARGUMENTS if name in kwargs}
        settings = self._take_component_arguments(kwargs)
        # Each method validates its own arguments on the shared backbone, as it would alone.
        configs = {name: COMPONENT_CONFIGS[name](**backbone, **settings[name]) for name in self.components}
        resolved = self._backbone_defaults_of_components(backbone, configs)
        if resolved != backbone:  # again on the backbone every component now shares
            configs = {name: COMPONENT_CONFIGS[name](**resolved, **settings[name]) for name in self.components}
        self._component_configs = configs
        for name, component in configs.items():
            for argument in COMPONENT_ARGUMENTS[name]:
                setattr(self, argument, getattr(component, argument))
        super().__init__(**resolved, **kwargs)

    def _take_component_arguments(self, kwargs: dict) -> dict[str, dict]:
        """Move each method argument out of `kwargs` to the enabled components that take it."""
        settings: dict[str, dict] = {name: {} for name in self.components}
        for argument in list(kwargs):
            owners = [name for name, arguments in COMPONENT_ARGUMENTS.items() if argument in arguments]
            if not owners:
                continue  # Transformers' own keys (architectures, auto_map, ...) stay with PretrainedConfig
            value = kwargs.pop(argument)
            enabled = [name for name in owners if name in self.components]
            if not enabled and argument not in VOCABULARY_SIZE_ARGUMENTS:
                raise ValueError(f"`{argument}` is an argument of {' and '.join(owners)}, which is not among "
                                 f"`components` {self.components}.")
            for name in enabled:
                settings[name][argument] = value
        return settings

    def _backbone_defaults_of_components(self, backbone: dict, configs: dict[str, SrcFeatTransformerConfig]) -> dict:
        """The given backbone arguments, plus those that an enabled component defaults differently."""
        resolved = dict(backbone)
        reference = SrcFeatTransformerConfig(**backbone)
        for argument in BACKBONE_ARGUMENTS:
            if argument in backbone:
                continue
            changed = {name: getattr(config, argument) for name, config in configs.items()
                       if getattr(config, argument) != getattr(reference, argument)}
            if len({repr(value) for value in changed.values()}) > 1:
                raise ValueError(f"The components default `{argument}` differently ({changed}); set it.")
            if changed:
                resolved[argument] = next(iter(changed.values()))
        return resolved

    @property
    def source_features_read(self) -> tuple[str, ...]:
        """What any component reads, in the components' order."""
        names = [name for component in self._component_configs.values() for name in component.source_features_read]
        return tuple(dict.fromkeys(names))

    def check_arguments(self) -> None:
        super().check_arguments()
        if "latent_feedback" in self.components and len(self.components) > 1:
            if self.share_lfe_parameters:
                raise ValueError("`share_lfe_parameters=True` makes the NMT encoder its own latent feature encoder, "
                                 f"which cannot run the other components {self.components} on itself; use a separate "
                                 "LFE (the default).")
            if ("relevance_features" in self.components and not self.lfe_has_own_embeddings
                    and self.factor_widths["word"] != self.d_model):
                raise ValueError(
                    f"A joint-trained LFE reads the NMT source token embeddings, which relevance features make "
                    f"{self.factor_widths['word']} wide (not d_model {self.d_model}); set `lfe_own_embeddings=True` "
                    "or `relevance_combine='add'`.")

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        # The components compute their properties (factor_widths, scaled_layers, ...) from their own copies of the
        # arguments: a change made after construction must reach them too.
        for component_name, component in (self.__dict__.get("_component_configs") or {}).items():
            if name in BACKBONE_ARGUMENTS or name in COMPONENT_ARGUMENTS[component_name]:
                setattr(component, name, value)

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails: the components' properties and helpers (DepsSanConfig.scaled_layers,
        # RelevanceFeaturesConfig.factor_widths, ...), computed by the component's own config.
        components = self.__dict__.get("_component_configs") or {}
        if not name.startswith("_"):
            for component in components.values():
                if hasattr(type(component), name) and not hasattr(SrcFeatTransformerConfig, name):
                    return getattr(component, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_dict(self) -> dict:
        output = super().to_dict()
        output.pop("_component_configs", None)  # rebuilt from the flat arguments when loaded
        return output


def check_components(components: object) -> None:
    """Raise a ValueError naming the problem unless `components` is a list of distinct, composable methods."""
    if not isinstance(components, list) or not all(isinstance(name, str) for name in components):
        raise ValueError(f"`components` must be a list of model types from {list(COMPONENT_CONFIGS)}, got "
                         f"{components!r}.")
    unknown = [name for name in components if name not in COMPONENT_CONFIGS]
    if unknown or len(set(components)) != len(components):
        raise ValueError(f"`components` must be distinct model types from {list(COMPONENT_CONFIGS)}, got "
                         f"{components!r}.")
    for index, first in enumerate(components):
        for second in components[index + 1:]:
            if EXTENSION_POINTS[first] == EXTENSION_POINTS[second]:
                raise ValueError(f"`components` {first} and {second} both replace {EXTENSION_POINTS[first]}, so "
                                 "they cannot compose; choose one.")


__all__ = ["SrcFeatComposedConfig", "COMPONENT_ARGUMENTS", "COMPONENT_CONFIGS"]
