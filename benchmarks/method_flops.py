#!/usr/bin/env python
"""How much more arithmetic each method's training step does than the baseline's: the floor under its speed
overhead for any implementation that is bound by its matrix products.

Each benchmark system is built at a model size (`benchmarks/gpu_throughput.py`'s sizes) and trained for one step on
each of a few real Multi30k token batches, counting the matrix products by `torch.utils.flop_counter`'s formulas
(linear layers, their gradients, the RNN's; attention's own score products are not counted on the CPU, where they
run in one fused operator). The papers trained with larger vocabularies than Multi30k's, where the
output layer takes a larger share of the baseline's work: `--paper_vocabulary` also states each ratio with the
output layer's products (6 x d_model x vocabulary per target position: forward, input gradient, weight gradient)
at that vocabulary, the rest as counted.

    python -m benchmarks.method_flops --tokenizer runs/quickstart --source_conllu train.en.conllu.gz \
        --output benchmarks/results/method_flops_base.json
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from benchmarks import gpu_throughput
from hf_srcfeat import linear
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically


class ProductCounter(TorchDispatchMode):
    """Counts the FLOPs of the matrix products that run: each dispatched operator that
    `torch.utils.flop_counter.flop_registry` has a formula for (no decompositions or higher-order operators, such
    as FlexAttention, are looked into). Not `FlopCounterMode` itself: its module tracker installs global module
    hooks, and under those the model's layers leave what they restate (stacked projections, blockwise products of
    concatenated inputs) to each layer's own call, so it would count arithmetic the training step does not do."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        outputs = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=outputs)
        return outputs


def training_step_flops(model: torch.nn.Module, batches: list[dict]) -> int:
    """Matrix-product FLOPs of one forward and backward pass over each batch, summed."""
    # The CPU's oneDNN products run as operators the counter does not know: PyTorch's own products while counting.
    onednn_min_rows, linear.ONEDNN_MIN_ROWS = linear.ONEDNN_MIN_ROWS, 1 << 62
    total = 0
    try:
        for batch in batches:
            with ProductCounter() as counter:
                model(**batch).loss.backward()
            total += counter.flops
            model.zero_grad(set_to_none=True)
    finally:
        linear.ONEDNN_MIN_ROWS = onednn_min_rows
    return total


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True)
    parser.add_argument("--systems", nargs="+", default=gpu_throughput.SYSTEMS, choices=gpu_throughput.SYSTEMS)
    parser.add_argument("--size", default="base", choices=list(gpu_throughput.SIZES))
    parser.add_argument("--pairs", type=int, default=600, help="Multi30k training pairs to batch (default 600)")
    parser.add_argument("--max_tokens", type=int, default=4096, help="padded tokens per batch (default 4096)")
    parser.add_argument("--batches", type=int, default=2, help="batches counted (default 2)")
    parser.add_argument("--paper_vocabulary", type=int, default=37000,
                        help="also state the ratios with the output layer at this vocabulary (default 37000, about "
                             "the papers' shared WMT14 en-de BPE vocabularies); 0: not")
    parser.add_argument("--tokenizer", help="trained tokenizer folder (default: train one on the pairs)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--source_conllu", default=None,
                        help="the pairs' source parses as CoNLL-U (hf-srcfeat-annotate), instead of parsing")
    args = parser.parse_args(argv)
    if "baseline" not in args.systems:
        parser.error("--systems must include baseline: every ratio is to it")
    for name in ("pairs", "max_tokens", "batches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.paper_vocabulary < 0:
        parser.error(f"--paper_vocabulary must be 0 (off) or a vocabulary size, got {args.paper_vocabulary}")
    torch.manual_seed(1)
    args.device = "cpu"
    tokenizer, rows, _ = gpu_throughput.encoded_pairs(args)
    batches = gpu_throughput.token_batches(tokenizer, rows, args.max_tokens, seed=1)[:args.batches]
    target_positions = sum(int(batch["labels"].numel()) for batch in batches)
    results: dict = {"code_version": code_version(), "torch": torch.__version__, "settings": vars(args),
                     "counted": "matrix products of one training step per batch (torch.utils.flop_counter)",
                     "source_positions": sum(int(batch["input_ids"].numel()) for batch in batches),
                     "target_positions": target_positions, "systems": {}}
    flops = {}
    for system in ["baseline", *(name for name in args.systems if name != "baseline")]:
        start = time.perf_counter()
        model = gpu_throughput.build(system, args.size, tokenizer).train()
        results.setdefault("vocab_size", model.config.vocab_size)
        flops[system] = training_step_flops(model, batches)
        entry = {"flops": flops[system], "tflops": round(flops[system] / 1e12, 4),
                 "relative_to_baseline": round(flops[system] / flops["baseline"], 3),
                 "num_parameters": model.num_parameters()}
        if args.paper_vocabulary:
            d_model, vocabulary = model.config.d_model, model.config.vocab_size
            output_layer_change = 6 * d_model * (args.paper_vocabulary - vocabulary) * target_positions
            entry["relative_to_baseline_at_paper_vocabulary"] = round(
                (flops[system] + output_layer_change) / (flops["baseline"] + output_layer_change), 3)
        results["systems"][system] = entry
        print(f"{system:22s} {entry['tflops']:8.3f} TFLOP  {entry['relative_to_baseline']:.3f}x"
              + (f"  ({entry['relative_to_baseline_at_paper_vocabulary']:.3f}x at {args.paper_vocabulary:,} words)"
                 if args.paper_vocabulary else "") + f"  {time.perf_counter() - start:.0f} s", flush=True)
        write_json_atomically(args.output, results)
    return results


if __name__ == "__main__":
    main()
