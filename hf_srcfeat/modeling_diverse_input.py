"""Diverse input representation (Chen et al., TASLP 2020): the source word vectors are split by learnable
projections into groups whose widths are whole attention heads; each group gets its own input function
(global: + positions; recurrence: a bidirectional RNN; local: a convolution; syntactic: + positions + a POS
embedding) and the results, concatenated, are the encoder input. Only the source embedding changes.

Padding: the recurrence and local groups never read padded positions, so a sentence gets the same input
representation alone and in a padded batch (left or right padding).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .configuration_diverse_input import DiverseInputConfig
from .embeddings import SrcFeatSourceEmbedding, sinusoidal_position_encoding, source_positions
from .modeling_srcfeat_transformer import (
    SrcFeatEncoder,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)
from .source_features import SourceFeatures

RECURRENT_CELL_CLASSES = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}


class RecurrenceFeatures(nn.Module):
    """Eq. (8)-(9): r_j = W [forward_j ; backward_j] of a bidirectional RNN over the real tokens only."""

    def __init__(self, width: int, cell: str):
        super().__init__()
        self.rnn = RECURRENT_CELL_CLASSES[cell](width, width, batch_first=True, bidirectional=True)
        self.projection = nn.Linear(2 * width, width)  # 2 d_r -> d_r

    def align_weights(self) -> None:
        """Weights loaded from safetensors can sit at addresses that are not 64-byte aligned; oneDNN's RNN then
        takes another kernel whose rounding differs (~1e-7), and a reloaded model would not reproduce the
        saved one's logits exactly. Copying them once to fresh (aligned) memory restores the usual path."""
        for parameter in self.rnn.parameters():
            if parameter.device.type == "cpu" and parameter.data_ptr() % 64:
                parameter.data = parameter.data.clone()

    def forward(self, group: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        self.align_weights()
        if attention_mask is None:
            states, _ = self.rnn(group)
            return self.projection(states)
        real = attention_mask.bool()
        # Move every sentence's real tokens to the front (order kept), run the packed RNN, move them back.
        order = torch.argsort((~real).to(torch.int8), dim=1, stable=True)
        compact = group.gather(1, order[..., None].expand_as(group))
        lengths = real.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(compact, lengths, batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=group.shape[1])
        restored = torch.empty_like(states).scatter_(1, order[..., None].expand_as(states), states)
        return self.projection(restored) * real[..., None]


class LocalFeatures(nn.Module):
    """Eq. (10)-(11): l_j = ReLU(conv_m(x)_j) + x_j, one 1-D convolution of width m, stride 1.

    The kernel is W in R^{m x d_l} (Eq. 10): one m-wide filter per channel (depthwise), m d_l + d_l parameters;
    Table II gives Loc_Diverse the baseline's parameter count, which a full d_l x d_l x m convolution would not.
    Padding is zeroed before the convolution, so a token next to padding sees what it sees next to the
    sentence boundary (the convolution's own zero padding). The source has no `<s>`: at the start of a
    sentence the zero padding stands where the paper's kernel would see a start symbol's vector."""

    def __init__(self, width: int, kernel_width: int):
        super().__init__()
        self.convolution = nn.Conv1d(width, width, kernel_width, stride=1, padding=kernel_width // 2, groups=width)

    def forward(self, group: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if attention_mask is not None:
            group = group * attention_mask[..., None].to(group.dtype)
        convolved = self.convolution(group.transpose(1, 2)).transpose(1, 2)
        return torch.relu(convolved) + group


class DiverseInputEmbedding(SrcFeatSourceEmbedding):
    """F = Concat(Func_1(X W_1), ..., Func_G(X W_G)) (Eq. 5-7), then dropout."""

    def __init__(self, config: DiverseInputConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens)
        self.group_widths = config.group_widths
        # Eq. (5): X_g = X W_g, W_g in R^{d_model x d_g}.
        self.projections = nn.ModuleDict({name: nn.Linear(config.d_model, width, bias=False)
                                          for name, width in self.group_widths.items()})
        if "recurrence" in self.group_widths:
            self.recurrence = RecurrenceFeatures(self.group_widths["recurrence"], config.recurrent_cell)
        if "local" in self.group_widths:
            self.local = LocalFeatures(self.group_widths["local"], config.local_kernel_width)
        if "syntactic" in self.group_widths:
            # Eq. (12): one POS vector p_j per tag, as wide as the group.
            self.pos_embedding = nn.Embedding(config.num_pos_tags, self.group_widths["syntactic"], padding_idx=0)
            self.num_pos_tags = config.num_pos_tags

    def group_representations(self, input_ids: torch.Tensor | None, features: SourceFeatures,
                              attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None = None
                              ) -> dict[str, torch.Tensor]:
        """F_g = Func_g(X_g) for every group (Eq. 6), before concatenation and dropout."""
        words = self.token_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        batch_size, seq_len = words.shape[:2]
        positions = source_positions(attention_mask, batch_size, seq_len, words.device)
        self.check_positions(positions)
        outputs = {}
        for name, width in self.group_widths.items():
            group = self.projections[name](words)
            if name == "global":  # Eq. (2)-(3): v_j = x_j + pe_j
                outputs[name] = group + sinusoidal_position_encoding(positions, width).to(group.dtype)
            elif name == "recurrence":  # Eq. (8)-(9)
                outputs[name] = self.recurrence(group, attention_mask)
            elif name == "local":  # Eq. (10)-(11)
                outputs[name] = self.local(group, attention_mask)
            else:  # Eq. (12)-(13): vp_j = x_j + pe_j + p_j
                outputs[name] = (group + sinusoidal_position_encoding(positions, width).to(group.dtype)
                                 + self.pos_embedding(features.require_ids(
                                     "pos_ids", "The syntactic group of the diverse input representation",
                                     self.num_pos_tags, "POS")))
        return outputs

    def forward(self, input_ids: torch.Tensor | None, features: SourceFeatures,
                attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        groups = self.group_representations(input_ids, features, attention_mask, inputs_embeds)
        return self.dropout(torch.cat(list(groups.values()), dim=-1))  # Eq. (7)


class DiverseInputEncoder(SrcFeatEncoder):
    source_embedding_class = DiverseInputEmbedding


class DiverseInputModel(SrcFeatTransformerModel):
    config_class = DiverseInputConfig
    encoder_class = DiverseInputEncoder


class DiverseInputForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = DiverseInputConfig
    model_class = DiverseInputModel


__all__ = ["DiverseInputForConditionalGeneration", "DiverseInputModel", "DiverseInputEmbedding"]
