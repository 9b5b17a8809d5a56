#!/usr/bin/env python
"""How much of a training step computes padding, and how close the rest comes to the machine's matmul peak:
sentence batches against token batches, PyTorch's default kernels against the zoo's, in one interleaved run.

    python -m benchmarks.batching_efficiency --tokenizer runs/quickstart \
        --output benchmarks/results/batching_efficiency.json

The benchmark's baseline (d_model 256, 3+3 layers) trains on real Multi30k pairs, round by round so that changes in
machine load hit every arm alike:

- `sentence_batches`: random batches of `--batch_size` sentences (the benchmark's batching), PyTorch's default
  matrix kernels (MKL), `nn.Dropout`'s masks and `nn.functional.cross_entropy` for the loss: the training step
  before the zoo's kernels;
- `token_batches`: the same step on token-budget batches (`TokenBudgetBatchSampler`, `--max_tokens`, pairs of one
  cost ordered by source, then target length);
- `token_batches_onednn`: token batches with the zoo's training step as it ships: every linear layer's three
  products through oneDNN (`hf_srcfeat.linear`), the output projection and the loss computed together over chunks
  of positions without the logits (`skip_logits`, as the Trainer asks; `hf_srcfeat.label_smoothed_cross_entropy`)
  and dropout masks from 16-bit random lanes (`hf_srcfeat.dropout`);
- `token_batches_onednn_logits_kept`: the same step returning the logits, the loss's gradient written in one pass
  over them (what a caller that reads the logits gets);
- `cost_ordered_token_batches_onednn`: the same on token batches of pairs sorted by their longer side alone, whose
  shorter sides pad more;
- with `--undone CHANGE ...`, `token_batches_onednn_without_CHANGE`: the shipped step with one of its changes undone
  (`benchmarks/undone_changes.py`: `log_softmax_loss`, `boolean_dropout_masks`, `copied_loss_weight_gradient`),
  on the same batches;
- with `--compiled`, `token_batches_compiled`: the shipped step with the model's forward under `torch.compile`
  (inductor, dynamic shapes), where the layers take PyTorch's own path (products by inductor, `nn.Dropout`'s
  masks), and `token_batches_compiled_onednn`: the same with the zoo's products and dropout masks as operators the
  graph calls as they are (`benchmarks/opaque_kernels.py`), inductor fusing the element-wise work around them.
  Both draw random numbers with ATen's generators, as the eager step does (inductor's `fallback_random`);
  compilation is done in the warm-up, before any timing.

Every arm updates the weights with the Trainer's optimizer, fused AdamW. `--model_size transformer_base` trains
Transformer base's shape instead (d_model 512, 6+6 layers, 8 heads, feed-forward 2,048) on the same vocabulary.

Reported per arm: the share of padded positions, target tokens/s, the share of the time spent in the kernel
(`system_time_share`: page faults of memory the C library mapped anew; the run keeps freed memory for reuse, as the
training commands do, `hf_srcfeat.process_memory`, and records glibc's `MALLOC_*` variables), and the
matrix-multiplication FLOP/s of the steps counted twice: over the padded shapes (what the machine computes) and over
the real tokens only (what is useful), each as a fraction of the machine's float32 matmul peak on the same threads:
the faster of MKL's and oneDNN's 1024^3 products, timed in the same rounds (both recorded). `--operation_breakdown`
also records the time of each tensor operation of the shipped step on token batches, per step
(`benchmarks/op_timing.py`), after the timed rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import benchmark
from benchmarks.opaque_kernels import use_opaque_kernels
from benchmarks.undone_changes import UNDONE_CHANGES, undone
from hf_srcfeat import dropout, linear
from hf_srcfeat.commands import train
from hf_srcfeat.process_memory import keep_freed_memory
from hf_srcfeat.provenance import processor_name
from hf_srcfeat.safe_writing import write_json_atomically

#: --model_size -> the shape trained: the benchmark's baseline, or Vaswani et al.'s Transformer base.
MODEL_SIZES = {
    "benchmark": {},
    "transformer_base": {"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "attention_heads": 8,
                         "ffn_dim": 2048},
}


def matmul_peak(size: int = 1024, repeats: int = 20) -> dict[str, float]:
    """FLOP/s of a float32 size x size x size product on this process's threads (best of `repeats`) by PyTorch's
    default kernel (`torch.mm`: MKL) and by oneDNN."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    products = {"mkl": lambda: torch.mm(a, b), "onednn": lambda: linear.onednn_product(a, b)}
    peaks = {}
    for kernel, product in products.items():
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - start)
        peaks[kernel] = 2 * size**3 / best
    return peaks


