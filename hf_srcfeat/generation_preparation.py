"""What `generate` prepares before the zoo's decoding loops run, kept for later calls with the same settings.

Before its loop, Transformers' `generate` prepares the call: it deep-copies and completes the generation config,
validates the arguments, turns the special tokens into tensors, and builds the logits processors and stopping
criteria. Reusing them saves about 0.7 ms of a call that decodes one sentence greedily on a CPU, 4-5% of it
(`benchmarks/greedy_step_costs.py`, its `paired_preparation` arm). None of it depends on the source
sentences when the zoo's loops run: they take only processors and criteria that look at each output row on its own
(`hf_srcfeat.decoding.ROW_WISE_PROCESSORS`), and every setting comes from the call's arguments and the model's
generation config. So a call whose loop is the zoo's records what `generate` handed the loop, and a later call with
the same arguments (the tensors aside) and an unchanged generation config runs Transformers' own input preparation
(the encoder, the decoder's start tokens, the beams' expansion) and the loop with it, skipping the rest.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig

from .decoding import in_inference_mode
from .source_features import SOURCE_FEATURE_NAMES, is_user_factor_feature

#: How many settings a model keeps preparations for (the most recently recorded first).
KEPT_PREPARATIONS = 4

#: Setting values compared by equality; anything else (a tensor, a callable, a processor list) is never recorded.
_PLAIN_VALUES = (bool, int, float, str, type(None))


def is_input_tensor(name: str) -> bool:
    """Whether `generate`'s keyword argument `name` is one of the model's per-sentence inputs."""
    return name in ("input_ids", "attention_mask", *SOURCE_FEATURE_NAMES) or is_user_factor_feature(name)


def _settings(arguments: dict) -> dict | None:
    """The call's arguments other than its input tensors, each as (type, value) so that e.g. `True` and `1` differ,
    a generation config as its attributes; None where one cannot be compared (the call is then neither recorded nor
    replayed)."""
    settings = {}
    for name, value in arguments.items():
        if is_input_tensor(name):
            continue
        if isinstance(value, GenerationConfig):
            value = value.__dict__
        elif not isinstance(value, _PLAIN_VALUES):
            return None
        settings[name] = (type(value), value)
    return settings


def _input_names(arguments: dict) -> frozenset[str]:
    return frozenset(name for name in arguments if is_input_tensor(name))


def _equal(first: Any, second: Any) -> bool:
    """`first == second`, or False where the comparison cannot answer (e.g. a tensor of several values)."""
    try:
        return bool(first == second)
    except (RuntimeError, TypeError, ValueError):
        return False


@dataclass
class GenerationPreparation:
    """What one `generate` call handed the zoo's loop, and what it was prepared from."""

    settings: dict  # a copy of the call's arguments other than its input tensors (`_settings`)
    input_names: frozenset[str]  # the call's input tensors
    device: torch.device
    model_generation_config: dict  # a copy of the model's generation config's attributes
    decoding_method: str  # the model's method `generate` called with them: "_sample" or "_beam_search"
    generation_config: GenerationConfig  # as `generate` completed it
    logits_processor: Any
    stopping_criteria: Any
    loop_options: dict  # the method's other keyword arguments (`use_cache`, ...)

    def matches(self, model: Any, arguments: dict) -> bool:
        input_ids = arguments.get("input_ids")
        return (isinstance(input_ids, torch.Tensor) and input_ids.device == self.device
                and _input_names(arguments) == self.input_names
                and _equal(model.generation_config.__dict__, self.model_generation_config)
                and _equal(_settings(arguments), self.settings))

    def generate(self, model: Any, arguments: dict) -> torch.Tensor:
        """What `generate(**arguments)` returns: Transformers' own preparation of the inputs, then the decoding method
        `generate` called, with what it was handed (the method hands it to the zoo's loop, as before); all of it in
        inference mode, as the loop runs (`hf_srcfeat.decoding.in_inference_mode`)."""
        token = _CALL.set(None)  # nothing to record: this call was
        try:
            return in_inference_mode(self._prepare_and_decode)(model, arguments)
        finally:
            _CALL.reset(token)

    def _prepare_and_decode(self, model: Any, arguments: dict) -> torch.Tensor:
        input_ids = arguments["input_ids"]
        config = self.generation_config
        model_kwargs = {name: value for name, value in arguments.items() if is_input_tensor(name) and name != "input_ids"}
        model_kwargs = model._maybe_prepare_encoder_kwargs_for_generation(input_ids, model_kwargs, "input_ids", config)
        decoder_input_ids, model_kwargs = model._prepare_decoder_input_ids_for_generation(
            batch_size=input_ids.shape[0], model_input_name="input_ids", model_kwargs=model_kwargs,
            decoder_start_token_id=config._decoder_start_token_tensor, device=input_ids.device)
        decoder_input_ids, model_kwargs = model._expand_inputs_for_generation(
            input_ids=decoder_input_ids, expand_size=max(config.num_beams, config.num_return_sequences),
            is_encoder_decoder=True, **model_kwargs)
        return getattr(model, self.decoding_method)(
            decoder_input_ids, logits_processor=self.logits_processor, stopping_criteria=self.stopping_criteria,
            generation_config=config, **model_kwargs, **self.loop_options)


