#!/usr/bin/env python
"""Stanza parsing speed with 1 and N worker processes, cold cache each, in one run.

    python -m benchmarks.measure_annotation_scaling --input ../shared/data/multi30k/train.en.gz --lines 3000 \
        --output benchmarks/results/annotation_scaling.json

Runs `hf-srcfeat-annotate --num_proc K` on the first `--lines` lines for each K, every time with a new,
empty parse cache, one torch thread per process, and records sentences/s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

from hf_srcfeat.safe_writing import write_json_atomically


def main(argv: list[str] | None = None) -> None:
    import torch

    from hf_srcfeat.commands import train
    from hf_srcfeat.commands.annotate import main as annotate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True)
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "input.txt"
        with gzip.open(args.input, "rt", encoding="utf-8") as handle:
            source.write_text("".join(line for _, line in zip(range(args.lines), handle, strict=False)),
                              encoding="utf-8")
        for processes in args.processes:
            report = Path(folder) / f"report{processes}.json"
            annotate(["--input", str(source), "--output", str(Path(folder) / f"out{processes}.conllu"),
                      "--num_proc", str(processes), "--annotation_cache", str(Path(folder) / f"cache{processes}.sqlite"),
                      "--report_json", str(report)])
            runs.append(json.loads(report.read_text()))
            print(runs[-1], flush=True)
    result = {"code_version": train.code_version(), "input": args.input, "lines": args.lines, "torch_threads": 1,
              "command": "python -m benchmarks.measure_annotation_scaling " + " ".join(argv if argv is not None
                                                                                     else sys.argv[1:]),
              "runs": runs}
    write_json_atomically(args.output, result)


if __name__ == "__main__":
    main()
