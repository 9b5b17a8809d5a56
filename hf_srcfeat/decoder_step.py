"""The decoder's step in the zoo's decoding loops, as tensor operations over weights looked up once per call.

`DecoderState.step` runs the decoder layer by layer through their modules. In a step of one new token per row most
of that time is not arithmetic: module calls, the linear layers' checks before each product (which copy of the
weight to read, whether gradients are needed), Transformers' attention dispatch. For decoders whose layers are
the baseline's (`SrcFeatDecoderLayer` with its own attention, feed-forward and residual sublayers: the baseline
and every method that changes only the encoder), `DecoderStep` computes every such step, from the target
embedding to the logits, with the same operations in the same order, reading the layers' parameters and the
products' prepared weights (`hf_srcfeat.linear.inference_product`) it looked up when the loop started; the first
step fills the cross-attention cache from the encoder memory as the modules fill it. The same logits and caches
to the bit (tests); one sentence decoded greedily on a CPU takes about 0.7x the time, a batch of 32 with beam 4
about 0.9x (`benchmarks/measure_decoding_speed.py`, its `fast_modules` arm). Any other decoder, and what the step
would skip (dropout in training mode, attention other than SDPA, hooks, adapters, int8 layers, embedding tables
that are not plain lookups, weights on several devices), keep the modules' path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional
from torch.nn.modules import module as module_hooks

from .linear import Linear, inference_product, inference_stacked_products

#: False: the loops step through the modules everywhere (what the decoding benchmark compares against).
STEPS_AS_TENSOR_OPERATIONS = True


def _runs_more_than_forward(module: nn.Module) -> bool:
    """Whether calling `module` does more than its `forward`: hooks, Accelerate's device placement (which replaces
    `forward`), an in-place `compile()`. The step would skip it."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or hasattr(module, "_hf_hook")
                or getattr(module, "_compiled_call_impl", None) is not None)


def _is_product(layer: nn.Module) -> bool:
    """A linear layer whose call is its product (not e.g. an adapter or a quantized layer)."""
    return type(layer) in (Linear, nn.Linear)


