#!/usr/bin/env python
"""Turn the benchmark's result files into the results table (Markdown) and validation loss curves (PNG).

    python -m benchmarks.benchmark_report                  # writes benchmarks/results/benchmark_report.md + .png
    python -m benchmarks.benchmark_report --update_docs   # also rewrites docs/results/benchmark.md's section

`--update_docs` refuses results whose set-up is not the benchmark's (runs with shared_overrides, fewer seeds or
systems, part of the test set: a smoke test) unless given `--allow_other_setup`.

Every number comes from `benchmarks/results/benchmark/*.json` (written by `benchmarks/benchmark.py`): mean and
standard deviation over seeds, the difference to the baseline and the paired bootstrap p-values of each seed;
and from one interleaved speed run of all systems (`benchmarks/benchmark_speed.py --benchmark_systems`,
`--speed_results`): training/decoding time relative to the baseline, set next to the overheads the papers report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

from hf_srcfeat.safe_writing import write_text_atomically

REPO = Path(__file__).resolve().parents[1]
README_START, README_END = "<!-- benchmark-results:start -->", "<!-- benchmark-results:end -->"
#: The documentation page whose results section `--update_docs` rewrites.
DOCS_PAGE = REPO / "docs" / "results" / "benchmark.md"

#: Training / decoding time relative to the baseline as the papers report them (None: not reported).
PAPER_OVERHEADS = {
    "deps_san": ("1.26x train (29 vs 23 s per 100 batches)", None),
    "relevance_concat": (None, None), "relevance_self": (None, None), "relevance_word": (None, None),
    "fusing_diverse": ("1.01x train (Table V, tokens/s)", "1.03x decode"),
    "phrase_max_attn_ta": ("1.75x train (Table 2)", "1.53x decode"),
    "lfe_joint": ("1.12x train (Table 1, s/iteration)", None),
    "lfe_dae": ("1.12x train (Table 1, s/iteration)", None),
    "relevance_concat+deps_san": (None, None),  # no paper combines methods
}
SPEED_COMMAND = ("python -m benchmarks.benchmark_speed --benchmark_systems --tokenizer runs/benchmark/tokenizer "
                 "--rounds 8 --steps_per_round 3 --decode_beams 1 4 "
                 "--output benchmarks/results/speed_benchmark_systems.json")
#: Where each method's parameters beyond the baseline's sit (the counts themselves come from the result files).
EXTRA_PARAMETERS = {
    "relevance_features": "a source embedding of its own, untied from the target's (a narrower subword slice "
                          "plus lemma, BIES, POS and deprel tables)",
    "diverse_input": "the recurrence (BiRNN) and local (CNN) groups of the input representation",
    "phrase_rep": "phrase pooling and phrase cross-attention in every encoder and decoder layer",
    "latent_feedback": "the latent feature encoder (its own embedding and layers)",
    "srcfeat_composed": "its components' modules",
}
#: A published Multi30k test_2016 (en->de) number for a small Transformer, to place the baseline.
PUBLISHED_REFERENCE_BLEU = 41.0  # lowercased, tokenized
PUBLISHED_REFERENCE = ("fairseq `transformer_tiny` on Multi30k en→de test_2016",
                       f"{PUBLISHED_REFERENCE_BLEU} lowercased, tokenized BLEU (a published figure for this set; "
                       "not re-measured here)")


def load_results(results_dir: Path) -> dict[str, list[dict]]:
    by_system: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(results_dir.glob("*.json")):
        result = json.loads(path.read_text())
        by_system[result["system"]].append(result)
    return dict(by_system)


def mean_and_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def paired_delta(results: list[dict], baseline: list[dict]) -> float:
    """Mean over the system's seeds of its BLEU minus the BLEU of the baseline run with the same seed."""
    baseline_by_seed = {r["seed"]: r["test"]["bleu"] for r in baseline}
    return statistics.mean(r["test"]["bleu"] - baseline_by_seed[r["seed"]] for r in results)


