"""SDPA with several short sentences packed into each attention row: `attn_implementation="packed_sdpa"`.

Token batches of short sentences (Multi30k: ~13 tokens) hand SDPA thousands of attention problems of a few dozen
positions each. GPU attention kernels work in tiles of 64-128 query and key positions, so such problems leave most
of every tile empty: on an H200, a token batch's attention took a third of a compiled training step. Here
`SENTENCES_PER_ROW` sentences of a batch become one row of 8 x length positions with a block-diagonal mask (each sentence
attends only to itself, with its own padding and causal mask inside its block), so the kernels see full tiles.
The result is the same function as `sdpa` (the masked-out blocks get no weight), at more attention arithmetic
(x 8), which at these lengths is a small part of a step's products.

The batch is padded with 1-8 empty sentences to a multiple of 8; they attend to themselves (zeros in, zeros
out) so that no row is fully masked, and are dropped from the output. Single-position queries (decoding steps),
sentences over `MAX_PACKED_LENGTH` positions, batches under 8 sentences, an additive position bias and float masks
take `sdpa` unchanged.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

#: The name models take it by (`from_pretrained(..., attn_implementation=...)`, `set_attn_implementation`).
PACKED_SDPA = "packed_sdpa"
#: Sentences packed into one attention row. One fixed number, so that a compiled model meets no new graph per
#: batch length (each distinct group size or padding branch would be one).
SENTENCES_PER_ROW = 8
#: Longer sentences (query or key positions) take `sdpa` unchanged: their problems already fill the kernels' tiles,
#: and packing would multiply their attention arithmetic for nothing.
MAX_PACKED_LENGTH = 64


def _rows(states: torch.Tensor, group: int) -> torch.Tensor:
    """[batch, heads, length, dim] -> [batch / group, heads, group x length, dim] (batch a multiple of group)."""
    batch, heads, length, dim = states.shape
    grouped = states.view(batch // group, group, heads, length, dim).transpose(1, 2)
    return grouped.reshape(batch // group, heads, group * length, dim)


def _block_diagonal(mask: torch.Tensor, group: int) -> torch.Tensor:
    """[batch, 1, Q, K] boolean (True = attend) -> [batch / group, 1, group x Q, group x K]: each sentence's mask on
    the diagonal, nothing across sentences."""
    batch, _, query_length, key_length = mask.shape
    blocks = mask.view(batch // group, group, query_length, 1, key_length)
    same_sentence = torch.eye(group, dtype=torch.bool, device=mask.device).view(1, group, 1, group, 1)
    return (blocks & same_sentence).view(batch // group, 1, group * query_length, group * key_length)


def packed_sdpa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    position_bias: torch.Tensor | None = None,
    sentences_per_row: int = SENTENCES_PER_ROW,
    max_packed_length: int = MAX_PACKED_LENGTH,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """`sdpa_attention_forward`'s result ([batch, Q, heads, dim]) with `sentences_per_row` sentences packed into
    each row of one SDPA call."""
    batch, _, query_length, _ = query.shape
    key_length = key.shape[2]
    group = sentences_per_row
    if (query_length == 1 or max(query_length, key_length) > max_packed_length or batch < group
            or position_bias is not None or key.shape[0] != batch
            or (attention_mask is not None and attention_mask.dtype != torch.bool)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, position_bias=position_bias, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    if attention_mask is None:
        attention_mask = torch.ones(query_length, key_length, dtype=torch.bool, device=query.device)
        if causal:  # bottom-right aligned, as SDPA's helpers and the eager path align it
            attention_mask = attention_mask.tril(key_length - query_length)
    mask = attention_mask.expand(batch, 1, query_length, key_length)
    # Empty sentences fill the last row; they attend to all of their own (zero) positions, so that no row is fully
    # masked. Between 1 and `group` of them, never none: a batch that divides would be one more compiled graph.
    padded = group - batch % group
    query, key, value = (nn.functional.pad(states, (0, 0, 0, 0, 0, 0, 0, padded)) for states in (query, key, value))
    mask = torch.cat([mask, mask.new_ones(padded, 1, query_length, key_length)])
    output = nn.functional.scaled_dot_product_attention(
        _rows(query, group), _rows(key, group), _rows(value, group), attn_mask=_block_diagonal(mask, group),
        dropout_p=dropout, scale=scaling)
    rows, heads, _, dim = output.shape
    output = output.view(rows, heads, group, query_length, dim).permute(0, 2, 3, 1, 4)
    return output.reshape(rows * group, query_length, heads, dim)[:batch], None


def register_packed_sdpa() -> None:
    """Make `packed_sdpa` an attention implementation every Transformers model can be set to, with SDPA's masks."""
    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention_forward)
    AttentionMaskInterface.register(PACKED_SDPA, sdpa_mask)
    assert PACKED_SDPA in ALL_ATTENTION_FUNCTIONS and PACKED_SDPA in ALL_MASK_ATTENTION_FUNCTIONS
