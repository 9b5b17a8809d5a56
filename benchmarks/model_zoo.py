#!/usr/bin/env python
"""The model zoo: publish the benchmark's trained systems and make the docs' "Model zoo" table.

    python -m benchmarks.model_zoo publish --mirror runs/hub_mirror     # or --upload ($HF_TOKEN)
    python -m benchmarks.model_zoo table --update_docs

`publish` runs hf-srcfeat-publish for one seed of every benchmark system whose result file exists, unless the
registry (`benchmarks/results/published_models.json`) lists it at that destination with the same results (a
system is published again when, say, its second seed finishes and the card's mean changes); repo ids are
`<org>/<system>-multi30k-en-de`. `table` turns the registry into one row per published model: its card's
method name, this checkpoint's test scores and the mean over the benchmark's seeds (as in its card), where it
is served, and a one-line load snippet. Nothing in the table is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks import benchmark
from benchmarks.benchmark_report import display_path, replace_readme_section
from hf_srcfeat.commands import publish

REPO = Path(__file__).resolve().parents[1]
ZOO_START, ZOO_END = "<!-- model-zoo:start -->", "<!-- model-zoo:end -->"


def repo_id_for(organisation: str, system: str) -> str:
    # Hub ids take letters, digits, '-', '_' and '.': a composed system's '+' becomes '-and-'.
    return f"{organisation}/{system.replace('_', '-').replace('+', '-and-')}-multi30k-en-de"


def method_name(model_type: str) -> str:
    """The title of the method's card template, e.g. 'Deps-SAN: dependency-scaled self-attention'."""
    template = REPO / "hf_srcfeat" / "model_cards" / f"{model_type}.md"
    title = next(line for line in template.read_text().splitlines() if line.startswith("# "))
    return title[2:].removesuffix(" (hf_srcfeat)")


def is_superseded(entry: dict, benchmark_dir: Path) -> bool:
    """Whether the benchmark no longer holds this checkpoint's result (its system was re-trained after a change)."""
    results = entry.get("results") or {}
    if "system" not in results:
        return False
    current = benchmark_dir / f"{results['system']}_seed{results['seed']}.json"
    return not current.exists() or json.loads(current.read_text())["test"]["bleu"] != results["bleu"]


REGISTRY = REPO / "benchmarks" / "results" / "published_models.json"