def measured_overheads(speed: dict, system: str) -> dict[str, float | list[float]] | None:
    """Time per training target token and per decoded sentence relative to the baseline (the papers' convention:
    1.75x = 75% slower) in one interleaved benchmark_speed.py run; `lfe_dae` has `lfe_joint`'s network."""
    models, reference = speed["models"], speed["models"]["baseline"]
    measured = models.get("lfe_joint" if system == "lfe_dae" else system)
    if measured is None:
        return None
    return {
        "train": reference["target_tokens_per_second"] / measured["target_tokens_per_second"],
        "train_rounds": [base / rate for base, rate in zip(reference["round_target_tokens_per_second"],
                                                           measured["round_target_tokens_per_second"], strict=True)],
        **{f"decode_beam{beams}": reference[f"decode_beam{beams}_sentences_per_second"] /
           measured[f"decode_beam{beams}_sentences_per_second"] for beams in (1, 4)},
    }


def results_table(by_system: dict[str, list[dict]], speed: dict | None) -> str:
    if "baseline" not in by_system:
        raise SystemExit("no baseline results: run `benchmarks/benchmark.py run --systems baseline` first.")
    baseline = by_system["baseline"]
    header = ["system", "seeds", "BLEU", "Δ BLEU", "p (per seed)", "BLEU lc", "chrF", "parameters",
              *(["train time", "decode time beam 4", "decode time greedy"] if speed is not NO_SPEED else [])]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for system, results in by_system.items():
        results = sorted(results, key=lambda r: r["seed"])
        bleu = [r["test"]["bleu"] for r in results]
        p_values = [r["test"].get("significance_vs_baseline", {}).get("p_value") for r in results]
        overheads = measured_overheads(speed, system) if speed and speed is not NO_SPEED else None
        times = ([] if speed is NO_SPEED else ["not measured"] * 3 if overheads is None else
                 [f"{overheads[key]:.2f}x" for key in ("train", "decode_beam4", "decode_beam1")])
        row = [
            system, ",".join(str(r["seed"]) for r in results), mean_and_spread(bleu),
            "–" if system == "baseline" else f"{paired_delta(results, baseline):+.2f}",
            "–" if system == "baseline" else ", ".join("not tested yet" if p is None else f"{p:.3f}" for p in p_values),
            mean_and_spread([r["test"]["bleu_lowercase"] for r in results]),
            mean_and_spread([r["test"]["chrf"] for r in results]), f"{results[0]['num_parameters']:,}", *times,
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def overhead_table(speed: dict) -> str:
    """The interleaved speed run's overheads with their per-round range, next to the papers' figures."""
    header = ["system", "train time (per-round range)", "decode time beam 4", "decode time greedy",
              "paper's overhead"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for system, paper in {"baseline": (None, None), **PAPER_OVERHEADS}.items():
        paper_text = "; ".join(part for part in paper if part) or ("–" if system == "baseline" else "not reported")
        overheads = measured_overheads(speed, system)
        if overheads is None:
            lines.append(f"| {system} | not measured | | | {paper_text} |")
            continue
        rounds = overheads["train_rounds"]
        note = " (lfe_joint's network)" if system == "lfe_dae" else ""
        lines.append(f"| {system}{note} | {overheads['train']:.2f}x ({min(rounds):.2f}-{max(rounds):.2f}) | "
                     f"{overheads['decode_beam4']:.2f}x | {overheads['decode_beam1']:.2f}x | {paper_text} |")
    return "\n".join(lines)


#: `results_table`'s speed when no speed run belongs to the results (e.g. GPU or other-language runs): no time columns.
NO_SPEED: dict = {}


def load_speed(speed_file: Path) -> dict | None:
    return json.loads(speed_file.read_text()) if speed_file.exists() else None


def overhead_section(speed: dict | None) -> list[str]:
    if speed is None:
        return [f"Speed overheads: not measured yet (`{SPEED_COMMAND}`)."]
    arguments = speed["args"]
    command = (f"python -m benchmarks.benchmark_speed --benchmark_systems --tokenizer {arguments['tokenizer']} "
               f"--rounds {arguments['rounds']} --steps_per_round {arguments['steps_per_round']} --decode_beams "
               f"{' '.join(map(str, arguments['decode_beams']))} --output {arguments['output']}")
    return [
        f"Speed overheads, measured in one run on this machine: `{command}` ("
        f"{speed['rounds_done']} rounds of {speed['args']['steps_per_round']} training "
        f"steps on the same 64-pair batches, then decoding the same 64 sources into exactly "
        f"{speed['args']['decode_tokens']} tokens each; the models take turns, so changes in machine load hit all "
        "alike). Times relative to the baseline, as the papers report them; the per-round ranges show the noise "
        "of this shared machine, so smaller differences between systems mean nothing.",
        "",
        overhead_table(speed),
    ]


def outcomes(by_system: dict[str, list[dict]], level: float = 0.05) -> list[str]:
    """One sentence per system, as measured: better/worse only when significant in every seed."""
    lines = []
    for system, results in by_system.items():
        if system == "baseline":
            continue
        delta = paired_delta(results, by_system["baseline"])
        p_values = [r["test"].get("significance_vs_baseline", {}).get("p_value") for r in results]
        if None in p_values:
            lines.append(f"- `{system}` differs from the baseline by {delta:+.2f} BLEU; its significance is not tested "
                         "yet (`benchmark.py significance` adds it once the baseline's test translations exist).")
            continue
        significant_seeds = sum(p < level for p in p_values)
        listed = f"p = {', '.join(f'{p:.3f}' for p in p_values)}"
        seeds = f"in each of its {len(results)} seeds" if len(results) > 1 else "in its one finished seed"
        if significant_seeds == len(results) and delta > 0:
            verdict = f"beats the baseline by {delta:+.2f} BLEU, significant (p < {level}) {seeds}"
        elif significant_seeds == len(results) and delta < 0:
            verdict = f"is worse than the baseline by {delta:+.2f} BLEU, significant (p < {level}) {seeds}"
        elif significant_seeds == 0:
            verdict = f"does not differ significantly from the baseline at this scale ({delta:+.2f} BLEU; {listed})"
        else:
            verdict = (f"differs from the baseline by {delta:+.2f} BLEU, significantly (p < {level}) in only "
                       f"{significant_seeds} of {len(results)} seeds ({listed}): no consistent difference at this scale")
        lines.append(f"- `{system}` {verdict}.{against_parts(results, by_system, level)}")
    return lines


def against_parts(results: list[dict], by_system: dict[str, list[dict]], level: float) -> str:
    """For a composed system: its difference to each of its parts, with the paired bootstrap p of each seed."""
    tested = [r["test"].get("significance_vs_parts", {}) for r in results]
    parts = list(dict.fromkeys(part for seed_tests in tested for part in seed_tests))
    sentences = []
    for part in parts:
        if part not in by_system:
            continue
        delta = paired_delta(results, by_system[part])
        p_values = ", ".join("not tested yet" if part not in seed_tests else f"{seed_tests[part]['p_value']:.3f}"
                             for seed_tests in tested)
        all_tested = all(part in seed_tests for seed_tests in tested)
        not_in_every_seed = all_tested and any(seed_tests[part]["p_value"] >= level for seed_tests in tested)
        sentences.append(f"`{part}` {delta:+.2f} BLEU (p = {p_values}"
                         f"{', not significant in every seed' if not_in_every_seed else ''})")
    return f" Against its parts: {'; '.join(sentences)}." if sentences else ""


def capacity(by_system: dict[str, list[dict]]) -> str | None:
    """Methods that add parameters: how many, where, and what that means for reading a gain."""
    baseline_parameters = by_system["baseline"][0]["num_parameters"]
    larger = [(system, results[0]) for system, results in by_system.items()
              if results[0]["num_parameters"] > 1.01 * baseline_parameters]
    if not larger:
        return None
    by_model_type: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for system, result in larger:
        by_model_type[result["model_type"]].append((system, result["num_parameters"] / baseline_parameters))
    described = [f"{', '.join(f'`{system}` {ratio:.2f}x' for system, ratio in systems)}: "
                 f"{EXTRA_PARAMETERS.get(model_type, 'its own modules')}" for model_type, systems in by_model_type.items()]
    return (f"Parameters against the baseline's {baseline_parameters:,}: {'; '.join(described)}. The added "
            "capacity is part of each method as published; the baseline is not enlarged to match, so a gain could "
            "come from the extra parameters as well as from the linguistic features.")


def last_drop(result: dict) -> float:
    """How much the validation loss fell between the run's last two evaluations (still learning when > 0)."""
    return result["validation_loss_curve"][-2]["eval_loss"] - result["validation_loss_curve"][-1]["eval_loss"]


def last_interval(result: dict) -> int:
    return result["validation_loss_curve"][-1]["step"] - result["validation_loss_curve"][-2]["step"]


def longer_budget(baseline: list[dict], longer: list[dict]) -> str | None:
    """The baseline trained on from its benchmark checkpoint (`benchmark.py --continue_from`): what the budget costs."""
    by_seed = {r["seed"]: r for r in baseline}
    findings = []
    for run in sorted((r for r in longer if r["seed"] in by_seed), key=lambda r: r["seed"]):
        short = by_seed[run["seed"]]

        def described(result: dict) -> str:
            return (f"BLEU {result['test']['bleu']:.2f} ({result['test']['bleu_lowercase_moses_tokenized']:.2f} "
                    f"lowercased tokenized), validation loss {result['validation_loss_curve'][-1]['eval_loss']:.3f} "
                    f"after {result['shared_arguments']['max_steps']} steps ({result['eval_metrics']['epoch']:.2f} epochs)")

        gap_before = PUBLISHED_REFERENCE_BLEU - short["test"]["bleu_lowercase_moses_tokenized"]
        gap_after = PUBLISHED_REFERENCE_BLEU - run["test"]["bleu_lowercase_moses_tokenized"]
        findings.append(f"seed {run['seed']}: {described(run)}, against {described(short)}; the gap to the "
                        f"reference's {PUBLISHED_REFERENCE_BLEU} shrinks from {gap_before:.2f} to {gap_after:.2f}, "
                        f"and the validation loss was still falling by {last_drop(run):.3f} over the last "
                        f"{last_interval(run)} steps")
    if not findings:
        return None
    steps = longer[0]["shared_arguments"]["max_steps"]
    seeds = " ".join(str(r["seed"]) for r in sorted(longer, key=lambda r: r["seed"]))
    command = (f"python -m benchmarks.benchmark run --systems baseline --seeds {seeds} --shared_overrides "
               f"'{{\"max_steps\": {steps}}}' --continue_from runs/benchmark --tokenizer runs/benchmark/tokenizer "
               "--runs_dir runs/benchmark_longer_budget "
               "--results_dir benchmarks/results/benchmark_longer_budget")
    return (f"The baseline trained on with everything else equal (`{command}`, which continues the benchmark run "
            f"from its last checkpoint): {'; '.join(findings)}.")


def baseline_against_reference(baseline: list[dict]) -> str:
    """The baseline next to a published Multi30k number, in that number's metric, and what the gap comes from."""
    tokenized = [r["test"].get("bleu_lowercase_moses_tokenized") for r in baseline]
    if None in tokenized:
        return (f"Published reference: {PUBLISHED_REFERENCE[0]}: {PUBLISHED_REFERENCE[1]}. Run "
                "`python -m benchmarks.benchmark rescore` to add the baseline's score in that metric.")
    epochs = statistics.mean(r["eval_metrics"]["epoch"] for r in baseline)
    last_drops = [last_drop(r) for r in baseline]
    interval = last_interval(baseline[0])
    return (
        f"Baseline against a published reference: {PUBLISHED_REFERENCE[0]}: {PUBLISHED_REFERENCE[1]}. In that "
        f"metric (lowercased, Moses-tokenized, `bleu_lowercase_moses_tokenized`) our baseline scores "
        f"{mean_and_spread(tokenized)}, so the metric explains almost nothing of the gap (sacreBLEU lowercased: "
        f"{mean_and_spread([r['test']['bleu_lowercase'] for r in baseline])}). The likely cause is the budget: every system "
        f"trains {epochs:.2f} epochs, sized so that a run fits this 2-core CPU, and the baseline's validation loss "
        f"was still falling by {statistics.mean(last_drops):.3f} over its last {interval} steps, i.e. the runs "
        "stop long before convergence. The benchmark therefore compares the methods at one equal, small budget; "
        "it does not show what they reach when trained to convergence.")


def loss_by_step(result: dict) -> dict[int, float]:
    return {point["step"]: point["eval_loss"] for point in result["validation_loss_curve"]}


def plot_validation_loss(by_system: dict[str, list[dict]], output: Path) -> None:
    """Left: each system's validation loss (mean over seeds). Right: its difference to the baseline run of the same
    seed, where systems that lie on top of each other on the left can be told apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    baseline_by_seed = {r["seed"]: loss_by_step(r) for r in by_system["baseline"]}
    figure, (losses, differences) = plt.subplots(1, 2, figsize=(11, 4.5))
    for system, results in by_system.items():
        curves = {r["seed"]: loss_by_step(r) for r in results}
        steps = sorted(set.intersection(*(set(curve) for curve in curves.values())))
        losses.plot(steps, [statistics.mean(curve[step] for curve in curves.values()) for step in steps],
                    marker="o", markersize=3, label=system)
        paired = [seed for seed in curves if seed in baseline_by_seed]
        steps = [step for step in steps if all(step in baseline_by_seed[seed] for seed in paired)]
        if paired:
            differences.plot(steps, [statistics.mean(curves[seed][step] - baseline_by_seed[seed][step]
                                                     for seed in paired) for step in steps],
                             marker="o", markersize=3, label=system)
    losses.set_xlabel("training step")
    losses.set_ylabel("validation loss (label-smoothed, mean over seeds)")
    losses.legend(fontsize=7)
    differences.axhline(0.0, color="grey", linewidth=0.8)
    differences.set_xlabel("training step")
    differences.set_ylabel("minus the baseline's of the same seed (mean)")
    figure.tight_layout()
    figure.savefig(output, dpi=120)
    plt.close(figure)


def minute_range(seconds: list[float]) -> str:
    low, high = round(min(seconds) / 60), round(max(seconds) / 60)
    return f"{low} minute{'' if low == 1 else 's'}" if low == high else f"{low}-{high} minutes"


def minutes(by_system: dict[str, list[dict]]) -> str:
    """Range of training minutes per run; a run resumed from a checkpoint is scaled to the whole budget."""
    seconds = [r["train_seconds"] * r["shared_arguments"]["max_steps"] /
               (r["shared_arguments"]["max_steps"] - r["resumed_from_step"])
               for results in by_system.values() for r in results]
    return minute_range(seconds)


def pretraining_minutes(by_system: dict[str, list[dict]]) -> str:
    """What the pre-trained systems spend before their translation training (not in the table's train time)."""
    seconds_per_seed = [r["pretraining"]["train_seconds"] for results in by_system.values() for r in results
                        if r.get("pretraining", {}).get("train_seconds")]
    if not seconds_per_seed:
        return ""
    return (f" `lfe_dae` first pre-trains its latent feature encoder as a denoising autoencoder: "
            f"{minute_range(seconds_per_seed)} per seed, not counted in its train time.")


def unfinished(by_system: dict[str, list[dict]], systems: list[str], seeds: list[int], results_dir: Path) -> str | None:
    """Which of the planned runs (every system, every seed) have no result file yet."""
    done = {(r["system"], r["seed"]) for results in by_system.values() for r in results}
    missing = [f"{system} seed {seed}" for seed in seeds for system in systems if (system, seed) not in done]
    if not missing:
        return None
    return (f"**Not finished yet**: {len(missing)} of {len(systems) * len(seeds)} planned runs have no result "
            f"({', '.join(missing)}); the table shows the finished ones. Results of runs trained before a change to "
            f"their system are kept in `{display_path(results_dir)}/superseded/`, with the reason.")


def display_path(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def setup_differences(by_system: dict[str, list[dict]]) -> list[str]:
    """How these results' set-up differs from the benchmark's (its shared set-up, every system, every seed, the whole
    test set); empty when they are the benchmark's."""
    from benchmarks.benchmark import SEEDS, SHARED_ARGUMENTS, SYSTEMS, TEST_SENTENCES

    results = [r for runs in by_system.values() for r in runs]
    overridden: dict[str, set[str]] = defaultdict(set)
    for r in results:
        # The parse files of --source_parses are an input, not a change to the set-up.
        shared = {key: value for key, value in r["shared_arguments"].items() if not key.endswith("_source_conllu")}
        for key in shared.keys() | SHARED_ARGUMENTS.keys():
            if shared.get(key) != SHARED_ARGUMENTS.get(key):
                overridden[key].add(json.dumps(shared.get(key)))
    differences = []
    if overridden:
        differences.append("trained with shared_overrides (" + ", ".join(
            f"{key} {' / '.join(sorted(values))}" for key, values in sorted(overridden.items())) + ")")
    seeds = sorted({r["seed"] for r in results})
    if not set(SEEDS) <= set(seeds):
        differences.append(f"seeds {', '.join(map(str, seeds))} (the benchmark's: {', '.join(map(str, SEEDS))})")
    missing = [system for system in SYSTEMS if system not in by_system]
    if missing:
        differences.append(f"no result of {', '.join(missing)}")
    partial = sorted({r["test_sentences"] for r in results if r.get("test_sentences") != TEST_SENTENCES},
                     key=str)
    if partial:
        differences.append(f"scored on {', '.join(map(str, partial))} test sentences (the benchmark: all "
                           f"{TEST_SENTENCES})")
    return differences


def hardware(baseline: dict, shared: dict) -> str:
    """Where the runs trained, and what that means for the speeds in their files. How the runs were scheduled (one at
    a time or side by side) is not in the result files, so it is not stated."""
    if shared.get("use_cpu", True):
        return ("The training runs themselves are not compared for speed: the machine's load may have changed from run "
                "to run (each result file records its own throughput). "
                f"{baseline['torch_threads']} torch thread(s) per run")
    precision = "bf16" if shared.get("bf16") else "fp16" if shared.get("fp16") else "fp32"
    return (f"Trained and decoded on one GPU ({baseline['decoding_device']}, {precision}), the runs side by side on "
            "it, so their times are not compared")


def report(by_system: dict[str, list[dict]], plot_name: str, planned_seeds: list[int], speed_file: Path | None,
           longer_baselines: list[dict] | None = None, planned_systems: list[str] | None = None,
           results_dir: Path = REPO / "benchmarks" / "results" / "benchmark") -> str:
    from benchmarks.benchmark import SYSTEMS

    baseline = by_system["baseline"][0]
    shared = baseline["shared_arguments"]
    source_lang, target_lang = shared.get("source_lang", "en"), shared.get("target_lang", "de")
    seeds = sorted({r["seed"] for results in by_system.values() for r in results})
    status = unfinished(by_system, planned_systems or list(SYSTEMS), planned_seeds, results_dir)
    extra_parameters = capacity(by_system)
    longer = longer_budget(by_system["baseline"], longer_baselines or [])
    speed = load_speed(speed_file) if speed_file else NO_SPEED
    times = ("Times are relative to the baseline (time per training target token, per decoded "
             "sentence; 1.50x = 50% slower, the papers' convention), from the interleaved speed run below, in which "
             "the systems take turns on the same batches. ") if speed_file else ""
    annotator = (f" Sources parsed by spaCy `{shared['spacy_model']}`." if shared.get("annotator") == "spacy"
                 else "")
    lines = [
        *([status, ""] if status else []),
        f"Multi30k {source_lang}→{target_lang}, test_2016_flickr ({baseline['test_sentences']} sentences), beam 4; every system trained "
        f"for {shared['max_steps']} steps of {shared['per_device_train_batch_size']} sentence pairs with the same "
        f"tokenizer, model size (d_model {shared['d_model']}, {shared['encoder_layers']}+{shared['decoder_layers']} "
        f"layers, {shared['attention_heads']} heads), optimiser and schedule; seeds {', '.join(map(str, seeds))} (each "
        f"result file records the code version that produced it). BLEU: sacreBLEU `{baseline['test']['bleu_signature']}`; "
        "BLEU lc: the same, lowercased; Δ BLEU: mean over seeds of the difference to the baseline run of the "
        "same seed; p: paired bootstrap resampling against the baseline of the same seed "
        f"(1000 samples).{annotator} {times}{hardware(baseline, shared)}; training took "
        f"{minutes(by_system)} per run (resumed runs scaled to the whole budget).{pretraining_minutes(by_system)}",
        "",
        results_table(by_system, speed),
        "",
        *outcomes(by_system),
        "",
        *([extra_parameters, ""] if extra_parameters else []),
        *([*overhead_section(speed), ""] if speed_file else []),
        f"![validation loss]({plot_name})",
        "",
        # The published reference is an en→de figure.
        *([baseline_against_reference(by_system["baseline"])] if (source_lang, target_lang) == ("en", "de") else []),
        *(["", longer] if longer else []),
        "",
        f"Generated by `python -m benchmarks.benchmark_report` from `{display_path(results_dir)}/*.json`.",
    ]
    return "\n".join(lines)


def run_label(run: str) -> str:
    """`deps_san/seed1` -> `deps_san seed 1`, as the README's tables name runs."""
    system, _, seed = run.rpartition("/seed")
    return f"{system} seed {seed}"


def run_order(run: str) -> tuple[bool, str]:
    """Sort key of runs (`system/seedK`) in the README's tables: the baseline first, then by name."""
    return not run.startswith("baseline/"), run


def replace_readme_section(readme: Path, text: str, start: str = README_START, end: str = README_END) -> None:
    """Replace what lies between the `start` and `end` markers; the rest of the README is kept as it is."""
    content = readme.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{readme} has no {start} ... {end} section to replace.")
    before, rest = content.split(start, 1)
    _, after = rest.split(end, 1)
    write_text_atomically(readme, f"{before}{start}\n{text}\n{end}{after}")


def plot_link(plot: Path, page: Path) -> str:
    """The plot as the page links it: the docs build copies the benchmark's plot beside its results page."""
    if page.resolve().is_relative_to(REPO / "docs"):
        return plot.name
    return os.path.relpath(plot.resolve(), page.resolve().parent)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results_dir", type=Path, default=REPO / "benchmarks" / "results" / "benchmark")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "benchmark_report.md")
    parser.add_argument("--update_docs", "--update_readme", dest="update_docs", action="store_true",
                        help="also write the results section into --docs_page")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2], help="the seeds every system should have")
    parser.add_argument("--systems", nargs="+", default=None, help="the systems planned (default: all of benchmark.py)")
    parser.add_argument("--speed_results", type=Path,
                        default=REPO / "benchmarks" / "results" / "speed_benchmark_systems.json",
                        help="benchmark_speed.py --benchmark_systems output (the overhead table); 'none': no speed")
    parser.add_argument("--longer_budget_dir", type=Path,
                        default=REPO / "benchmarks" / "results" / "benchmark_longer_budget",
                        help="results of baselines trained on past the benchmark's budget (benchmark.py "
                             "--continue_from); 'none': not shown")
    parser.add_argument("--docs_page", "--readme", dest="docs_page", type=Path, default=DOCS_PAGE)
    parser.add_argument("--allow_other_setup", action="store_true", help=(
        "with --update_docs: write the docs page although the results are not the benchmark's set-up "
        "(shared_overrides, fewer seeds or systems, part of the test set), e.g. into a page of their own"))
    args = parser.parse_args(argv)
    speed_file = None if str(args.speed_results) == "none" else args.speed_results
    by_system = load_results(args.results_dir)
    differences = setup_differences(by_system) if args.update_docs and not args.allow_other_setup else []
    if differences:  # checked before anything is written: the docs page publishes the benchmark's results only
        parser.error(f"--update_docs: {display_path(args.results_dir)} is not the benchmark's set-up: "
                     f"{'; '.join(differences)}. Pass --allow_other_setup to write {display_path(args.docs_page)} "
                     "from it anyway.")
    longer_baselines = (load_results(args.longer_budget_dir).get("baseline", [])
                        if str(args.longer_budget_dir) != "none" and args.longer_budget_dir.exists() else [])
    plot = args.output.with_suffix(".png")
    plot_validation_loss(by_system, plot)
    options = {"longer_baselines": longer_baselines, "planned_systems": args.systems, "results_dir": args.results_dir}
    text = report(by_system, plot.name, args.seeds, speed_file, **options)
    write_text_atomically(args.output, text + "\n")
    if args.update_docs:
        replace_readme_section(args.docs_page, report(by_system, plot_link(plot, args.docs_page), args.seeds,
                                                      speed_file, **options))
    print(text)
    return text


if __name__ == "__main__":
    main()
