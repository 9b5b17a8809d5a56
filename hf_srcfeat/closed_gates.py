"""Gates for grafting a method onto a trained model (`graft_gates=True`): each part a method adds mixes in as
x + g (f(x) - x), between what the model computed before (x) and what the method computes (f(x)), with a learned
scalar g per part that starts at 0. At the start the grafted model computes exactly what the trained one did;
g = 1 is the method as published."""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init


class ClosedGates(nn.Module):
    """`count` learned gates, all 0 (closed) at the start."""

    def __init__(self, count: int):
        super().__init__()
        self.values = nn.Parameter(torch.zeros(count))

    def initialize_parameters(self) -> None:
        init.zeros_(self.values)

    def mix(self, index: int, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """before + g_index (after - before)."""
        return before + self.values[index].to(before.dtype) * (after - before)


__all__ = ["ClosedGates"]
