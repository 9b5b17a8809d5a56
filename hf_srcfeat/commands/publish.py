#!/usr/bin/env python
"""Turn a trained run into a Hugging Face Hub repository folder, then upload it or serve it from a git mirror.

    hf-srcfeat-publish runs/deps_san_multi30k_en_de --repo_id hf-srcfeat/deps-san-multi30k-en-de \\
        --output runs/publish/deps-san-multi30k-en-de --dry-run          # build the folder only
    ... --upload                                                         # HfApi.upload_folder, token: $HF_TOKEN
    ... --mirror /srv/hf-mirrors                                          # commit into <mirror>/models/<org>/<name>

The folder holds the weights (safetensors), config, generation config, the tokenizer with its feature
vocabularies, the model card rendered from `hf_srcfeat/model_cards/<model_type>.md` as README.md, and the model and
tokenizer code for `trust_remote_code=True` loading (flat sibling modules, registered with `auto_map`).
The card's results come from the benchmark's result files (`--benchmark_system`) or, failing that, from the
run's own `results.json`; they are never typed by hand. A non-empty output folder is never overwritten, and an
output inside the mirror repository (whose files the commit replaces) is refused.
The card's language pair, data, test sets, metrics (with their sacreBLEU signatures), model type and size come from
the run (`--language`, `--dataset` override them). `--registry FILE` also records the publication in FILE;
`python -m benchmarks.model_zoo` passes the project's registry, from which it makes the documentation's model
zoo table; a user's publication records nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from hf_srcfeat.commands import run_as_script
from hf_srcfeat.commands.average_checkpoints import checkpoint_step
from hf_srcfeat.integrations.ctranslate2 import is_export
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically, write_text_atomically

if TYPE_CHECKING:  # the model code loads when a model is published, not for --help
    from hf_srcfeat.tokenization_pretrained_source_features import PretrainedSourceFeatureTokenizer

#: The source checkout this module runs from (the benchmark's results live there; a wheel install has none).
REPO = Path(__file__).resolve().parents[2]
CARD_TEMPLATES = Path(__file__).resolve().parents[1] / "model_cards"
LICENSE = "apache-2.0"


def run_results(run_dir: Path, benchmark_dir: Path | None, system: str | None) -> dict | None:
    """Test-set scores of this checkpoint: from the benchmark's result file of `system` for the run's seed (with
    the mean over every seed of that system), else from the run's own `results.json`."""
    path = run_dir / "results.json"
    run = json.loads(path.read_text()) if path.exists() else {}
    if system and benchmark_dir is not None:
        files = sorted(benchmark_dir.glob(f"{system}_seed*.json"))
        if not files:
            raise SystemExit(f"no benchmark result files {system}_seed*.json in {benchmark_dir}.")
        by_seed = {result["seed"]: result for result in (json.loads(file.read_text()) for file in files)}
        if run.get("seed") not in by_seed:
            raise SystemExit(f"{run_dir} is not one of the benchmark runs of {system!r} (seeds {sorted(by_seed)}; "
                             f"the run's results.json says seed {run.get('seed')}).")
        own = by_seed[run["seed"]]["test"]
        seeds = sorted(by_seed)
        against_baseline = {"against_baseline": {
            "baseline_bleu": own["significance_vs_baseline"]["baseline_bleu"],
            "p_value": round(own["significance_vs_baseline"]["p_value"], 4)}} if "significance_vs_baseline" in own else {}
        measured = (f"Multi30k en→de test_2016_flickr ({by_seed[run['seed']].get('test_sentences', 1000):,} "
                    f"sentences), beam {by_seed[run['seed']].get('test_num_beams', 4)}")
        return {"source": f"hf_srcfeat benchmark, system `{system}`, seed {run['seed']}", "measured": measured,
                **against_baseline,
                "bleu": own["bleu"], "bleu_lowercase": own["bleu_lowercase"], "chrf": own["chrf"],
                "bleu_signature": own["bleu_signature"], "system": system, "seed": run["seed"],
                "trained_by": benchmark_command(system, by_seed[run["seed"]]),
                "mean_over_seeds": {
                    "seeds": seeds,
                    "bleu": round(statistics.mean(by_seed[seed]["test"]["bleu"] for seed in seeds), 2),
                    "chrf": round(statistics.mean(by_seed[seed]["test"]["chrf"] for seed in seeds), 2)}}
    metrics = run.get("test_metrics") or {}
    if "test_bleu" in metrics:
        setup = run.get("test_setup")
        measured = (f"{setup['set']} ({setup['sentences']:,} sentences), {decoding_settings(setup)}" if setup else
                    "Multi30k test_2016_flickr; the number of sentences and the beam were not recorded by this run")
        return {"source": "this run's `results.json` (hf-srcfeat-train)", "measured": measured,
                "bleu": round(metrics["test_bleu"], 2), "chrf": round(metrics["test_chrf"], 2),
                "bleu_signature": (setup or {}).get("bleu_signature", "not recorded by this run")}
    return None


