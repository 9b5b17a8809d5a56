#!/usr/bin/env python
"""How much each benchmark model depends on its parse: BLEU on test_2016_flickr with the normal parses,
with corrupted parses (a share x of the words get a random head and random tags), and with no parse at all.

    python -m benchmarks.parse_robustness --runs deps_san/seed1 relevance_concat/seed1 baseline/seed1 \\
        --corruption 0.1 0.25 0.5 --output benchmarks/results/parse_robustness.json

Corruption, per word, with probability x (the same words and replacements for every model: one seeded draw):
its head becomes a word drawn at random among those that keep the sentence a tree (not itself, not one of its
descendants; the root keeps its root), and its UPOS, XPOS and relation become labels drawn at random from those of
the test parses. Lemmas and morphological features stay. "No parse": the subwords alone, every feature at its
default (`MissingFeatureDefaults`: <unk> labels, unknown dependency links). Decoding as the benchmark's test
(beam 4, at most 64 tokens); each result is written to the output as soon as it is scored, with the code version and
command that produced it, and a result already there is not computed again. Several processes may add runs to one
output side by side (each write re-reads it under a lock). An output holds one set-up (test set, number of sentences,
corruption seed): adding to it with another is refused, naming what differs, so that its results never mix set-ups.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks import benchmark
from benchmarks.benchmark_report import replace_readme_section, run_label, run_order
from benchmarks.parser_value import read_json
from hf_srcfeat.commands import train
from hf_srcfeat.dependency_tree import ancestor_matrix

REPO = Path(__file__).resolve().parents[1]
README_START, README_END = "<!-- parse-robustness:start -->", "<!-- parse-robustness:end -->"
#: What a run's entry records besides its conditions.
RUN_FIELDS = ("model_type", "feature_dropout")


def corrupt(sentence, rate: float, rng: random.Random, labels: dict[str, list[str]]):
    """`sentence` with each word's head and tags replaced at random with probability `rate` (still one tree)."""
    heads = [word.head for word in sentence.words]
    words = list(sentence.words)
    for index in range(1, len(words) + 1):
        if rng.random() >= rate:
            continue
        word = words[index - 1]
        if heads[index - 1] != 0:
            # Not the word itself nor one below it: ancestors[other, word] is 1 exactly for those.
            below = ancestor_matrix(heads)[:, index - 1]
            allowed = [other for other in range(1, len(words) + 1) if not below[other - 1]]
            if allowed:
                heads[index - 1] = rng.choice(allowed)
        words[index - 1] = replace(word, head=heads[index - 1], upos=rng.choice(labels["upos"]),
                                   xpos=rng.choice(labels["xpos"]),
                                   deprel="root" if heads[index - 1] == 0 else rng.choice(labels["deprel"]))
    return replace(sentence, words=words)


#: The settings an output's results share (recorded at its top level); a run with other settings needs another output.
SETTINGS = ("test_set", "sentences", "corruption_seed")


def setting_differences(recorded: dict, settings: dict) -> str:
    """'sentences 5 (now 10), corruption_seed 1 (now 7)': the settings the output was made with that differ now."""
    return ", ".join(f"{name} {recorded[name]} (now {value})" for name, value in settings.items()
                     if name in recorded and recorded[name] != value)


def check_settings(output: Path, recorded: dict, settings: dict) -> None:
    """Refuse to add results made with other settings to `output`'s: its table would mix them."""
    different = setting_differences(recorded, settings)
    if different:
        raise SystemExit(f"--output {output} holds results made with {different}; give another --output (or remove "
                         "it) to measure with these settings.")


