#!/usr/bin/env python
"""Bytes per stored training example and peak memory of preprocessing, against corpus size.

    python -m benchmarks.measure_data_path --tokenizer runs/quickstart --source_conllu train.en.conllu.gz \
        --output benchmarks/results/data_path_scaling.json

For each size (default 5,000 and 29,000 Multi30k training pairs), a fresh process reads the source parses
(CoNLL-U, as `train.py --train_source_conllu` does), tokenizes the pairs with `datasets.map` as train.py does
(trees stored as the words' heads, `return_dep_distance=False`, in narrow integer types) and reports the Arrow table's bytes per example and
the process's peak resident memory. The same 1,000 pairs stored with the [S, S] `dep_distance` matrix (the old
path) give the comparison.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

from hf_srcfeat.safe_writing import write_json_atomically


def measure(pairs: int, tokenizer_dir: str, source_conllu: str, with_matrix: bool) -> dict:
    """Run in a fresh process: preprocess `pairs` pairs, return bytes per example and peak RSS."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    import hf_srcfeat  # noqa: F401
    from hf_srcfeat.conllu import read_conllu
    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.tokenization_source_features import STORAGE_DTYPES, storage_features

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    corpus = load_multi30k("train", "en", "de", limit=pairs)
    parses = [sentence.to_json() for _, sentence in zip(range(pairs), read_conllu(source_conllu), strict=False)]
    data = corpus.add_column("source_parse", parses)

    def tokenize(batch):
        from hf_srcfeat.annotated_sentence import AnnotatedSentence

        annotations = [AnnotatedSentence.from_json(parse) for parse in batch["source_parse"]]
        encoded = tokenizer(annotations=annotations, truncation=True, max_length=128, return_dep_distance=with_matrix)
        encoded["labels"] = tokenizer(text_target=batch["target"], truncation=True, max_length=128)["input_ids"]
        return encoded

    # As train.py stores them (narrow integer types); the old path had int64 lists and the [S, S] matrix.
    features = None if with_matrix else storage_features(list(STORAGE_DTYPES))
    stored: Dataset = data.map(tokenize, batched=True, remove_columns=data.column_names, features=features)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"pairs": len(stored), "columns": stored.column_names,
            "bytes_per_example": round(stored.data.nbytes / len(stored), 1), "peak_rss_mib": round(peak_kib / 1024, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--source_conllu", required=True, help="parses of the Multi30k training sources, in order")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 29000])
    parser.add_argument("--child", nargs=2, metavar=("PAIRS", "WITH_MATRIX"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(int(args.child[0]), args.tokenizer, args.source_conllu, args.child[1] == "1")))
        return
    from hf_srcfeat.commands import train

    def child(pairs: int, with_matrix: bool) -> dict:
        command = [sys.executable, __file__, "--tokenizer", args.tokenizer, "--source_conllu", args.source_conllu,
                   "--output", str(args.output), "--child", str(pairs), "1" if with_matrix else "0"]
        completed = subprocess.run(command, capture_output=True, text=True, check=True)
        return json.loads(completed.stdout.strip().splitlines()[-1])

    result = {"code_version": train.code_version(),
              "command": "python -m benchmarks.measure_data_path " + " ".join(argv if argv is not None else sys.argv[1:]),
              "heads_stored": [child(size, with_matrix=False) for size in args.sizes],
              "matrix_stored_1000_pairs": child(1000, with_matrix=True),
              "heads_stored_1000_pairs": child(1000, with_matrix=False)}
    smallest, largest = result["heads_stored"][0], result["heads_stored"][-1]
    result["peak_rss_ratio_largest_to_smallest"] = round(largest["peak_rss_mib"] / smallest["peak_rss_mib"], 3)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(args.output, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