def results_section(results: dict | None) -> str:
    if results is None:
        return "\n\nNot measured: no benchmark result and no test metrics were found for this run.\n"
    measured = results.get("measured", "Multi30k en→de test_2016_flickr (1,000 sentences), beam 4")
    text = (f"\n\n{measured}: sacreBLEU {results['bleu']}, chrF {results['chrf']}"
            f"{', lowercased BLEU ' + str(results['bleu_lowercase']) if 'bleu_lowercase' in results else ''} "
            f"(from {results['source']}; BLEU signature `{results['bleu_signature']}`).")
    if "against_baseline" in results:
        baseline = results["against_baseline"]
        text += (f" The baseline trained with the same seed, size, data and budget scores {baseline['baseline_bleu']} "
                 f"(difference {results['bleu'] - baseline['baseline_bleu']:+.2f} BLEU; paired bootstrap resampling, "
                 f"p = {baseline['p_value']:.3f}).")
    if "mean_over_seeds" in results:
        mean = results["mean_over_seeds"]
        text += (f" Mean over the benchmark's seeds {', '.join(map(str, mean['seeds']))}: sacreBLEU {mean['bleu']}, "
                 f"chrF {mean['chrf']}; the comparison with the baseline and the other methods is the results "
                 "table of the hf_srcfeat documentation.\n\nThis checkpoint was trained by "
                 f"`{results['trained_by']}` (the benchmark's shared size, data, optimiser and budget"
                 f"{', with the overrides named' if '--shared_overrides' in results['trained_by'] else ''}).")
    return text + "\n"


def benchmark_command(system: str, result: dict) -> str:
    """The command that trained a benchmark run, with the shared set-up's settings its result file records otherwise
    than the benchmark (`--shared_overrides`); the parse files of `--source_parses` are inputs, not settings."""
    command = f"python -m benchmarks.benchmark run --systems {system} --seeds {result['seed']}"
    try:  # a source checkout's benchmark (the results it publishes live there too)
        from benchmarks.benchmark import SHARED_ARGUMENTS
    except ImportError:
        return command
    recorded = result.get("shared_arguments") or {}
    overrides = {key: recorded.get(key) for key in sorted(recorded.keys() | SHARED_ARGUMENTS.keys())
                 if recorded.get(key) != SHARED_ARGUMENTS.get(key) and not key.endswith("_source_conllu")}
    return command + (f" --shared_overrides '{json.dumps(overrides)}'" if recorded and overrides else "")


def decoding_settings(setup: dict) -> str:
    """The decoding a test was scored with, as its record says: the beam (or sampling) and the settings that change
    what it finds."""
    if setup.get("do_sample"):
        parts = ["sampling"] + [f"{name} {setup[name]}" for name in ("top_k", "top_p", "temperature") if name in setup]
    else:
        parts = [f"beam {setup.get('num_beams', '?')}"]
        if setup.get("length_penalty") not in (None, 1.0):  # Transformers' default: beam scores are mean log-probs
            parts.append(f"length_penalty {setup['length_penalty']}")
    if setup.get("no_repeat_ngram_size"):
        parts.append(f"no_repeat_ngram_size {setup['no_repeat_ngram_size']}")
    if setup.get("repetition_penalty") not in (None, 1.0):
        parts.append(f"repetition_penalty {setup['repetition_penalty']}")
    if setup.get("early_stopping") is True and not setup.get("do_sample"):
        parts.append("early_stopping")
    return ", ".join(parts)


