"""Diverse input representation (Chen et al., TASLP 2020): the source word vectors are split by learnable
projections into groups whose widths are whole attention heads; each group gets its own input function
(global: + positions; recurrence: a bidirectional RNN; local: a convolution; syntactic: + positions + a POS
embedding) and the results, concatenated, are the encoder input. Only the source embedding changes.

Padding: the recurrence and local groups never read padded positions, so a sentence gets the same input
representation alone and in a padded batch (left or right padding).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .closed_gates import ClosedGates
from .configuration_diverse_input import DiverseInputConfig
from .embeddings import SrcFeatSourceEmbedding, required, sinusoidal_position_encoding, source_positions
from .linear import Linear
from .modeling_srcfeat_transformer import (
    SrcFeatEncoder,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)
from .source_features import SourceFeatures

RECURRENT_CELL_CLASSES = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}
WEIGHT_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def recurrence(inputs: torch.Tensor, weights: list[torch.Tensor], cell: str, train: bool) -> torch.Tensor:
    """The states [B, S, hidden] of a one-layer, one-direction `cell` RNN run left to right over `inputs`
    [B, S, width], from zero states: the operator `nn.GRU.forward` calls. `weights`: weight_ih, weight_hh, bias_ih,
    bias_hh."""
    initial = inputs.new_zeros(1, inputs.shape[0], weights[1].shape[1])
    # (input, hx, weights, has_biases, num_layers, dropout, train, bidirectional, batch_first), as nn.GRU calls
    if cell == "lstm":
        return torch._VF.lstm(inputs, (initial, initial), weights, True, 1, 0.0, train, False, True)[0]
    operator = torch._VF.gru if cell == "gru" else torch._VF.rnn_tanh
    return operator(inputs, initial, weights, True, 1, 0.0, train, False, True)[0]


# Compiled, the RNN operator runs as an operator of its own, which the compiler does not look into: traced, it
# unrolls over the time steps, fixing the graph to one sentence length (every batch length compiled again) and
# tracing for long. Its backward recomputes the forward states, as the operator keeps its gate activations to itself.
# A compiled graph runs without autocast, so the weights are taken in the inputs' dtype here (autocast's own cast
# would happen outside). The results are contiguous and unshared, as the compiler assumes of an operator's outputs
# (the RNN operator returns a transposed view, and cuDNN's weight gradients share one buffer).
def _recurrence_in_inputs_dtype(inputs: torch.Tensor, weights: list[torch.Tensor], cell: str,
                                train: bool) -> torch.Tensor:
    return recurrence(inputs, [weight.to(inputs.dtype) for weight in weights], cell, train)


@torch.library.custom_op("hf_srcfeat::recurrence", mutates_args=())
def compiled_recurrence(inputs: torch.Tensor, weights: list[torch.Tensor], cell: str, train: bool) -> torch.Tensor:
    """`recurrence` for a compiled graph (weights in the inputs' dtype, a contiguous result)."""
    return _recurrence_in_inputs_dtype(inputs, weights, cell, train).contiguous()


@compiled_recurrence.register_fake
def _(inputs: torch.Tensor, weights: list[torch.Tensor], cell: str, train: bool) -> torch.Tensor:
    return inputs.new_empty(inputs.shape[0], inputs.shape[1], weights[1].shape[1])


@torch.library.custom_op("hf_srcfeat::recurrence_backward", mutates_args=())
def recurrence_backward(gradient: torch.Tensor, inputs: torch.Tensor, weights: list[torch.Tensor], cell: str,
                        train: bool) -> list[torch.Tensor]:
    """The gradients of `compiled_recurrence`'s states (given `gradient`) for its inputs and each weight."""
    # An operator's own code runs with autograd's dispatch keys excluded, so a tensor would not record its history:
    # they are let back in for the recomputation (torch.func.vjp would too, but fails on oneDNN's LSTM kernel).
    excluded = torch._C._dispatch_tls_local_exclude_set()
    dispatch_keys = torch._C.DispatchKey
    for key in (dispatch_keys.AutogradCPU, dispatch_keys.AutogradCUDA, dispatch_keys.ADInplaceOrView):
        excluded = excluded.remove(key)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded), torch.enable_grad():
        leaves = [tensor.detach().requires_grad_() for tensor in (inputs, *weights)]
        states = _recurrence_in_inputs_dtype(leaves[0], leaves[1:], cell, train)
        gradients = torch.autograd.grad(states, leaves, gradient)
    return [gradient_.clone(memory_format=torch.contiguous_format) for gradient_ in gradients]


