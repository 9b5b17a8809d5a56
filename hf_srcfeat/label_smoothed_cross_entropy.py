"""Label-smoothed cross-entropy (Szegedy et al. 2016) as one autograd step.

`nn.functional.cross_entropy(..., label_smoothing=ε)` gives the same values, but differentiates through its parts:
the backward pass fills a zero [tokens, vocabulary] gradient for the likelihood term, another for the smoothing
term, adds them and runs log-softmax's backward, several passes over the largest tensor of a training step (and as
many of its copies in memory: 4 GB each for 4,000 tokens of NLLB's 256k vocabulary). Here the gradient is written
once, `softmax(logits) - target` with the smoothed target `(1 - ε)·one_hot(label) + ε / vocabulary_size`.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of `logits` `[tokens, vocabulary]` against `labels` `[tokens]`."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
        log_probabilities = torch.log_softmax(logits, dim=-1)
        counted = labels != IGNORE_INDEX
        targets = labels.masked_fill(~counted, 0)
        negative_log_likelihood = -log_probabilities.gather(1, targets[:, None]).squeeze(1)
        smoothing_term = -log_probabilities.mean(dim=-1)  # against the uniform distribution
        ctx.save_for_backward(log_probabilities, targets, counted)
        ctx.smoothing = smoothing
        return (((1 - smoothing) * negative_log_likelihood + smoothing * smoothing_term) * counted).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        log_probabilities, targets, counted = ctx.saved_tensors
        smoothing, vocabulary_size = ctx.smoothing, log_probabilities.shape[-1]
        # softmax of log-probabilities is their exp, but through softmax's vectorised kernel: `torch.exp` on the
        # CPU slows down manyfold where its results fall below float32's normal range (subnormal numbers), as a
        # confident model's probabilities over a large vocabulary do.
        grad = torch.softmax(log_probabilities, dim=-1).sub_(smoothing / vocabulary_size)
        grad.scatter_add_(1, targets[:, None], grad.new_full((len(targets), 1), -(1 - smoothing)))
        grad.mul_((counted * grad_loss).to(grad.dtype)[:, None])
        return grad, None, None


def label_smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The summed cross-entropy of `logits` `[..., vocabulary]` against `labels` `[...]` with the target smoothed
    by `smoothing` towards the uniform distribution; labels of -100 are left out (as `nn.functional.cross_entropy`
    with `ignore_index=-100, label_smoothing=smoothing, reduction="sum"`)."""
    return LabelSmoothedCrossEntropy.apply(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), smoothing)


__all__ = ["LabelSmoothedCrossEntropy", "label_smoothed_cross_entropy"]
