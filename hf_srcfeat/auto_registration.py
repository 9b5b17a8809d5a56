"""The zoo's model types in Transformers' Auto classes, and its translation task in `pipeline`.

`import hf_srcfeat` must stay quick (it loads neither torch nor Transformers), yet it promises that
`AutoModelForSeq2SeqLM.from_pretrained(run)` knows the zoo's model types afterwards. So each registration runs when
the Transformers module it fills is there: at once if it was imported already, otherwise right after it is
imported (a finder on `sys.meta_path` that wraps that one module's loader; Python offers no post-import hook of
its own). Each part imports only what it registers, so no registration runs inside a half-initialised module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: (model type, configuration module, config class, modeling module, base model class, model with LM head).
_MODEL_MODULES = (
    ("srcfeat_transformer", "configuration_srcfeat_transformer", "SrcFeatTransformerConfig",
     "modeling_srcfeat_transformer", "SrcFeatTransformerModel", "SrcFeatTransformerForConditionalGeneration"),
    ("deps_san", "configuration_deps_san", "DepsSanConfig", "modeling_deps_san", "DepsSanModel",
     "DepsSanForConditionalGeneration"),
    ("relevance_features", "configuration_relevance_features", "RelevanceFeaturesConfig",
     "modeling_relevance_features", "RelevanceFeaturesModel", "RelevanceFeaturesForConditionalGeneration"),
    ("diverse_input", "configuration_diverse_input", "DiverseInputConfig", "modeling_diverse_input",
     "DiverseInputModel", "DiverseInputForConditionalGeneration"),
    ("phrase_rep", "configuration_phrase_rep", "PhraseRepConfig", "modeling_phrase_rep", "PhraseRepModel",
     "PhraseRepForConditionalGeneration"),
    ("latent_feedback", "configuration_latent_feedback", "LatentFeedbackConfig", "modeling_latent_feedback",
     "LatentFeedbackModel", "LatentFeedbackForConditionalGeneration"),
    ("srcfeat_composed", "configuration_composed", "SrcFeatComposedConfig", "modeling_composed",
     "SrcFeatComposedModel", "SrcFeatComposedForConditionalGeneration"),
)
#: The zoo's model types, known without importing a model (for help texts).
MODEL_TYPES = tuple(model_type for model_type, *_ in _MODEL_MODULES)


def _attribute(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"hf_srcfeat.{module}"), name)


def config_classes() -> list[Any]:
    """Every model type's config class."""
    return [_attribute(module, name) for _, module, name, *_ in _MODEL_MODULES]


def model_classes() -> tuple[tuple[Any, Any, Any], ...]:
    """(config, base model, model with LM head) of every model of the zoo."""
    return tuple((_attribute(config_module, config_name), _attribute(model_module, base_name),
                  _attribute(model_module, generation_name))
                 for _, config_module, config_name, model_module, base_name, generation_name in _MODEL_MODULES)


def model_classes_by_type() -> dict[str, type]:
    """Model type -> its model with LM head."""
    return {config.model_type: generation for config, _, generation in model_classes()}


def _register_configs(auto_module: ModuleType) -> None:
    for config_class in config_classes():
        auto_module.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)


def _register_models(auto_module: ModuleType) -> None:
    for config_class, model_class, generation_class in model_classes():
        auto_module.AutoModel.register(config_class, model_class, exist_ok=True)
        auto_module.AutoModelForSeq2SeqLM.register(config_class, generation_class, exist_ok=True)


def _register_tokenizer(auto_module: ModuleType) -> None:
    tokenizer_class = _attribute("tokenization_source_features", "SourceFeatureTokenizer")
    for config_class in config_classes():
        auto_module.AutoTokenizer.register(config_class, tokenizer_class=tokenizer_class, exist_ok=True)


def _register_pipeline(_: ModuleType) -> None:
    _attribute("pipeline_translation", "register_pipeline")()


#: Transformers module -> what fills it; each runs once, when its module is there.
REGISTRATIONS: dict[str, Callable[[ModuleType], None]] = {
    "transformers.models.auto.configuration_auto": _register_configs,
    "transformers.models.auto.modeling_auto": _register_models,
    "transformers.models.auto.tokenization_auto": _register_tokenizer,
    "transformers.pipelines": _register_pipeline,
}

_pending = dict(REGISTRATIONS)
#: Modules of Transformers or of this package executing right now: registering while any is half-initialised
#: would import from it (Transformers' Auto modules load in the middle of `modeling_utils`, for one).
_executing = 0
_registering = False


def _run(registration: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        registration(module)
    except Exception as error:  # a broken registration must not make Transformers itself unimportable
        warnings.warn(f"hf_srcfeat could not register its model types with {module.__name__}: {error!r}",
                      stacklevel=2)


def _register_pending() -> None:
    global _registering
    if _registering or _executing:
        return
    _registering = True
    try:
        progress = True
        while progress:
            progress = False
            for name, registration in list(_pending.items()):
                module = sys.modules.get(name)
                if module is not None:
                    del _pending[name]
                    _run(registration, module)
                    progress = True
    finally:
        _registering = False
    if not _pending and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the modules of Transformers and of this package it returns the normal spec, with
    a loader that counts the module as executing and, once no such module is, runs the registrations due."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(("transformers.", "hf_srcfeat.")):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec_module = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            global _executing
            _executing += 1
            try:
                original_exec_module(module)
            finally:
                _executing -= 1
            _register_pending()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_FINDER = _RegisterAfterImport()


def register_with_transformers() -> None:
    """Registers now with the Transformers modules already imported, and with the others as they load."""
    if _pending and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _register_pending()