def read_json(folder: Path | None, name: str) -> dict:
    path = folder / name if folder is not None else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def run_facts(run_dir: Path | None, languages: list[str] | None = None, datasets: list[str] | None = None,
              parameters: int | None = None) -> dict:
    """What the card says about this model, from the run's own `config.json` and `results.json` (language pair,
    data, test sets, size, steps); `languages` and `datasets` override what the run recorded. For a model averaged
    from checkpoints (`averaged_from.json`), the run's record is its checkpoints' run folder's."""
    run, config = read_json(run_dir, "results.json"), read_json(run_dir, "config.json")
    checkpoints = [Path(path) for path in read_json(run_dir, "averaged_from.json").get("checkpoints", [])]
    # The averaged checkpoints' run trained on what this model was (its tests scored its last model, not this one).
    trained = run or (read_json(checkpoints[-1].parent, "results.json") if checkpoints else {})
    data = trained.get("data_args") or {}
    pair = languages or [language for language in (data.get("source_lang"), data.get("target_lang")) if language]
    # The tokenizer's settings: its own file, or a wrapped checkpoint tokenizer's (source_features_config.json).
    tokenizer_settings = [read_json(run_dir, "tokenizer_config.json"), read_json(run_dir, "source_features_config.json")]
    source_language = None if pair else next((found["language"] for found in tokenizer_settings
                                              if found.get("language")), None)
    # hf-srcfeat-train reads Multi30k when given no file and no other dataset.
    multi30k = datasets is None and bool(data) and not data.get("train_file") and \
        data.get("dataset_name") in (None, "multi30k")
    if datasets is None:
        datasets = [data["dataset_name"]] if data.get("dataset_name") not in (None, "multi30k") else []
    files = [Path(name).name for name in (data.get("train_file"),) if name]
    variant = {name: config[name] for name in ("relevance_combine", "diverse_variant", "phrase_segmentation",
                                               "components") if config.get(name) not in (None, [], "")}
    parser = next((found["annotator_settings"] for found in tokenizer_settings if found.get("annotator_settings")),
                  None)
    tests = {name: entry for name, entry in (run.get("test_sets") or {}).items() if "test_bleu" in entry["metrics"]}
    if not tests and "test_bleu" in (run.get("test_metrics") or {}):
        tests = {"test": {"metrics": run["test_metrics"], "setup": run.get("test_setup") or {}}}
    return {"languages": pair, "source_language": source_language, "datasets": datasets, "train_files": files,
            "multi30k": multi30k, "model_type": config.get("model_type"), "variant": variant,
            "parameters": parameters or run.get("num_parameters"), "steps": run.get("global_step"),
            "train_examples": trained.get("train_examples"),
            "init_from": (trained.get("model_args") or {}).get("init_from"), "tests": tests, "parser": parser,
            "averaged_steps": [path.name if step is None else step for path, step in
                               ((path, checkpoint_step(path)) for path in checkpoints)]}


def this_model_section(facts: dict) -> str:
    """The card's "This model" section: the facts of this checkpoint, each from the run."""
    pair = "→".join(facts["languages"]) or (f"from {facts['source_language']} (the target language is not "
                                            "recorded)" if facts.get("source_language") else "not recorded by the run")
    data = ", ".join(["Multi30k train"] * bool(facts.get("multi30k")) + facts["datasets"] + facts["train_files"]) \
        or "not recorded by the run"
    lines = [f"- **Language pair:** {pair}", f"- **Training data:** {data}"
             + (f" ({facts['train_examples']:,} sentence pairs)" if facts.get("train_examples") else ""),
             f"- **Model type:** `{facts['model_type']}`"
             + (" (" + ", ".join(f"`{name}`: {value}" for name, value in facts["variant"].items()) + ")"
                if facts["variant"] else "")]
    if facts.get("parameters"):
        lines.append(f"- **Parameters:** {facts['parameters']:,}")
    if facts.get("steps"):
        lines.append(f"- **Training steps:** {facts['steps']:,}")
    if facts.get("averaged_steps"):
        steps = facts["averaged_steps"]
        named = ", ".join(f"{step:,}" if isinstance(step, int) else str(step) for step in steps)
        lines.append(f"- **Weights:** the mean of {len(steps)} checkpoints of its training run "
                     f"({'steps ' if all(isinstance(step, int) for step in steps) else ''}{named}; "
                     "hf-srcfeat-average-checkpoints)")
    if facts.get("init_from"):
        lines.append(f"- **Started from:** {checkpoint_name(facts['init_from'])}")
    parsing = parser_line(facts.get("parser"))
    if parsing:
        lines.append(parsing)
    for name, test in facts["tests"].items():
        setup, metrics = test.get("setup") or {}, test["metrics"]
        signature = setup.get("bleu_signature")
        lines.append(f"- **{setup.get('set', name)}** ({setup.get('sentences', '?')} sentences, "
                     f"{decoding_settings(setup)}): sacreBLEU {metrics['test_bleu']:.2f}, chrF "
                     f"{metrics.get('test_chrf', float('nan')):.2f}" + (f" (`{signature}`)" if signature else ""))
    return "## This model\n\n" + "\n".join(lines) + "\n\n"


