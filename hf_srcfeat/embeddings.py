"""Token embeddings with positions: the baseline's source and target input representations.

Positions are Vaswani et al.'s sinusoids by default; `config.position_embedding_type` selects the layouts of
pretrained checkpoint families instead (Marian's and fairseq's sinusoids, mBART's learned table), so that those
checkpoints load exactly.

A method that changes the source input representation (feature groups, factor embeddings) subclasses
`SrcFeatSourceEmbedding` and sets it as its encoder's `source_embedding_class`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .dropout import Dropout
from .source_features import SourceFeatures


def sinusoidal_position_encoding(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, Section 3.5).

    `positions` is any integer tensor; the result has one more trailing dimension of size `d_model`.
    Computed on the fly (cheap) so nothing depends on buffers surviving meta-device loading.
    """
    half = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32)
    inverse_frequency = torch.exp(half * (-math.log(10000.0) / d_model))
    angles = positions.to(torch.float32)[..., None] * inverse_frequency
    encoding = torch.zeros(*positions.shape, d_model, device=positions.device)
    encoding[..., 0::2] = torch.sin(angles)
    encoding[..., 1::2] = torch.cos(angles[..., : d_model // 2])
    return encoding


def sinusoidal_halves_encoding(positions: torch.Tensor, d_model: int, fairseq: bool = False) -> torch.Tensor:
    """[sin | cos] halves instead of interleaved columns. Marian (`fairseq=False`) uses Vaswani's angles
    pos / 10000^(2i/d); fairseq (M2M100, NLLB) uses pos / 10000^(i / (d/2 - 1)). An odd `d_model` leaves Marian's
    extra sine column and fairseq's zero column last, as those implementations do."""
    if not fairseq:  # Vaswani's sinusoids, the sine columns first
        interleaved = sinusoidal_position_encoding(positions, d_model)
        return torch.cat([interleaved[..., 0::2], interleaved[..., 1::2]], dim=-1)
    half = d_model // 2
    exponent = torch.arange(half, device=positions.device, dtype=torch.float32) / max(half - 1, 1)
    inverse_frequency = torch.exp(exponent * -math.log(10000.0))
    angles = positions.to(torch.float32)[..., None] * inverse_frequency
    sines = torch.sin(angles)
    cosines = torch.cos(angles[..., :half])
    encoding = torch.cat([sines, cosines], dim=-1)
    if encoding.shape[-1] < d_model:  # an odd width: a zero column
        encoding = torch.nn.functional.pad(encoding, (0, d_model - encoding.shape[-1]))
    return encoding


def required(input_ids: torch.Tensor | None) -> torch.Tensor:
    """`input_ids`, which a call without `inputs_embeds` must give."""
    if input_ids is None:
        raise ValueError("give input_ids or inputs_embeds.")
    return input_ids


def given_tokens(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
    """The input a forward pass was given: token ids, else embeddings."""
    if input_ids is not None:
        return input_ids
    if inputs_embeds is None:
        raise ValueError("give input_ids or inputs_embeds.")
    return inputs_embeds


def source_positions(attention_mask: torch.Tensor | None, batch_size: int, seq_len: int,
                     device: torch.device) -> torch.Tensor:
    """Position of every source token, counting only real tokens, so left padding does not shift positions."""
    if attention_mask is None:
        return torch.arange(seq_len, device=device).expand(batch_size, seq_len)
    return ((attention_mask != 0).long().cumsum(-1) - 1).clamp(min=0)


class SinusoidalTokenEmbedding(nn.Module):
    """Dropout(sqrt(d) * E[token] + PE(position)): the Transformer's input representation (with
    `config.layernorm_embedding`, Dropout(LayerNorm(...)))."""

    def __init__(self, config, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.d_model = config.d_model
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.max_positions = config.max_position_embeddings
        self.position_type = getattr(config, "position_embedding_type", "sinusoidal")
        self.position_offset = getattr(config, "position_offset", 0)
        if self.position_type == "learned":
            self.embed_positions = nn.Embedding(config.max_position_embeddings + self.position_offset, config.d_model)
        self.layernorm_embedding = nn.LayerNorm(config.d_model) if getattr(config, "layernorm_embedding", False) \
            else None
        self.dropout = Dropout(config.dropout)
        # Sinusoid tables by device, computed at first use: not buffers, so that meta-device loading and saved
        # weights never see them.
        self.sinusoid_tables: dict[torch.device, torch.Tensor] = {}

    def check_positions(self, positions: torch.Tensor, longest: int | None = None) -> None:
        """Raise an error unless every position has an embedding. `longest`: a bound the caller knows on the host
        (positions counted within a sequence of that many tokens); within the table it spares reading the
        positions back, which waits for the GPU."""
        if torch.compiler.is_compiling():  # the check reads a value back to the host: eager mode only
            return
        if longest is not None and longest <= self.max_positions:
            return
        longest = int(positions.max()) + 1 if positions.numel() else 0
        if longest > self.max_positions:
            raise ValueError(
                f"sequence of {longest} tokens is longer than max_position_embeddings ({self.max_positions}); "
                "truncate the input (tokenizer(..., truncation=True)) or raise max_position_embeddings."
            )

    def positional(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32,
                   longest: int | None = None) -> torch.Tensor:
        """The position table in the embeddings' dtype: computed in float32 (exact angles), then cast, so a
        bfloat16 or float16 model adds positions of its own precision. `longest`: see `check_positions`."""
        self.check_positions(positions, longest)
        positions = positions + self.position_offset
        if self.position_type == "learned":
            return self.embed_positions(positions).to(dtype)
        if torch.compiler.is_compiling() or (positions.is_cuda and torch.cuda.is_current_stream_capturing()):
            # A table kept on the module would be a graph input to guard on, or memory of a CUDA graph's pool.
            return self.sinusoids(positions).to(dtype)
        return nn.functional.embedding(positions, self.sinusoid_table(positions.device)).to(dtype)

    def sinusoids(self, positions: torch.Tensor) -> torch.Tensor:
        """The float32 sinusoids of `positions` in this model's layout."""
        if self.position_type == "sinusoidal":
            return sinusoidal_position_encoding(positions, self.d_model)
        return sinusoidal_halves_encoding(positions, self.d_model, fairseq=self.position_type == "sinusoidal_fairseq")

    def sinusoid_table(self, device: torch.device) -> torch.Tensor:
        """The sinusoids of every position the model takes, computed once per device: decoding looks up one
        position a step, and computing it anew each time was 4% of a greedy step of one sentence."""
        table = self.sinusoid_tables.get(device)
        if table is None:
            positions = torch.arange(self.max_positions + self.position_offset, device=device)
            table = self.sinusoid_tables[device] = self.sinusoids(positions)
        return table

    def with_positions(self, embeddings: torch.Tensor, positions: torch.Tensor,
                       longest: int | None = None) -> torch.Tensor:
        """Dropout(LayerNorm(embeddings + positions)), the LayerNorm where the model has one: the representation the
        first layer reads."""
        hidden_states = embeddings + self.positional(positions, embeddings.dtype, longest)
        if self.layernorm_embedding is not None:
            hidden_states = self.layernorm_embedding(hidden_states)
        return self.dropout(hidden_states)

    def token_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids) * self.embed_scale


class SrcFeatSourceEmbedding(SinusoidalTokenEmbedding):
    """Baseline source representation: token embedding + positions; the source features are not used.

    Subclasses may read `features` (e.g. `features.pos_ids`) to build a feature-aware representation.
    """

    @classmethod
    def token_embedding_width(cls, config) -> int:
        """Width of the source token embedding matrix the model creates for this class (d_model here; a
        factored representation gives the subword factor only part of d_model)."""
        return config.d_model

    def forward(
        self,
        input_ids: torch.Tensor | None,
        features: SourceFeatures,
        attention_mask: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        embeddings = self.token_embeddings(required(input_ids)) if inputs_embeds is None else inputs_embeds
        batch_size, seq_len = embeddings.shape[:2]
        positions = source_positions(attention_mask, batch_size, seq_len, embeddings.device)
        return self.with_positions(embeddings, positions, longest=seq_len)


class SrcFeatTargetEmbedding(SinusoidalTokenEmbedding):
    """Target representation: token embedding + positions continuing after `past_length` cached tokens."""

    def forward(self, input_ids: torch.Tensor | None, past_length: int = 0,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        embeddings = self.token_embeddings(required(input_ids)) if inputs_embeds is None else inputs_embeds
        longest = past_length + embeddings.shape[1]
        positions = torch.arange(past_length, longest, device=embeddings.device)
        return self.with_positions(embeddings, positions, longest)