def _layer_norm(norm: nn.LayerNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    """`norm`'s forward, called without the module call."""
    return lambda inputs: functional.layer_norm(inputs, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


class _LayerStep:
    """One decoder layer's weights and products for the step, looked up once."""

    def __init__(self, layer: Any, rows: int):
        self_attention, cross_attention = layer.self_attn, layer.encoder_attn
        self.heads, self.head_dim = self_attention.num_heads, self_attention.head_dim
        self.self_scaling, self.cross_scaling = self_attention.scaling, cross_attention.scaling
        # As the modules multiply: self-attention's query, key and value projections stacked.
        self.query_key_value = inference_stacked_products(
            (self_attention.q_proj, self_attention.k_proj, self_attention.v_proj), rows)
        self.self_output = inference_product(self_attention.out_proj, rows)
        self.cross_key_value_layers = (cross_attention.k_proj, cross_attention.v_proj)
        self.cross_query = inference_product(cross_attention.q_proj, rows)
        self.cross_output = inference_product(cross_attention.out_proj, rows)
        self.feed_forward_in = inference_product(layer.ffn.fc1, rows)
        self.feed_forward_out = inference_product(layer.ffn.fc2, rows)
        self.activation = layer.ffn.activation
        self.pre_norm = layer.self_attn_sublayer.pre_norm
        self.norms = [_layer_norm(sublayer.layer_norm) for sublayer in
                      (layer.self_attn_sublayer, layer.encoder_attn_sublayer, layer.ffn_sublayer)]

    def residual(self, hidden_states: torch.Tensor, norm: Callable, sublayer: Callable) -> torch.Tensor:
        """`ResidualSublayer` in eval mode: x + f(LayerNorm(x)) ("pre") or LayerNorm(x + f(x)) ("post")."""
        if self.pre_norm:
            return hidden_states + sublayer(norm(hidden_states))
        return norm(hidden_states + sublayer(hidden_states))

    def cross_keys_and_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values [sentences, heads, positions, head_dim] of the encoder memory
        [sentences, positions, d_model]: one stacked product, as `SrcFeatAttention` computes them."""
        sentences, positions, width = memory.shape
        keys, values = inference_stacked_products(self.cross_key_value_layers, sentences * positions)(
            memory.reshape(sentences * positions, width))
        return (keys.view(sentences, positions, self.heads, self.head_dim).transpose(1, 2),
                values.view(sentences, positions, self.heads, self.head_dim).transpose(1, 2))

    def __call__(self, hidden_states: torch.Tensor, length: int, self_cache: Any,
                 cross_keys_and_values: tuple[torch.Tensor, torch.Tensor], cross_mask: torch.Tensor | None
                 ) -> torch.Tensor:
        rows, heads, head_dim = hidden_states.shape[0], self.heads, self.head_dim

        def self_attention(inputs: torch.Tensor) -> torch.Tensor:
            query, key, value = (projection.view(rows, heads, head_dim)
                                 for projection in self.query_key_value(inputs))
            if not self_cache.is_initialized:  # the first step allocates the buffers
                self_cache.lazy_initialization(key.unsqueeze(2), value.unsqueeze(2))
            self_cache.key_buffer[:rows, length] = key  # as `PreallocatedLayer.update` writes them
            self_cache.value_buffer[:rows, length] = value
            self_cache.length = length + 1
            keys, values = self_cache._expose(rows)
            output = functional.scaled_dot_product_attention(query.unsqueeze(2), keys, values,
                                                             scale=self.self_scaling)
            return self.self_output(output.reshape(rows, heads * head_dim))

        def cross_attention(inputs: torch.Tensor) -> torch.Tensor:
            keys, values = cross_keys_and_values
            sentences = keys.shape[0]
            beams = rows // sentences
            # The beams of a sentence attend as the query positions of its row (`SrcFeatAttention`).
            query = self.cross_query(inputs).view(sentences, beams, heads, head_dim).transpose(1, 2)
            mask = cross_mask[::beams] if cross_mask is not None and beams > 1 else cross_mask
            output = functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                                             scale=self.cross_scaling)
            return self.cross_output(output.transpose(1, 2).reshape(rows, heads * head_dim))

        def feed_forward(inputs: torch.Tensor) -> torch.Tensor:
            return self.feed_forward_out(self.activation(self.feed_forward_in(inputs)))

        hidden_states = self.residual(hidden_states, self.norms[0], self_attention)
        hidden_states = self.residual(hidden_states, self.norms[1], cross_attention)
        return self.residual(hidden_states, self.norms[2], feed_forward)


class _TargetEmbeddingStep:
    """`SrcFeatTargetEmbedding` in eval mode for one new token per row: the token's row of the embedding matrix,
    scaled, plus the position's row of the position table (cast once to the embeddings' dtype, as the module casts
    each lookup), [and the embedding norm]."""

    def __init__(self, embedding: Any):
        self.embedding = embedding
        self.token_weight = embedding.embed_tokens.weight
        self.scale = embedding.embed_scale
        table = (embedding.embed_positions.weight if embedding.position_type == "learned"
                 else embedding.sinusoid_table(self.token_weight.device))
        self.position_table = table.to(self.token_weight.dtype)
        self.position_offset = embedding.position_offset
        self.norm = _layer_norm(embedding.layernorm_embedding) if embedding.layernorm_embedding is not None else None

    def __call__(self, input_ids: torch.Tensor, length: int) -> torch.Tensor:
        """The [rows, d_model] representation of `input_ids` [rows] at position `length`."""
        if length >= self.embedding.max_positions:  # the module's error names the limit
            return self.embedding(input_ids[:, None], length)[:, 0]
        hidden_states = functional.embedding(input_ids, self.token_weight) * self.scale
        hidden_states = hidden_states + self.position_table[length + self.position_offset]
        return self.norm(hidden_states) if self.norm is not None else hidden_states


class DecoderStep:
    """`DecoderState.step` for one new token per row, for a model whose decoder layers are the baseline's (made by
    the model's `decoder_step_as_tensor_operations`). The products are looked up for the number of rows of the first
    step, and again when more rows come (beam search's second step): the most a loop has, since rows only leave the
    batch after that."""

    def __init__(self, model: Any):
        self.model = model
        self.decoder = model.get_decoder()
        self.layers: list[_LayerStep] = []
        self.logits: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.rows = 0  # the rows the products were looked up for
        self.final_norm = _layer_norm(self.decoder.layer_norm) if self.decoder.layer_norm is not None else None
        self.logits_bias = model.final_logits_bias if getattr(model.config, "final_logits_bias", False) else None
        self.embedding = _TargetEmbeddingStep(self.decoder.embed_target)

    @classmethod
    def for_model(cls, model: Any) -> DecoderStep | None:
        """A `DecoderStep` for `model`, whose decoder layers are the baseline's (the model class checks that:
        `decoder_step_as_tensor_operations`), or None where the modules' path must run: a decoder module in training
        mode, attention other than SDPA, a linear layer that is not a plain product (an adapter, int8), a module
        that does more when called than its `forward` (hooks, global ones too, Accelerate's placement, an in-place
        compile), weights on several devices or not loaded."""
        decoder = model.get_decoder()
        layers = list(decoder.layers)
        products = [model.lm_head] + [projection for layer in layers for projection in (
            layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.out_proj,
            layer.encoder_attn.q_proj, layer.encoder_attn.out_proj, layer.ffn.fc1, layer.ffn.fc2)]
        devices = {parameter.device for parameter in (*decoder.parameters(), *model.lm_head.parameters())}
        if (not STEPS_AS_TENSOR_OPERATIONS or getattr(decoder.config, "_attn_implementation", None) != "sdpa"
                # Dropout anywhere in training mode (e.g. Monte Carlo dropout in an evaluated model)
                or any(module.training for module in decoder.modules())
                or not all(_is_product(product) for product in products)
                or any(_runs_more_than_forward(module) for module in (model.lm_head, *decoder.modules()))
                or module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks
                or len(devices) != 1 or next(iter(devices)).type == "meta"):  # one device, weights loaded
            return None
        return cls(model)

    def __call__(self, state: Any, input_ids: torch.Tensor) -> torch.Tensor:
        """float32 logits of the next token after `input_ids` [rows, 1] for every row, from the loops'
        `DecoderState` (whose caches hold the earlier positions; at the first step the cross-attention cache is
        filled from the encoder memory, as the modules fill it)."""
        rows = input_ids.shape[0]
        if rows > self.rows:
            self.layers = [_LayerStep(layer, rows) for layer in self.decoder.layers]
            self.logits, self.rows = inference_product(self.model.lm_head, rows), rows
        assert self.logits is not None  # set with the layers
        length = state.self_attention.get_seq_length()
        hidden_states = self.embedding(input_ids.view(rows), length)
        cross_cache = state.cache.cross_attention_cache
        cross_mask = state.cross_mask if isinstance(state.cross_mask, torch.Tensor) else None
        for index, (layer, self_cache) in enumerate(zip(self.layers, state.self_attention_layers, strict=True)):
            if length == 0:
                cross_keys_and_values = cross_cache.update(*layer.cross_keys_and_values(state.encoder_hidden_states),
                                                           index)
                state.cache.is_updated[index] = True
            else:
                cross_keys_and_values = cross_cache.layers[index].keys, cross_cache.layers[index].values
            hidden_states = layer(hidden_states, length, self_cache, cross_keys_and_values, cross_mask)
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        logits = self.logits(hidden_states)
        if self.logits_bias is not None:
            logits = logits + self.logits_bias.to(logits.dtype)
        return logits.float()

__all__ = ["DecoderStep", "STEPS_AS_TENSOR_OPERATIONS"]