def parser_line(settings: dict | None) -> str | None:
    """The card's line on the parser of raw source text where it is not the examples' (the method descriptions show
    English sentences parsed by Stanza): its backend, language and what to install."""
    if not settings or (settings.get("backend", "stanza"), settings.get("language", "en")) == ("stanza", "en"):
        return None
    language = settings.get("language") or "the source language"
    if settings.get("backend") == "spacy":
        model = str(settings.get("model"))
        install = f"`python -m spacy download {model}`" if "/" not in model and "\\" not in model else \
            "a copy of the pipeline folder it was trained with"
        parser = f"spaCy pipeline `{Path(model).name}` ({language}; install it: {install})"
    else:
        parser = f"{settings.get('backend', 'stanza')} ({language} models)"
    return (f"- **Source parsing:** {parser}. The examples below show English sentences parsed by Stanza: give "
            f"sentences in {language}, which this parser reads.")


def checkpoint_name(init_from: str) -> str:
    """How a card names the checkpoint a run started from: a Hub id as it is (also when it was given as its folder in
    the Hub cache, `models--org--name`); a folder of the trainer's machine by its name alone, whose full path would
    mean nothing to the card's readers."""
    for part in reversed(Path(init_from).parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return f"`{part[len('models--'):].replace('--', '/', 1)}`"
    if Path(init_from).exists() or Path(init_from).is_absolute() or init_from.startswith((".", "~")) \
            or init_from.count("/") != 1:
        return f"a local checkpoint (`{Path(init_from).name}`)"
    return f"`{init_from}`"


def card_metadata(template_metadata: dict, repo_id: str, facts: dict, results: dict | None) -> str:
    """The card's YAML through `huggingface_hub.ModelCardData`, the results as its eval results."""
    from huggingface_hub import EvalResult, ModelCardData

    pair = "→".join(facts["languages"])
    languages = facts["languages"] or [facts["source_language"]] * bool(facts.get("source_language"))
    evaluations: list[EvalResult] = []
    for name, test in facts["tests"].items():
        set_name = (test.get("setup") or {}).get("set", name)
        for metric, label in (("bleu", "sacreBLEU"), ("chrf", "chrF")):
            if f"test_{metric}" in test["metrics"]:
                evaluations.append(EvalResult(
                    task_type="translation", task_name=f"Translation {pair}".strip(),
                    dataset_type=facts["datasets"][0] if facts["datasets"] else name, dataset_name=set_name,
                    dataset_split="test", metric_type=metric, metric_name=label,
                    metric_value=round(test["metrics"][f"test_{metric}"], 2)))
    if results is not None and "system" in results:  # the benchmark's own result file, not the run's
        evaluations = [EvalResult(task_type="translation", task_name="Translation en→de", dataset_type="multi30k",
                                  dataset_name="Multi30k test_2016_flickr", dataset_split="test", metric_type=metric,
                                  metric_name=label, metric_value=results[metric])
                       for metric, label in (("bleu", "sacreBLEU"), ("chrf", "chrF"))]
    data = ModelCardData(
        language=languages or None, license=LICENSE, library_name=template_metadata.get("library_name"),
        pipeline_tag=template_metadata.get("pipeline_tag"), tags=template_metadata.get("tags"),
        datasets=facts["datasets"] or None, metrics=["bleu", "chrf"], model_name=repo_id.split("/")[-1],
        eval_results=evaluations or None)
    return data.to_yaml()


def render_card(template: str, repo_id: str, results: dict | None, facts: dict | None = None) -> str:
    """The card: metadata, a "This model" section and the results from the run (`run_facts`), the method's
    description from its template, and the repo id."""
    facts = facts or run_facts(None)
    _, front_matter, body = template.split("---", 2)
    metadata = yaml.safe_load(front_matter)
    body = body.replace("<this repository>", repo_id)
    head, rest = body.split("## Results", 1)
    tail = rest[rest.index("\n## "):] if "\n## " in rest else ""
    first_section = head.find("\n## ")
    head = head if first_section < 0 else head[:first_section + 1] + this_model_section(facts) + head[first_section + 1:]
    return "---\n" + card_metadata(metadata, repo_id, facts, results) + "\n---" + head + "## Results" + \
        results_section(results) + tail


def build_repository(run_dir: Path, repo_id: str, output: Path, results: dict | None,
                     languages: list[str] | None = None, datasets: list[str] | None = None) -> Path:
    if output.exists() and not output.is_dir():
        raise SystemExit(f"--output {output} is a file; name a folder to build the repository in.")
    if output.exists() and any(output.iterdir()):
        raise SystemExit(f"{output} is not empty; choose another --output (nothing is overwritten).")
    if not (run_dir / "config.json").is_file():
        raise SystemExit(f"hf-srcfeat-publish: {run_dir} has no config.json; give a trained model folder "
                         "(hf-srcfeat-train's output_dir, or hf-srcfeat-average-checkpoints' output).")
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat.pipeline_translation import pipeline
    from hf_srcfeat.tokenization_pretrained_source_features import (
        PretrainedSourceFeatureTokenizer,
        load_tokenizer,
    )

    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir)
    tokenizer = load_tokenizer(run_dir)
    # auto_map entries + code files, so that the repository loads with trust_remote_code=True alone.
    type(model.config).register_for_auto_class()
    type(model).register_for_auto_class("AutoModelForSeq2SeqLM")
    wrapped = isinstance(tokenizer, PretrainedSourceFeatureTokenizer)  # a run started from a pretrained checkpoint
    if not wrapped:
        type(tokenizer).register_for_auto_class("AutoTokenizer")
    # The translation pipeline ships too (`custom_pipelines` in config.json and its module), so that
    # `transformers.pipeline(model=repo_id, trust_remote_code=True)` translates without hf_srcfeat installed; saving
    # the pipeline saves the model and the tokenizer.
    pipeline("translation", model=model, tokenizer=tokenizer).save_pretrained(output)
    if wrapped:
        ship_wrapped_tokenizer(tokenizer, output)
    else:
        # Transformers 5 no longer writes it, but loaders still ask for it; the same tokens as tokenizer_config.json.
        write_json_atomically(output / "special_tokens_map.json", tokenizer.special_tokens_map)
    template = CARD_TEMPLATES / f"{model.config.model_type}.md"
    if not template.exists():
        raise SystemExit(f"no model card template {template} for model type {model.config.model_type!r}.")
    card = render_card(template.read_text(), repo_id, results,
                       run_facts(run_dir, languages, datasets, model.num_parameters()))
    if getattr(model.config, "converted_from", None):
        card = card.replace("\n## ", f"\nStarted from a pretrained {model.config.converted_from} checkpoint, converted into the "
                            "zoo's backbone, with this method grafted on (the documentation's guide \"Pretrained "
                            "checkpoints\"); its own tokenizer is in `checkpoint_tokenizer/`.\n\n## ", 1)
        # The tokenizer wraps the checkpoint's own: its class comes with the repository's code.
        card = card.replace(f'AutoTokenizer.from_pretrained("{repo_id}")',
                            f'AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)')
        card = card.replace("(`SourceFeatureTokenizer`)", "(`PretrainedSourceFeatureTokenizer`, around the checkpoint's "
                            "own)")
    write_text_atomically(output / "README.md", card)
    return output