def table(results: dict) -> str:
    """The README table: BLEU per condition, one row per run with the whole curve, the baseline first; above it, the
    test set and how many of its sentences were scored."""
    conditions = [name for entry in results["runs"].values() for name in entry if name not in RUN_FIELDS]
    conditions = list(dict.fromkeys(conditions))  # in the order measured, once each
    heads = [name.replace("_", " ") if not name.startswith("corrupted_")
             else f"{float(name.removeprefix('corrupted_')):.0%} corrupted" for name in conditions]
    lines = ["| run | " + " | ".join(heads) + " |", "|---" * (len(conditions) + 1) + "|"]
    if "sentences" in results:
        lines[:0] = [f"BLEU on {results.get('test_set', 'the test set')}, {results['sentences']} sentences, corruption "
                     f"seed {results.get('corruption_seed', '?')}:", ""]
    for run in sorted(results["runs"], key=run_order):
        entry = results["runs"][run]
        if all(name in entry for name in conditions):
            lines.append(f"| {run_label(run)} | " + " | ".join(f"{entry[name]['bleu']:.2f}" for name in conditions)
                         + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=[], help="run folders under --runs_dir (system/seedK)")
    parser.add_argument("--runs_dir", type=Path, default=REPO / "runs" / "benchmark")
    parser.add_argument("--corruption", nargs="+", type=float, default=[0.1, 0.25, 0.5])
    parser.add_argument("--no_parse", action=argparse.BooleanOptionalAction, default=True,
                        help="also translate without a parse (default: yes)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the corruption draw")
    parser.add_argument("--max_sentences", type=int, default=None, help="the first N test sentences only")
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    parser.add_argument("--source_parses", default=None, help=(
        "CoNLL-U parses of the test sources (test_2016_flickr.en.conllu.gz in this folder); default: Stanza, cached"))
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "parse_robustness.json")
    parser.add_argument("--table", action="store_true", help="print the README table of the results in --output")
    parser.add_argument("--update_docs", "--update_readme", dest="update_docs", action="store_true",
                        help="with --table: also write it into the docs page")
    parser.add_argument("--docs_page", "--readme", dest="docs_page", type=Path,
                        default=REPO / "docs" / "guides" / "feature_dropout.md")
    args = parser.parse_args(argv)
    if args.table:
        results = read_json(args.output)  # an error naming the file if it is missing or not JSON
        if args.update_docs:
            replace_readme_section(args.docs_page, table(results), README_START, README_END)
        print(table(results))
        return results
    if not args.runs:
        parser.error("--runs is required (or --table)")
    if any(not 0.0 <= rate <= 1.0 for rate in args.corruption):
        parser.error(f"--corruption: each rate must lie in [0, 1], got {args.corruption}")
    if args.max_sentences is not None and args.max_sentences < 1:
        parser.error(f"--max_sentences must be at least 1, got {args.max_sentences}")
    # Checked before the data are read and parsed: a mistyped run would otherwise fail as a Hub repo id, late.
    missing = [run for run in args.runs if not (args.runs_dir / run / "config.json").exists()]
    if missing:
        parser.error(f"--runs: no such run folder (with a trained model) under --runs_dir {args.runs_dir}: "
                     f"{', '.join(missing)}")

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_srcfeat.annotator_stanza import StanzaAnnotator
    from hf_srcfeat.conllu import read_conllu
    from hf_srcfeat.data.multi30k import load_multi30k

    test = load_multi30k("test_2016_flickr", "en", "de", args.data_dir)
    sources, references = list(test["source"])[:args.max_sentences], list(test["target"])[:args.max_sentences]
    settings = {"test_set": "test_2016_flickr", "sentences": len(sources), "corruption_seed": args.seed}
    if args.output.exists():  # before the parsing and decoding this output could not take
        check_settings(args.output, read_json(args.output), settings)
    if args.source_parses:
        parses = list(read_conllu(Path(args.source_parses) / "test_2016_flickr.en.conllu.gz"))[:len(sources)]
    else:
        parses = StanzaAnnotator().annotate(sources)
    labels = {name: sorted({getattr(word, name) for sentence in parses for word in sentence.words})
              for name in ("upos", "xpos", "deprel")}
    conditions = {"parsed": parses}
    for rate in args.corruption:
        rng = random.Random(f"{args.seed}-{rate}")
        conditions[f"corrupted_{rate:g}"] = [corrupt(sentence, rate, rng, labels) for sentence in parses]
    if args.no_parse:
        conditions["no_parse"] = sources

    command = "python -m benchmarks.parse_robustness " + " ".join(argv if argv is not None else sys.argv[1:])
    code_version = train.code_version()

    def initial() -> dict:
        return {**settings, "runs": {}}

    def read() -> dict:
        return json.loads(args.output.read_text()) if args.output.exists() else initial()

    torch.manual_seed(0)
    for run in args.runs:
        folder = args.runs_dir / run
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        for condition, inputs in conditions.items():
            if condition in read()["runs"].get(run, {}):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the no-parse defaults warn once per batch
                hypotheses, _ = benchmark.translate(model, tokenizer, inputs, num_beams=benchmark.TEST_NUM_BEAMS,
                                                    parse=condition != "no_parse")
            scores = benchmark.score(hypotheses, references)
            print(f"{run} {condition}: BLEU {scores['bleu']}", flush=True)

            def add(results: dict, run=run, condition=condition, model=model, scores=scores) -> None:
                # Re-read under a lock: another process may have added its runs since this one started, or made
                # the file with other settings.
                check_settings(args.output, results, settings)
                entry = results["runs"].setdefault(run, {
                    "model_type": model.config.model_type,
                    "feature_dropout": getattr(model.config, "feature_dropout", {})})
                entry[condition] = {"bleu": scores["bleu"], "chrf": scores["chrf"], "code_version": code_version,
                                    "command": command}

            benchmark.update_json(args.output, add, initial)
    return read()


if __name__ == "__main__":
    main()
