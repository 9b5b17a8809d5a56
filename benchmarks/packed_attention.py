"""Attention over several sentences packed into each row, as an attention implementation the backbone can take:
for measuring, on a GPU, whether packing short sentences makes SDPA's kernels faster inside the training step.

A token batch of short sentences gives attention thousands of problems of at most ~32 positions; the memory-efficient
kernel computes each in a tile of 64 x 64, most of it padding (`benchmarks/measure_attention_packing.py` times one
call). Here `PACKED_SENTENCES` consecutive sentences of the batch share one row: the projections'
[sentences, positions, heads, head_dim] layout viewed as [rows, sentences x positions, heads, head_dim] (no copy),
attended under a block-diagonal mask built from the sentences' own masks (padding, and causality in the decoder's
self-attention), so that each sentence still sees only its own positions. The sentences left over when the batch is
not a multiple are attended unpacked (compiled with dynamic sizes, a batch with and one without a leftover sentence
trace apart; `gpu_throughput --batch_size_multiple 2` gives only batches without one).
`use_packed_attention(model)` makes a model's attention layers use it; score
modifications and attention weights keep their own paths (`hf_srcfeat.attention`).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from hf_srcfeat.attention import _is_masked_out

#: The name the implementation is registered under (`AttentionInterface`).
IMPLEMENTATION = "packed_sdpa"
#: Sentences per packed row.
PACKED_SENTENCES = 2


def _packed(states: torch.Tensor, rows: int, sentences: int) -> torch.Tensor:
    """[batch, heads, positions, head_dim] (the first rows x sentences of the batch) -> [rows, heads, sentences x
    positions, head_dim]."""
    heads, positions, head_dim = states.shape[1:]
    stacked = states[:rows * sentences].transpose(1, 2)
    return stacked.reshape(rows, sentences * positions, heads, head_dim).transpose(1, 2)


def block_diagonal_mask(attention_mask: torch.Tensor | None, causal: bool, rows: int, sentences: int,
                        query_length: int, key_length: int, device: torch.device) -> torch.Tensor:
    """The boolean mask (True: may attend) [rows, 1, sentences x queries, sentences x keys] of packed rows: each
    sentence's own [queries, keys] mask (`attention_mask`, boolean or additive, [batch or 1, 1, queries or 1, keys];
    causal where `causal`) on the diagonal, nothing across sentences. Each attention call builds it anew."""
    own = torch.eye(sentences, dtype=torch.bool, device=device)[None, :, None, :, None]
    if attention_mask is not None:
        allowed = ~_is_masked_out(attention_mask)
        allowed = allowed.expand(rows * sentences if allowed.shape[0] == 1 else -1, 1, query_length,
                                 key_length)[:rows * sentences]
        own = own & allowed.reshape(rows, sentences, query_length, 1, key_length)
    if causal:
        own = own & torch.ones(query_length, key_length, dtype=torch.bool, device=device).tril()[:, None, :]
    return own.expand(rows, sentences, query_length, sentences, key_length).reshape(
        rows, 1, sentences * query_length, sentences * key_length)


def packed_sdpa_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          **kwargs) -> tuple[torch.Tensor, None]:
    """Transformers' SDPA attention (same arguments and output, [batch, queries, heads, head_dim]) with
    `PACKED_SENTENCES` sentences per row."""
    batch, _, query_length, _ = query.shape
    key_length = key.shape[2]
    sentences = PACKED_SENTENCES
    rows = batch // sentences
    if rows == 0 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    # As Transformers' SDPA decides it: causal self-attention over more than one query without a mask.
    is_causal = kwargs.get("is_causal")
    causal = query_length > 1 and attention_mask is None and (
        is_causal if is_causal is not None else getattr(module, "is_causal", True))
    mask = block_diagonal_mask(attention_mask, causal, rows, sentences, query_length, key_length, query.device)
    output = torch.nn.functional.scaled_dot_product_attention(
        _packed(query, rows, sentences), _packed(key, rows, sentences), _packed(value, rows, sentences),
        attn_mask=mask, dropout_p=dropout, scale=scaling)
    heads, head_dim = output.shape[1], output.shape[3]
    output = output.transpose(1, 2).reshape(rows * sentences, query_length, heads, head_dim)
    if rows * sentences < batch:
        left = attention_mask if attention_mask is None or attention_mask.shape[0] == 1 else \
            attention_mask[rows * sentences:]
        rest, _ = sdpa_attention_forward(module, query[rows * sentences:], key[rows * sentences:],
                                         value[rows * sentences:], left, dropout=dropout, scaling=scaling, **kwargs)
        output = torch.cat([output, rest])
    return output, None


AttentionInterface.register(IMPLEMENTATION, packed_sdpa_attention)
# The masks SDPA takes (without a mask function of its own a custom implementation would get none).
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)


def use_packed_attention(model: nn.Module) -> nn.Module:
    """`model` with its attention layers attending through `packed_sdpa_attention` (in place)."""
    model.set_attn_implementation(IMPLEMENTATION)
    return model


__all__ = ["IMPLEMENTATION", "PACKED_SENTENCES", "block_diagonal_mask", "packed_sdpa_attention",
           "use_packed_attention"]
