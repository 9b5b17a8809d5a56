#!/usr/bin/env python
"""What a better (or worse) parser is worth to each model, from the parse-corruption curves of
`benchmarks/parse_robustness.py` and the annotator's measured accuracy.

    python -m benchmarks.parser_value     # writes benchmarks/results/parser_value.json, prints the README table

Corrupting a fraction x of the words (random head, random UPOS/XPOS/deprel) turns correct heads and tags into
wrong ones at the annotator's accuracy: head accuracy falls from UAS to about UAS (1 - x), UPOS accuracy from
UPOS to about UPOS (1 - x). The least-squares slope of BLEU over the head-accuracy points lost (x = 0, 0.1, 0.25,
0.5) is each model's sensitivity to the parse; extrapolated the other way it estimates what fewer errors would be
worth. Random errors are not a parser's errors (those are systematic and plausible, so likely cost less), and the
models were trained on the annotator's parses: read the figures as orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.benchmark_report import replace_readme_section, run_label, run_order
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically

REPO = Path(__file__).resolve().parents[1]
README_START, README_END = "<!-- parser-value:start -->", "<!-- parser-value:end -->"
CORRUPTION_RATES = (0.0, 0.1, 0.25, 0.5)
#: Head-accuracy gains of the better parsers the README considers (points of UAS).
SCENARIOS = (-10.0, 5.0, 10.0)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def condition(rate: float) -> str:
    return "parsed" if rate == 0 else f"corrupted_{rate:g}"


def parser_value(robustness: dict, uas: float) -> dict[str, dict]:
    values = {}
    for run, entry in robustness["runs"].items():
        if not all(condition(rate) in entry for rate in CORRUPTION_RATES) or "no_parse" not in entry:
            continue
        # Head accuracy lost at corruption rate x: uas * x points (a corrupted word's random head is wrong).
        points = [(uas * rate, entry[condition(rate)]["bleu"]) for rate in CORRUPTION_RATES]
        per_point = -slope(points)  # BLEU lost per point of head accuracy lost
        values[run] = {"model_type": entry["model_type"], "feature_dropout": entry["feature_dropout"],
                       "bleu_parsed": entry["parsed"]["bleu"], "bleu_no_parse": entry["no_parse"]["bleu"],
                       "bleu_per_uas_point": round(per_point, 4) + 0.0,
                       **{f"bleu_change_uas_{gain:+g}": round(per_point * gain, 2) + 0.0 for gain in SCENARIOS}}
    return values


def table(values: dict[str, dict]) -> str:
    lines = ["| run | BLEU with the parses | BLEU per point of UAS | parser 10 points worse | 5 points better | "
             "10 points better |", "|---|---|---|---|---|---|"]
    for run in sorted(values, key=run_order):
        value = values[run]
        changes = [f"{change:+.2f}" if change else "0.00"
                   for change in (value[f"bleu_change_uas_{gain:+g}"] for gain in SCENARIOS)]
        lines.append(f"| {run_label(run)} | {value['bleu_parsed']:.2f} | {value['bleu_per_uas_point']:.3f} | "
                     f"{' | '.join(changes)} |")
    return "\n".join(lines)


def read_json(path: Path) -> dict:
    """The JSON file `path`, or an error naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"{path}: cannot read it as JSON ({error}).") from None


def required(data, path: Path, *keys: str):
    """The value at `keys` in `data` (read from `path`), or an error naming the file and what it lacks."""
    for depth, key in enumerate(keys):
        if not isinstance(data, dict) or key not in data:
            raise SystemExit(f"{path}: no {'.'.join(keys[:depth + 1])!r}; is it the right file?")
        data = data[key]
    return data


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robustness", type=Path, default=REPO / "benchmarks" / "results" / "parse_robustness.json")
    parser.add_argument("--annotator_accuracy", type=Path,
                        default=REPO / "benchmarks" / "results" / "annotator_stanza_shared_en.json")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "parser_value.json")
    parser.add_argument("--update_docs", "--update_readme", dest="update_docs", action="store_true",
                        help="also write the table into the docs page")
    parser.add_argument("--docs_page", "--readme", dest="docs_page", type=Path,
                        default=REPO / "docs" / "guides" / "feature_dropout.md")
    args = parser.parse_args(argv)
    annotator = read_json(args.annotator_accuracy)
    accuracy = required(annotator, args.annotator_accuracy, "ewt_test")
    uas = required(annotator, args.annotator_accuracy, "ewt_test", "uas")
    values = parser_value({"runs": required(read_json(args.robustness), args.robustness, "runs")}, uas)
    result = {"code_version": code_version(), "annotator_ewt_test": accuracy, "corruption_rates": CORRUPTION_RATES,
              "command": " ".join(["python -m benchmarks.parser_value", *(argv if argv is not None else sys.argv[1:])]),
              "runs": values}
    write_json_atomically(args.output, result)
    if args.update_docs:
        replace_readme_section(args.docs_page, table(values), README_START, README_END)
    print(table(values))
    return result


if __name__ == "__main__":
    main()
