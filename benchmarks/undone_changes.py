"""Earlier ways of the shipped CPU training step, restored for one step at a time, so that
`benchmarks/batching_efficiency.py --undone` can time a change against the step without it, interleaved in one run:

- `log_softmax_loss`: the loss without the logits computes each chunk's loss from a log-softmax pass over its logits
  (and the mean of those log-probabilities), besides the softmax its gradient needs, instead of from that softmax.
- `boolean_dropout_masks`: the CPU dropout's masks come from comparing the random lanes with the threshold (PyTorch's
  boolean comparison), and values and gradients are multiplied by the boolean mask itself, instead of by its uint8
  view. The masks are the same; only how they are made and applied differs.
- `copied_loss_weight_gradient`: the loss without the logits copies the output weight's summed gradient into the
  weight's layout and then scales it by the loss's gradient, two passes, instead of scaling it into that layout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hf_srcfeat import dropout as dropout_module
from hf_srcfeat import label_smoothed_cross_entropy as loss_module


def _log_softmax_row_losses(logits: torch.Tensor, probabilities: torch.Tensor, targets: torch.Tensor,
                            mean_logits: torch.Tensor, smoothing: float) -> torch.Tensor:
    return loss_module._row_losses(torch.log_softmax(logits, dim=-1), targets, smoothing)


def _compared_lanes(lanes: torch.Tensor, threshold: int) -> torch.Tensor:
    return lanes >= threshold


def _boolean_mask_product(values: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    return values.mul(mask).mul_(scale)


def _copied_then_scaled_weight_gradient(grad_weight: torch.Tensor, grad_loss: torch.Tensor) -> torch.Tensor:
    return grad_weight.contiguous() * grad_loss


#: change -> [(the object holding the shipped way, its attribute name, the earlier way put there while undone)]
EARLIER_WAYS = {
    "log_softmax_loss": [(loss_module, "_row_losses_from_softmax", _log_softmax_row_losses)],
    "boolean_dropout_masks": [(dropout_module, "_lanes_at_or_above", _compared_lanes),
                              (dropout_module, "_apply_mask", _boolean_mask_product)],
    "copied_loss_weight_gradient": [(loss_module, "_scaled_weight_gradient", _copied_then_scaled_weight_gradient)],
}
UNDONE_CHANGES = tuple(EARLIER_WAYS)


@contextlib.contextmanager
def undone(change: str | None) -> Iterator[None]:
    """Within the block, `change` (one of `UNDONE_CHANGES`) is undone; None: the step as shipped."""
    if change is None:
        yield
        return
    if change not in EARLIER_WAYS:
        raise ValueError(f"unknown change {change!r}; known: {', '.join(UNDONE_CHANGES)}")
    shipped = [(owner, name, vars(owner)[name]) for owner, name, _ in EARLIER_WAYS[change]]
    for owner, name, earlier in EARLIER_WAYS[change]:
        setattr(owner, name, earlier)
    try:
        yield
    finally:
        for owner, name, way in shipped:
            setattr(owner, name, way)