def ship_wrapped_tokenizer(tokenizer: PretrainedSourceFeatureTokenizer, output: Path) -> None:
    """The code of a wrapped checkpoint tokenizer and a tokenizer_config.json whose auto_map names it, so that
    `AutoTokenizer.from_pretrained(repo, trust_remote_code=True)` loads it (the checkpoint's own files are in
    `checkpoint_tokenizer/`)."""
    from transformers.dynamic_module_utils import custom_object_save

    custom_object_save(tokenizer, output)  # the module and the flat siblings it imports
    module = type(tokenizer).__module__.rsplit(".", 1)[-1]
    write_json_atomically(output / "tokenizer_config.json", {
        "tokenizer_class": type(tokenizer).__name__,
        "auto_map": {"AutoTokenizer": [f"{module}.{type(tokenizer).__name__}", None]}})


#: Optional files transformers probes for when loading. For a file missing from a local mirror olah answers 401
#: (the Hub: 404), which huggingface_hub reads as "repository not found" and transformers does not catch, so
#: the mirror gets neutral stand-ins: an empty added-tokens map, an empty chat template (a translation tokenizer
#: has none; "" is falsy like None) and a listable, empty chat-template folder.
MIRROR_PLACEHOLDERS = {
    "added_tokens.json": "{}\n",
    "chat_template.jinja": "",
    "additional_chat_templates/README.md": "No chat templates: a translation model (stand-in for mirror serving).\n",
}


