"""The decoder's step in the zoo's decoding loops, as tensor operations over weights looked up once per call.

`DecoderState.step` runs the decoder layer by layer through their modules. In a step of one new token per row most
of that time is not arithmetic: module calls, the linear layers' checks before each product (which copy of the
weight to read, whether gradients are needed), Transformers' attention dispatch. For decoders whose layers are
the baseline's (`SrcFeatDecoderLayer` with its own attention, feed-forward and residual sublayers: the baseline
and every method that changes only the encoder), `DecoderStep` computes every such step, from the target
embedding to the logits, with the same operations in the same order, reading the layers' parameters and the
products' prepared weights (`hf_srcfeat.linear.inference_product`) it looked up when the loop started; the first
step fills the cross-attention cache from the encoder memory as the modules fill it. The same logits and caches
to the bit (tests); one sentence decoded greedily on a CPU takes about 0.65-0.75x the time, a batch of 32 with
beam 4 about 0.9x (`benchmarks/measure_decoding_speed.py`, its `fast_modules` arm). A method whose decoder layer
adds a sublayer restates it in a `LayerStep` subclass (phrase representations). Any other decoder, and what the step
would skip (dropout in training mode, attention other than SDPA, hooks, adapters, int8 layers, embedding tables
that are not plain lookups, weights on several devices), keep the modules' path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from .linear import (
    Linear,
    any_runs_more_than_forward,
    inference_memo,
    inference_product,
    inference_stacked_product,
    prepared_copies_state,
    prepared_copies_unchanged,
    same_objects,
)

#: False: the loops step through the modules everywhere (what the decoding benchmark compares against).
STEPS_AS_TENSOR_OPERATIONS = True


def _is_product(layer: nn.Module) -> bool:
    """A linear layer whose call is its product (not e.g. an adapter or a quantized layer)."""
    return type(layer) in (Linear, nn.Linear)


def layer_norm_function(norm: nn.LayerNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    """`norm`'s forward, called without the module call (and without `functional.layer_norm`'s dispatch checks:
    the same kernel)."""
    shape = norm.normalized_shape
    return lambda inputs: torch.layer_norm(inputs, shape, norm.weight, norm.bias, norm.eps)


class LayerStep:
    """One decoder layer's step (the baseline's `SrcFeatDecoderLayer`), its weights and products looked up once. A
    method whose decoder layer adds a sublayer before cross-attention restates it in a subclass
    (`before_cross_attention`, with its layers in `products`)."""

    @classmethod
    def products(cls, layer: Any) -> list[nn.Module]:
        """The linear layers the step multiplies by: each must be a plain product (`DecoderStep.for_model`)."""
        self_attention, cross_attention = layer.self_attn, layer.encoder_attn
        return [self_attention.q_proj, self_attention.k_proj, self_attention.v_proj, self_attention.out_proj,
                cross_attention.q_proj, cross_attention.k_proj, cross_attention.v_proj, cross_attention.out_proj,
                layer.ffn.fc1, layer.ffn.fc2]

    def __init__(self, layer: Any, rows: int):
        self_attention, cross_attention = layer.self_attn, layer.encoder_attn
        # Where the modules keep their keys and values: the self-attention cache's layer, the cross-attention's slot.
        self.index, self.cross_slot = self_attention.layer_idx, cross_attention.layer_idx
        self.heads, self.head_dim = self_attention.num_heads, self_attention.head_dim
        self.self_scaling, self.cross_scaling = self_attention.scaling, cross_attention.scaling
        # As the modules multiply: self-attention's query, key and value projections stacked.
        self.query_key_value = inference_stacked_product(
            (self_attention.q_proj, self_attention.k_proj, self_attention.v_proj), rows)
        self.self_output = inference_product(self_attention.out_proj, rows)
        self.cross_attention_module = cross_attention  # its keys and values of the memory, at the first step
        self.cross_query = inference_product(cross_attention.q_proj, rows)
        self.cross_output = inference_product(cross_attention.out_proj, rows)
        self.feed_forward_in = inference_product(layer.ffn.fc1, rows)
        self.feed_forward_out = inference_product(layer.ffn.fc2, rows)
        self.activation = layer.ffn.activation.forward  # no module call: `for_model` checked it has no hooks
        self.pre_norm = layer.self_attn_sublayer.pre_norm
        self.norms = [layer_norm_function(sublayer.layer_norm) for sublayer in
                      (layer.self_attn_sublayer, layer.encoder_attn_sublayer, layer.ffn_sublayer)]

    def residual(self, hidden_states: torch.Tensor, norm: Callable, sublayer: Callable) -> torch.Tensor:
        """`ResidualSublayer` in eval mode: x + f(LayerNorm(x)) ("pre") or LayerNorm(x + f(x)) ("post")."""
        if self.pre_norm:
            return hidden_states + sublayer(norm(hidden_states))
        return norm(hidden_states + sublayer(hidden_states))

    def memory_keys_and_values(self, state: Any, slot: int, attention: Any, memory: torch.Tensor
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values [sentences, heads, positions, head_dim] that `attention` (a `SrcFeatAttention`) to
        `memory` [sentences, positions, d_model] keeps in slot `slot` of the cross-attention cache: computed at the
        first step and stored as the module computes and stores them, then read from there."""
        cache = state.cache
        if cache.is_updated.get(slot, False):
            cached = cache.cross_attention_cache.layers[slot]
            return cached.keys, cached.values
        # The module's own products, from the memory as it gets it: a product of a non-contiguous memory may round
        # otherwise than one of a contiguous copy.
        keys, values = cache.cross_attention_cache.update(*attention.keys_and_values(memory), slot)
        cache.is_updated[slot] = True
        return keys, values

    def attend(self, inputs: torch.Tensor, query_product: Callable, output_product: Callable,
               keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
        """Attention of the rows `inputs` [rows, d_model] to a memory cached once per sentence: the beams of a
        sentence attend as the query positions of its row, under its row of `mask` (`SrcFeatAttention`)."""
        rows, heads, head_dim = inputs.shape[0], self.heads, self.head_dim
        sentences = keys.shape[0]
        beams = rows // sentences
        if beams == 1:
            query = query_product(inputs).view(rows, heads, 1, head_dim)
        else:
            query = query_product(inputs).view(sentences, beams, heads, head_dim).transpose(1, 2)
            mask = mask[::beams] if mask is not None else None
        output = functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)
        return output_product(output.transpose(1, 2).reshape(rows, heads * head_dim))

    def before_cross_attention(self, hidden_states: torch.Tensor, state: Any) -> torch.Tensor:
        """`SrcFeatDecoderLayer.before_cross_attention`: the identity here."""
        return hidden_states

    def self_attention(self, inputs: torch.Tensor, state: Any, length: int) -> torch.Tensor:
        """Self-attention of the rows `inputs` [rows, d_model] at position `length`, their keys and values written
        to the loops' preallocated cache as `PreallocatedLayer.update` writes them."""
        rows, heads, head_dim = inputs.shape[0], self.heads, self.head_dim
        cache = state.self_attention_layers[self.index]
        projections = self.query_key_value(inputs).view(rows, 3, heads, head_dim)  # query, key, value
        if not cache.is_initialized:  # the first step allocates the buffers
            cache.lazy_initialization(projections[:, 1, :, None], projections[:, 2, :, None])
        cache.key_buffer[:rows, length] = projections[:, 1]
        cache.value_buffer[:rows, length] = projections[:, 2]
        cache.length = length + 1
        keys, values = cache._expose(rows)
        output = functional.scaled_dot_product_attention(projections[:, 0, :, None], keys, values,
                                                         scale=self.self_scaling)
        return self.self_output(output.reshape(rows, heads * head_dim))

    def cross_attention(self, inputs: torch.Tensor, state: Any) -> torch.Tensor:
        """Cross-attention of the rows `inputs` [rows, d_model] to the encoder memory."""
        keys, values = self.memory_keys_and_values(state, self.cross_slot, self.cross_attention_module,
                                                   state.encoder_hidden_states)
        mask = state.cross_mask if isinstance(state.cross_mask, torch.Tensor) else None
        return self.attend(inputs, self.cross_query, self.cross_output, keys, values, mask, self.cross_scaling)

    def feed_forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.feed_forward_out(self.activation(self.feed_forward_in(inputs)))

    def __call__(self, hidden_states: torch.Tensor, state: Any, length: int) -> torch.Tensor:
        """The layer's output for `hidden_states` [rows, d_model] at position `length`, reading and writing the
        loops' `DecoderState`."""
        self_norm, cross_norm, feed_forward_norm = self.norms
        # `residual` written out: Python calls are a good part of a one-row step's time. Each sublayer's output is a
        # fresh product, so the residual is added into it (the same sum: addition commutes) rather than into a new
        # tensor.
        if self.pre_norm:
            hidden_states = self.self_attention(self_norm(hidden_states), state, length).add_(hidden_states)
            hidden_states = self.before_cross_attention(hidden_states, state)
            hidden_states = self.cross_attention(cross_norm(hidden_states), state).add_(hidden_states)
            return self.feed_forward(feed_forward_norm(hidden_states)).add_(hidden_states)
        hidden_states = self_norm(self.self_attention(hidden_states, state, length).add_(hidden_states))
        hidden_states = self.before_cross_attention(hidden_states, state)
        hidden_states = cross_norm(self.cross_attention(hidden_states, state).add_(hidden_states))
        return feed_forward_norm(self.feed_forward(hidden_states).add_(hidden_states))


