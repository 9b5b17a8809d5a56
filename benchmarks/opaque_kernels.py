"""The zoo's CPU training kernels as operators a compiled graph calls as they are: for measuring `torch.compile`
of the training step with the products and dropout masks the eager step uses.

Under `torch.compile` the backbone's layers take PyTorch's own path (`hf_srcfeat.linear`, `hf_srcfeat.dropout`):
inductor then multiplies through MKL, about half of oneDNN's float32 speed on AMD processors, and draws dropout
masks with its own random numbers. `use_opaque_kernels(model)` makes the model's linear and dropout layers call,
when compiled, `onednn_linear` (forward and backward products by oneDNN, the gradients as the eager step computes
them) and `lane_dropout_mask` (the eager step's 16-bit-lane masks), which inductor leaves opaque and fuses the
element-wise work around. Eager calls are unchanged.

`use_opaque_layer_norm(model)` does the same for LayerNorm on any device: compiled, each LayerNorm calls ATen's own
forward and backward kernels (`layer_norm`, `layer_norm_backward`). On a GPU inductor fuses the backward of the
residual add, dropout and LayerNorm into one kernel whose reduction of LayerNorm's weight and bias gradients over
every position runs about three times as long as the same kernel without those gradients; ATen reduces them in a
kernel of its own. The residual add and dropout stay compiled around the opaque call.

`use_separate_layer_norm_gradients(model)` keeps the whole LayerNorm compiled except that reduction: its weight
and bias gradients are column sums that `column_sums` takes as a matrix product with a row of ones (cuBLAS on a
GPU), so inductor's kernels keep only row-wise work (ATen's own gamma-beta kernel measured 114 us a call on an H200
at a 32,768-token batch, about four times what reading its inputs once takes).
"""

from __future__ import annotations

import torch
from torch import nn

from hf_srcfeat import dropout, linear


