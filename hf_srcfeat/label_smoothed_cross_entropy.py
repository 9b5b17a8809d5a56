"""Label-smoothed cross-entropy (Szegedy et al. 2016) as one autograd step.

`nn.functional.cross_entropy(..., label_smoothing=ε)` gives the same values, but differentiates through its parts:
the backward pass fills a zero [tokens, vocabulary] gradient for the likelihood term, another for the smoothing
term, adds them and runs log-softmax's backward, several passes over the largest tensor of a training step (and as
many of its copies in memory: 4 GB each for 4,000 tokens of NLLB's 256k vocabulary). Here the gradient is written
once, `softmax(logits) - target` with the smoothed target `(1 - ε)·one_hot(label) + ε / vocabulary_size`.

A training step that reads only the loss can go further (`ProjectedLabelSmoothedCrossEntropy`): the output
projection and the loss as one step over chunks of target positions, each chunk's gradients computed right after
its logits (still in the processor's cache where a chunk fits, up to vocabularies of about 8,000), so the
[tokens, vocabulary] logits are never held as a whole, read back or kept for the backward pass (as Liger Kernel's
fused linear cross-entropy does on GPUs; its kernels need Triton).
"""

from __future__ import annotations

import torch

from .linear import linear_gradients, onednn_product

IGNORE_INDEX = -100
#: Logits held at once by `ProjectedLabelSmoothedCrossEntropy`: a chunk of 2^21 float32 values (8 MB) stays in a
#: server processor's last-level cache while its gradient is computed. Over large vocabularies, at least
#: `MIN_CHUNK_ROWS` positions a chunk: each chunk adds its part of the weight's gradient, a pass over the
#: [vocabulary, d_model] weight, which fewer rows do not repay (`docs/guides/training.md`).
CHUNK_LOGITS = 1 << 21
MIN_CHUNK_ROWS = 256


