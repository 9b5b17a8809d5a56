"""The Trainer the training command uses: Transformers' `Seq2SeqTrainer` with what resuming the zoo's runs needs."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import SequentialSampler
from transformers import Seq2SeqTrainer, TrainerCallback

from .modeling_srcfeat_transformer import SrcFeatTransformerForConditionalGeneration
from .provenance import code_version
from .safe_writing import write_json_atomically

#: Written into each checkpoint: the training seconds up to it, so that a resumed run's time adds up.
TRAINING_TIME_FILE = "training_time.json"


class SrcFeatSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` that knows tied weights: a checkpoint leaves out the copies of tied embeddings (as
    `save_pretrained` does), which a resume ties again instead of warning that they are missing. Its training steps
    read only the model's loss, and say so to the zoo's models (`skip_logits`): on the CPU they then compute the
    output projection and the loss without the [tokens, vocabulary] logits."""

    def compute_loss(self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: torch.Tensor | int | None = None):
        # Only the model's own loss, unread outputs: no `compute_loss_func` or label smoother reads the logits, and
        # the zoo's own `forward` makes the loss (a subclass's might read the logits, or not take the argument).
        if (model.training and not return_outputs and "labels" in inputs and self.compute_loss_func is None
                and self.label_smoother is None and type(self.accelerator.unwrap_model(model)).forward
                is SrcFeatTransformerForConditionalGeneration.forward):
            inputs = {**inputs, "skip_logits": True}
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    def _get_eval_sampler(self, eval_dataset):
        # Evaluation and prediction in the dataset's order, whatever the training batches' order
        # (`train_sampling_strategy="group_by_length"` groups evaluation batches by length too): the predictions then
        # follow the split, as its prediction file and its scores against the split's references need. Several
        # processes each take their share in order, and gathering puts them back.
        if eval_dataset is None or not hasattr(eval_dataset, "__len__"):
            return None
        return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    # The Trainer's evaluation loss is the mean of the batches' mean token losses weighted by their sentences, so it
    # changed with the evaluation batch size; it is the mean over the evaluated tokens here, as fairseq reports it.
    def prediction_step(self, model: nn.Module, inputs: dict[str, Any], prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None, **gen_kwargs):
        self._batch_mean_loss = True
        try:
            loss, generated, labels = super().prediction_step(model, inputs, prediction_loss_only,
                                                              ignore_keys=ignore_keys, **gen_kwargs)
        finally:
            self._batch_mean_loss = False
        if isinstance(loss, torch.Tensor) and inputs.get("labels") is not None and hasattr(self, "_evaluated_tokens"):
            tokens = (inputs["labels"] != -100).sum().to(loss.device)
            self._evaluated_tokens += torch.stack([loss.detach().float() * tokens, tokens.float()])
        return loss, generated, labels

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device):
        # Evaluating, a batch's loss is its own token mean (weighted by its tokens in `evaluation_loop`): the
        # Trainer's count would be the tokens of every process's batch, and its loss that process's share, scaled.
        if getattr(self, "_batch_mean_loss", False):
            return None
        return super()._get_num_items_in_batch(batch_samples, device)

    def evaluation_loop(self, dataloader, description: str, prediction_loss_only: bool | None = None,
                        ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"):
        self._evaluated_tokens = torch.zeros(2, device=self.args.device)  # (sum of token losses, tokens)
        try:
            output = super().evaluation_loop(dataloader, description, prediction_loss_only=prediction_loss_only,
                                             ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
            total, tokens = self.accelerator.reduce(self._evaluated_tokens, reduction="sum").tolist()
        finally:
            del self._evaluated_tokens
        if tokens > 0 and output.metrics is not None and f"{metric_key_prefix}_loss" in output.metrics:
            output.metrics[f"{metric_key_prefix}_loss"] = total / tokens
        return output

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        model: Any = self.model  # Transformers types it loosely (a module, or None before init)
        tied = set(model.get_expanded_tied_weights_keys(all_submodels=True)) \
            if hasattr(model, "get_expanded_tied_weights_keys") else set()
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            model.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))


class TrainingTimeCallback(TrainerCallback):
    """Counts the seconds spent training across resumptions: each checkpoint records the total so far (and the code
    version that trained), and a run resumed from it starts from that total."""

    def __init__(self, resumed_from: str | Path | None = None):
        self.earlier = earlier_training_seconds(resumed_from)
        self.started: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    @property
    def seconds(self) -> float:
        return self.earlier + (time.monotonic() - self.started if self.started is not None else 0.0)

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
            if folder.is_dir():
                # With the code that trained up to here: a run resumed with other code records both.
                write_json_atomically(folder / TRAINING_TIME_FILE, {"train_seconds": self.seconds,
                                                                    "code_version": code_version()})


