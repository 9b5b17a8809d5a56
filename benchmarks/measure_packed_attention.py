#!/usr/bin/env python
"""One attention call's forward + backward at a token batch's shape, SDPA against `packed_sdpa`:

    python -m benchmarks.measure_packed_attention --output benchmarks/results/packed_attention_h100.json

The shape of a Transformer-base token batch of Multi30k (`--sentences` sentences padded to `--length` positions,
their real lengths drawn between a quarter of that and all of it, 8 heads of 64 dimensions, bf16 on a GPU),
for encoder self-attention (padding mask), decoder self-attention (causal and padding) and cross-attention. Each
way is timed by CUDA events over `--repeats` calls after warm-up (median), the ways alternating; its output is
compared with a float32 SDPA reference (relative error of the non-padding rows). `--device cpu` is a smoke test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from hf_srcfeat.packed_attention import SENTENCES_PER_ROW, packed_sdpa_attention_forward
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically


def attention_inputs(sentences: int, length: int, heads: int, dim: int, dtype: torch.dtype, device: str,
                     cross: bool, causal: bool, generator: torch.Generator) -> dict:
    """Queries, keys, values (with gradients), the output gradient and the boolean mask of one attention call."""
    key_length = length + length // 4 if cross else length  # sources a little longer than targets
    query_lengths = torch.randint(length // 4, length + 1, (sentences,), generator=generator)
    key_lengths = torch.randint(key_length // 4, key_length + 1, (sentences,), generator=generator)
    if not cross:
        key_lengths = query_lengths
    keys_kept = torch.arange(key_length)[None] < key_lengths[:, None]
    mask = keys_kept[:, None, None, :].expand(sentences, 1, length, key_length)
    if causal:
        mask = mask & torch.ones(length, key_length, dtype=torch.bool).tril()
    queries_kept = torch.arange(length)[None] < query_lengths[:, None]

    def states(positions: int) -> torch.Tensor:
        return torch.randn(sentences, heads, positions, dim, generator=generator).to(device, dtype).requires_grad_()

    return {"query": states(length), "key": states(key_length), "value": states(key_length),
            "grad": torch.randn(sentences, length, heads, dim, generator=generator).to(device, dtype),
            "mask": mask.to(device), "queries_kept": queries_kept.to(device), "causal": causal}


def run_sdpa(module: nn.Module, inputs: dict) -> torch.Tensor:
    output = nn.functional.scaled_dot_product_attention(inputs["query"], inputs["key"], inputs["value"],
                                                        attn_mask=inputs["mask"])
    return output.transpose(1, 2)


def run_packed(module: nn.Module, inputs: dict) -> torch.Tensor:
    output, _ = packed_sdpa_attention_forward(module, inputs["query"], inputs["key"], inputs["value"], inputs["mask"],
                                              scaling=inputs["query"].shape[-1] ** -0.5)
    return output


def time_call(way, module: nn.Module, inputs: dict, device: str) -> float:
    """Seconds of one forward + backward."""
    if device.startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        way(module, inputs).backward(inputs["grad"])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    start_time = time.perf_counter()
    way(module, inputs).backward(inputs["grad"])
    return time.perf_counter() - start_time


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=1100)
    parser.add_argument("--length", type=int, default=32, help="padded positions of the queries (default 32)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in ("sentences", "length", "heads", "head_dim", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA GPU (--device cpu for a smoke test)")
    dtype = torch.bfloat16 if cuda else torch.float32
    generator = torch.Generator().manual_seed(0)
    results = {}
    for call, cross, causal in (("encoder_self", False, False), ("decoder_self", False, True),
                                ("cross", True, False)):
        inputs = attention_inputs(args.sentences, args.length, args.heads, args.head_dim, dtype, args.device,
                                  cross, causal, generator)
        module = nn.Module()
        module.is_causal = causal
        with torch.no_grad():
            reference = nn.functional.scaled_dot_product_attention(
                inputs["query"].float(), inputs["key"].float(), inputs["value"].float(), attn_mask=inputs["mask"]
            ).transpose(1, 2)[inputs["queries_kept"]]
        ways = {"sdpa": run_sdpa, "packed_sdpa": run_packed}
        timings: dict[str, list[float]] = {name: [] for name in ways}
        errors = {}
        for name, way in ways.items():
            with torch.no_grad():
                output = way(module, inputs)[inputs["queries_kept"]].float()
            errors[name] = float((output - reference).norm() / reference.norm())
            for _ in range(3):  # warm-up
                time_call(way, module, inputs, args.device)
        for _ in range(args.repeats):
            for name, way in ways.items():
                timings[name].append(time_call(way, module, inputs, args.device))
        medians = {name: statistics.median(values) for name, values in timings.items()}
        results[call] = {"microseconds_forward_backward": {name: round(value * 1e6, 1) for name, value in medians.items()},
                         "packed_speedup": round(medians["sdpa"] / medians["packed_sdpa"], 2),
                         "relative_error_vs_float32": {name: round(value, 5) for name, value in errors.items()},
                         "key_length": inputs["key"].shape[2]}
        print(call, results[call], flush=True)
    result = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "dtype": str(dtype), "code_version": code_version(),
              "command": "python -m benchmarks.measure_packed_attention " + " ".join(
                  argv if argv is not None else sys.argv[1:]),
              "shape": {"sentences": args.sentences, "length": args.length, "heads": args.heads,
                        "head_dim": args.head_dim, "sentences_per_row": SENTENCES_PER_ROW},
              "repeats": args.repeats, "calls": results}
    write_json_atomically(args.output, result)
    return result


if __name__ == "__main__":
    main()
