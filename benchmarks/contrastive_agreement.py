#!/usr/bin/env python
"""Score the blind subject-verb agreement set with benchmark models: both German candidates of each English source
(forced decoding, `hf_srcfeat.metrics.forced_decoding.score_targets`), one line per item.

    python -m benchmarks.contrastive_agreement --runs baseline/seed1 deps_san/seed2 --runs_dir runs/benchmark

Writes `benchmarks/results/contrastive_agreement/<system>_seed<k>.tsv` (`score_a<TAB>score_b`: the summed
log-probability of candidate a and of candidate b) and a `.json` beside it with the model, the data folder and a hash
of its files' contents, the command and the code version. Which candidate is correct is not known here: accuracy is
computed elsewhere, and nothing here may select or tune on this set.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

from hf_srcfeat.safe_writing import write_json_atomically, write_text_atomically

REPO = Path(__file__).resolve().parents[1]
DATA_ENV = "HF_SRCFEAT_CONTRASTIVE_DIR"
#: The set's files: the English sources and the two German candidates of each.
DATA_FILES = ("source.en.gz", "candidate_a.de.gz", "candidate_b.de.gz")
#: The keys that make a `.json` in the output folder one of this script's records (any other is left out of the index).
RECORD_KEYS = ("model", "code_version", "items")


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def read_set(data_dir: Path) -> tuple[dict[str, list[str]], str]:
    """The set's lines per file and a SHA-256 of their text (not of the gzip bytes, which change with recompression),
    or an error naming the folder or file that is missing."""
    if not data_dir.is_dir():
        raise SystemExit(f"--data_dir: {data_dir} is not a folder (the set needs {', '.join(DATA_FILES)}).")
    missing = [name for name in DATA_FILES if not (data_dir / name).exists()]
    if missing:
        raise SystemExit(f"--data_dir: {data_dir} has no {', '.join(missing)}.")
    lines = {name: read_lines(data_dir / name) for name in DATA_FILES}
    digest = hashlib.sha256()
    for name in DATA_FILES:
        digest.update(name.encode() + b"\0" + "\n".join(lines[name]).encode() + b"\0")
    return lines, digest.hexdigest()


def shown_folder(folder: str | Path) -> str:
    """The data folder as the index names it: relative to the repository when it sits beside it (../shared/...)."""
    path = Path(folder).resolve()
    return f"{os.path.relpath(path, REPO)}/" if path.is_relative_to(REPO.parent) else f"{path}/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=[], help="runs as system/seedK, under --runs_dir")
    parser.add_argument("--index_only", action="store_true", help=(
        "only rewrite OUTPUT_DIR/README.md, the table of the scores there and the models they come from"))
    parser.add_argument("--runs_dir", type=Path, default=REPO / "runs" / "benchmark")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help=f"the set's folder (default ${DATA_ENV}, else ../shared/data/contrastive_agreement_blind)")
    parser.add_argument("--output_dir", type=Path, default=REPO / "benchmarks" / "results" / "contrastive_agreement")
    parser.add_argument("--results_dir", type=Path, default=None, help=(
        "the benchmark results of these runs (<system>_seed<k>.json, e.g. benchmarks/results/benchmark): their test "
        "scores and code version are recorded with the agreement scores, naming the models scored"))
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    if args.index_only:
        write_index(args.output_dir)
        return 0
    if not args.runs:
        parser.error("give --runs (or --index_only)")
    torch.set_num_threads(args.threads)
    # Every run is checked before the set is read: a mistyped one should not cost the others' scoring.
    folders = {run: args.runs_dir / run.partition("/")[0] / run.partition("/")[2] for run in args.runs}
    missing = [f"{run} ({folder})" for run, folder in folders.items() if not (folder / "config.json").exists()]
    if missing:
        parser.error(f"--runs: no trained model folder for {', '.join(missing)}")
    data_dir = args.data_dir or Path(os.environ.get(DATA_ENV, REPO.parent / "shared" / "data" /
                                                    "contrastive_agreement_blind"))
    lines, data_sha256 = read_set(data_dir)
    sources = lines["source.en.gz"]
    candidates = {name: lines[f"candidate_{name}.de.gz"] for name in ("a", "b")}
    if not len(sources) == len(candidates["a"]) == len(candidates["b"]):
        raise SystemExit(f"{data_dir}: the source and candidate files differ in length.")

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_srcfeat  # noqa: F401  (registers the model classes)
    from hf_srcfeat.commands.train import code_version
    from hf_srcfeat.metrics.forced_decoding import score_targets

    args.output_dir.mkdir(parents=True, exist_ok=True)
    for run in args.runs:
        system, _, seed = run.partition("/")
        folder = folders[run]
        start = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        parses = tokenizer.annotate(sources, show_progress=True)  # parsed once, used for both candidates
        scores = {name: score_targets(model, tokenizer, parses, targets, batch_size=args.batch_size)
                  for name, targets in candidates.items()}
        stem = f"{system}_{seed}"
        run_result = args.results_dir / f"{stem}.json" if args.results_dir else None
        model_record = {}
        if run_result is not None and run_result.exists():
            recorded = json.loads(run_result.read_text())
            model_record = {"run_results": str(run_result), "run_code_version": recorded.get("code_version"),
                            "run_test_scores": recorded.get("test")}
        write_text_atomically(args.output_dir / f"{stem}.tsv", "".join(
            f"{a.total:.4f}\t{b.total:.4f}\n" for a, b in zip(scores["a"], scores["b"], strict=True)))
        write_json_atomically(args.output_dir / f"{stem}.json", {
            "model": str(folder), **model_record, "items": len(sources), "data_dir": str(data_dir),
            "data_sha256": data_sha256,
            "score": "sum of the candidate's token log-probabilities",
            "code_version": code_version(), "seconds": round(time.perf_counter() - start, 1),
            "command": "python -m benchmarks.contrastive_agreement " + " ".join(argv if argv is not None
                                                                                 else sys.argv[1:])})
        print(f"{run}: {len(sources)} items scored into {args.output_dir / (stem + '.tsv')}", file=sys.stderr)
    write_index(args.output_dir)
    return 0


def write_index(output_dir: Path) -> None:
    """README.md of the scores folder: one row per scored run, with the model's own test scores where recorded, and the
    data folder(s) the records name. Other JSON files in the folder (not this script's records) are left out."""
    rows, folders = [], []
    for record_file in sorted(output_dir.glob("*.json")):
        try:
            record = json.loads(record_file.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(record, dict) or any(key not in record for key in RECORD_KEYS) \
                or not record_file.with_suffix(".tsv").exists():
            continue
        # Records written before the data folder was recorded were scored on the default set.
        folder = shown_folder(record["data_dir"]) if "data_dir" in record else \
            "../shared/data/contrastive_agreement_blind/"
        if folder not in folders:
            folders.append(folder)
        scores = record.get("run_test_scores") or {}
        rows.append(f"| `{record_file.stem}.tsv` | `{record['model']}` | {scores.get('bleu', '')} | "
                    f"{scores.get('chrf', '')} | {record.get('run_code_version') or ''} | {record['code_version']} |")
    named = " and ".join(f"`{folder}`" for folder in folders) or "the set in each record's `data_dir`"
    write_text_atomically(output_dir / "README.md",
        "# Blind subject-verb agreement scores\n\n"
        f"Both German candidates of each item of {named}, scored by forced "
        "decoding with a benchmark model: one line per item, `score_a<TAB>score_b`, the summed log-probability of "
        "each candidate. Which candidate is correct is not known here; accuracy is computed elsewhere. Written by "
        "`python -m benchmarks.contrastive_agreement` (its command is in each `.json`).\n\n"
        "| scores | model | its test BLEU | chrF | model's code version | scoring code version |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