@recurrence_backward.register_fake
def _(gradient: torch.Tensor, inputs: torch.Tensor, weights: list[torch.Tensor], cell: str,
      train: bool) -> list[torch.Tensor]:
    return [torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device) for tensor in (inputs, *weights)]


# ctx: the context object register_autograd passes, which takes attributes freely.
def _keep_recurrence_inputs(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    states_inputs, weights, ctx.cell, ctx.train = inputs
    ctx.save_for_backward(states_inputs, *weights)


def _recurrence_gradients(ctx: Any, gradient: torch.Tensor) -> tuple:
    states_inputs, *weights = ctx.saved_tensors
    gradients = recurrence_backward(gradient, states_inputs, weights, ctx.cell, ctx.train)
    return gradients[0], gradients[1:], None, None


compiled_recurrence.register_autograd(_recurrence_gradients, setup_context=_keep_recurrence_inputs)


class BidirectionalRecurrentWeights(nn.Module):
    """The weights of a one-layer bidirectional `nn.GRU`/`nn.LSTM`/`nn.RNN` (same names, shapes and
    initialisation, so checkpoints load either way), run one direction at a time by `run`.

    Why not the `nn` module itself: Dynamo does not trace RNN modules (a graph break at every call), and packing
    padded sentences needs their lengths on the host (a sync). Calling the RNN operator that `nn.GRU.forward` calls,
    on sentences whose padding comes after their tokens, needs neither."""

    def __init__(self, width: int, cell: str):
        super().__init__()
        reference = RECURRENT_CELL_CLASSES[cell](width, width, batch_first=True, bidirectional=True)
        self.cell, self.input_size, self.hidden_size = cell, width, width
        for suffix in ("", "_reverse"):
            for name in WEIGHT_NAMES:
                self.register_parameter(f"{name}_l0{suffix}", getattr(reference, f"{name}_l0{suffix}"))

    def run(self, inputs: torch.Tensor, reverse: bool) -> torch.Tensor:
        """The states [B, S, width] of one direction run left to right over `inputs` [B, S, width]."""
        weights = [getattr(self, f"{name}_l0{'_reverse' if reverse else ''}") for name in WEIGHT_NAMES]
        if torch.compiler.is_compiling():
            return compiled_recurrence(inputs, weights, self.cell, self.training)
        return recurrence(inputs, weights, self.cell, self.training)


class RecurrenceFeatures(nn.Module):
    """Eq. (8)-(9): r_j = W [forward_j ; backward_j] of a bidirectional RNN over the real tokens only."""

    def __init__(self, width: int, cell: str):
        super().__init__()
        self.rnn = BidirectionalRecurrentWeights(width, cell)
        self.projection = Linear(2 * width, width)  # 2 d_r -> d_r

    def align_weights(self) -> None:
        """Weights loaded from safetensors can sit at addresses that are not 64-byte aligned; oneDNN's RNN then
        takes another kernel whose rounding differs (~1e-7), and a reloaded model would not reproduce the
        saved one's logits exactly. Copying them once to fresh (aligned) memory restores the usual path."""
        if torch.compiler.is_compiling():
            return
        for parameter in self.rnn.parameters():
            if parameter.device.type == "cpu" and parameter.data_ptr() % 64:
                parameter.data = parameter.data.clone()

    def forward(self, group: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        self.align_weights()
        real = (attention_mask if attention_mask is not None else torch.ones_like(group[..., 0])).bool()
        # Every sentence's real tokens to the front (order kept): the forward direction then never reads padding
        # before a token. The backward direction reads each sentence reversed within its length (padding still
        # after it), and its states are put back in sentence order: the same gather, as it is its own inverse.
        order = torch.argsort((~real).to(torch.int8), dim=1, stable=True)
        compact = group.gather(1, order[..., None].expand_as(group))
        positions = torch.arange(group.shape[1], device=group.device)
        lengths = real.sum(1, keepdim=True)
        within = torch.where(positions < lengths, lengths - 1 - positions, positions)[..., None]
        forward_states = self.rnn.run(compact, reverse=False)
        backward_states = self.rnn.run(compact.gather(1, within.expand_as(compact)), reverse=True)
        backward_states = backward_states.gather(1, within.expand_as(backward_states))
        states = torch.cat([forward_states, backward_states], -1)
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
        if torch.compiler.is_compiling():
            convolved = self.shifted_sum(group)
        else:
            convolved = self.convolution(group.transpose(1, 2)).transpose(1, 2)
        return torch.relu(convolved) + group

    def shifted_sum(self, group: torch.Tensor) -> torch.Tensor:
        """The convolution as a sum of the kernel's taps over shifted copies of `group` [B, S, width]: compiled,
        inductor's lowering of the convolution's backward fixes the graph to one sentence length (every batch
        length would compile the whole model again); element-wise, the taps fuse and the length stays a symbol."""
        taps = self.convolution.kernel_size[0]
        padded = F.pad(group, (0, 0, taps // 2, taps // 2))  # zeros before and after each sentence, as the conv pads
        weight = self.convolution.weight[:, 0, :]  # [width, taps]: one filter per channel
        length = group.shape[1]
        convolved = padded[:, :length] * weight[:, 0]
        for tap in range(1, taps):
            convolved = convolved + padded[:, tap:tap + length] * weight[:, tap]
        return convolved if self.convolution.bias is None else convolved + self.convolution.bias


class DiverseInputEmbedding(SrcFeatSourceEmbedding):
    """F = Concat(Func_1(X W_1), ..., Func_G(X W_G)) (Eq. 5-7), then dropout."""

    def __init__(self, config: DiverseInputConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens)
        self.group_widths = config.group_widths
        # Eq. (5): X_g = X W_g, W_g in R^{d_model x d_g}.
        self.projections = nn.ModuleDict({name: Linear(config.d_model, width, bias=False)
                                          for name, width in self.group_widths.items()})
        if "recurrence" in self.group_widths:
            self.recurrence = RecurrenceFeatures(self.group_widths["recurrence"], config.recurrent_cell)
        if "local" in self.group_widths:
            self.local = LocalFeatures(self.group_widths["local"], config.local_kernel_width)
        if "syntactic" in self.group_widths:
            # Eq. (12): one POS vector p_j per tag, as wide as the group.
            self.pos_embedding = nn.Embedding(config.num_pos_tags, self.group_widths["syntactic"], padding_idx=0)
            self.num_pos_tags = config.num_pos_tags
        # grafted: the trained model's input representation x, mixed toward F as x + g (F - x), g from 0
        self.graft_gate = ClosedGates(1) if config.graft_gates else None

    def group_representations(self, input_ids: torch.Tensor | None, features: SourceFeatures,
                              attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None = None
                              ) -> dict[str, torch.Tensor]:
        """F_g = Func_g(X_g) for every group (Eq. 6), before concatenation and dropout."""
        words = self.token_embeddings(required(input_ids)) if inputs_embeds is None else inputs_embeds
        batch_size, seq_len = words.shape[:2]
        positions = source_positions(attention_mask, batch_size, seq_len, words.device)
        self.check_positions(positions, longest=seq_len)
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
        words = self.token_embeddings(required(input_ids)) if inputs_embeds is None else inputs_embeds
        groups = self.group_representations(input_ids, features, attention_mask, inputs_embeds=words)
        diverse = torch.cat(list(groups.values()), dim=-1)  # Eq. (7)
        if self.graft_gate is None:
            return self.dropout(diverse)
        positions = source_positions(attention_mask, words.shape[0], words.shape[1], words.device)
        # the grafted-onto model's representation (with dropout)
        trained = self.with_positions(words, positions, longest=words.shape[1])
        return self.graft_gate.mix(0, trained, self.dropout(diverse))


class DiverseInputEncoder(SrcFeatEncoder):
    source_embedding_class = DiverseInputEmbedding


class DiverseInputModel(SrcFeatTransformerModel):
    config_class = DiverseInputConfig
    encoder_class = DiverseInputEncoder


class DiverseInputForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = DiverseInputConfig
    model_class = DiverseInputModel


__all__ = ["DiverseInputForConditionalGeneration", "DiverseInputModel", "DiverseInputEmbedding"]