def zoo_table(entries: list[dict], benchmark_dir: Path = REPO / "benchmarks" / "results" / "benchmark",
              registry: Path = REGISTRY) -> str:
    """The zoo table of the registry `registry`'s `entries`, with notes naming where it comes from."""
    if not entries:
        return "No model has been published yet."
    superseded = [is_superseded(entry, benchmark_dir) for entry in entries]
    lines = ["| Model | Method | Test BLEU / chrF (this checkpoint) | Mean BLEU over seeds | Served from | Load |",
             "| --- | --- | --- | --- | --- | --- |"]
    for entry, replaced in zip(entries, superseded, strict=True):
        results = entry.get("results") or {}
        scores = f"{results['bleu']} / {results['chrf']}" if results else "not measured"
        if replaced:
            scores += " (superseded)"
        mean = results.get("mean_over_seeds")
        if mean:
            seeds = f"{'seeds' if len(mean['seeds']) > 1 else 'seed'} {', '.join(map(str, mean['seeds']))}"
            mean_text = f"{mean['bleu']} ({seeds})"
        else:
            mean_text = "–"
        if replaced and mean:  # the card's mean includes the replaced run
            mean_text += " (superseded)"
        load = f'`hf_srcfeat.pipeline("translation", model="{entry["repo_id"]}")`'
        method = method_name(entry["model_type"])
        if "system" in results:  # several benchmark systems share a model type (e.g. relevance_self, _word)
            method += f" (`{results['system']}`)"
        lines.append(f"| `{entry['repo_id']}` | {method} | {scores} | {mean_text} | "
                     f"{entry['destination']} ({entry['revision'][:7]}) | {load} |")
    notes = ["Scores: Multi30k en→de test_2016_flickr, beam 4, sacreBLEU (cased, detokenized) / chrF, from each "
             "model's card. Load: hf_srcfeat's translation pipeline (Transformers 5 removed its own "
             "`pipeline(\"translation\")`); without hf_srcfeat, `AutoModelForSeq2SeqLM` and `AutoTokenizer` "
             "`.from_pretrained(repo_id, trust_remote_code=True)` run the code shipped in the repository. Encoding "
             "raw text needs Stanza."]
    if any(superseded):
        notes.append("(superseded): the benchmark re-trained this system after a change to its code (see Results and "
                     "`benchmarks/results/benchmark/superseded/`); the checkpoint still loads and runs with the "
                     "behaviour it was trained with, and is replaced when its re-run is published.")
    if any(entry["destination"] == "local mirror" for entry in entries):
        notes.append("\"local mirror\": published into a git mirror served by a Hub-compatible server (olah, "
                     "`HF_ENDPOINT=http://host:port`), not (yet) uploaded to huggingface.co: this environment has "
                     "no access to the Hub. `python -m benchmarks.model_zoo publish --upload` with `HF_TOKEN` set "
                     "uploads them.")
    option = "" if registry.resolve() == REGISTRY.resolve() else f"--registry {display_path(registry)} "
    notes.append(f"Generated by `python -m benchmarks.model_zoo {option}table --update_docs` from "
                 f"`{display_path(registry)}`.")
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def publish_benchmark(args: argparse.Namespace) -> list[str]:
    """Publish each system whose checkpoint is finished and whose published card is missing or out of date
    (e.g. another seed finished since, changing the mean); returns the repo ids published."""
    destination, target = ("local mirror", ["--mirror", str(args.mirror)]) if args.mirror else \
        ("huggingface.co", ["--upload"])
    registry = json.loads(args.registry.read_text()) if args.registry.exists() else []
    published_results = {entry["repo_id"]: entry["results"] for entry in registry
                         if entry["destination"] == destination}
    published = []
    for system in benchmark.SYSTEMS:
        repo_id, run = repo_id_for(args.organisation, system), args.runs_dir / system / f"seed{args.seed}"
        if not (args.benchmark_dir / f"{system}_seed{args.seed}.json").exists() or not (run / "results.json").exists():
            continue  # no result, or no finished model folder here (gone with another machine, or training again)
        if published_results.get(repo_id) == publish.run_results(run, args.benchmark_dir, system):
            continue
        with tempfile.TemporaryDirectory() as staging:  # the mirror's git history or the Hub keeps each version
            publish.main([str(run), "--repo_id", repo_id, "--output", str(Path(staging) / "repository"),
                          "--benchmark_system", system, "--benchmark_dir", str(args.benchmark_dir),
                          "--registry", str(args.registry), *target])
        published.append(repo_id)
    return published


def main(argv: list[str] | None = None) -> str | list[str]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", type=Path, default=REGISTRY)
    commands = parser.add_subparsers(dest="command", required=True)
    publishing = commands.add_parser("publish", help="publish every finished benchmark system not published yet")
    target = publishing.add_mutually_exclusive_group(required=True)
    target.add_argument("--mirror", type=Path, help="commit into this local mirror folder")
    target.add_argument("--upload", action="store_true", help="upload to huggingface.co ($HF_TOKEN)")
    publishing.add_argument("--organisation", default="hf-srcfeat")
    publishing.add_argument("--seed", type=int, default=1, help="which seed's checkpoint to publish")
    publishing.add_argument("--runs_dir", type=Path, default=REPO / "runs" / "benchmark")
    publishing.add_argument("--benchmark_dir", type=Path, default=REPO / "benchmarks" / "results" / "benchmark")
    table = commands.add_parser("table", help="print the zoo table; --update_docs writes it into the docs page")
    table.add_argument("--update_docs", "--update_readme", dest="update_docs", action="store_true")
    table.add_argument("--docs_page", "--readme", dest="docs_page", type=Path,
                       default=REPO / "docs" / "guides" / "publishing.md")
    args = parser.parse_args(argv)
    if args.command == "publish":
        published = publish_benchmark(args)
        print("published:", ", ".join(published) if published else "nothing new")
        return published
    entries = json.loads(args.registry.read_text()) if args.registry.exists() else []
    text = zoo_table(entries, registry=args.registry)
    if args.update_docs:
        replace_readme_section(args.docs_page, text, ZOO_START, ZOO_END)
    print(text)
    return text


if __name__ == "__main__":
    main()
