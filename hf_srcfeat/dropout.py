"""The backbone's dropout, with masks drawn from 16-bit random numbers on the CPU.

`nn.Dropout` on the CPU draws one random double per element (`bernoulli_`); in training that was 6% of a step of
the benchmark's model. Here every element's mask is one 16-bit lane of a random 64-bit word compared with a
threshold: 4-7x faster per mask. The drop probability is rounded to a multiple of 1/65536 (0.1 becomes 0.1000061)
and kept values are scaled by 1 / (1 - that probability), so expectations are unchanged. Other devices, compiled
graphs and evaluation take `nn.Dropout`'s own path; the module holds no parameters, so saved models are unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: Lanes of 16 bits: a drop probability is a multiple of 1 / 65536.
LANE_VALUES = 1 << 16
#: False: `nn.Dropout`'s masks everywhere (what the benchmarks compare against).
LANE_MASKS = True


def dropped_share(p: float) -> float:
    """The drop probability `dropout_mask` realises for `p`: `p` rounded to a multiple of 1 / 65536."""
    return round(p * LANE_VALUES) / LANE_VALUES


def dropout_mask(shape: torch.Size | tuple[int, ...], p: float,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """A boolean CPU mask of `shape`, True (kept) with probability 1 - `dropped_share(p)`, each element independent."""
    count = math.prod(shape)
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device="cpu")
    # The full 64-bit range: `random_()` without bounds leaves the sign bit 0, and with it a lane that is never dropped.
    words.random_(-(1 << 63), None, generator=generator)
    lanes = words.view(torch.int16)[:count].view(shape)  # each uniform over [-32768, 32767]
    threshold = round(p * LANE_VALUES) - LANE_VALUES // 2  # kept: lanes >= threshold
    if not -LANE_VALUES // 2 < threshold < LANE_VALUES // 2:  # a rate that rounds to 0 or 1: beyond 16 bits
        return torch.full(shape, threshold <= -LANE_VALUES // 2, dtype=torch.bool)
    return _lanes_at_or_above(lanes, threshold)


def _lanes_at_or_above(lanes: torch.Tensor, threshold: int) -> torch.Tensor:
    """`lanes >= threshold` (int16 lanes, `threshold` within int16 and above its minimum), stated as a clamp to
    {threshold - 1, threshold} shifted to {0, 1}: PyTorch's comparisons write booleans element by element, slower on
    the CPU than these vectorised integer passes (`benchmarks/results/cpu_step_changes/` times a dropout's forward and
    backward both ways)."""
    kept = lanes.clamp(threshold - 1, threshold).sub_(threshold - 1).to(torch.uint8)
    return kept.view(torch.bool)


def _apply_mask(values: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """`values * mask * scale`, out of place. The mask multiplies as bytes: PyTorch multiplies by a boolean tensor
    element by element, slower on the CPU than by its vectorised uint8 view (the same 0s and 1s)."""
    return values.mul(mask.view(torch.uint8)).mul_(scale)


class DropoutFunction(torch.autograd.Function):
    """inputs * mask / (1 - p), with the mask kept for the backward pass (one byte an element)."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor, p: float) -> torch.Tensor:
        mask = dropout_mask(inputs.shape, p)
        ctx.scale = 1.0 / (1.0 - dropped_share(p))
        ctx.save_for_backward(mask)
        return _apply_mask(inputs, mask, ctx.scale)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (mask,) = ctx.saved_tensors
        # Out of place, so that a second derivative (create_graph=True) differentiates through it.
        return _apply_mask(grad_output, mask, ctx.scale), None


class Dropout(nn.Dropout):
    """`nn.Dropout`; in CPU training its masks come from `dropout_mask`."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if (not LANE_MASKS or not self.training or not 0.0 < dropped_share(self.p) < 1.0 or self.inplace
                or inputs.device.type != "cpu" or not inputs.is_floating_point() or torch.compiler.is_compiling()):
            return super().forward(inputs)
        return DropoutFunction.apply(inputs, self.p)


__all__ = ["LANE_MASKS", "Dropout", "DropoutFunction", "dropout_mask", "dropped_share"]