def add_mirror_placeholders(repository: Path) -> None:
    for name, content in MIRROR_PLACEHOLDERS.items():
        path = repository / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(path, content)


def check_run_folder(run_dir: Path) -> None:
    """Refuse, in one line, a run folder that is not here (publishing reads the run's results.json: a Hub id is no
    run) or that is a CTranslate2 export."""
    if not run_dir.is_dir():
        raise SystemExit(f"hf-srcfeat-publish: run_dir {run_dir}: no such folder here (publishing reads a trained "
                         "model folder and its results.json; a Hub id is not one).")
    if is_export(run_dir):
        raise SystemExit(f"hf-srcfeat-publish: run_dir {run_dir} is a CTranslate2 export (hf-srcfeat-export-ct2); "
                         "publish the Transformers model it was exported from.")


def check_output_outside_mirror(output: Path, mirror: Path, repo_id: str) -> None:
    """Refuse an --output inside the mirror repository (committing replaces that repository's files, so the folder
    just built would be deleted) or holding it (it would be copied into itself)."""
    repository, built = (mirror / "models" / repo_id).resolve(), output.resolve()
    if built.is_relative_to(repository) or repository.is_relative_to(built):
        raise SystemExit(f"--output {output} {'is inside' if built.is_relative_to(repository) else 'holds'} the "
                         f"mirror repository {repository}, whose files publishing replaces with the built folder; "
                         "build it elsewhere.")


def check_repo_id(repo_id: str) -> None:
    """Refuse what the Hub would refuse (huggingface_hub's own validator: no '..', no '--', no path tricks) and
    anything but org/name, with a message naming the id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise SystemExit(f"--repo_id {repo_id!r} is not a valid Hub repository id: {error}") from error
    if repo_id.count("/") != 1:
        raise SystemExit(f"--repo_id must be org/name, got {repo_id!r}.")


def commit_to_mirror(folder: Path, mirror: Path, repo_id: str) -> Path:
    """Commit the folder as the `main` branch of <mirror>/models/<org>/<name> (a git repository olah serves).
    Only that repository's own files are replaced; a path outside the mirror, or a folder there that is not a git
    repository (someone else's files), is refused before anything is deleted."""
    check_repo_id(repo_id)
    models = (mirror / "models").resolve()
    repository = (models / repo_id).resolve()
    if repository.parent.parent != models:
        raise SystemExit(f"--repo_id {repo_id!r} leads outside the mirror's models folder {models}; refused.")
    if repository.exists() and any(repository.iterdir()) and not (repository / ".git").exists():
        raise SystemExit(f"{repository} exists and is not a mirror repository (no .git); not replacing its files.")
    repository.mkdir(parents=True, exist_ok=True)
    git = ["git", "-c", "user.name=hf_srcfeat publish", "-c", "user.email=publish@hf-srcfeat.invalid"]
    if not (repository / ".git").exists():
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repository, check=True)
    for entry in repository.iterdir():  # the new commit holds exactly the published files
        if entry.name != ".git":  # a symlinked entry is unlinked, never followed
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    shutil.copytree(folder, repository, dirs_exist_ok=True)
    add_mirror_placeholders(repository)
    subprocess.run(git + ["add", "-A"], cwd=repository, check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", f"Publish {repo_id}"], cwd=repository, check=True)
    return repository


def upload(folder: Path, repo_id: str) -> str:
    """Upload with HfApi.upload_folder; returns the new commit's id."""
    from huggingface_hub import HfApi

    token = os.environ.get("HF_TOKEN")
    if not token:
        raise SystemExit("set HF_TOKEN to a Hub token with write access to upload (or use --dry-run / --mirror).")
    api = HfApi(token=token)
    api.create_repo(repo_id, exist_ok=True)
    return api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message="Publish with hf_srcfeat").oid