def training_flops(config, source_lengths: list[int], target_lengths: list[int]) -> float:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward) of the baseline for sentences of these
    source and target lengths: projections, attention scores and weighted sums, feed-forward and output layers."""
    d, ffn, vocab = config.d_model, config.encoder_ffn_dim, config.vocab_size
    total = 0.0
    for s, t in zip(source_lengths, target_lengths, strict=True):
        encoder = config.encoder_layers * (8 * s * d * d + 4 * s * s * d + 4 * s * d * ffn)
        decoder = config.decoder_layers * (8 * t * d * d + 4 * t * t * d + 4 * t * d * d + 4 * s * d * d
                                           + 4 * t * s * d + 4 * t * d * ffn)
        total += encoder + decoder + 2 * t * d * vocab
    return 3 * total


def batch_lengths(batch: dict) -> tuple[list[int], list[int], list[int], list[int]]:
    """(real source lengths, real target lengths, padded source lengths, padded target lengths) of a batch."""
    sources = batch["attention_mask"].sum(-1).tolist()
    targets = (batch["labels"] != -100).sum(-1).tolist()
    rows = len(sources)
    return sources, targets, [batch["input_ids"].shape[1]] * rows, [batch["labels"].shape[1]] * rows


def source_annotations(sources: list[str], source_conllu: str | None = None, device: str = "cpu") -> list:
    """The parses of `sources`: read from `source_conllu` (`hf-srcfeat-annotate`'s output for the same sentences, in
    order: a large corpus without parsing it again), or Stanza's."""
    from hf_srcfeat.annotator_stanza import StanzaAnnotator
    from hf_srcfeat.conllu import read_conllu

    if source_conllu is None:
        return StanzaAnnotator(device=device).annotate(sources, show_progress=True)
    annotations = [sentence for _, sentence in zip(range(len(sources)), read_conllu(source_conllu), strict=False)]
    if [sentence.text for sentence in annotations] != sources:
        raise SystemExit(f"{source_conllu} does not hold the parses of the first {len(sources)} training sources in "
                         "order.")
    return annotations


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq

    from hf_srcfeat.data.batching import TokenBudgetBatchSampler
    from hf_srcfeat.data.multi30k import load_multi30k

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="the benchmark's tokenizer folder")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=4000, help="Multi30k training pairs to batch (default 4000; "
                        "the recipes batch all 29,000, which pads less)")
    parser.add_argument("--source_conllu", default=None,
                        help="parses of the training sources (hf-srcfeat-annotate) instead of running Stanza")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per sentence batch (the benchmark's)")
    parser.add_argument("--max_tokens", type=int, default=2048, help="padded tokens per token batch")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps_per_round", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--model_size", choices=sorted(MODEL_SIZES), default="benchmark",
                        help="the benchmark's baseline (d_model 256, 3+3 layers) or Transformer base's shape")
    parser.add_argument("--operation_breakdown", action="store_true",
                        help="also time each tensor operation of the shipped step on token batches, per step "
                             "(benchmarks/op_timing.py)")
    parser.add_argument("--undone", nargs="+", choices=UNDONE_CHANGES, default=[],
                        help="also the shipped step with each of these changes undone (benchmarks/undone_changes.py)")
    parser.add_argument("--compiled", action="store_true",
                        help="also token batches with the model's forward under torch.compile (inductor)")
    args = parser.parse_args(argv)
    train.code_version()  # read now: the run keeps the code it imported, whatever the checkout becomes meanwhile
    keeps_freed_memory = keep_freed_memory()  # as the training commands do
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    pairs = load_multi30k("train", "en", "de", args.data_dir, limit=args.pairs)
    annotations = source_annotations(list(pairs["source"]), args.source_conllu)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    encodings = tokenizer(annotations=annotations, text_target=list(pairs["target"]), truncation=True, max_length=128)
    rows = [{name: encodings[name][index] for name in encodings} for index in range(len(annotations))]
    collate = DataCollatorForSeq2Seq(tokenizer)
    order = np.random.default_rng(1).permutation(len(rows)).tolist()
    sentence_batches = [collate([rows[i] for i in order[start:start + args.batch_size]])
                        for start in range(0, len(order) - args.batch_size + 1, args.batch_size)]
    lengths = [(len(row["input_ids"]), len(row["labels"])) for row in rows]
    token_batches = [collate([rows[i] for i in batch])
                     for batch in TokenBudgetBatchSampler(lengths, args.max_tokens, seed=1)]
    # For comparison: pairs ordered by their longer side alone, whose shorter sides pad more.
    cost_ordered_batches = [collate([rows[i] for i in batch]) for batch in TokenBudgetBatchSampler(
        [max(pair) for pair in lengths], args.max_tokens, seed=1)]

    shared = benchmark.SHARED_ARGUMENTS
    model_arguments = train.ModelArguments(**{**{key: shared[key] for key in (
        "d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "dropout", "label_smoothing",
        "layernorm_position")}, **MODEL_SIZES[args.model_size]})

    def default_kernels_loss(logits, labels, num_items_in_batch=None):
        # The loss as PyTorch computes it: autograd through log-softmax, the likelihood and the smoothing term.
        total = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                  ignore_index=-100, label_smoothing=model_arguments.label_smoothing,
                                                  reduction="sum")
        return total / (labels != -100).sum().clamp(min=1)

    default_min_rows = linear.ONEDNN_MIN_ROWS

    def training_arm(pytorch_kernels: bool = False, compiled: bool = False, opaque_kernels: bool = False,
                     logits_kept: bool = False, undone_change: str | None = None):
        """A training step on its own copy of the same initial model (so that each arm's weights are its own) with
        PyTorch's matrix kernels and loss or the shipped ones; compiled: the forward under `torch.compile`, with
        the zoo's kernels as opaque operators (`opaque_kernels`) or PyTorch's path. The shipped step asks for the
        loss only, as the Trainer's training steps do (`skip_logits`), unless `logits_kept`. Returns the step and
        the model's config."""
        model = train.build_model(model_arguments, tokenizer, seed=1).train()
        if pytorch_kernels:
            model.label_smoothed_loss = default_kernels_loss
        if opaque_kernels:
            use_opaque_kernels(model)
        # The Trainer's optimizer (`adamw_torch_fused`, Transformers' default) in every arm.
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=shared["weight_decay"], fused=True)
        forward = torch.compile(model, dynamic=True) if compiled else model

        def step(batch: dict) -> None:
            linear.ONEDNN_MIN_ROWS = sys.maxsize if pytorch_kernels else default_min_rows
            dropout.LANE_MASKS = not pytorch_kernels
            with undone(undone_change):
                forward(**batch, skip_logits=not (pytorch_kernels or logits_kept)).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step, model.config

    kinds = {"sentence_batches": sentence_batches, "token_batches": token_batches,
             "token_batches_onednn_logits_kept": token_batches, "token_batches_onednn": token_batches,
             "cost_ordered_token_batches_onednn": cost_ordered_batches}
    steps = {"sentence_batches": training_arm(pytorch_kernels=True)[0],
             "token_batches": training_arm(pytorch_kernels=True)[0],
             "token_batches_onednn_logits_kept": training_arm(logits_kept=True)[0],
             "cost_ordered_token_batches_onednn": training_arm()[0]}
    steps["token_batches_onednn"], config = training_arm()
    for change in args.undone:
        kinds[f"token_batches_onednn_without_{change}"] = token_batches
        steps[f"token_batches_onednn_without_{change}"] = training_arm(undone_change=change)[0]
    if args.compiled:
        # The shipped step, compiled: inductor fuses the element-wise work around the matmuls (norms, softmax,
        # dropout).
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
        kinds["token_batches_compiled"] = kinds["token_batches_compiled_onednn"] = token_batches
        steps["token_batches_compiled"] = training_arm(compiled=True)[0]
        steps["token_batches_compiled_onednn"] = training_arm(compiled=True, opaque_kernels=True)[0]
    totals = {kind: {"seconds": 0.0, "system_seconds": 0.0, "target_tokens": 0, "useful_flops": 0.0,
                     "padded_flops": 0.0, "real_positions": 0, "padded_positions": 0, "steps": 0} for kind in kinds}
    for kind, batches in kinds.items():
        compile_start = time.perf_counter()
        for batch in batches[:3 if "compiled" in kind else 1]:  # warm-up (compilation, incl. a new shape)
            steps[kind](batch)
        print(kind, f"warm-up {time.perf_counter() - compile_start:.1f} s", flush=True)
    peaks = []
    for round_index in range(args.rounds):
        peaks.append(matmul_peak())
        print(f"round {round_index}: peak {peaks[-1]}", flush=True)
        for kind, batches in kinds.items():
            for offset in range(args.steps_per_round):
                batch = batches[(1 + round_index * args.steps_per_round + offset) % len(batches)]
                usage = resource.getrusage(resource.RUSAGE_SELF)
                start = time.perf_counter()
                steps[kind](batch)
                elapsed = time.perf_counter() - start
                system_seconds = resource.getrusage(resource.RUSAGE_SELF).ru_stime - usage.ru_stime
                sources, targets, padded_sources, padded_targets = batch_lengths(batch)
                total = totals[kind]
                total["seconds"] += elapsed
                total["system_seconds"] += system_seconds
                total["steps"] += 1
                total["target_tokens"] += sum(targets)
                total["useful_flops"] += training_flops(config, sources, targets)
                total["padded_flops"] += training_flops(config, padded_sources, padded_targets)
                total["real_positions"] += sum(sources) + sum(targets)
                total["padded_positions"] += sum(padded_sources) + sum(padded_targets)
    peak_by_kernel = {kernel: float(np.median([round_peaks[kernel] for round_peaks in peaks]))
                      for kernel in peaks[0]}
    peak = max(peak_by_kernel.values())
    result = {"code_version": train.code_version(), "torch": torch.__version__, "threads": args.threads,
              "command": "python -m benchmarks.batching_efficiency " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:]),
              "settings": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
              "processor": processor_name(),
              "malloc_environment": {name: value for name, value in os.environ.items() if name.startswith("MALLOC_")},
              "keeps_freed_memory": keeps_freed_memory,
              "matmul_peak_gflops": round(peak / 1e9, 1),
              **{f"matmul_peak_gflops_{kernel}": round(value / 1e9, 1) for kernel, value in peak_by_kernel.items()},
              "matmul_peak_gflops_per_round": [{kernel: round(value / 1e9, 1) for kernel, value in round_peaks.items()}
                                               for round_peaks in peaks]}
    for kind, total in totals.items():
        batches = kinds[kind]
        result[kind] = {
            "batches_available": len(batches), "steps": total["steps"],
            "sentences_per_batch": round(float(np.mean([len(b["labels"]) for b in batches])), 1),
            "padding_share": round(1 - total["real_positions"] / total["padded_positions"], 4),
            "target_tokens_per_second": round(total["target_tokens"] / total["seconds"], 1),
            "computed_fraction_of_peak": round(total["padded_flops"] / total["seconds"] / peak, 3),
            "useful_fraction_of_peak": round(total["useful_flops"] / total["seconds"] / peak, 3),
            "system_time_share": round(total["system_seconds"] / total["seconds"], 3)}
        print(kind, result[kind], flush=True)
    if args.operation_breakdown:
        from benchmarks.op_timing import operation_breakdown

        # Batches after the first, as the timed rounds take them (the first was the warm-up's).
        chosen = [token_batches[(1 + offset) % len(token_batches)] for offset in range(args.steps_per_round)]
        result["operation_breakdown"] = {
            "arm": "token_batches_onednn",
            "target_tokens_per_step": round(sum(sum(batch_lengths(batch)[1]) for batch in chosen) / len(chosen), 1),
            **operation_breakdown(lambda: [steps["token_batches_onednn"](batch) for batch in chosen],
                                  units=len(chosen), unit="step")}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(args.output, result)


if __name__ == "__main__":
    main()
