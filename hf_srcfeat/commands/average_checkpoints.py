"""`hf-srcfeat-average-checkpoints`: average the weights of a run's last N checkpoints (or of chosen ones) into a
model folder that loads with `from_pretrained`, as fairseq's `scripts/average_checkpoints.py` does.

    hf-srcfeat-average-checkpoints runs/phrase_rep --last 5 --output runs/phrase_rep-averaged
    hf-srcfeat-average-checkpoints --checkpoints runs/x/checkpoint-4000 runs/x/checkpoint-5000 --output runs/x-avg

Reads and writes safetensors only (a checkpoint saved as a pickle is refused). Every checkpoint must hold the same
model type and the same parameter names and shapes; floating-point tensors are averaged in float64 and stored in
their own dtype, any other tensor must be equal in every checkpoint. The output gets the configuration, generation
configuration and tokenizer of the newest checkpoint, the one of the highest step (from its `checkpoint-<step>` name,
else its trainer_state.json; the last listed when a step is unknown), whatever the order given (the tokenizer from
its run folder where the checkpoint has none; with a run started from a pretrained checkpoint, that checkpoint's
tokenizer too), and `averaged_from.json`, which names the checkpoints (absolute paths, oldest first).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hf_srcfeat.commands import interruptible
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import output_path, write_json_atomically

if TYPE_CHECKING:  # torch loads when checkpoints are read, not for --help
    import torch

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
#: Files copied from the newest checkpoint: everything but the weights and the trainer's own state.
TRAINER_STATE_FILES = {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin",
                       "scaler.pt"}


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The `checkpoint-<step>` folders of a run, oldest first."""
    if not run_dir.is_dir():
        raise SystemExit(f"{run_dir} is not a run folder.")
    found = [(int(match.group(1)), path) for path in run_dir.iterdir()
             if path.is_dir() and (match := CHECKPOINT_NAME.match(path.name))]
    return [path for _, path in sorted(found)]


def checkpoint_step(checkpoint: Path) -> int | None:
    """The training step of a checkpoint: from its `checkpoint-<step>` name, else its trainer_state.json."""
    if match := CHECKPOINT_NAME.match(checkpoint.name):
        return int(match.group(1))
    try:
        return int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def oldest_first(checkpoints: Sequence[Path]) -> list[Path]:
    """The checkpoints by training step (the order given when a step is unknown: the last is taken as the newest)."""
    steps = {checkpoint: checkpoint_step(checkpoint) for checkpoint in checkpoints}
    if any(step is None for step in steps.values()):
        return list(checkpoints)
    return sorted(checkpoints, key=lambda checkpoint: steps[checkpoint] or 0)  # stable: equal steps as given


def weight_files(checkpoint: Path) -> list[Path]:
    """The safetensors files of one checkpoint (one file, or the shards an index names)."""
    index = checkpoint / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [checkpoint / shard for shard in shards]
    if (checkpoint / "model.safetensors").exists():
        return [checkpoint / "model.safetensors"]
    pickled = [path.name for path in checkpoint.glob("*.bin")] + [path.name for path in checkpoint.glob("*.pt")
                                                                   if path.name not in TRAINER_STATE_FILES]
    detail = f" (it has {', '.join(pickled)}: pickled weights are not read)" if pickled else ""
    raise SystemExit(f"{checkpoint} has no model.safetensors{detail}.")


def read_checkpoint(checkpoint: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, state dict) of one checkpoint folder."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config = checkpoint / "config.json"
    if not config.exists():
        raise SystemExit(f"{checkpoint} has no config.json; is it a checkpoint folder?")
    settings = json.loads(config.read_text())
    state: dict[str, torch.Tensor] = {}
    for path in weight_files(checkpoint):
        try:
            state.update(load_file(path))
        except (SafetensorError, OSError) as error:
            raise SystemExit(f"{path} cannot be read as safetensors ({error}).") from None
    return settings, state


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]], names: Sequence[str]) -> dict[str, torch.Tensor]:
    """The element-wise mean of floating-point tensors (computed in float64, stored in their dtype); other tensors
    must be equal in every state dict. Different parameter names or shapes are refused, naming the checkpoint."""
    import torch

    reference = states[0]
    for state, name in zip(states[1:], names[1:], strict=True):
        if set(state) != set(reference):
            differing = sorted(set(state) ^ set(reference))[:5]
            raise SystemExit(f"{name} has other parameters than {names[0]} (e.g. {', '.join(differing)}); only "
                             "checkpoints of one model can be averaged.")
        for key, tensor in state.items():
            if tensor.shape != reference[key].shape:
                raise SystemExit(f"{name}: {key} has shape {tuple(tensor.shape)}, {names[0]} has "
                                 f"{tuple(reference[key].shape)}; only checkpoints of one model can be averaged.")
    averaged = {}
    for key, tensor in reference.items():
        if tensor.is_floating_point():
            total = torch.zeros(tensor.shape, dtype=torch.float64)
            for state in states:
                total += state[key].to(torch.float64)
            averaged[key] = (total / len(states)).to(tensor.dtype)
        else:
            if any(not torch.equal(state[key], tensor) for state in states[1:]):
                raise SystemExit(f"{key} is a {tensor.dtype} tensor that differs between the checkpoints; it cannot "
                                 "be averaged.")
            averaged[key] = tensor.clone()
    return averaged


