#!/usr/bin/env python
"""Markdown table of a `benchmark_speed.py` result file, for model cards and the README.

    python -m benchmarks.speed_table benchmarks/results/speed_methods.json baseline concat self_relevance

Columns: parameters, training target tokens/s (mean over rounds, with the range of the per-round ratios to
the first system), and decoding sentences/s when the run timed it; ratios are to the first system listed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def speed_table(results: dict, systems: list[str]) -> str:
    models = results["models"]
    unknown = [name for name in systems if name not in models]
    if unknown:
        raise SystemExit(f"{unknown} are not in the result file; it has {list(models)}.")
    reference = models[systems[0]]
    beams = sorted(int(key[len("decode_beam"):-len("_sentences_per_second")]) for key in reference
                   if key.startswith("decode_beam") and key.endswith("_sentences_per_second"))
    header = ["system", "parameters", "train target tokens/s", "relative (per-round range)"]
    header += [f"decode beam {beam} sent/s (relative)" for beam in beams]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name in systems:
        entry = models[name]
        rounds = [rate / base for rate, base in zip(entry["round_target_tokens_per_second"],
                                                    reference["round_target_tokens_per_second"], strict=True)]
        relative = entry["target_tokens_per_second"] / reference["target_tokens_per_second"]
        row = [name, f"{entry['num_parameters']:,}", f"{entry['target_tokens_per_second']:.1f}",
               f"{relative:.2f} ({min(rounds):.2f}-{max(rounds):.2f})"]
        for beam in beams:
            rate = entry[f"decode_beam{beam}_sentences_per_second"]
            row.append(f"{rate:.1f} ({rate / reference[f'decode_beam{beam}_sentences_per_second']:.2f})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("systems", nargs="+", help="labels in the result file; the first is the reference")
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    print(speed_table(results, args.systems))
    print(f"\n{results['rounds_done']} rounds of "
          f"{results['args']['steps_per_round']} steps, {results['torch_threads']} torch thread(s).")


if __name__ == "__main__":
    main()
