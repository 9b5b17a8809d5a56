"""Earlier ways of the shipped CPU training step, restored for one step at a time, so that
`benchmarks/batching_efficiency.py --undone` can time a change against the step without it, interleaved in one run:

- `log_softmax_loss`: the loss without the logits computes each chunk's loss from a log-softmax pass over its logits
  (and the mean of those log-probabilities), besides the softmax its gradient needs, instead of from that softmax.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hf_srcfeat import label_smoothed_cross_entropy as loss_module


def _log_softmax_row_losses(logits: torch.Tensor, probabilities: torch.Tensor, targets: torch.Tensor,
                            mean_logits: torch.Tensor, smoothing: float) -> torch.Tensor:
    return loss_module._row_losses(torch.log_softmax(logits, dim=-1), targets, smoothing)


#: change -> (the object holding the shipped way, its attribute name, the earlier way put there while undone)
EARLIER_WAYS = {"log_softmax_loss": (loss_module, "_row_losses_from_softmax", _log_softmax_row_losses)}
UNDONE_CHANGES = tuple(EARLIER_WAYS)


@contextlib.contextmanager
def undone(change: str | None) -> Iterator[None]:
    """Within the block, `change` (one of `UNDONE_CHANGES`) is undone; None: the step as shipped."""
    if change is None:
        yield
        return
    if change not in EARLIER_WAYS:
        raise ValueError(f"unknown change {change!r}; known: {', '.join(UNDONE_CHANGES)}")
    owner, name, earlier = EARLIER_WAYS[change]
    shipped = vars(owner)[name]
    setattr(owner, name, earlier)
    try:
        yield
    finally:
        setattr(owner, name, shipped)