def average_checkpoints(checkpoints: Sequence[Path], output: Path) -> Path:
    """Average `checkpoints` into the new model folder `output` (see the module docstring); returns it."""
    from safetensors.torch import save_file

    from hf_srcfeat.tokenization_pretrained_source_features import BASE_FOLDER

    if len(checkpoints) < 2:
        raise SystemExit(f"averaging needs at least two checkpoints, got {len(checkpoints)}.")
    seen: dict[Path, Path] = {}
    for checkpoint in checkpoints:
        if checkpoint.resolve() in seen:  # it would count twice in the mean
            raise SystemExit(f"checkpoint {checkpoint} is given twice (as {seen[checkpoint.resolve()]} too); each "
                             "checkpoint is averaged once.")
        seen[checkpoint.resolve()] = checkpoint
    checkpoints = oldest_first(checkpoints)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise SystemExit(f"--output {output} exists and is not an empty folder; nothing is overwritten.")
    read = [read_checkpoint(checkpoint) for checkpoint in checkpoints]
    model_types = {config.get("model_type", "") for config, _ in read}
    if len(model_types) != 1:
        raise SystemExit(f"the checkpoints hold different model types ({', '.join(sorted(model_types))}); only "
                         "checkpoints of one model can be averaged.")
    # Weights of one shape trained over other vocabularies would average without an error into nonsense.
    fingerprints = {config.get("tokenizer_fingerprint") for config, _ in read}
    if len(fingerprints) != 1:
        raise SystemExit("the checkpoints were trained with different tokenizers (tokenizer_fingerprint "
                         f"{', '.join(sorted(str(print_) for print_ in fingerprints))}); only checkpoints of one "
                         "run (or one vocabulary) can be averaged.")
    averaged = average_state_dicts([state for _, state in read], [str(checkpoint) for checkpoint in checkpoints])
    newest = checkpoints[-1]
    output.mkdir(parents=True, exist_ok=True)
    for path in newest.iterdir():
        if path.is_file() and path.name not in TRAINER_STATE_FILES and not path.name.startswith("model") \
                and path.suffix not in {".bin", ".pt", ".pth"}:
            shutil.copy2(path, output / path.name)
    # Trainer checkpoints may lack the tokenizer, which hf-srcfeat-train saves in the run folder above them.
    for path in newest.parent.glob("*.json"):
        if path.name not in {"config.json", "generation_config.json", "results.json", "eval_results.json",
                             "model.safetensors.index.json"} and not (output / path.name).exists():
            shutil.copy2(path, output / path.name)
    # A model started from a pretrained checkpoint keeps that checkpoint's tokenizer in a folder of its own.
    for holder in (newest, newest.parent):
        if (holder / BASE_FOLDER).is_dir():
            shutil.copytree(holder / BASE_FOLDER, output / BASE_FOLDER)
            break
    with output_path(output / "model.safetensors") as writable:  # whole or not at all
        save_file({key: tensor.contiguous() for key, tensor in averaged.items()}, writable, metadata={"format": "pt"})
    # Absolute: the record (and a model card made from it) must not depend on where the command ran.
    write_json_atomically(output / "averaged_from.json", {
        "checkpoints": [str(checkpoint.resolve()) for checkpoint in checkpoints], "method": "mean of the weights",
        "code_version": code_version()})
    return output


@interruptible
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-srcfeat-average-checkpoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", type=Path, help="a run folder with checkpoint-<step> folders")
    parser.add_argument("--last", type=int, default=None, help="average the run's newest N checkpoints")
    parser.add_argument("--checkpoints", nargs="+", type=Path, default=None, help="average these checkpoint folders")
    parser.add_argument("--output", type=Path, required=True, help="the new model folder (must not hold files)")
    args = parser.parse_args(argv)
    if (args.checkpoints is None) == (args.run_dir is None) or (args.checkpoints and args.last is not None):
        parser.error("give a run folder (with --last N) or --checkpoints, not both.")
    if args.checkpoints is not None:
        checkpoints = args.checkpoints
    else:
        if args.last is None or args.last < 2:
            parser.error(f"--last must be an integer of at least 2 with a run folder, got {args.last}.")
        available = run_checkpoints(args.run_dir)
        if len(available) < args.last:
            parser.error(f"--last {args.last}: {args.run_dir} has {len(available)} checkpoint folder(s) "
                         f"({', '.join(path.name for path in available) or 'none'}).")
        checkpoints = available[-args.last:]
    output = average_checkpoints(checkpoints, args.output)
    print(f"averaged {len(checkpoints)} checkpoints ({', '.join(path.name for path in oldest_first(checkpoints))}) "
          f"into {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
