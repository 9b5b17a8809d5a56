"""Multi-head attention shared by every model of the zoo, with per-head modification of the scores.

Score modifications are always given in an explicit [batch, heads, query, key] layout. Reference code of
PASCAL and Deps-SAN flattens batch and heads and slices the last `P * batch` rows, which pairs sentences with
the wrong heads when only P < H heads are modified; building the full layout here rules that out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.nn.attention.flex_attention import flex_attention
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .linear import Linear, stacked_products

SCORE_MODES = ("mult", "add")


@dataclass
class ScoreModification:
    """How one attention layer changes its scaled dot-product scores S = QK^T / sqrt(d_k) before the softmax.

    `scale` multiplies S element-wise (Deps-SAN's Eq. 4), `bias` is added to it; both are [B, H, Q, K] (or
    broadcastable to it). Masked positions are masked after the modification, so padding never gains mass.
    """

    scale: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    @classmethod
    def on_heads(
        cls, values: torch.Tensor, num_heads: int, heads: Sequence[int] | None, mode: str
    ) -> ScoreModification:
        """Apply per-sentence `values` [B, Q, K] to the chosen `heads` (all when None) and leave the other heads
        unchanged (scale 1, bias 0). `mode` is "mult" (a scale) or "add" (a bias)."""
        if mode not in SCORE_MODES:
            raise ValueError(f"score modification mode must be one of {list(SCORE_MODES)}, got {mode!r}.")
        if values.dim() != 3:
            raise ValueError(f"score modification values must be [batch, query, key], got {tuple(values.shape)}.")
        if heads is None or len(heads) == num_heads:
            full = values[:, None].expand(-1, num_heads, -1, -1)
        else:
            identity = 1.0 if mode == "mult" else 0.0
            full = values.new_full((values.shape[0], num_heads, *values.shape[1:]), identity)
            full[:, list(heads)] = values[:, None]
        return cls(scale=full) if mode == "mult" else cls(bias=full)


def _is_masked_out(attention_mask: torch.Tensor) -> torch.Tensor:
    """Boolean 'may not attend' tensor from a boolean (True = attend) or additive float mask."""
    if attention_mask.dtype == torch.bool:
        return ~attention_mask
    return attention_mask < torch.finfo(attention_mask.dtype).min / 2


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    score_scale: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(S * scale + bias, masked) V with S = QK^T * scaling; returns ([B, Q, H, d], [B, H, Q, K])."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if score_scale is not None:
        scores = scores * score_scale
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores.masked_fill(_is_masked_out(attention_mask), torch.finfo(scores.dtype).min)
    elif module.is_causal and query.shape[2] > 1:
        # The SDPA mask helpers return None for a plain causal mask; apply it here (bottom-right aligned).
        q_len, k_len = query.shape[2], key.shape[2]
        future = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(k_len - q_len + 1)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def flex_score_modified_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    score_scale: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    compiled: bool = True,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """`eager_attention_forward`'s result as one FlexAttention kernel: the score modification and the mask are its
    `score_mod`, so the [B, H, Q, K] scores are never written to memory. Masked scores get the dtype's minimum, as
    in the eager path, so fully masked (padding) rows match too. `compiled=False` runs FlexAttention's reference
    implementation (any device; what the CPU test compares)."""
    if dropout:
        raise ValueError("FlexAttention has no attention dropout; the eager path handles attention_dropout > 0.")
    shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    # Both are read in query's dtype inside the kernel. The mask goes in as an additive bias (the dtype's minimum
    # where masked, as the eager path fills) rather than a captured boolean under torch.where: with the boolean,
    # torch 2.11 broke the compiled graph inside FlexAttention's autograd on an H100 and training failed.
    scale = score_scale.to(query.dtype).expand(shape) if score_scale is not None else None
    bias = position_bias.to(query.dtype) if position_bias is not None else None
    if attention_mask is not None:
        lowest, masked = torch.finfo(query.dtype).min, _is_masked_out(attention_mask)
        mask_bias = torch.zeros(masked.shape, dtype=query.dtype, device=query.device).masked_fill(masked, lowest)
        bias = mask_bias if bias is None else (bias + mask_bias).clamp(min=lowest)
    bias = bias.expand(shape).contiguous() if bias is not None else None

    def score_mod(score, batch, head, query_index, key_index):
        if scale is not None:
            score = score * scale[batch, head, query_index, key_index]
        if bias is not None:
            score = score + bias[batch, head, query_index, key_index]
        return score

    function = _compiled_flex_attention() if compiled else flex_attention
    # FlexAttention's autocast rule breaks the compiled graph and then fails in its autograd (torch 2.11, seen on an
    # H100): run it outside autocast on the dtype autocast gave the projections, as the eager path computes in.
    with torch.autocast(device_type=query.device.type, enabled=False):
        dtype = query.dtype
        output = function(query, key.to(dtype), value.to(dtype), score_mod=score_mod, scale=scaling)
    return output.transpose(1, 2).contiguous(), None


@functools.cache
def _compiled_flex_attention():
    """FlexAttention only fuses when compiled; one compiled function for the process (shapes may vary)."""
    return torch.compile(flex_attention, dynamic=True)


#: FlexAttention's compiled kernels need this many dimensions per head (torch 2.11: 'must be at least 16').
FLEX_ATTENTION_MIN_HEAD_DIM = 16


def fused_score_modification_available(query: torch.Tensor, dropout: float) -> bool:
    """Whether a multiplicative score modification can run as a fused FlexAttention kernel: on CUDA, without
    attention dropout, with heads of at least 16 dimensions (FlexAttention's kernels refuse fewer). Elsewhere the
    eager path computes it (FlexAttention's CPU path is a reference, not fused)."""
    return query.is_cuda and not dropout and query.shape[-1] >= FLEX_ATTENTION_MIN_HEAD_DIM


class SrcFeatAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017) for encoder self-, decoder self- and cross-attention.

    `config._attn_implementation` picks SDPA or eager. A multiplicative score scale cannot be expressed as an
    SDPA mask: on CUDA it runs as a fused FlexAttention kernel (`flex_score_modified_attention`), elsewhere (or with
    `output_attentions`, or attention dropout) through the eager path; an additive bias goes through SDPA as a
    float mask.
    """

    def __init__(
        self,
        config,
        num_heads: int,
        is_causal: bool = False,
        layer_idx: int | None = None,
        is_cross_attention: bool = False,
    ):
        super().__init__()
        self.config = config
        self.embed_dim = config.d_model
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.q_proj = Linear(self.embed_dim, self.embed_dim)
        self.k_proj = Linear(self.embed_dim, self.embed_dim)
        self.v_proj = Linear(self.embed_dim, self.embed_dim)
        self.out_proj = Linear(self.embed_dim, self.embed_dim)

    def _heads(self, projected: torch.Tensor) -> torch.Tensor:
        """[batch, positions, d_model] -> [batch, heads, positions, head_dim]."""
        return projected.view(*projected.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def _project(self, projection: nn.Linear, states: torch.Tensor) -> torch.Tensor:
        return self._heads(projection(states))

    def keys_and_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values [batch, heads, positions, head_dim] of `memory` [batch, positions, d_model]: one
        product over the two weights stacked where that applies (`stacked_products`)."""
        key, value = stacked_products((self.k_proj, self.v_proj), memory)
        return self._heads(key), self._heads(value)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        score_modification: ScoreModification | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        memory = key_value_states if key_value_states is not None else hidden_states
        # Projections of one input as one product where that applies (`stacked_products`): self-attention's three
        # here, cross-attention's keys and values of the memory below, unless they are cached.
        stacked = (stacked_products((self.q_proj, self.k_proj, self.v_proj), hidden_states)
                   if key_value_states is None else None)
        query = self._heads(stacked[0]) if stacked is not None else self._project(self.q_proj, hidden_states)

        cache: Any = None  # Transformers' cache classes type their layers loosely
        reuse_cross = False
        if past_key_values is not None and self.layer_idx is not None:
            if isinstance(past_key_values, EncoderDecoderCache):
                reuse_cross = self.is_cross_attention and past_key_values.is_updated.get(self.layer_idx, False)
                cache = (past_key_values.cross_attention_cache if self.is_cross_attention
                         else past_key_values.self_attention_cache)
            else:
                cache = past_key_values
        if reuse_cross:
            # Cross-attention keys/values depend only on the encoder output: computed once per generation.
            key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            if stacked is not None:
                key, value = self._heads(stacked[1]), self._heads(stacked[2])
            else:
                key, value = self.keys_and_values(memory)
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if self.is_cross_attention:
                    assert self.layer_idx is not None  # a cache is only taken when layer_idx is set (above)
                    cast(EncoderDecoderCache, past_key_values).is_updated[self.layer_idx] = True

        beams = query.shape[0] // key.shape[0]
        if beams > 1 and beams * key.shape[0] == query.shape[0]:
            # Beam search: the cached cross-attention keys and values hold one row per sentence. In a decoding step
            # the beams' queries attend as the query positions of their sentence's row, so the keys and values are
            # read once per sentence; the rows of a sentence share its source mask. The output's
            # [sentences, beams, heads, head_dim] holds the rows in their order.
            if query.shape[2] == 1 and score_modification is None and not output_attentions:
                query = query.transpose(1, 2).reshape(key.shape[0], beams, self.num_heads, self.head_dim)
                query = query.transpose(1, 2)
                attention_mask = attention_mask[::beams] if attention_mask is not None else None
            else:
                key, value = key.repeat_interleave(beams, 0), value.repeat_interleave(beams, 0)

        score_scale = score_modification.scale if score_modification is not None else None
        position_bias = score_modification.bias if score_modification is not None else None
        dropout = self.dropout if self.training else 0.0
        attention_function: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
        if score_scale is not None and not output_attentions and fused_score_modification_available(query, dropout):
            attention_function = flex_score_modified_attention
        elif score_scale is not None or output_attentions:
            attention_function = eager_attention_forward
        else:
            attention_function = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, eager_attention_forward
            )
        extra: dict[str, Any] = {"score_scale": score_scale} if score_scale is not None else {}
        if position_bias is not None:
            extra["position_bias"] = position_bias
        output, weights = attention_function(
            self, query, key, value, attention_mask,
            scaling=self.scaling, dropout=dropout, **extra,
        )
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], self.embed_dim))
        return output, (weights if output_attentions else None)
