#!/usr/bin/env python
"""Training throughput of the baseline and each method on a CUDA GPU: bf16 mixed precision, token-based batches,
at the benchmark's size and at Transformer-base size.

    python -m benchmarks.gpu_throughput --output benchmarks/results/gpu_throughput_h100.json

For every system and size: the same token-budget batches of real Multi30k pairs (sources parsed with Stanza,
on the GPU when there is one), collated on the CPU beforehand (a DataLoader with workers does that during real
training), then `--warmup` untimed and `--steps` timed optimiser steps (AdamW, autocast bf16, fp32 weights).
Interleaved: all systems of a size are built at once, each warms up, then they take turns for `--rounds`
rounds on the same batches (a first run measuring one system after another gave the first one 15-30% fewer
tokens/s than when measured last). Reports target tokens/s (non-padding, with the per-round values), source
tokens/s, seconds per step, padding share, and the peak GPU memory of all systems of a size together, with the
GPU's name, the software versions and the code version.
`lfe_dae` has `lfe_joint`'s network (only its initialisation differs), so it is not measured apart.

`--compile` puts every encoder and decoder layer under `torch.compile` (regional compilation: one compiled graph
serves all layers of a stack, dynamic shapes so that every batch shape reuses it; score modifications run as
FlexAttention kernels inside it), compiled during the warm-up, which then steps through every batch at least once;
with `--whole_model`, each system's whole forward with its loss as one graph instead (minutes of compilation each).
`--baseline_variants` adds the baseline changed in named ways, each measured beside the others as
`baseline_<parts>`: `eager` (not compiled), `eager_attention` (attention as plain tensor operations, which inductor
fuses when compiled), `packed_attention` (SDPA over two sentences packed into each row under a block-diagonal mask,
`benchmarks/packed_attention.py`), `opaque_layer_norm` (compiled, each LayerNorm calls ATen's forward and backward
kernels, `benchmarks/opaque_kernels.py`), `separate_layer_norm_gradients` (compiled, each LayerNorm's weight and bias
gradients are reduced by a product with a row of ones outside inductor's fused kernels, the rest of it compiled as
before), `cuda_graphs` (compiled with mode "reduce-overhead": kernels launched as
recorded graphs), `cpp_wrapper` (inductor's kernels launched by generated C++ instead of Python, torch.compile's
option "cpp_wrapper") and `whole_model` (the whole forward with the loss as one compiled graph, and with it the
backward; the optimiser step stays outside), joined by `+`, e.g. `whole_model+cuda_graphs`. Each system's result
records what of it ran compiled and how often inductor skipped CUDA graphs; `--pad_to_multiple_of N` pads batch
lengths up to multiples of N, so that CUDA graphs meet fewer distinct batch shapes (the settings count them);
`--batch_size_multiple N` rounds every batch's sentences down to a multiple of N and leaves out the batches that
still are not one (with 2, packed attention pairs every sentence and compiles one graph instead of two). The result
file is rewritten after each system's warm-up and after every round, so a run stopped early keeps what it measured.
`--profile_steps N` then runs N more steps of each system twice, unprofiled and under `torch.profiler`: the device's
busy time against the unprofiled step's, by kind of kernel and by kernel, and the launches and host synchronisations
a step (`benchmarks/gpu_time_breakdown.py`; with `--device cpu`, the operations' times, `benchmarks/op_timing.py`).
Each system's matrix-multiplication FLOP/s are counted with the baseline's formula over the real tokens
(`batching_efficiency.training_flops`: what is useful; methods' extra work not counted) and over the padded
shapes, as fractions of the bf16 matmul peak measured in the same run (an 8192^3 product, median of CUDA-event
timings). A system that fails to build, compile or step is recorded with its error and the others go on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from benchmarks import benchmark
from benchmarks.batching_efficiency import batch_lengths, source_annotations, training_flops
from benchmarks.gpu_time_breakdown import gpu_time_breakdown
from benchmarks.op_timing import operation_breakdown
from benchmarks.opaque_kernels import use_opaque_layer_norm, use_separate_layer_norm_gradients
from benchmarks.packed_attention import use_packed_attention
from hf_srcfeat.commands import train
from hf_srcfeat.compilation import ONE_GRAPH_SETTINGS
from hf_srcfeat.safe_writing import write_json_atomically

#: Model sizes: the CPU benchmark's, and Transformer-base (Vaswani et al. 2017) as the papers use it.
SIZES = {
    "benchmark": {"d_model": 256, "encoder_layers": 3, "decoder_layers": 3, "attention_heads": 4, "ffn_dim": 1024},
    "base": {"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "attention_heads": 8, "ffn_dim": 2048},
}
SYSTEMS = [system for system in benchmark.SYSTEMS if system != "lfe_dae"]
#: What a baseline variant may change, in the order its system's name lists them.
VARIANT_PARTS = ("whole_model", "cuda_graphs", "cpp_wrapper", "eager_attention", "packed_attention",
                 "opaque_layer_norm", "separate_layer_norm_gradients", "eager")
#: Inductor's settings for a `cpp_wrapper` variant (torch.compile's `options`, which exclude a `mode`).
CPP_WRAPPER_OPTIONS = {"cpp_wrapper": True}


def baseline_variant(text: str) -> tuple[str, ...]:
    """`--baseline_variants`' parser: parts joined by '+' (e.g. "whole_model+cuda_graphs"), in canonical order."""
    parts = text.split("+")
    unknown = [part for part in parts if part not in VARIANT_PARTS]
    if unknown or len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a variant is one or more of {', '.join(VARIANT_PARTS)}, each once, joined by '+'")
    if "eager_attention" in parts and "packed_attention" in parts:
        raise argparse.ArgumentTypeError(f"{text!r}: eager_attention and packed_attention each set the attention")
    if "opaque_layer_norm" in parts and "separate_layer_norm_gradients" in parts:
        raise argparse.ArgumentTypeError(
            f"{text!r}: opaque_layer_norm and separate_layer_norm_gradients each set the LayerNorm")
    if "cuda_graphs" in parts and "cpp_wrapper" in parts:
        raise argparse.ArgumentTypeError(f"{text!r}: cuda_graphs (compile mode \"reduce-overhead\") and cpp_wrapper "
                                         "(inductor options) are not combined here: measure them apart")
    if "eager" in parts and {"whole_model", "cuda_graphs", "cpp_wrapper", "opaque_layer_norm",
                             "separate_layer_norm_gradients"} & set(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: 'eager' (not compiled) excludes whole_model, cuda_graphs, "
                                         "cpp_wrapper, opaque_layer_norm and separate_layer_norm_gradients")
    return tuple(part for part in VARIANT_PARTS if part in parts)


