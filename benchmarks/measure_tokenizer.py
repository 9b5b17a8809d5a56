#!/usr/bin/env python
"""Measure the feature-aware tokenizer on all Multi30k training sources: Stanza parse time with a fresh cache,
the cached re-run, and the tokenizer's own cost beyond Stanza.

    python -m benchmarks.measure_tokenizer --output benchmarks/results/tokenizer_multi30k_train.json

"Own cost" times `tokenizer(annotations=...)` (subwords, feature ids, B/I/E/S, phrases, tree distances,
padding-free lists) against the plain subword encoding of the same raw texts (`source_features=False`).
Also counts the sentences whose word-aligned subwords equal the raw-text subwords. Writes JSON as it goes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import stanza
import torch

from hf_srcfeat.annotator_stanza import StanzaAnnotator
from hf_srcfeat.commands.train import code_version
from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.provenance import processor_name
from hf_srcfeat.safe_writing import write_json_atomically
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", default=None, help="Stanza resources (default: $HF_SRCFEAT_STANZA_DIR)")
    parser.add_argument("--limit", type=int, default=None, help="training sentences (default all 29,000)")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    output = Path(args.output)
    results: dict = {"code_version": code_version(), "stanza_version": stanza.__version__,
                     "torch_threads": args.threads, "cpu": processor_name(),
                     "data_files": [str(multi30k_file("train", lang)) for lang in ("en", "de")]}

    def save() -> None:
        write_json_atomically(output, results)

    pairs = load_multi30k("train", limit=args.limit)
    sources, targets = list(pairs["source"]), list(pairs["target"])
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder) / "cache.sqlite"
        annotator = StanzaAnnotator(model_dir=args.model_dir, cache_path=cache)
        _ = annotator.pipeline  # model loading is not part of the parse time
        annotations, parse_seconds = timed(annotator.annotate, sources)
        results["annotation"] = {"sentences": len(sources), "parse_seconds": round(parse_seconds, 1),
                                 "sentences_per_second": round(len(sources) / parse_seconds, 1)}
        save()
        fresh = StanzaAnnotator(model_dir=args.model_dir, cache_path=cache)
        _, cached_seconds = timed(fresh.annotate, sources, show_progress=False)
        results["annotation"]["cached_rerun_seconds"] = round(cached_seconds, 2)
        save()

    tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=args.vocab_size,
                                               source_annotations=annotations)
    features, feature_seconds = timed(tokenizer, annotations=annotations)
    plain, plain_seconds = timed(tokenizer, sources, source_features=False)
    tokens = sum(len(ids) for ids in features["input_ids"])
    same = sum(a == b for a, b in zip(features["input_ids"], plain["input_ids"], strict=True))
    results["tokenizer"] = {
        "vocab_size": len(tokenizer), "source_tokens": tokens,
        "feature_encoding_seconds": round(feature_seconds, 2),
        "plain_subword_encoding_seconds": round(plain_seconds, 2),
        "feature_overhead_ms_per_sentence": round(1000 * (feature_seconds - plain_seconds) / len(sources), 3),
        "feature_encoding_share_of_stanza_parse": round(feature_seconds / parse_seconds, 4),
        "sentences_with_same_subwords_as_raw_text": same,
        "sentences_with_same_subwords_as_raw_text_percent": round(100 * same / len(sources), 2),
    }
    save()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