@torch.library.custom_op("hf_srcfeat_benchmarks::onednn_matmul", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def onednn_matmul(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """`left @ right.T` by oneDNN (2-D operands, either may be a transposed view)."""
    return linear.onednn_product(left, right)


@onednn_matmul.register_fake
def _(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    return left.new_empty(left.shape[0], right.shape[0])


# Any input layout: without the tag inductor copies each input into the layout the eager graph had.
@torch.library.custom_op("hf_srcfeat_benchmarks::onednn_linear", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def onednn_linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`inputs @ weight.T + bias` by oneDNN."""
    return linear.onednn_product(inputs, weight, bias)


@onednn_linear.register_fake
def _(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return inputs.new_empty(*inputs.shape[:-1], weight.shape[0])


def _save_operands(ctx, inputs: tuple, output: torch.Tensor) -> None:
    layer_inputs, weight, bias = inputs
    ctx.save_for_backward(layer_inputs, weight)
    ctx.has_bias = bias is not None


def _linear_backward(ctx, grad_output: torch.Tensor):
    layer_inputs, weight = ctx.saved_tensors
    return linear.linear_gradients(grad_output, layer_inputs, weight, ctx.has_bias, ctx.needs_input_grad,
                                   product=onednn_matmul)


onednn_linear.register_autograd(_linear_backward, setup_context=_save_operands)


# Random: never merged with another call or reordered against other random operations.
@torch.library.custom_op("hf_srcfeat_benchmarks::lane_dropout_mask", mutates_args=(),
                         tags=(torch.Tag.nondeterministic_seeded,))
def lane_dropout_mask(inputs: torch.Tensor, p: float) -> torch.Tensor:
    """`hf_srcfeat.dropout.dropout_mask` for `inputs`' shape (`inputs` gives only the shape)."""
    return dropout.dropout_mask(inputs.shape, p)


@lane_dropout_mask.register_fake
def _(inputs: torch.Tensor, p: float) -> torch.Tensor:
    return inputs.new_empty(inputs.shape, dtype=torch.bool)


@torch.library.custom_op("hf_srcfeat_benchmarks::layer_norm", mutates_args=())
def layer_norm(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ATen's LayerNorm over the last dimension: (output, mean, reciprocal standard deviation)."""
    return torch.ops.aten.native_layer_norm(inputs, [inputs.shape[-1]], weight, bias, eps)


@layer_norm.register_fake
def _(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # ATen keeps the statistics of half-precision inputs in float32 on CUDA, and on the CPU where the weight is
    # float32; its output is contiguous.
    half = inputs.dtype in (torch.float16, torch.bfloat16)
    float32_statistics = half and (inputs.device.type != "cpu" or weight.dtype == torch.float32)
    statistics = inputs.new_empty((*inputs.shape[:-1], 1), dtype=torch.float32 if float32_statistics else inputs.dtype)
    return inputs.new_empty(inputs.shape), statistics, torch.empty_like(statistics)


@torch.library.custom_op("hf_srcfeat_benchmarks::layer_norm_backward", mutates_args=())
def layer_norm_backward(grad_output: torch.Tensor, inputs: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                        weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ATen's LayerNorm backward: the gradients of the inputs, the weight and the bias."""
    return torch.ops.aten.native_layer_norm_backward(grad_output.contiguous(), inputs, [inputs.shape[-1]], mean, rstd,
                                                     weight, bias, [True, True, True])


@layer_norm_backward.register_fake
def _(grad_output: torch.Tensor, inputs: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor,
      bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(inputs), torch.empty_like(weight), torch.empty_like(bias)


def _save_layer_norm_operands(ctx, inputs: tuple, output: tuple) -> None:
    layer_inputs, weight, bias, _ = inputs
    ctx.save_for_backward(layer_inputs, output[1], output[2], weight, bias)


def _layer_norm_gradients(ctx, grad_output: torch.Tensor, _grad_mean: torch.Tensor, _grad_rstd: torch.Tensor):
    layer_inputs, mean, rstd, weight, bias = ctx.saved_tensors
    return (*layer_norm_backward(grad_output, layer_inputs, mean, rstd, weight, bias), None)


layer_norm.register_autograd(_layer_norm_gradients, setup_context=_save_layer_norm_operands)


def _as_autocast_gives_layer_norm(inputs: torch.Tensor) -> torch.Tensor:
    """`inputs` in the dtype autocast runs LayerNorm in: float32 on CUDA (the CPU's autocast leaves it to the inputs'
    dtype)."""
    if inputs.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        return inputs.float()
    return inputs


def _layer_norms_turned_into(model: nn.Module, kind: type[nn.LayerNorm]) -> nn.Module:
    """`model` with each `nn.LayerNorm` that has a weight and a bias turned into `kind` (in place: the parameters stay
    the same)."""
    for module in model.modules():
        if type(module) is nn.LayerNorm and module.weight is not None and module.bias is not None:
            module.__class__ = kind
    return model


class OpaqueLayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` (with weight and bias) that a compiled graph calls as ATen's kernels (`layer_norm`)."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and len(self.normalized_shape) == 1:
            return layer_norm(_as_autocast_gives_layer_norm(inputs), self.weight, self.bias, self.eps)[0]
        return super().forward(inputs)


def use_opaque_layer_norm(model: nn.Module) -> nn.Module:
    """`model` with each `nn.LayerNorm` that has a weight and a bias turned into `OpaqueLayerNorm` (in place)."""
    return _layer_norms_turned_into(model, OpaqueLayerNorm)


@torch.library.custom_op("hf_srcfeat_benchmarks::column_sums", mutates_args=())
def column_sums(rows: torch.Tensor) -> torch.Tensor:
    """The column sums of a [positions, features] matrix, as its product with a row of ones, in its own precision
    (autocast would round the operands to half precision, TF32 to a 10-bit mantissa)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.autocast(rows.device.type, enabled=False):
            return (rows.new_ones(1, rows.shape[0]) @ rows)[0]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


@column_sums.register_fake
def _(rows: torch.Tensor) -> torch.Tensor:
    return rows.new_empty(rows.shape[1])


class _AffineWithSeparateGradients(torch.autograd.Function):
    """`normalised * weight + bias`, whose weight and bias gradients come from one `column_sums` call."""

    @staticmethod
    def forward(ctx, normalised: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(normalised, weight)
        return normalised * weight + bias

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        normalised, weight = ctx.saved_tensors
        grad_input = grad_output * weight
        if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):
            return grad_input, None, None
        features = grad_output.shape[-1]
        gradients = grad_output.reshape(-1, features)
        # One product for both: inductor writes the two halves from the kernel that computes them.
        sums = column_sums(torch.cat([gradients * normalised.reshape(gradients.shape), gradients], dim=1))
        return grad_input, sums[:features], sums[features:]


class SeparateGradientLayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` (with weight and bias) whose weight and bias gradients a compiled graph reduces apart, by
    `column_sums`, from the row-wise work that inductor fuses."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and len(self.normalized_shape) == 1:
            inputs = _as_autocast_gives_layer_norm(inputs)
            # Half-precision inputs with float32 weights normalised in float32 and rounded once, as ATen does
            computed = torch.promote_types(inputs.dtype, self.weight.dtype)
            normalised = nn.functional.layer_norm(inputs.to(computed), self.normalized_shape, None, None, self.eps)
            return _AffineWithSeparateGradients.apply(normalised, self.weight, self.bias).to(inputs.dtype)
        return super().forward(inputs)


def use_separate_layer_norm_gradients(model: nn.Module) -> nn.Module:
    """`model` with each `nn.LayerNorm` that has a weight and a bias turned into `SeparateGradientLayerNorm` (in
    place)."""
    return _layer_norms_turned_into(model, SeparateGradientLayerNorm)


class OpaqueKernelLinear(linear.Linear):
    """`hf_srcfeat.linear.Linear` whose CPU float32 products in a compiled graph are `onednn_linear`."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if (torch.compiler.is_compiling() and inputs.device.type == "cpu" and inputs.dtype == torch.float32
                and self.weight.dtype == torch.float32):
            return onednn_linear(inputs, self.weight, self.bias)
        return super().forward(inputs)


class OpaqueKernelDropout(dropout.Dropout):
    """`hf_srcfeat.dropout.Dropout` whose CPU training masks in a compiled graph come from `lane_dropout_mask`."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if (torch.compiler.is_compiling() and self.training and 0.0 < dropout.dropped_share(self.p) < 1.0
                and not self.inplace and inputs.device.type == "cpu" and inputs.is_floating_point()):
            mask = lane_dropout_mask(inputs.detach(), self.p)
            return inputs * mask * (1.0 / (1.0 - dropout.dropped_share(self.p)))
        return super().forward(inputs)


def use_opaque_kernels(model: nn.Module) -> nn.Module:
    """`model` with its zoo linear and dropout layers turned into the opaque-kernel kinds above (in place: the
    parameters and saved weights stay the same)."""
    for module in model.modules():
        if type(module) is linear.Linear:
            module.__class__ = OpaqueKernelLinear
        elif type(module) is dropout.Dropout:
            module.__class__ = OpaqueKernelDropout
    return model


__all__ = ["OpaqueKernelDropout", "OpaqueKernelLinear", "OpaqueLayerNorm", "SeparateGradientLayerNorm", "column_sums",
           "lane_dropout_mask", "layer_norm", "onednn_linear", "onednn_matmul", "use_opaque_kernels",
           "use_opaque_layer_norm", "use_separate_layer_norm_gradients"]