class _TargetEmbeddingStep:
    """`SrcFeatTargetEmbedding` in eval mode for one new token per row: the token's row of the embedding matrix,
    scaled, plus the position's row of the position table (cast once to the embeddings' dtype, as the module casts
    each lookup), then the embedding norm where the model has one."""

    def __init__(self, embedding: Any):
        self.embedding = embedding
        self.token_weight = embedding.embed_tokens.weight
        self.scale = embedding.embed_scale
        table = (embedding.embed_positions.weight if embedding.position_type == "learned"
                 else embedding.sinusoid_table(self.token_weight.device))
        self.position_table = table.to(self.token_weight.dtype)
        self.position_offset = embedding.position_offset
        norm = embedding.layernorm_embedding
        self.norm = layer_norm_function(norm) if norm is not None else None

    def __call__(self, input_ids: torch.Tensor, length: int) -> torch.Tensor:
        """The [rows, d_model] representation of `input_ids` [rows] at position `length`."""
        if length >= self.embedding.max_positions:  # the module's error names the limit
            return self.embedding(input_ids[:, None], length)[:, 0]
        hidden_states = functional.embedding(input_ids, self.token_weight) * self.scale
        hidden_states = hidden_states + self.position_table[length + self.position_offset]
        return self.norm(hidden_states) if self.norm is not None else hidden_states