def _row_losses(log_probabilities: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Each row's loss: `(1 - ε)` times the target's negative log-likelihood plus `ε` times the cross-entropy against
    the uniform distribution."""
    negative_log_likelihood = -log_probabilities.gather(1, targets[:, None]).squeeze(1)
    smoothing_term = -log_probabilities.mean(dim=-1)  # against the uniform distribution
    return (1 - smoothing) * negative_log_likelihood + smoothing * smoothing_term


def _row_losses_from_softmax(logits: torch.Tensor, probabilities: torch.Tensor, targets: torch.Tensor,
                             mean_logits: torch.Tensor, smoothing: float) -> torch.Tensor:
    """`_row_losses` from the softmax of `logits` (which the gradient needs anyway) instead of a second pass for
    their log-softmax: `log p_target` and the log-normaliser `lse = logit_target - log p_target` give the
    likelihood term, and `lse - mean(logits)` the smoothing term, with `mean_logits` (each row's mean logit) passed in
    because the caller computes it without reading the logits. Where the target's probability falls below float's
    normal range (a target far below the row's maximum), `lse` is computed from the logits instead."""
    target_logits = logits.gather(1, targets[:, None]).squeeze(1)
    target_probabilities = probabilities.gather(1, targets[:, None]).squeeze(1)
    target_log_probabilities = target_probabilities.log()
    log_normalizers = target_logits - target_log_probabilities
    imprecise = target_probabilities < torch.finfo(probabilities.dtype).tiny
    if imprecise.any():
        log_normalizers[imprecise] = torch.logsumexp(logits[imprecise], dim=-1)
        target_log_probabilities = torch.where(imprecise, target_logits - log_normalizers, target_log_probabilities)
    # The likelihood term from the log-probability itself: `lse - logit` would lose its digits to large logits.
    return -(1 - smoothing) * target_log_probabilities + smoothing * (log_normalizers - mean_logits)


def _row_gradients(scores: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The gradient of `_row_losses` for the logits, `softmax(scores) - smoothed target`; `scores` are the logits or
    their log-probabilities (the same softmax)."""
    # softmax, not the exp of log-probabilities: `torch.exp` on the CPU slows down manyfold where its results fall
    # below float32's normal range (subnormal numbers), as a confident model's probabilities over a large vocabulary
    # do; softmax's vectorised kernel does not.
    return _softmax_to_row_gradients(torch.softmax(scores, dim=-1), targets, smoothing)


def _softmax_to_row_gradients(probabilities: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """`probabilities - smoothed target`, written over `probabilities`."""
    grad = probabilities.sub_(smoothing / probabilities.shape[-1])
    grad.scatter_add_(1, targets[:, None], grad.new_full((len(targets), 1), -(1 - smoothing)))
    return grad


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of `logits` `[tokens, vocabulary]` against `labels` `[tokens]`."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
        log_probabilities = torch.log_softmax(logits, dim=-1)
        counted = labels != IGNORE_INDEX
        targets = labels.masked_fill(~counted, 0)
        ctx.save_for_backward(log_probabilities, targets, counted)
        ctx.smoothing = smoothing
        return (_row_losses(log_probabilities, targets, smoothing) * counted).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        log_probabilities, targets, counted = ctx.saved_tensors
        grad = _row_gradients(log_probabilities, targets, ctx.smoothing)
        grad.mul_((counted * grad_loss).to(grad.dtype)[:, None])
        return grad, None, None


def _scaled_weight_gradient(grad_weight: torch.Tensor, grad_loss: torch.Tensor) -> torch.Tensor:
    """`grad_weight * grad_loss` in the weight's own layout, as its `.grad` is kept (autograd would copy a gradient in
    another layout again): one pass over the summed gradient, transposed or not, instead of a copy and a product."""
    return torch.mul(grad_weight, grad_loss, out=grad_weight.new_empty(grad_weight.shape))


class ProjectedLabelSmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of the logits `hidden @ weight.T + bias` (`hidden` `[tokens, d_model]`,
    `weight` `[vocabulary, d_model]`) against `labels` `[tokens]`, for CPU float32 (oneDNN's products). The forward
    pass computes the gradients that are needed too, over chunks of the counted positions; the backward pass scales
    them by the loss's gradient. The logits are never kept, and positions labelled -100 are never projected."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                smoothing: float) -> torch.Tensor:
        needs_grad_inputs, needs_grad_weight, needs_grad_bias = ctx.needs_input_grad[:3]
        counted = (labels != IGNORE_INDEX).nonzero().squeeze(1)
        inputs, targets = hidden.index_select(0, counted), labels.index_select(0, counted)
        grad_inputs = torch.empty_like(inputs) if needs_grad_inputs else None
        grad_weight: torch.Tensor | None = None
        grad_bias: torch.Tensor | None = None
        total = hidden.new_zeros(())
        # Each row's mean logit is its state times the weight's mean row (plus the bias's mean): no pass over the
        # logits for the smoothing term.
        mean_weight = weight.detach().mean(0)
        mean_bias = bias.detach().mean() if bias is not None else 0.0
        rows = max(MIN_CHUNK_ROWS, CHUNK_LOGITS // weight.shape[0])
        for start in range(0, len(inputs), rows):
            chunk, chunk_targets = inputs[start:start + rows], targets[start:start + rows]
            logits = onednn_product(chunk, weight, bias)
            probabilities = torch.softmax(logits, dim=-1)
            total += _row_losses_from_softmax(logits, probabilities, chunk_targets, chunk @ mean_weight + mean_bias,
                                              smoothing).sum()
            if not (needs_grad_inputs or needs_grad_weight or needs_grad_bias):
                continue
            grad = _softmax_to_row_gradients(probabilities, chunk_targets, smoothing)
            grad_chunk, grad_weight_chunk, _ = linear_gradients(grad, chunk, weight, False,
                                                                (needs_grad_inputs, needs_grad_weight, False))
            if grad_inputs is not None and grad_chunk is not None:
                grad_inputs[start:start + rows] = grad_chunk
            if grad_weight_chunk is not None:
                # Summed in the layout the products return (transposed where the vocabulary is the wider side).
                grad_weight = grad_weight_chunk if grad_weight is None else grad_weight.add_(grad_weight_chunk)
            if needs_grad_bias:
                grad_bias = grad.sum(0) if grad_bias is None else grad_bias.add_(grad.sum(0))
        if needs_grad_weight and grad_weight is None:
            grad_weight = torch.zeros_like(weight)
        if needs_grad_bias and grad_bias is None and bias is not None:
            grad_bias = torch.zeros_like(bias)
        ctx.save_for_backward(counted, grad_inputs, grad_weight, grad_bias)
        ctx.hidden_shape = hidden.shape
        return total

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        counted, grad_inputs, grad_weight, grad_bias = ctx.saved_tensors
        grad_hidden = None
        if grad_inputs is not None:
            grad_hidden = grad_inputs.new_zeros(ctx.hidden_shape)
            grad_hidden.index_copy_(0, counted, grad_inputs * grad_loss)
        return (grad_hidden, _scaled_weight_gradient(grad_weight, grad_loss) if grad_weight is not None else None,
                grad_bias * grad_loss if grad_bias is not None else None, None, None)


def label_smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The summed cross-entropy of `logits` `[..., vocabulary]` against `labels` `[...]` with the target smoothed
    by `smoothing` towards the uniform distribution; labels of -100 are left out (as `nn.functional.cross_entropy`
    with `ignore_index=-100, label_smoothing=smoothing, reduction="sum"`)."""
    return LabelSmoothedCrossEntropy.apply(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), smoothing)


def projected_label_smoothed_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                                           labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    """`label_smoothed_cross_entropy(hidden @ weight.T + bias, labels, smoothing)` without the logits
    (`ProjectedLabelSmoothedCrossEntropy`); `hidden` `[..., d_model]`, CPU float32."""
    return ProjectedLabelSmoothedCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), weight, bias,
                                                    labels.reshape(-1), smoothing)


__all__ = ["LabelSmoothedCrossEntropy", "ProjectedLabelSmoothedCrossEntropy", "label_smoothed_cross_entropy",
           "projected_label_smoothed_cross_entropy"]
