#!/usr/bin/env python
"""How much of a training step computes padding: sentence batches against token batches, in one interleaved run.

    python -m benchmarks.batching_efficiency --tokenizer runs/quickstart \
        --output benchmarks/results/batching_efficiency.json

The benchmark's baseline (d_model 256, 3+3 layers) trains on real Multi30k pairs, alternately on random batches of
`--batch_size` sentences (the benchmark's batching) and on token-budget batches (`TokenBudgetBatchSampler`,
`--max_tokens`), round by round so that changes in machine load hit both alike. Reported per batching: the share
of padded positions, target tokens/s, and the matrix-multiplication FLOP/s of the steps counted twice: over the
padded shapes (what the machine computes) and over the real tokens only (what is useful), each as a fraction of the
machine's float32 matmul peak on the same threads (a large square product timed in the same run). With
`--compiled`, a third arm trains a copy of the model on the token batches with its forward under `torch.compile`
(inductor, dynamic shapes) and fused Adam; compilation is done in the warm-up, before any timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import benchmark
from hf_srcfeat.commands import train
from hf_srcfeat.safe_writing import write_json_atomically


def matmul_peak(size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of a float32 size x size x size product on this process's threads (best of `repeats`)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


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


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq

    from hf_srcfeat.annotator_stanza import StanzaAnnotator
    from hf_srcfeat.data.batching import TokenBudgetBatchSampler
    from hf_srcfeat.data.multi30k import load_multi30k

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="the benchmark's tokenizer folder")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=4000)
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per sentence batch (the benchmark's)")
    parser.add_argument("--max_tokens", type=int, default=2048, help="padded tokens per token batch")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps_per_round", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--compiled", action="store_true",
                        help="also token batches with the step under torch.compile (inductor) and fused Adam")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    pairs = load_multi30k("train", "en", "de", args.data_dir, limit=args.pairs)
    annotations = StanzaAnnotator().annotate(list(pairs["source"]), show_progress=True)
    encodings = tokenizer(annotations=annotations, text_target=list(pairs["target"]), truncation=True, max_length=128)
    rows = [{name: encodings[name][index] for name in encodings} for index in range(len(annotations))]
    collate = DataCollatorForSeq2Seq(tokenizer)
    order = np.random.default_rng(1).permutation(len(rows)).tolist()
    sentence_batches = [collate([rows[i] for i in order[start:start + args.batch_size]])
                        for start in range(0, len(order) - args.batch_size + 1, args.batch_size)]
    lengths = [max(len(row["input_ids"]), len(row["labels"])) for row in rows]
    token_batches = [collate([rows[i] for i in batch])
                     for batch in TokenBudgetBatchSampler(lengths, args.max_tokens, seed=1)]

    shared = benchmark.SHARED_ARGUMENTS
    model_arguments = train.ModelArguments(**{key: shared[key] for key in (
        "d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "dropout", "label_smoothing",
        "layernorm_position")})
    model = train.build_model(model_arguments, tokenizer, seed=1).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def eager_step(batch: dict) -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    kinds = {"sentence_batches": sentence_batches, "token_batches": token_batches}
    steps = {"sentence_batches": eager_step, "token_batches": eager_step}
    if args.compiled:
        # The same model, compiled: inductor fuses the element-wise work around the matmuls (norms, softmax,
        # dropout, the loss); the optimizer updates all parameters in one fused kernel.
        compiled_model = train.build_model(model_arguments, tokenizer, seed=1).train()
        compiled_forward = torch.compile(compiled_model, dynamic=True)
        fused_optimizer = torch.optim.Adam(compiled_model.parameters(), lr=1e-4, fused=True)

        def compiled_step(batch: dict) -> None:
            compiled_forward(**batch).loss.backward()
            fused_optimizer.step()
            fused_optimizer.zero_grad(set_to_none=True)

        kinds["token_batches_compiled"] = token_batches
        steps["token_batches_compiled"] = compiled_step
    totals = {kind: {"seconds": 0.0, "target_tokens": 0, "useful_flops": 0.0, "padded_flops": 0.0,
                     "real_positions": 0, "padded_positions": 0, "steps": 0} for kind in kinds}
    for kind, batches in kinds.items():
        compile_start = time.perf_counter()
        for batch in batches[:3 if kind.endswith("compiled") else 1]:  # warm-up (compilation, incl. a new shape)
            steps[kind](batch)
        print(kind, f"warm-up {time.perf_counter() - compile_start:.1f} s", flush=True)
    peaks = []
    for round_index in range(args.rounds):
        peaks.append(matmul_peak())
        for kind, batches in kinds.items():
            for offset in range(args.steps_per_round):
                batch = batches[(1 + round_index * args.steps_per_round + offset) % len(batches)]
                start = time.perf_counter()
                steps[kind](batch)
                elapsed = time.perf_counter() - start
                sources, targets, padded_sources, padded_targets = batch_lengths(batch)
                total = totals[kind]
                total["seconds"] += elapsed
                total["steps"] += 1
                total["target_tokens"] += sum(targets)
                total["useful_flops"] += training_flops(model.config, sources, targets)
                total["padded_flops"] += training_flops(model.config, padded_sources, padded_targets)
                total["real_positions"] += sum(sources) + sum(targets)
                total["padded_positions"] += sum(padded_sources) + sum(padded_targets)
    peak = float(np.median(peaks))
    result = {"code_version": train.code_version(), "torch": torch.__version__, "threads": args.threads,
              "command": "python -m benchmarks.batching_efficiency " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:]),
              "settings": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
              "matmul_peak_gflops": round(peak / 1e9, 1), "matmul_peak_gflops_per_round": [round(p / 1e9, 1)
                                                                                           for p in peaks]}
    for kind, total in totals.items():
        batches = kinds[kind]
        result[kind] = {
            "batches_available": len(batches), "steps": total["steps"],
            "sentences_per_batch": round(float(np.mean([len(b["labels"]) for b in batches])), 1),
            "padding_share": round(1 - total["real_positions"] / total["padded_positions"], 4),
            "target_tokens_per_second": round(total["target_tokens"] / total["seconds"], 1),
            "computed_fraction_of_peak": round(total["padded_flops"] / total["seconds"] / peak, 3),
            "useful_fraction_of_peak": round(total["useful_flops"] / total["seconds"] / peak, 3)}
        print(kind, result[kind], flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(args.output, result)


if __name__ == "__main__":
    main()
