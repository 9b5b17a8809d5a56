"""Training a method grafted onto a pretrained model as adapter users expect: only the added parameters
(`freeze_pretrained`), a learning rate of their own, and unfreezing the pretrained ones after some steps.

The added parameters are those `hf_srcfeat.pretrained_checkpoints.graft` recorded in `config.grafted_parameters`.
"""

from __future__ import annotations

import logging

import torch
from transformers import PreTrainedModel, TrainerCallback

logger = logging.getLogger("hf_srcfeat.graft_training")


def grafted_parameter_names(model: PreTrainedModel) -> set[str]:
    return set(getattr(model.config, "grafted_parameters", None) or ())


def freeze_pretrained(model: PreTrainedModel, frozen: bool = True) -> int:
    """Stop (or restart) gradients to every parameter that is not grafted; returns how many tensors changed."""
    added = grafted_parameter_names(model)
    changed = 0
    for name, parameter in model.named_parameters():
        if name not in added and parameter.requires_grad == frozen:
            parameter.requires_grad_(not frozen)
            changed += 1
    return changed


def parameter_groups(model: PreTrainedModel, learning_rate: float, added_learning_rate: float | None,
                     weight_decay: float) -> list[dict]:
    """Optimizer parameter groups: pretrained and added parameters at their learning rates, without weight decay on
    biases and LayerNorm weights (as the Trainer's own optimizer). Frozen parameters stay in their group: unfreezing
    them later needs no new optimizer (torch's optimizers skip parameters without gradients)."""
    added = grafted_parameter_names(model)
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
    for name, parameter in model.named_parameters():
        decays = parameter.dim() > 1
        groups.setdefault((name in added, decays), []).append(parameter)
    return [{"params": parameters, "weight_decay": weight_decay if decays else 0.0,
             "lr": (added_learning_rate or learning_rate) if is_added else learning_rate}
            for (is_added, decays), parameters in groups.items()]


class UnfreezeCallback(TrainerCallback):
    """Let gradients reach the pretrained parameters again from step `step` on."""

    def __init__(self, model: PreTrainedModel, step: int):
        self.model, self.step, self.done = model, step, False

    def on_step_begin(self, args, state, control, **kwargs):
        if not self.done and state.global_step >= self.step:
            count = freeze_pretrained(self.model, frozen=False)
            logger.info("step %d: unfroze %d pretrained parameter tensors", state.global_step, count)
            self.done = True


__all__ = ["UnfreezeCallback", "freeze_pretrained", "grafted_parameter_names", "parameter_groups"]