def variant_name(parts: tuple[str, ...]) -> str:
    return "_".join(("baseline", *parts))


def encoded_pairs(args) -> tuple[object, list[dict], float]:
    """The tokenizer, the unpadded encodings (with labels) of the first `--pairs` Multi30k training pairs, and the
    seconds their sources took to parse (near 0 when the annotation cache held them)."""
    from transformers import AutoTokenizer

    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

    pairs = load_multi30k("train", "en", "de", args.data_dir, limit=args.pairs)
    sources, targets = list(pairs["source"]), list(pairs["target"])
    start = time.perf_counter()
    annotations = source_annotations(sources, args.source_conllu, args.device)
    parse_seconds = time.perf_counter() - start
    if args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=8000, source_annotations=annotations)
    encodings = tokenizer(annotations=annotations, text_target=targets, truncation=True, max_length=128)
    rows = [{name: encodings[name][index] for name in encodings} for index in range(len(sources))]
    return tokenizer, rows, parse_seconds


def token_batches(tokenizer, rows: list[dict], max_tokens: int, seed: int,
                  pad_to_multiple_of: int | None = None, batch_size_multiple: int = 1) -> list[dict]:
    """The rows in token-budget batches, collated; lengths padded up to a multiple of `pad_to_multiple_of` where
    given (fewer distinct batch shapes, each of which CUDA graphs record apart); only batches of a multiple of
    `batch_size_multiple` sentences: the sampler rounds them, and the few it cannot round (the last, or one before a
    sentence longer than `max_tokens / batch_size_multiple`) are left out."""
    from transformers import DataCollatorForSeq2Seq

    from hf_srcfeat.data.batching import TokenBudgetBatchSampler

    lengths = [(len(row["input_ids"]), len(row["labels"])) for row in rows]
    collate = DataCollatorForSeq2Seq(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
    sampler = TokenBudgetBatchSampler(lengths, max_tokens, seed=seed, batch_size_multiple=batch_size_multiple)
    return [collate([rows[index] for index in batch]) for batch in sampler if len(batch) % batch_size_multiple == 0]


def build(system: str, size: str, tokenizer):
    model_type, overrides = benchmark.SYSTEMS[system]
    arguments = train.ModelArguments(model_type=model_type, config_overrides=json.dumps(overrides),
                                     layernorm_position="pre", **SIZES[size])
    return train.build_model(arguments, tokenizer, seed=1)


def configure_dynamo() -> None:
    """Recompile limits: the layers of every system measured share one compiled function (GradientCheckpointingLayer's
    call), a few entries per system: above the default recompile limit, the later systems would silently run eagerly.
    A system that still reaches the limit fails (and is recorded) rather than running eagerly unnoticed.
    Sizes each their own symbol and floats constant, as in compiled training (`hf_srcfeat.compilation`), for the
    rest of the process."""
    for config, values in ONE_GRAPH_SETTINGS:
        for name, value in values.items():
            setattr(config, name, value)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 1024)
    if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
        torch._dynamo.config.fail_on_recompile_limit_hit = True


