#!/usr/bin/env python
"""Stanza parsing speed with 1 and N processes, cold cache each, interleaved in one run.

    python -m benchmarks.measure_annotation_scaling --input ../shared/data/multi30k/train.en.gz --lines 8000 \
        --rounds 2 --output benchmarks/results/annotation_scaling.json

Runs `hf-srcfeat-annotate --num_proc K` on the first `--lines` lines for each K in turn, `--rounds` times, every
time with a new, empty parse cache, one torch thread per process (start-up and model loading included), and
records sentences/s per run, the median per K and its speed-up over one process. `--device cuda --processes 1`
measures Stanza on a GPU (its Python work around the models, the conversion and the cache still on one CPU thread).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path

from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically


def main(argv: list[str] | None = None) -> None:
    import stanza  # imported once up front, so that no run pays for it
    import torch

    from hf_srcfeat.commands.annotate import main as annotate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True)
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=1, help="each K this many times, interleaved")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: where Stanza runs (annotate's --device)")
    parser.add_argument("--batch_size", type=int, default=None, help="sentences handed to Stanza at once (annotate's "
                        "default when not given)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    for name, value in (("lines", args.lines), ("rounds", args.rounds), ("processes", min(args.processes))):
        if value < 1:
            parser.error(f"--{name} must be at least 1, got {value}")
    torch.set_num_threads(1)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "input.txt"
        with gzip.open(args.input, "rt", encoding="utf-8") as handle:
            source.write_text("".join(line for _, line in zip(range(args.lines), handle, strict=False)),
                              encoding="utf-8")
        for round_index in range(args.rounds):
            for processes in args.processes:
                name = f"{processes}_{round_index}"
                report = Path(folder) / f"report{name}.json"
                annotate(["--input", str(source), "--output", str(Path(folder) / f"out{name}.conllu"),
                          "--num_proc", str(processes), "--annotation_cache", str(Path(folder) / f"cache{name}.sqlite"),
                          "--report_json", str(report), "--device", args.device,
                          *(["--batch_size", str(args.batch_size)] if args.batch_size is not None else [])])
                runs.append({**json.loads(report.read_text()), "round": round_index})
                print(runs[-1], flush=True)
    medians = {processes: statistics.median(run["sentences_per_second"] for run in runs
                                            if run["num_proc"] == processes) for processes in args.processes}
    result = {"code_version": code_version(), "input": args.input, "lines": args.lines, "torch_threads": 1,
              "device": torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda")
              else "cpu",
              "batch_size": args.batch_size if args.batch_size is not None else "annotate's default",
              "torch": torch.__version__, "stanza": stanza.__version__,
              "command": "python -m benchmarks.measure_annotation_scaling " + " ".join(argv if argv is not None
                                                                                     else sys.argv[1:]),
              "runs": runs, "median_sentences_per_second": medians,
              "speedup_over_one_process": {processes: round(rate / medians[1], 2) for processes, rate in medians.items()}
              if 1 in medians else None}
    write_json_atomically(args.output, result)


if __name__ == "__main__":
    main()