# The `generate` call being prepared in this thread or task: (model, its keyword arguments).
_CALL: contextvars.ContextVar[tuple[Any, dict] | None] = contextvars.ContextVar("hf_srcfeat_generate_call",
                                                                                default=None)


@contextlib.contextmanager
def recording(model: Any, arguments: dict) -> Iterator[None]:
    """Within the block, a loop `generate` hands to the zoo on `model` is recorded (`record_loop`) for these
    arguments."""
    token = _CALL.set((model, arguments))
    try:
        yield
    finally:
        _CALL.reset(token)


def record_loop(model: Any, decoding_method: str, generation_config: GenerationConfig, logits_processor: Any,
                stopping_criteria: Any, model_kwargs: dict) -> None:
    """Keep what `generate` handed `model`'s `decoding_method` ("_sample" or "_beam_search"), which hands it to the
    zoo's loop, for later calls with the settings of the call `recording` names, if that call is `model`'s and it
    can be compared: plain setting values, the per-sentence inputs all in the model's own input tensors, an
    attention mask, and nothing else the loop takes that is a tensor."""
    call = _CALL.get()
    if call is None or call[0] is not model:
        return
    arguments = call[1]
    settings = _settings(arguments)
    input_ids = arguments.get("input_ids")
    loop_options = {name: value for name, value in model_kwargs.items()
                    if name not in ("encoder_outputs", "attention_mask")}
    if (settings is None or not isinstance(input_ids, torch.Tensor)
            or not isinstance(arguments.get("attention_mask"), torch.Tensor)
            or not all(isinstance(value, _PLAIN_VALUES) for value in loop_options.values())):
        return
    preparation = GenerationPreparation(
        settings=copy.deepcopy(settings), input_names=_input_names(arguments), device=input_ids.device,
        model_generation_config=copy.deepcopy(model.generation_config.__dict__), decoding_method=decoding_method,
        generation_config=generation_config, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
        loop_options=loop_options)
    kept = [other for other in model.__dict__.get("_generation_preparations", ())
            if not (other.input_names == preparation.input_names and _equal(other.settings, settings))]
    model.__dict__["_generation_preparations"] = [preparation, *kept][:KEPT_PREPARATIONS]


def matching_preparation(model: Any, arguments: dict) -> GenerationPreparation | None:
    """The preparation `model` recorded for a call with these arguments, or None."""
    for preparation in model.__dict__.get("_generation_preparations", ()):
        if preparation.matches(model, arguments):
            return preparation
    return None


def forget_preparations(model: Any) -> None:
    """Drop what `model` kept from earlier `generate` calls: the next call with any settings prepares anew (as after
    changing something a preparation depends on that it does not compare, such as the model's config)."""
    model.__dict__.pop("_generation_preparations", None)


__all__ = ["GenerationPreparation", "forget_preparations", "matching_preparation", "record_loop", "recording",
           "is_input_tensor"]