def compile_layers(model: nn.Module, mode: str | None = None, backend: str = "inductor",
                   options: dict | None = None) -> int:
    """Regional compilation: each layer of every `*layers` stack under `torch.compile` (dynamic shapes; `mode`,
    `backend` and `options` as torch.compile takes them, e.g. mode "reduce-overhead" for CUDA graphs). Layers of one
    class share the compiled code, so compiling costs one graph per layer type. Returns the layers compiled."""
    configure_dynamo()
    layers = [layer for name, module in model.named_modules()
              if isinstance(module, nn.ModuleList) and name.endswith("layers") for layer in module]
    for layer in layers:
        layer.compile(dynamic=True, mode=inductor_mode(mode, backend), backend=backend, options=options)
    return len(layers)


def matmul_peak_bf16(size: int = 8192, repeats: int = 10) -> float:
    """FLOP/s of a bf16 size x size x size product on the current GPU: the median of `repeats` CUDA-event timings
    after three warm-ups, rotating over three random input pairs (never zeros, which run faster)."""
    pairs = [(torch.randn(size, size, device="cuda", dtype=torch.bfloat16),
              torch.randn(size, size, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    for index in range(3):
        torch.mm(*pairs[index % 3])
    timings = []
    for index in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(*pairs[index % 3])
        end.record()
        end.synchronize()
        timings.append(start.elapsed_time(end) / 1000)
    del pairs
    return 2 * size**3 / sorted(timings)[len(timings) // 2]


def inductor_mode(mode: str | None, backend: str) -> str | None:
    """`mode` where the backend takes one (inductor's), else None."""
    return mode if backend == "inductor" else None


def compilation(model: nn.Module, forward, backend: str, mode: str | None, options: dict | None = None) -> str:
    """What of `model` runs compiled, read off the objects: the whole forward (`forward` an OptimizedModule) or how
    many of its layers (`nn.Module.compile` sets `_compiled_call_impl`), with backend, mode and inductor's options."""
    given = f", options {json.dumps(options, sort_keys=True)}" if options else ""
    if isinstance(forward, torch._dynamo.eval_frame.OptimizedModule):
        mode_name = (mode or "default") if backend == "inductor" and not options else "none"
        return f"whole forward with the loss, backend {backend}, mode {mode_name}{given}"
    layers = [module for module in model.modules() if getattr(module, "_compiled_call_impl", None) is not None]
    return f"{len(layers)} layers, backend {backend}{given}" if layers else "eager"


class Trainee:
    """One system's model and optimiser, stepping through the shared batches (autocast bf16, fp32 weights)."""

    def __init__(self, model, device: str, whole_model: bool = False, mode: str | None = None,
                 backend: str = "inductor", options: dict | None = None):
        """`whole_model`: the whole forward (embeddings, masks, every layer, the loss) as one graph compiled in
        `mode` (or with inductor's `options`) by `backend`; else the model as built (its layers compiled or not)."""
        self.model, self.device = model.to(device).train(), device
        self.forward = model
        if whole_model:
            configure_dynamo()
            self.forward = torch.compile(model, dynamic=True, backend=backend, mode=inductor_mode(mode, backend),
                                         options=options)
        self.compiled = compilation(model, self.forward, backend, mode, options)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.startswith("cuda"))
        self.cudagraph_skips = 0
        self.seconds, self.steps, self.target_tokens, self.source_tokens, self.padded = 0.0, 0, 0, 0, 0
        self.useful_flops, self.padded_flops = 0.0, 0.0
        self.round_rates: list[float] = []
        self.warmup_seconds: float | None = None

    def step(self, batch: dict) -> None:
        batch = {name: value.to(self.device, non_blocking=True) for name, value in batch.items()}
        # A new iteration for CUDA graphs (no-op otherwise): the last step's graph outputs may be overwritten.
        torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16):
            loss = self.forward(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def timed_round(self, batches: list[dict]) -> None:
        synchronize(self.device)
        start = time.perf_counter()
        for batch in batches:
            self.step(batch)
        synchronize(self.device)
        seconds = time.perf_counter() - start
        target_tokens = 0
        for batch in batches:
            sources, targets, padded_sources, padded_targets = batch_lengths(batch)
            target_tokens += sum(targets)
            self.source_tokens += sum(sources)
            self.padded += sum(padded_sources) + sum(padded_targets)
            self.useful_flops += training_flops(self.model.config, sources, targets)
            self.padded_flops += training_flops(self.model.config, padded_sources, padded_targets)
        self.seconds += seconds
        self.steps += len(batches)
        self.target_tokens += target_tokens
        self.round_rates.append(target_tokens / seconds)

    def summary(self, peak: float | None) -> dict:
        summary = {"compiled": self.compiled, "cudagraph_skips": self.cudagraph_skips,
                   "steps": self.steps, "seconds": round(self.seconds, 3),
                   "seconds_per_step": round(self.seconds / self.steps, 4),
                   "target_tokens_per_second": round(self.target_tokens / self.seconds),
                   "target_tokens_per_second_per_round": [round(rate) for rate in self.round_rates],
                   "source_tokens_per_second": round(self.source_tokens / self.seconds),
                   "padding_share": round(1 - (self.target_tokens + self.source_tokens) / self.padded, 4),
                   "num_parameters": self.model.num_parameters(),
                   "useful_tflops_per_second": round(self.useful_flops / self.seconds / 1e12, 3),
                   "computed_tflops_per_second": round(self.padded_flops / self.seconds / 1e12, 3)}
        if peak:
            summary["useful_fraction_of_peak"] = round(self.useful_flops / self.seconds / peak, 3)
            summary["computed_fraction_of_peak"] = round(self.padded_flops / self.seconds / peak, 3)
        return summary


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_interleaved(trainees: dict[str, Trainee], batches: list[dict], warmup: int, steps: int,
                        rounds: int, errors: dict[str, str], peak: float | None,
                        report: Callable[[dict[str, dict]], None] = lambda measured: None) -> dict[str, dict]:
    """Every system warms up (compiling, with `--compile`), then the systems take turns for `rounds` rounds of
    steps // rounds steps on the same batches, so that clock, temperature and allocator changes over the run hit all
    systems alike. A system whose warm-up or timed steps fail goes to `errors` and leaves the run. `report` gets
    what was measured so far after each system's warm-up and after each round."""

    def leave(system: str, stage: str, error: Exception) -> None:
        errors[system] = f"{stage}: {type(error).__name__}: {str(error)[:2000]}"
        print(f"{system}: {errors[system][:500]}", flush=True)
        del trainees[system]

    def measured() -> dict[str, dict]:  # the systems warmed up so far, with their timed steps
        return {system: {**(trainee.summary(peak) if trainee.steps else {}),
                         "warmup_seconds": round(trainee.warmup_seconds, 1)}
                for system, trainee in trainees.items() if trainee.warmup_seconds is not None}

    skips = torch._dynamo.utils.counters["inductor"]
    for system, trainee in list(trainees.items()):
        start, skipped_before = time.perf_counter(), skips["cudagraph_skips"]
        try:
            for index in range(warmup):
                trainee.step(batches[index % len(batches)])
            synchronize(trainee.device)
            # Inductor falls back from CUDA graphs silently (e.g. for a CPU tensor input): counted, so that a CUDA-graph
            # system that ran without them shows it.
            trainee.cudagraph_skips = skips["cudagraph_skips"] - skipped_before
        except Exception as error:  # noqa: BLE001 - recorded in the results, the other systems go on
            leave(system, "warm-up", error)
            continue
        trainee.warmup_seconds = time.perf_counter() - start
        print(f"{system}: warm-up {trainee.warmup_seconds:.1f} s", flush=True)
        report(measured())

    per_round = max(1, steps // rounds)
    for round_index in range(rounds):
        chunk = [batches[(warmup + round_index * per_round + i) % len(batches)] for i in range(per_round)]
        for system, trainee in list(trainees.items()):
            try:
                trainee.timed_round(chunk)
                # Printed as it goes: a run stopped at a time limit still shows what it measured.
                print(f"round {round_index + 1} {system}: {trainee.round_rates[-1]:,.0f} target tokens/s", flush=True)
            except Exception as error:  # noqa: BLE001 - recorded in the results, the other systems go on
                leave(system, f"timed round {round_index + 1}", error)
        report(measured())
    return measured()


def profile_systems(trainees: dict[str, Trainee], batches: list[dict], steps: int) -> dict[str, dict]:
    """Each system's time breakdown over `steps` steps (from the first batch on). On a GPU: the same steps timed
    without the profiler, then what the device ran under it (`gpu_time_breakdown`), its busy time also as a share of
    the unprofiled step (the profiler slows the host). On the CPU the operations' times (`operation_breakdown`,
    which runs the steps twice: untimed, then timed). A system whose profile fails gets its error instead."""
    chunk = [batches[index % len(batches)] for index in range(steps)]
    profiles = {}
    for system, trainee in trainees.items():
        def work(trainee: Trainee = trainee) -> None:
            for batch in chunk:
                trainee.step(batch)
            synchronize(trainee.device)

        try:
            if trainee.device.startswith("cuda"):
                start = time.perf_counter()
                work()
                unprofiled_ms = (time.perf_counter() - start) * 1e3 / len(chunk)
                profile = gpu_time_breakdown(work, len(chunk), "step")
                profile["wall_milliseconds_per_unit_unprofiled"] = round(unprofiled_ms, 3)
                profile["device_busy_share_of_unprofiled_step"] = round(
                    profile["device_busy_milliseconds_per_unit"] / unprofiled_ms, 3)
            else:
                profile = operation_breakdown(work, len(chunk), "step")
        except Exception as error:  # noqa: BLE001 - recorded in the results, the other systems go on
            profile = {"error": f"{type(error).__name__}: {str(error)[:2000]}"}
        profiles[system] = profile
        print(f"{system}: profiled {len(chunk)} steps", flush=True)
    return profiles


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--pairs", type=int, default=5000, help="Multi30k training pairs to batch (default 5000)")
    parser.add_argument("--max_tokens", type=int, default=8192, help="padded tokens per batch (default 8192)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=48, help="timed steps per system, over all rounds")
    parser.add_argument("--rounds", type=int, default=6, help="rounds in which the systems take turns")
    parser.add_argument("--compile", action="store_true",
                        help="every encoder and decoder layer under torch.compile (compiled in the warm-up)")
    parser.add_argument("--whole_model", action="store_true",
                        help="with --compile: each system's whole forward with its loss as one compiled graph instead "
                             "of each layer")
    parser.add_argument("--compile_mode", default=None, choices=["default", "reduce-overhead", "max-autotune"],
                        help="torch.compile's mode for --compile (default: its default)")
    parser.add_argument("--pad_to_multiple_of", type=int, default=None,
                        help="pad each batch's source and target lengths up to a multiple of this (fewer distinct "
                             "batch shapes for CUDA graphs to record)")
    parser.add_argument("--batch_size_multiple", type=int, default=1,
                        help="sentences per batch rounded down to a multiple of this; batches that are not one are "
                             "left out (default 1)")
    parser.add_argument("--compile_backend", default="inductor", choices=["inductor", "aot_eager", "eager"],
                        help="torch.compile's backend for --compile (default inductor; the others, without kernels "
                             "of their own, check the script quickly, and take no --compile_mode)")
    parser.add_argument("--pin_memory", action="store_true",
                        help="batches in pinned memory, as a DataLoader with pin_memory=True gives them (the copy "
                             "to the GPU then does not wait for it)")
    parser.add_argument("--baseline_variants", nargs="+", type=baseline_variant, default=[], metavar="VARIANT",
                        help="also the baseline changed by each VARIANT, measured as baseline_<parts>: one or more "
                             f"of {', '.join(VARIANT_PARTS)} joined by '+' (e.g. whole_model+cuda_graphs; all but "
                             "eager_attention and packed_attention need --compile)")
    parser.add_argument("--profile_steps", type=int, default=0,
                        help="after the timed rounds, profile this many steps of each system (default 0: none; "
                             "each runs them twice: once unprofiled)")
    parser.add_argument("--no_cudnn_attention", action="store_true",
                        help="SDPA without its cuDNN kernel (PyTorch then picks memory-efficient attention for masks)")
    parser.add_argument("--tokenizer", help="trained tokenizer folder (default: train one on the pairs)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--source_conllu", default=None,
                        help="parses of the training sources (hf-srcfeat-annotate) instead of running Stanza")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke test of the script")
    args = parser.parse_args(argv)
    variants = list(dict.fromkeys(args.baseline_variants))
    compiled_variants = ["+".join(parts) for parts in variants
                         if set(parts) - {"eager_attention", "packed_attention"}]
    cuda_graphs_variant = any("cuda_graphs" in parts for parts in variants)
    needs_compile = [option for option, given in (
        ("--baseline_variants " + " ".join(compiled_variants), bool(compiled_variants)),
        ("--compile_mode", args.compile_mode is not None), ("--whole_model", args.whole_model),
        ("--compile_backend", args.compile_backend != "inductor")) if given]
    if args.profile_steps < 0:
        parser.error(f"--profile_steps must be at least 0, got {args.profile_steps}")
    if args.pad_to_multiple_of is not None and args.pad_to_multiple_of < 1:
        parser.error(f"--pad_to_multiple_of must be at least 1, got {args.pad_to_multiple_of}")
    if args.batch_size_multiple < 1:
        parser.error(f"--batch_size_multiple must be at least 1, got {args.batch_size_multiple}")
    if needs_compile and not args.compile:
        parser.error(f"{', '.join(needs_compile)} only apply with --compile")
    if args.compile_mode is not None and args.compile_backend != "inductor":
        parser.error(f"--compile_mode is inductor's; --compile_backend {args.compile_backend} takes none")
    cpp_wrapper_variants = ["+".join(parts) for parts in variants if "cpp_wrapper" in parts]
    if cpp_wrapper_variants and (args.compile_backend != "inductor" or args.compile_mode is not None):
        parser.error(f"--baseline_variants {' '.join(cpp_wrapper_variants)}: cpp_wrapper sets inductor's options, "
                     "which take neither another --compile_backend nor a --compile_mode")
    if args.whole_model and any("whole_model" in parts for parts in variants):
        parser.error("--whole_model already compiles every system whole; a whole_model variant would repeat the "
                     "baseline")
    if args.compile_mode == "reduce-overhead" and cuda_graphs_variant:
        parser.error("a cuda_graphs variant adds a CUDA-graph system beside the run's own; with --compile_mode "
                     "reduce-overhead every compiled system already runs under CUDA graphs")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpu_throughput.py measures a CUDA GPU; this machine has none "
                         "(--device cpu for a smoke test).")
    torch.backends.cuda.matmul.allow_tf32 = True
    if args.no_cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(False)
    peak = matmul_peak_bf16() if cuda else None
    tokenizer, rows, parse_seconds = encoded_pairs(args)
    batches = token_batches(tokenizer, rows, args.max_tokens, seed=1, pad_to_multiple_of=args.pad_to_multiple_of,
                            batch_size_multiple=args.batch_size_multiple)
    if args.pin_memory and cuda:
        batches = [{name: value.pin_memory() for name, value in batch.items()} for batch in batches]
    # Compiled layers meet some batch shapes for the first time with a recompilation (seconds): the warm-up
    # steps through every batch once, so that none falls into a timed round; twice with CUDA graphs, which run a
    # shape eagerly the first time and record it the second.
    cuda_graphs = args.compile_mode == "reduce-overhead" or cuda_graphs_variant
    passes = 2 if cuda_graphs else 1
    warmup = max(args.warmup, passes * len(batches)) if args.compile else args.warmup
    compiled_unit = "the whole forward with the loss" if args.whole_model else "each encoder and decoder layer"
    result = {
        "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": __import__("transformers").__version__,
        "code_version": train.code_version(),
        "command": "python -m benchmarks.gpu_throughput " + " ".join(argv if argv is not None else sys.argv[1:]),
        "matmul_peak_tflops_bf16": round(peak / 1e12, 1) if peak else None,
        "settings": {"pairs": args.pairs, "max_tokens": args.max_tokens, "batches": len(batches),
                     "pad_to_multiple_of": args.pad_to_multiple_of, "batch_size_multiple": args.batch_size_multiple,
                     "sentences": sum(len(batch["input_ids"]) for batch in batches),
                     "distinct_batch_shapes": len({(tuple(batch["input_ids"].shape), tuple(batch["labels"].shape))
                                                   for batch in batches}),
                     "warmup": warmup, "steps": args.steps, "rounds": args.rounds,
                     "profiled_steps": args.profile_steps,
                     "design": "interleaved: the systems of a size take turns each round",
                     "precision": "autocast bfloat16, float32 weights, fused AdamW", "batching": "token budget",
                     "sdpa_cudnn_attention": torch.backends.cuda.cudnn_sdp_enabled(),
                     "compiled": f"{compiled_unit}, torch.compile(dynamic=True, mode={args.compile_mode!r}, "
                                 f"backend={args.compile_backend!r})" if args.compile else False,
                     "dynamic_sizes": "a symbol for each size (no duck sizing), floats constant" if args.compile else None,
                     "pinned_batches": bool(args.pin_memory and cuda),
                     "flops": "matmul FLOPs by the baseline's formula (forward + backward = 3 x forward) over real "
                              "tokens (useful) and padded shapes (computed)",
                     "sizes": {size: SIZES[size] for size in args.sizes}},
        "source_parses": args.source_conllu or {
            "parser": "stanza", "sentences": len(rows), "seconds": round(parse_seconds, 1), "device": args.device,
            "note": "cold cache unless the annotation cache already held these sentences"},
        "systems": {}, "errors": {},
    }
    for size in args.sizes:
        trainees, errors = {}, result["errors"].setdefault(size, {})
        systems = {name: () for name in args.systems} | {variant_name(parts): parts for parts in variants}
        for name, parts in systems.items():
            try:
                model = build("baseline" if parts else name, size, tokenizer)
                if "eager_attention" in parts:
                    model.set_attn_implementation("eager")
                if "packed_attention" in parts:
                    use_packed_attention(model)
                if "opaque_layer_norm" in parts:
                    use_opaque_layer_norm(model)
                if "separate_layer_norm_gradients" in parts:
                    use_separate_layer_norm_gradients(model)
                mode = "reduce-overhead" if "cuda_graphs" in parts else args.compile_mode
                options = CPP_WRAPPER_OPTIONS if "cpp_wrapper" in parts else None
                whole = "whole_model" in parts or (args.whole_model and "eager" not in parts)
                if args.compile and not whole and "eager" not in parts:
                    compile_layers(model, mode, args.compile_backend, options)
                trainees[name] = Trainee(model, args.device, whole, mode, args.compile_backend, options)
            except Exception as error:  # noqa: BLE001 - recorded in the results, the other systems go on
                errors[name] = f"{type(error).__name__}: {str(error)[:2000]}"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        args.output.parent.mkdir(parents=True, exist_ok=True)

        def report(measured: dict[str, dict], size: str = size) -> None:
            result["systems"][size] = measured
            write_json_atomically(args.output, result)

        measured = measure_interleaved(trainees, batches, warmup, args.steps, args.rounds, errors, peak, report)
        reference = measured.get("baseline")
        for system, summary in measured.items():
            if reference:
                summary["relative_time_per_target_token"] = round(
                    reference["target_tokens_per_second"] / summary["target_tokens_per_second"], 3)
            print(f"{size:9s} {system:32s} {summary['target_tokens_per_second']:>9,} target tokens/s "
                  f"{summary['seconds_per_step'] * 1000:7.1f} ms/step "
                  f"{summary['useful_tflops_per_second']:6.1f} useful TFLOP/s "
                  f"({summary.get('useful_fraction_of_peak', 0):.1%} of peak)", flush=True)
        result["systems"][size] = measured
        if args.profile_steps:
            write_json_atomically(args.output, result)  # a crash while profiling keeps the rounds
            result.setdefault("profiles", {})[size] = profile_systems(trainees, batches, args.profile_steps)
        if cuda:
            result.setdefault("peak_memory_gib_all_systems_of_a_size", {})[size] = round(
                torch.cuda.max_memory_allocated() / 2**30, 2)
        del trainees
        if cuda:
            torch.cuda.empty_cache()
        write_json_atomically(args.output, result)
    if cuda:
        result["matmul_peak_tflops_bf16_after"] = round(matmul_peak_bf16() / 1e12, 1)
        write_json_atomically(args.output, result)


if __name__ == "__main__":
    main()