@dataclass
class _LookedUpSteps:
    """What `DecoderStep.looked_up` keeps for later calls, with what it was looked up from."""

    modules: tuple  # the decoder's modules
    copies: tuple  # the prepared copies and parameters of the products (`prepared_copies_state`)
    layers: list[LayerStep]
    logits: Callable[[torch.Tensor], torch.Tensor]


class DecoderStep:
    """`DecoderState.step` for one new token per row, for a model whose decoder layers `layer_step` restates (made
    by the model's `decoder_step_as_tensor_operations`). The products are looked up for the number of rows of the
    first step, and again when more rows come (beam search's second step): the most a loop has, since rows only
    leave the batch after that. Within `prepared_inference_weights` later calls reuse them (`looked_up`)."""

    def __init__(self, model: Any, layer_step: type[LayerStep] = LayerStep, decoder_modules: tuple = (),
                 products: tuple = ()):
        self.model = model
        self.decoder = model.get_decoder()
        self.layer_step = layer_step
        # As `for_model` checked them: the decoder's modules, and the linear layers the steps multiply by
        self.decoder_modules, self.products = decoder_modules, products
        self.layers: list[LayerStep] = []
        self.logits: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.rows = 0  # the rows the products were looked up for
        self.final_norm = layer_norm_function(self.decoder.layer_norm) if self.decoder.layer_norm is not None else None
        self.logits_bias = model.final_logits_bias if getattr(model.config, "final_logits_bias", False) else None
        self.embedding = _TargetEmbeddingStep(self.decoder.embed_target)

    @classmethod
    def for_model(cls, model: Any, layer_step: type[LayerStep] = LayerStep) -> DecoderStep | None:
        """A `DecoderStep` for `model`, whose decoder layers `layer_step` restates (the model class checks that:
        `decoder_step_as_tensor_operations`), or None where the modules' path must run: a decoder module in training
        mode, attention other than SDPA, a linear layer that is not a plain product (an adapter, int8), a module
        that does more when called than its `forward` (hooks, global ones too, Accelerate's placement, an in-place
        compile), weights on several devices or not loaded."""
        decoder = model.get_decoder()
        products = [model.lm_head] + [product for layer in decoder.layers for product in layer_step.products(layer)]
        # One walk over the modules serves every check: it runs once per `generate` call (each module's own
        # `_parameters` read directly: `parameters(recurse=False)` goes through generators and is slower here).
        decoder_modules = list(decoder.modules())
        devices = {parameter.device for module in (model.lm_head, *decoder_modules)
                   for parameter in module._parameters.values() if parameter is not None}
        if (not STEPS_AS_TENSOR_OPERATIONS or getattr(decoder.config, "_attn_implementation", None) != "sdpa"
                # Dropout anywhere in training mode (e.g. Monte Carlo dropout in an evaluated model)
                or any(module.training for module in decoder_modules)
                or not all(_is_product(product) for product in products)
                or any_runs_more_than_forward((model.lm_head, *decoder_modules))
                or len(devices) != 1 or next(iter(devices)).type == "meta"):  # one device, weights loaded
            return None
        return cls(model, layer_step, tuple(decoder_modules), tuple(products))

    def looked_up(self, rows: int) -> tuple[list[LayerStep], Callable[[torch.Tensor], torch.Tensor]]:
        """The layers' steps and the output product for `rows` rows. Looking them up takes a good part of a call that
        decodes one sentence, so within `prepared_inference_weights` they are kept with the output projection's
        prepared copy (`inference_memo`, which goes when the block ends) and reused by later calls while the
        decoder's modules and the products' copies and parameters are the same (`prepared_copies_state`)."""
        # Without the modules `for_model` checked (a step made directly) nothing says they are the same: no reuse.
        memo = inference_memo(self.model.lm_head) if self.decoder_modules else None
        key = (self.layer_step, rows)
        kept = memo.get(key) if memo is not None else None
        if kept is not None and self.reads_as_when_kept(kept):
            return kept.layers, kept.logits
        layers = [self.layer_step(layer, rows) for layer in self.decoder.layers]
        logits = inference_product(self.model.lm_head, rows)
        copies = prepared_copies_state(self.products) if memo is not None else None  # the lookup may have made some
        if memo is not None and copies is not None:
            # Steps looked up from other copies would keep them alive until the block ends.
            for stale in [other for other, steps in list(memo.items()) if not self.reads_as_when_kept(steps)]:
                del memo[stale]
            memo[key] = _LookedUpSteps(self.decoder_modules, copies, layers, logits)
        return layers, logits

    def reads_as_when_kept(self, kept: _LookedUpSteps) -> bool:
        """Whether steps `looked_up` kept read what steps looked up now would: the same decoder modules, the products'
        copies and parameters unchanged."""
        return same_objects(kept.modules, self.decoder_modules) and prepared_copies_unchanged(kept.copies, self.products)

    def __call__(self, state: Any, input_ids: torch.Tensor) -> torch.Tensor:
        """float32 logits of the next token after `input_ids` [rows, 1] for every row, from the loops'
        `DecoderState` (whose caches hold the earlier positions; at the first step the cross-attention cache is
        filled from the encoder memory, as the modules fill it)."""
        rows = input_ids.shape[0]
        if rows > self.rows:
            self.layers, self.logits = self.looked_up(rows)
            self.rows = rows
        assert self.logits is not None  # set with the layers
        length = state.self_attention_layers[0].length  # the positions cached so far (`get_seq_length`)
        hidden_states = self.embedding(input_ids.view(rows), length)
        for layer in self.layers:
            hidden_states = layer(hidden_states, state, length)
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        logits = self.logits(hidden_states)
        if self.logits_bias is not None:
            logits = logits + self.logits_bias.to(logits.dtype)
        return logits if logits.dtype == torch.float32 else logits.float()


__all__ = ["DecoderStep", "LayerStep", "STEPS_AS_TENSOR_OPERATIONS", "layer_norm_function"]
