#!/usr/bin/env python
"""Measure the annotator: accuracy on gold UD English-EWT test, throughput on raw Multi30k, cached re-run.

    python -m benchmarks.measure_annotator --ewt_dir ../shared/data/ud_english_ewt --output annotator.json

Accuracy uses gold tokenization (pretokenized input), as the Stanza models' own README does: UPOS, lemma,
UAS and LAS (relation without subtype). Throughput runs the full raw-text pipeline on Multi30k sentences
with a fresh cache, then again from the cache. Writes a JSON file with the numbers and the set-up.
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
from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.data.multi30k import load_multi30k
from hf_srcfeat.metrics.parse_accuracy import annotation_scores
from hf_srcfeat.provenance import code_version, processor_name
from hf_srcfeat.safe_writing import write_json_atomically


def accuracy(ewt_file: Path, model_dir: str | None) -> dict:
    gold = list(read_conllu(ewt_file))
    annotator = StanzaAnnotator(model_dir=model_dir, pretokenized=True, use_cache=False)
    predicted = annotator.annotate([" ".join(word.text for word in sentence.words) for sentence in gold])
    return annotation_scores(gold, predicted)


def throughput(texts: list[str], model_dir: str | None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder) / "cache.sqlite"
        annotator = StanzaAnnotator(model_dir=model_dir, cache_path=cache)
        _ = annotator.pipeline  # load the models outside the timed region
        start = time.perf_counter()
        annotator.annotate(texts)
        parse_seconds = time.perf_counter() - start
        start = time.perf_counter()
        StanzaAnnotator(model_dir=model_dir, cache_path=cache).annotate(texts, show_progress=False)
        cached_seconds = time.perf_counter() - start
    return {"sentences": len(texts), "parse_seconds": round(parse_seconds, 2),
            "sentences_per_second": round(len(texts) / parse_seconds, 1),
            "cached_rerun_seconds": round(cached_seconds, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ewt_dir", required=True)
    parser.add_argument("--model_dir", default=None, help="Stanza resources (default: $HF_SRCFEAT_STANZA_DIR)")
    parser.add_argument("--multi30k_split", default="val")
    parser.add_argument("--limit", type=int, default=None, help="Multi30k sentences to parse (default all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    texts = list(load_multi30k(args.multi30k_split, limit=args.limit)["source"])
    results = {
        "code_version": code_version(), "processor": processor_name(),
        "stanza_version": stanza.__version__, "torch_threads": args.threads,
        "ewt_test": accuracy(Path(args.ewt_dir) / "en_ewt-ud-test.conllu.gz", args.model_dir),
        f"multi30k_{args.multi30k_split}": throughput(texts, args.model_dir),
    }
    write_json_atomically(args.output, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
