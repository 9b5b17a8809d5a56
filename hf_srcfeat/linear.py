"""The linear layer of the shared backbone (attention projections, feed-forward, output projection).

An `nn.Linear` whose inference on the CPU in float32 multiplies through oneDNN once a call has enough rows: there
PyTorch's default (MKL) reaches about half of a core's float32 peak on AMD processors and oneDNN close to it
(`benchmarks/measure_decoding_speed.py`, docs/guides/translate.md). Training, autograd, other dtypes and devices,
and compiled graphs take `nn.Linear`'s own path; the parameters and saved weights are `nn.Linear`'s.
"""

from __future__ import annotations

import torch
from torch import nn

#: Below this many rows (e.g. greedy decoding of one sentence) MKL's matrix-vector kernels are the faster ones.
ONEDNN_MIN_ROWS = 16


def _onednn_applies(inputs: torch.Tensor, in_features: int) -> bool:
    return (inputs.dtype == torch.float32 and inputs.device.type == "cpu" and not torch.is_grad_enabled()
            and inputs.numel() >= ONEDNN_MIN_ROWS * in_features and torch.backends.mkldnn.is_available()
            and not torch.compiler.is_compiling())


class Linear(nn.Linear):
    """`nn.Linear`; CPU float32 inference on batches of rows runs oneDNN's matrix multiplication."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if _onednn_applies(inputs, self.in_features):
            return torch.ops.mkldnn._linear_pointwise(inputs, self.weight, self.bias, "none", [], "")
        return super().forward(inputs)


__all__ = ["Linear", "ONEDNN_MIN_ROWS"]
