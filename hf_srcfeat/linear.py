"""The linear layer of the shared backbone (attention projections, feed-forward, output projection).

An `nn.Linear` whose products on the CPU in float32 run through oneDNN once a call has enough rows: there PyTorch's
default (MKL) reaches about half of a core's float32 peak on AMD processors and oneDNN close to it
(`benchmarks/measure_decoding_speed.py`, `benchmarks/batching_efficiency.py`). In training the three products of a
layer (the output, the input's and the weight's gradients) all run through oneDNN.

Without gradients (translation), the weight is also kept in the layout the kernel reads fastest, made once and
remade when the weight changes: packed into oneDNN's blocked layout for products of several rows, transposed for
one row (greedy decoding of one sentence), where MKL then streams it row by row. Decoding reads every weight of the
decoder each step, from memory rather than cache once the model outgrows the cache; read in these layouts the
products of a greedy step of one sentence take about half as long, those of a batched step about a tenth less
(`benchmarks/measure_decoding_speed.py`). A layer keeps one copy (packed once it
met several rows, for single rows too), which costs the weight's size again, and drops it as soon as it trains.

Other dtypes and devices, autocast and compiled graphs take `nn.Linear`'s own path; the parameters and saved
weights are `nn.Linear`'s.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn

#: Below this many rows (e.g. greedy decoding of one sentence) MKL's matrix-vector kernels are the faster ones.
ONEDNN_MIN_ROWS = 16
#: Products without gradients read the weight in a prepared layout (False: the training kernels' path).
PREPARED_INFERENCE_WEIGHTS = True
#: The row count oneDNN packs the weight for; products of any number of rows read it, fastest from about 4 rows.
PACKING_ROWS_HINT = 64


def onednn_product(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`inputs @ weight.T + bias` by oneDNN (`weight` is `[out_features, in_features]`, as `nn.Linear` keeps it)."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


def _onednn_applies(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    # Compiled graphs first: tracing `mkldnn.is_available` would break them.
    return (not torch.compiler.is_compiling() and inputs.dtype == torch.float32 and weight.dtype == torch.float32
            and inputs.device.type == "cpu" and inputs.numel() >= ONEDNN_MIN_ROWS * weight.shape[1]
            and torch.backends.mkldnn.is_available() and not torch.is_autocast_enabled("cpu"))


class OneDNNLinearFunction(torch.autograd.Function):
    """A linear layer whose forward and backward products all run through oneDNN."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(inputs, weight)
        ctx.has_bias = bias is not None
        return onednn_product(inputs, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        inputs, weight = ctx.saved_tensors
        grad_rows = grad_output.reshape(-1, grad_output.shape[-1])
        grad_inputs = grad_weight = grad_bias = None
        # oneDNN reads a transposed right operand in place: copying it first would take as long as some products.
        if ctx.needs_input_grad[0]:  # grad_output @ weight
            grad_inputs = onednn_product(grad_rows, weight.t()).view(inputs.shape)
        if ctx.needs_input_grad[1]:  # grad_output.T @ inputs
            input_rows = inputs.reshape(-1, inputs.shape[-1])
            # oneDNN copies its transposed left operand first: let that be the narrower of the two.
            if weight.shape[1] < weight.shape[0]:
                grad_weight = onednn_product(input_rows.t(), grad_rows.t()).t()
            else:
                grad_weight = onednn_product(grad_rows.t(), input_rows.t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_rows.sum(0)
        return grad_inputs, grad_weight, grad_bias


@dataclass
class PreparedWeight:
    """A layer's weight in the layouts inference reads, made on first use, for one state of the weight."""

    weight: weakref.ref  # the weight they were made from (a new tensor may take a freed one's address)
    state: tuple[int, int]  # its data_ptr and version then
    transposed: torch.Tensor | None = None  # [in_features, out_features], contiguous
    packed: torch.Tensor | None = None  # oneDNN's blocked layout (an opaque mkldnn tensor)


# Kept beside the layers rather than on them, so that copying, pickling or saving a layer never meets the opaque
# oneDNN tensor; an entry goes when its layer does.
_PREPARED_WEIGHTS: weakref.WeakKeyDictionary[nn.Module, PreparedWeight] = weakref.WeakKeyDictionary()


def _prepared_inference_applies(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    return (PREPARED_INFERENCE_WEIGHTS and not torch.compiler.is_compiling() and inputs.dtype == torch.float32
            and weight.dtype == torch.float32 and inputs.device.type == "cpu" and not weight.is_inference()
            and not (torch.is_grad_enabled() and (weight.requires_grad or inputs.requires_grad))
            and torch.backends.mkldnn.is_available() and not torch.is_autocast_enabled("cpu"))


def release_prepared_weights(model: nn.Module | None = None) -> None:
    """Drop the prepared copies of `model`'s linear layers (of every layer when None), e.g. to free their memory
    after translating; the next product without gradients makes them again."""
    layers = list(_PREPARED_WEIGHTS) if model is None else [layer for layer in model.modules()
                                                             if isinstance(layer, Linear)]
    for layer in layers:
        _PREPARED_WEIGHTS.pop(layer, None)


class Linear(nn.Linear):
    """`nn.Linear`; CPU float32 products of batches of rows run oneDNN's matrix multiplication, in inference and
    training, and inference reads the weight in a prepared layout."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if _prepared_inference_applies(inputs, self.weight):
            return self._inference_product(inputs)
        if torch.is_grad_enabled() and self.weight.requires_grad:
            _PREPARED_WEIGHTS.pop(self, None)  # training from here on: the copies would go stale
        if not _onednn_applies(inputs, self.weight):
            return super().forward(inputs)
        if torch.is_grad_enabled() and (self.weight.requires_grad or inputs.requires_grad):
            return OneDNNLinearFunction.apply(inputs, self.weight, self.bias)
        return onednn_product(inputs, self.weight, self.bias)

    def _inference_product(self, inputs: torch.Tensor) -> torch.Tensor:
        state = (self.weight.data_ptr(), self.weight._version)
        prepared = _PREPARED_WEIGHTS.get(self)
        if prepared is None or prepared.weight() is not self.weight or prepared.state != state:
            prepared = _PREPARED_WEIGHTS[self] = PreparedWeight(weakref.ref(self.weight), state)
        weight = self.weight.detach()
        if inputs.numel() == self.in_features and prepared.packed is None:  # one row
            if prepared.transposed is None:
                prepared.transposed = weight.t().contiguous()
            row = inputs.reshape(1, self.in_features)
            outputs = row @ prepared.transposed if self.bias is None else torch.addmm(self.bias, row,
                                                                                       prepared.transposed)
            return outputs.view(*inputs.shape[:-1], self.out_features)
        if prepared.packed is None:
            # One copy per layer at a time: once several rows came, single rows read the packed copy too.
            prepared.packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKING_ROWS_HINT)
            prepared.transposed = None
        return torch.ops.mkldnn._linear_pointwise(inputs, prepared.packed, self.bias, "none", [], "")


__all__ = ["Linear", "ONEDNN_MIN_ROWS", "OneDNNLinearFunction", "PREPARED_INFERENCE_WEIGHTS", "onednn_product",
           "release_prepared_weights"]
