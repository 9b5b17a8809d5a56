#!/usr/bin/env python
"""Training speed of each method relative to the baseline of the same size, measured in one run.

    python -m benchmarks.benchmark_speed --model_types srcfeat_transformer deps_san \
        --output benchmarks/results/speed_deps_san.json

Several variants of one model type get labels: `--model_types baseline=srcfeat_transformer
concat=relevance_features --config_overrides '{"concat": {"relevance_combine": "concat"}}'`.

Every model gets the same batches of real Multi30k pairs (encoded once by the feature-aware tokenizer) and
the same number of optimiser steps; the models take turns in rounds (each round starting with the next
model), so that a change in machine load affects all of them alike. Reported: target tokens per second
(non-padding labels) and the ratio to the first model type, plus each round's rate (the spread). With `--decode_beams 1 4`, every round also times
`generate` on the first batch's sources, each model producing exactly `--decode_tokens` tokens per sentence
(so untrained models compare fairly): sentences per second and the ratio to the first model type.
One torch thread by default (see the benchmark results page on shared cores). Writes JSON as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

import hf_srcfeat
from hf_srcfeat.annotator_stanza import StanzaAnnotator
from hf_srcfeat.commands.train import MODEL_CONFIGS, code_version, feature_vocabulary_arguments
from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.provenance import processor_name
from hf_srcfeat.safe_writing import write_json_atomically
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer


def make_batches(tokenizer, pairs, batch_size: int, count: int) -> list[dict[str, torch.Tensor]]:
    sources, targets = list(pairs["source"]), list(pairs["target"])
    batches = []
    for index in range(count):
        chunk = slice(index * batch_size, (index + 1) * batch_size)
        batch = tokenizer(sources[chunk], text_target=targets[chunk], padding=True, return_tensors="pt")
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        batches.append(dict(batch))
    return batches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_types", nargs="+", default=["srcfeat_transformer", "deps_san"],
                        help="model types, or label=model_type; the first is the reference")
    parser.add_argument("--config_overrides", default="{}", help="JSON object of label -> config arguments")
    parser.add_argument("--benchmark_systems", action="store_true", help=(
        "measure the systems of benchmarks/benchmark.py (instead of --model_types); lfe_dae is left out: it is "
        "lfe_joint's network, only its LFE starts from the autoencoder's weights"))
    parser.add_argument("--tokenizer", help="a trained tokenizer folder (e.g. runs/benchmark/tokenizer); default: "
                        "train one with a 4,000-subword vocabulary on the measured pairs")
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn_dim", type=int, default=1024)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=10, help="distinct batches, cycled")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps_per_round", type=int, default=10)
    parser.add_argument("--decode_beams", type=int, nargs="*", default=[],
                        help="also time generation with these beam sizes (e.g. 1 4), once per round")
    parser.add_argument("--decode_tokens", type=int, default=20,
                        help="every model generates exactly this many tokens per sentence when decoding is timed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    overrides = json.loads(args.config_overrides)
    systems = dict(entry.split("=", 1) if "=" in entry else (entry, entry) for entry in args.model_types)
    if args.benchmark_systems:
        from benchmarks.benchmark import COMPOSED_SYSTEMS, SYSTEMS

        measured = {name: entry for name, entry in {**SYSTEMS, **COMPOSED_SYSTEMS}.items() if name != "lfe_dae"}
        systems = {name: model_type for name, (model_type, _) in measured.items()}
        overrides = {name: system_overrides for name, (_, system_overrides) in measured.items()}
    unknown = sorted(set(systems.values()) - set(MODEL_CONFIGS))
    if unknown:
        raise SystemExit(f"unknown model types {unknown}; choose from {sorted(MODEL_CONFIGS)}")

    pairs = load_multi30k("train", limit=args.batch_size * args.batches)
    if args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = train_source_feature_tokenizer(list(pairs["source"]), list(pairs["target"]), vocab_size=4000,
                                                   annotator=StanzaAnnotator())
    batches = make_batches(tokenizer, pairs, args.batch_size, args.batches)
    results: dict = {"code_version": code_version(), "args": vars(args), "torch_threads": args.threads,
                     "torch_version": torch.__version__, "cpu": processor_name(),
                     "data_files": [str(multi30k_file("train", lang)) for lang in ("en", "de")], "models": {}}

    models, optimizers = {}, {}
    for label, model_type in systems.items():
        torch.manual_seed(args.seed)
        config_class = MODEL_CONFIGS[model_type]
        config = config_class(
            vocab_size=len(tokenizer), d_model=args.d_model, encoder_layers=args.layers, decoder_layers=args.layers,
            encoder_attention_heads=args.heads, decoder_attention_heads=args.heads, encoder_ffn_dim=args.ffn_dim,
            decoder_ffn_dim=args.ffn_dim, layernorm_position="pre", **feature_vocabulary_arguments(config_class, tokenizer),
            **overrides.get(label, {}))
        models[label] = hf_srcfeat.MODEL_CLASSES_BY_TYPE[model_type](config).train()
        optimizers[label] = torch.optim.Adam(models[label].parameters(), lr=1e-4)
        results["models"][label] = {"model_type": model_type, "config": config.to_diff_dict(), "seconds": 0.0,
                                    "target_tokens": 0, "num_parameters": models[label].num_parameters()}

    def step(label: str, batch: dict[str, torch.Tensor]) -> None:
        loss = models[label](**batch).loss
        loss.backward()
        optimizers[label].step()
        optimizers[label].zero_grad()

    sources = {key: value for key, value in batches[0].items() if key != "labels"}

    def decode(label: str, num_beams: int) -> float:
        """Seconds to translate the first batch's sources into exactly `--decode_tokens` tokens each."""
        model = models[label].eval()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(**sources, num_beams=num_beams, min_new_tokens=args.decode_tokens,
                           max_new_tokens=args.decode_tokens)
        seconds = time.perf_counter() - start
        model.train()
        return seconds

    labels = list(systems)
    for label in labels:  # warm-up, not timed
        step(label, batches[0])
    for round_index in range(args.rounds):
        # Each round starts with a different model, so no model always runs right after another's cache use.
        shift = round_index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            entry = results["models"][label]
            start, tokens = time.perf_counter(), 0
            for offset in range(args.steps_per_round):
                batch = batches[(round_index * args.steps_per_round + offset) % len(batches)]
                step(label, batch)
                tokens += int((batch["labels"] != -100).sum())
            seconds = time.perf_counter() - start
            entry["seconds"] += seconds
            entry["target_tokens"] += tokens
            entry.setdefault("round_target_tokens_per_second", []).append(round(tokens / seconds, 1))
            for num_beams in args.decode_beams:
                key = f"decode_beam{num_beams}"
                entry[key + "_seconds"] = entry.get(key + "_seconds", 0.0) + decode(label, num_beams)
                entry[key + "_sentences"] = entry.get(key + "_sentences", 0) + len(sources["input_ids"])
        reference = results["models"][labels[0]]
        for entry in results["models"].values():
            entry["target_tokens_per_second"] = round(entry["target_tokens"] / entry["seconds"], 1)
            entry["relative_to_" + labels[0]] = round(
                entry["target_tokens_per_second"] / reference["target_tokens_per_second"], 3)
            for num_beams in args.decode_beams:
                key = f"decode_beam{num_beams}"
                entry[key + "_sentences_per_second"] = round(entry[key + "_sentences"] / entry[key + "_seconds"], 2)
                entry[key + "_relative_to_" + labels[0]] = round(
                    entry[key + "_sentences_per_second"] / reference[key + "_sentences_per_second"], 3)
        results["rounds_done"] = round_index + 1
        partial = Path(args.output + ".partial")  # replaced in one step: readers never see half a file
        write_json_atomically(partial, results)
        os.replace(partial, args.output)
    print(json.dumps({label: {k: v for k, v in entry.items() if k != "config"}
                      for label, entry in results["models"].items()}, indent=2))


if __name__ == "__main__":
    main()