def record_publication(registry: Path, entry: dict) -> None:
    """Add (or replace, by repo id) the entry in the registry the documentation's model zoo table is made from."""
    entries = json.loads(registry.read_text()) if registry.exists() else []
    entries = [old for old in entries if old["repo_id"] != entry["repo_id"]] + [entry]
    write_json_atomically(registry, sorted(entries, key=lambda e: e["repo_id"]), ensure_ascii=False)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="hf-srcfeat-publish", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a trained model folder (hf-srcfeat-train's output_dir)")
    parser.add_argument("--repo_id", required=True, help="org/name on the Hub")
    parser.add_argument("--output", type=Path, required=True, help="where to build the repository folder")
    parser.add_argument("--benchmark_system", help="take the card's results from this benchmark system")
    parser.add_argument("--benchmark_dir", type=Path, default=REPO / "benchmarks" / "results" / "benchmark",
                        help="the benchmark's result files, for --benchmark_system (default: the project's)")
    parser.add_argument("--registry", type=Path, default=None,
                        help="also record the publication in this JSON list (the project's zoo command passes its "
                             "own; by default nothing is recorded)")
    parser.add_argument("--language", nargs=2, metavar=("SOURCE", "TARGET"), default=None,
                        help="the card's language pair (default: the run's --source_lang/--target_lang)")
    parser.add_argument("--dataset", nargs="+", default=None,
                        help="the card's training datasets as Hub ids (default: the run's --dataset_name, if any)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--dry-run", action="store_true", help="build the folder and stop")
    target.add_argument("--upload", action="store_true", help="upload with HfApi.upload_folder ($HF_TOKEN)")
    target.add_argument("--mirror", type=Path, help="commit into this local mirror folder for self-hosting")
    args = parser.parse_args(argv)
    check_repo_id(args.repo_id)
    check_run_folder(args.run_dir)
    if args.mirror:
        check_output_outside_mirror(args.output, args.mirror, args.repo_id)
    if args.upload and not os.environ.get("HF_TOKEN"):  # before the folder is built: a rerun would find it there
        raise SystemExit("set HF_TOKEN to a Hub token with write access to upload (or use --dry-run / --mirror).")
    results = run_results(args.run_dir, args.benchmark_dir, args.benchmark_system)
    folder = build_repository(args.run_dir, args.repo_id, args.output, results, args.language, args.dataset)
    print(f"built {folder}")
    if args.dry_run:
        return folder
    if args.mirror:
        repository = commit_to_mirror(folder, args.mirror, args.repo_id)
        revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True, text=True,
                                  check=True).stdout.strip()
        destination = "local mirror"
        print(f"committed to {repository}")
    else:
        revision, destination = upload(folder, args.repo_id), "huggingface.co"
        print(f"uploaded {args.repo_id} at {revision}")
    if args.registry is None:
        return folder
    record_publication(args.registry, {
        "repo_id": args.repo_id, "model_type": json.loads((folder / "config.json").read_text())["model_type"],
        "destination": destination, "revision": revision,
        "published": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "code_version": code_version(), "results": results})
    return folder


def cli() -> int:
    """The `hf-srcfeat-publish` console script."""
    return run_as_script(main)


if __name__ == "__main__":
    sys.exit(cli())