def checkpoint_training_record(checkpoint: str | Path | None) -> dict:
    """What a checkpoint recorded of its training (TRAINING_TIME_FILE): empty for none, or one written before."""
    path = Path(checkpoint, TRAINING_TIME_FILE) if checkpoint else None
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def earlier_training_seconds(checkpoint: str | Path | None) -> float:
    """The training seconds a checkpoint recorded (0 for none, or one written before they were recorded, or whose
    save was interrupted before it: said, as the run's `train_seconds` then counts from here)."""
    record = checkpoint_training_record(checkpoint)
    if checkpoint and not record:
        logger.warning("%s records no training time (%s): the run's train_seconds count from this resumption.",
                       checkpoint, TRAINING_TIME_FILE)
    return float(record["train_seconds"]) if record else 0.0


def checkpoint_code_version(checkpoint: str | Path | None) -> str | None:
    """The code version that trained up to a checkpoint (None where it has no record of it)."""
    return checkpoint_training_record(checkpoint).get("code_version")


logger = logging.getLogger("hf_srcfeat.train")


def with_perplexity(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """The metrics with `<prefix>_perplexity`, exp of the mean token loss (label smoothing included)."""
    loss = metrics.get(f"{prefix}_loss")
    if loss is not None and f"{prefix}_perplexity" not in metrics:
        metrics[f"{prefix}_perplexity"] = math.exp(min(loss, 700.0))  # exp(>709) overflows a float
    return metrics


def metrics_line(metrics: dict[str, float], prefix: str) -> str:
    """BLEU, chrF, loss and perplexity, as far as measured, in one line for the console."""
    names = {"bleu": "BLEU", "chrf": "chrF", "loss": "loss", "perplexity": "perplexity"}
    return ", ".join(f"{label} {metrics[f'{prefix}_{name}']:.2f}" for name, label in names.items()
                     if f"{prefix}_{name}" in metrics)


class MetricsReport(TrainerCallback):
    """Prints each evaluation's BLEU, chrF, loss and perplexity as it is computed (the Trainer's own log line
    goes to the progress bar, or nowhere with some reporters). `evaluated_model` names what is evaluated where it
    is not the model of the current step (the best checkpoint, loaded at the end)."""

    def __init__(self) -> None:
        self.evaluated_model: str | None = None

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if state.is_world_process_zero and metrics:
            with_perplexity(metrics, "eval")
            logger.info("%s, validation: %s", self.evaluated_model or f"step {state.global_step}",
                        metrics_line(metrics, "eval"))


#: What the Trainer resumes a run from, besides the weights: the run's state, the optimizer's and the schedule's (a
#: checkpoint without the last two would resume with fresh ones, silently).
CHECKPOINT_STATE_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt")


def checkpoint_problem(folder: str | Path) -> str | None:
    """Why a run cannot resume from checkpoint `folder` (a save that was interrupted: files missing or cut off), or
    None. Read cheaply: the JSON parsed, the weights' headers, the zip directory at the end of torch's files."""
    import zipfile

    from .damaged_files import DamagedFileError, check_json_files, check_weights_files

    folder = Path(folder)
    missing = [name for name in CHECKPOINT_STATE_FILES if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")):
        missing.insert(0, "model.safetensors")
    if missing:
        return (f"{folder} lacks {', '.join(missing)} (its save was interrupted, or it was saved with "
                "--save_only_model, which keeps no training state to resume)")
    try:
        check_json_files(folder)
        check_weights_files(folder)
    except DamagedFileError as error:
        return str(error)
    for name in ("optimizer.pt", "scheduler.pt"):
        try:
            with zipfile.ZipFile(folder / name):
                pass
        except (zipfile.BadZipFile, OSError) as error:
            return f"{folder / name} is truncated or damaged ({error})"
    return None


def newest_complete_checkpoint(output_dir: str | Path) -> tuple[str | None, list[str]]:
    """The newest `checkpoint-N` of `output_dir` a run can resume from, and why each newer one cannot."""
    folders = [path for path in Path(output_dir).glob("checkpoint-*") if path.is_dir()
               and path.name.split("-", 1)[1].isdigit()] if Path(output_dir).is_dir() else []
    skipped: list[str] = []
    for folder in sorted(folders, key=lambda path: int(path.name.split("-", 1)[1]), reverse=True):
        problem = checkpoint_problem(folder)
        if problem is None:
            return str(folder), skipped
        skipped.append(problem)
    return None, skipped
