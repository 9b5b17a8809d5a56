#!/usr/bin/env python
"""Time and peak memory of the output projection and the label-smoothed loss of one training step, forward and
backward, with the logits (the projection through the zoo's linear layer, then the loss) and without them (the two
together over chunks of positions, what the Trainer's training steps ask for with `skip_logits`), for vocabularies
from the benchmark's to NLLB's.

    python -m benchmarks.measure_loss_without_logits --output benchmarks/results/loss_without_logits.json

Each measurement runs in a fresh process (so that its peak resident memory is its own), on one thread, with the
training commands' allocator settings (`hf_srcfeat.process_memory`), the two ways taking turns for `--rounds`
rounds: the growth of the peak resident memory over the inputs during a first step (Linux's VmHWM, reset before
it), then the time of a second step. Reported per vocabulary size: the median seconds and the largest growth.
Inputs are random (`--positions` decoder states of `--d_model`, a weight scaled as trained ones are, random
labels): the cost does not depend on the values. Writes JSON (with the code version).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

WAYS = ("logits", "without_logits")


def memory_kb(field: str) -> int:
    """A field of /proc/self/status in kB: the resident size (VmRSS) or its peak (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/self/status has no {field}: this measurement needs Linux.")


def measure_once(way: str, positions: int, d_model: int, vocabulary: int) -> dict[str, float]:
    """One forward and backward pass of the projection and the loss, `way`; seconds and peak memory growth (MB)."""
    import time

    import torch

    from hf_srcfeat.label_smoothed_cross_entropy import (
        label_smoothed_cross_entropy,
        projected_label_smoothed_cross_entropy,
    )
    from hf_srcfeat.linear import Linear
    from hf_srcfeat.process_memory import keep_freed_memory

    torch.set_num_threads(1)
    torch.manual_seed(0)
    projection = Linear(d_model, vocabulary, bias=False)
    torch.nn.init.normal_(projection.weight, std=d_model ** -0.5)
    states = torch.randn(positions, d_model, requires_grad=True)
    labels = torch.randint(0, vocabulary, (positions,))
    keep_freed_memory()  # as the training commands do

    def step() -> torch.Tensor:
        if way == "logits":
            loss = label_smoothed_cross_entropy(projection(states), labels, 0.1)
        else:
            loss = projected_label_smoothed_cross_entropy(states, projection.weight, None, labels, 0.1)
        loss.backward()
        return loss.detach()

    before = memory_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from the current size
    loss = step()
    growth = (memory_kb("VmHWM") - before) / 1024
    projection.weight.grad = states.grad = None
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_memory_growth_mb": growth, "loss": loss.item()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocabularies", type=int, nargs="+", default=[8000, 32000, 128000, 256000])
    parser.add_argument("--positions", type=int, default=4000, help="target positions of the step")
    parser.add_argument("--d_model", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--one", nargs=2, metavar=("WAY", "VOCABULARY"), help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_once(args.one[0], args.positions, args.d_model, int(args.one[1]))))
        return

    from hf_srcfeat.commands.train import code_version
    from hf_srcfeat.provenance import processor_name
    from hf_srcfeat.safe_writing import write_json_atomically

    runs: dict[int, dict[str, list[dict[str, float]]]] = {vocabulary: {way: [] for way in WAYS}
                                                          for vocabulary in args.vocabularies}
    for round_index in range(args.rounds):
        for vocabulary in args.vocabularies:
            for way in WAYS:
                completed = subprocess.run(
                    [sys.executable, "-m", "benchmarks.measure_loss_without_logits", "--output", str(args.output),
                     "--positions", str(args.positions), "--d_model", str(args.d_model),
                     "--one", way, str(vocabulary)], capture_output=True, text=True, check=True,
                    cwd=Path(__file__).resolve().parent.parent)
                runs[vocabulary][way].append(json.loads(completed.stdout.strip().splitlines()[-1]))
                print(round_index, vocabulary, way, runs[vocabulary][way][-1], flush=True)
    results = {}
    for vocabulary, by_way in runs.items():
        summary = {way: {"seconds": round(statistics.median(run["seconds"] for run in measured), 3),
                         "peak_memory_growth_mb": round(max(run["peak_memory_growth_mb"] for run in measured), 1)}
                   for way, measured in by_way.items()}
        logits_loss, own_loss = by_way["logits"][0]["loss"], by_way["without_logits"][0]["loss"]
        summary["speedup_without_logits"] = round(summary["logits"]["seconds"]
                                                  / summary["without_logits"]["seconds"], 3)
        summary["same_loss"] = abs(logits_loss - own_loss) <= 1e-5 * abs(logits_loss)
        results[str(vocabulary)] = summary
    command = "python -m benchmarks.measure_loss_without_logits " + " ".join(argv if argv is not None else sys.argv[1:])
    write_json_atomically(args.output, {
        "code_version": code_version(), "command": command, "processor": processor_name(), "threads": 1,
        "positions": args.positions, "d_model": args.d_model, "rounds": args.rounds, "vocabularies": results})
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
