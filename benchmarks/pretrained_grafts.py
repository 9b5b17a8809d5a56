#!/usr/bin/env python
"""Does syntax still help a trained model? Methods grafted onto a pretrained Marian model, against continued
training of that model.

    python -m benchmarks.pretrained_grafts pretrain     # the stand-in checkpoint: MarianMTModel on Multi30k en->de
    python -m benchmarks.pretrained_grafts check        # its conversion again (part of `pretrain`)
    python -m benchmarks.pretrained_grafts adopt        # a pretraining stopped early: its best checkpoint
    python -m benchmarks.pretrained_grafts run --seeds 1 2
    python -m benchmarks.pretrained_grafts report       # the table: results README, docs page, README section

No pretrained checkpoint can be downloaded here, so the stand-in is made the way a user's was: Transformers' own
`MarianMTModel` and `MarianTokenizer` (a joint SentencePiece model of the benchmark's 8,000-token budget), the
benchmark's size, trained with `Seq2SeqTrainer` on Multi30k en->de until the validation loss stops improving
(or `--pretrain_max_steps`). `pretrain` also checks that its conversion into the zoo's backbone translates the test
set exactly as the Marian model does. `run` fine-tunes it, each arm for the benchmark's number of steps with
`hf-srcfeat-train --init_from`: (a) continued training without features, (b) relevance features, (c) Deps-SAN,
(d) the fusing diverse input representation, and (b), (c) again with `--freeze_pretrained`; every arm is scored on
test_2016_flickr (paired bootstrap against (a) of its seed) and translates the blind sets. Results:
`benchmarks/results/pretrained_grafts/` (each with its config, data and code version); run folders under
`runs/pretrained_grafts/`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The stand-in's size: the benchmark's (d_model 256, 3+3 layers, 4 heads, FFN 1024), Marian's post-LayerNorm,
#: swish and scaled, shared and tied embeddings (as OPUS-MT models are).
MARIAN_SIZE = dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, dropout=0.1,
                   activation_function="swish", max_position_embeddings=256, scale_embedding=True)

#: Arm -> (model type, config overrides, freeze the pretrained parameters).
ARMS: dict[str, tuple[str, dict, bool]] = {
    "continued": ("srcfeat_transformer", {}, False),
    "relevance": ("relevance_features", {}, False),
    "deps_san": ("deps_san", {"deps_san_layers": [0]}, False),
    "fusing_diverse": ("diverse_input", {"diverse_variant": "fusing_diverse"}, False),
    "relevance_frozen": ("relevance_features", {}, True),
    "deps_san_frozen": ("deps_san", {"deps_san_layers": [0]}, True),
}

#: Fine-tuning set-up: the benchmark's optimiser and batch; sizes come from the checkpoint. The learning rate goes
#: on from where the stand-in's inverse-square-root schedule left it (5e-4 after 1,600 steps of a 1e-3 peak, with a
#: short warm-up of its own, as the added parameters start from zero), for 400 steps: what every arm gets. No
#: evaluation during training (nothing is selected), the test set decoded once at the end with beam 4.
FINE_TUNING = {
    "source_lang": "en", "target_lang": "de", "max_steps": 400, "per_device_train_batch_size": 64,
    "per_device_eval_batch_size": 64, "learning_rate": 0.0005, "lr_scheduler_type": "inverse_sqrt",
    "warmup_steps": 50, "adam_beta2": 0.98, "weight_decay": 0.0001, "eval_strategy": "no", "save_strategy": "no",
    "logging_steps": 50, "generation_num_beams": 4, "generation_max_length": 64, "predict_with_generate": True,
    "do_predict": True,
    "do_train": True, "do_eval": False, "use_cpu": True, "report_to": "none", "disable_tqdm": True,
}


def train_sentencepiece_tokenizer(folder: Path, sources: list[str], targets: list[str], vocab_size: int):
    """A `MarianTokenizer` over one joint SentencePiece unigram model (as source.spm and target.spm)."""
    import sentencepiece
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.txt").write_text("\n".join(sources + targets), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"), model_prefix=str(folder / "joint"), vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, pad_id=-1, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "joint.model"))
    vocabulary = {processor.id_to_piece(index): index for index in range(processor.get_piece_size())}
    for token in ("</s>", "<pad>"):
        vocabulary.setdefault(token, len(vocabulary))
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    (folder / "corpus.txt").unlink()
    return MarianTokenizer(source_spm=str(folder / "joint.model"), target_spm=str(folder / "joint.model"),
                           vocab=str(folder / "vocab.json"), source_lang="en", target_lang="de")


def pretrain(args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import (
        DataCollatorForSeq2Seq,
        EarlyStoppingCallback,
        MarianConfig,
        MarianMTModel,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
        set_seed,
    )

    from hf_srcfeat.commands.train import code_version
    from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file

    torch.set_num_threads(args.threads)
    set_seed(args.seed)
    folder = args.runs_dir / "marian_multi30k"
    train_pairs = load_multi30k("train", "en", "de", args.data_dir, args.max_train_samples)
    validation = load_multi30k("val", "en", "de", args.data_dir, args.max_eval_samples)
    tokenizer = train_sentencepiece_tokenizer(folder / "tokenizer_work", list(train_pairs["source"]),
                                              list(train_pairs["target"]), args.vocab_size)
    size = {**MARIAN_SIZE, **(json.loads(args.size) if args.size else {})}
    config = MarianConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                          eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id, **size)
    model = MarianMTModel(config)

    def encode(data):
        return Dataset.from_dict(dict(tokenizer(list(data["source"]), text_target=list(data["target"]),
                                                truncation=True, max_length=128)))

    arguments = Seq2SeqTrainingArguments(
        output_dir=str(folder / "training"), max_steps=args.pretrain_max_steps, per_device_train_batch_size=64,
        per_device_eval_batch_size=64, learning_rate=1e-3, lr_scheduler_type="inverse_sqrt", warmup_steps=400,
        adam_beta2=0.98, weight_decay=1e-4, label_smoothing_factor=0.1, eval_strategy="steps",
        eval_steps=args.eval_steps, save_strategy="steps", save_steps=args.eval_steps, save_total_limit=2,
        load_best_model_at_end=True, metric_for_best_model="eval_loss", logging_steps=50, seed=args.seed,
        use_cpu=True, report_to="none", disable_tqdm=True)
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=encode(train_pairs),
                             eval_dataset=encode(validation), processing_class=tokenizer,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
                             callbacks=[EarlyStoppingCallback(early_stopping_patience=args.patience)])
    trainer.train()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = {"code_version": code_version(), "seed": args.seed, "marian_config": config.to_dict(),
              "data_files": [str(multi30k_file(split, lang, args.data_dir)) for split in ("train", "val")
                             for lang in ("en", "de")],
              "vocab_size": len(tokenizer), "pretrain_max_steps": args.pretrain_max_steps,
              "global_step": trainer.state.global_step, "best_eval_loss": trainer.state.best_metric,
              "best_checkpoint": trainer.state.best_model_checkpoint,
              "stopped_early": trainer.state.global_step < args.pretrain_max_steps,
              "log_history": trainer.state.log_history}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    write_json(args.results_dir / "pretrained.json", result)
    return check_conversion(args)


def adopt_best_checkpoint(args: argparse.Namespace) -> dict:
    """A pretraining stopped before its end (the time a session had): its best saved checkpoint by validation loss
    becomes the stand-in, and pretrained.json records the steps it had and that it was stopped."""
    import shutil

    from hf_srcfeat.commands.train import code_version

    folder = args.runs_dir / "marian_multi30k"
    checkpoints = sorted((folder / "training").glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    if not checkpoints:
        raise SystemExit(f"no checkpoint in {folder / 'training'} to adopt.")
    state = json.loads((checkpoints[-1] / "trainer_state.json").read_text())
    best = Path(state.get("best_model_checkpoint") or checkpoints[-1])
    for file in best.iterdir():
        if file.is_file() and not file.name.startswith(("optimizer", "scheduler", "rng_state", "trainer_state",
                                                         "training_args")):
            shutil.copy2(file, folder / file.name)
    config = json.loads((folder / "config.json").read_text())
    result = {"code_version": code_version(), "seed": args.seed, "marian_config": config,
              "vocab_size": config["vocab_size"], "pretrain_max_steps": args.pretrain_max_steps,
              "global_step": state["global_step"], "best_eval_loss": state.get("best_metric"),
              "best_checkpoint": str(best), "stopped_early": False,
              "stopped_by_hand": f"at step {state['global_step']} of at most {args.pretrain_max_steps}: the time "
                                 "this machine had; the best checkpoint by validation loss is the stand-in",
              "log_history": state["log_history"]}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    write_json(args.results_dir / "pretrained.json", result)
    return check_conversion(args)


def check_conversion(args: argparse.Namespace) -> dict:
    """The stand-in's conversion into the zoo's backbone must translate test_2016_flickr as the Marian model
    does (beam 4); the count of identical translations goes into pretrained.json."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.metrics.translation_scores import corpus_scores
    from hf_srcfeat.pretrained_checkpoints import convert_pretrained

    torch.set_num_threads(args.threads)
    folder = args.runs_dir / "marian_multi30k"
    model = MarianMTModel.from_pretrained(folder).eval()
    tokenizer = MarianTokenizer.from_pretrained(folder)
    converted = convert_pretrained(str(folder))
    test = load_multi30k("test_2016_flickr", "en", "de", args.data_dir, args.max_test_samples)
    sources = list(test["source"])
    identical = 0
    translations: list[str] = []
    for start in range(0, len(sources), 50):
        batch = tokenizer(sources[start:start + 50], padding=True, return_tensors="pt")
        with torch.no_grad():
            expected = model.generate(**batch, num_beams=4, max_new_tokens=64)
            got = converted.generate(**batch, num_beams=4, max_new_tokens=64)
        identical += sum(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
        translations += [text.strip() for text in tokenizer.batch_decode(expected, skip_special_tokens=True)]
    result = json.loads((args.results_dir / "pretrained.json").read_text())
    result["conversion_check"] = {"sentences": len(sources), "identical_beam4_translations": identical}
    # The stand-in as it is, before any fine-tuning: what continued training and every graft start from.
    scores = corpus_scores(translations, list(test["target"]))
    result["test_scores"] = {**{name: round(value, 2) if isinstance(value, float) else value
                                for name, value in scores.items()}, "num_beams": 4, "sentences": len(sources)}
    write_json(args.results_dir / "pretrained.json", result)
    if identical != len(sources):
        raise SystemExit(f"the converted model translates {len(sources) - identical} test sentences differently.")
    return result


def write_json(path: Path, data: dict) -> None:
    from hf_srcfeat.safe_writing import write_json_atomically

    write_json_atomically(path, data, default=str)


def write_text(path: Path, text: str) -> None:
    from hf_srcfeat.safe_writing import write_text_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, text)


def run_arms(args: argparse.Namespace) -> None:
    from benchmarks.benchmark import as_argv
    from hf_srcfeat.commands import train
    from hf_srcfeat.commands.translate import main as translate

    checkpoint = args.runs_dir / "marian_multi30k"
    if not (checkpoint / "config.json").exists():
        raise SystemExit(f"no stand-in checkpoint in {checkpoint}: run `python -m benchmarks.pretrained_grafts "
                         "pretrain` first.")
    overrides = json.loads(args.overrides) if args.overrides else {}
    for seed in args.seeds:
        for arm in args.arms:
            result_file = args.results_dir / f"{arm}_seed{seed}.json"
            if result_file.exists():
                continue
            model_type, config_overrides, frozen = ARMS[arm]
            output_dir = args.runs_dir / arm / f"seed{seed}"
            arguments = {**FINE_TUNING, **overrides, "seed": seed, "output_dir": str(output_dir),
                         "overwrite_output_dir": True, "init_from": str(checkpoint), "model_type": model_type}
            if config_overrides:
                arguments["config_overrides"] = config_overrides
            if args.data_dir:
                arguments["data_dir"] = str(args.data_dir)
            results = train.main(as_argv(arguments) + (["--freeze_pretrained"] if frozen else []))
            result = {"arm": arm, "seed": seed, "model_type": model_type, "config_overrides": config_overrides,
                      "freeze_pretrained": frozen, "checkpoint": str(checkpoint), "arguments": arguments,
                      "code_version": results["code_version"], "num_parameters": results["num_parameters"],
                      "train_seconds": results.get("train_seconds"), "test_metrics": results.get("test_metrics")}
            # The test translations are kept with the results: significance against continued training can be
            # computed again without the run folders.
            write_text(predictions_file(args, arm, seed),
                                  (output_dir / "test_predictions.txt").read_text(encoding="utf-8"))
            if arm != "continued":
                significance = significance_against_continued(args, result)
                if significance is not None:
                    result["significance_vs_continued"] = significance
                result["graft_gates"] = graft_gates(output_dir)
            blind = args.results_dir / "blind" / f"{arm}_seed{seed}"
            blind.mkdir(parents=True, exist_ok=True)
            for source in sorted(Path(args.blind_dir).glob("*.en.gz")) if args.blind_dir else []:
                translate(["--model", str(output_dir), "--input", str(source), "--output",
                           str(blind / source.name.replace(".en.gz", ".de")), "--quiet", "--device", "cpu"])
            args.results_dir.mkdir(parents=True, exist_ok=True)
            write_json(result_file, result)
            print(f"{arm} seed {seed}: {result['test_metrics']}", flush=True)


def significance_against_continued(args: argparse.Namespace, result: dict) -> dict | None:
    """Paired bootstrap of an arm's test translations against continued training of the same seed, from the run
    folders (None while that run is missing)."""
    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.metrics.translation_scores import paired_bootstrap

    seed = result["seed"]
    baseline_file = predictions_file(args, "continued", seed)
    arm_file = predictions_file(args, result["arm"], seed)
    if not (baseline_file.exists() and arm_file.exists()):
        return None
    references = list(load_multi30k("test_2016_flickr", "en", "de", args.data_dir,
                                    result["arguments"].get("max_predict_samples"))["target"])
    return paired_bootstrap(baseline_file.read_text(encoding="utf-8").splitlines(),
                            arm_file.read_text(encoding="utf-8").splitlines(), references)


def graft_gates(run_folder: Path) -> dict[str, list[float]]:
    """The learned gates of a grafted model after fine-tuning (0: the added part is unused; 1: the method as
    published), by parameter name."""
    from safetensors import safe_open

    with safe_open(str(run_folder / "model.safetensors"), framework="pt") as weights:
        return {name: [round(value, 6) for value in weights.get_tensor(name).flatten().tolist()]
                for name in weights.keys() if name.endswith(".values") and "gate" in name}


def predictions_file(args: argparse.Namespace, arm: str, seed: int) -> Path:
    """An arm's test_2016_flickr translations, kept in the results folder."""
    return args.results_dir / "predictions" / f"{arm}_seed{seed}.test_2016_flickr.de"


#: Where the runs fine-tuned from an earlier stand-in (same recipe and seed, weights not identical) are kept.
EARLIER_STAND_IN = "earlier_stand_in"


def stand_in_report(args: argparse.Namespace) -> tuple[str, str]:
    """(summary, table) of the result files in `args.results_dir`, the arms fine-tuned from one stand-in
    (significance filled in where a run finished before continued training of its seed did)."""
    results = []
    for path in sorted(args.results_dir.glob("*_seed*.json")):
        result = json.loads(path.read_text())
        if result["arm"] != "continued" and "significance_vs_continued" not in result:
            significance = significance_against_continued(args, result)
            if significance is not None:
                result["significance_vs_continued"] = significance
                write_json(path, result)
        run_folder = args.runs_dir / result["arm"] / f"seed{result['seed']}"
        if result["arm"] != "continued" and "graft_gates" not in result and (run_folder / "model.safetensors").exists():
            result["graft_gates"] = graft_gates(run_folder)
            write_json(path, result)
        results.append(result)
    if not results:
        raise SystemExit(f"no arm results in {args.results_dir}.")
    pretrained = json.loads((args.results_dir / "pretrained.json").read_text())
    seeds = sorted({result["seed"] for result in results})
    by_arm: dict[str, dict[int, dict]] = {}
    for result in results:
        by_arm.setdefault(result["arm"], {})[result["seed"]] = result
    continued = by_arm.get("continued", {})
    rows = ["| arm | model type | trained | " + " | ".join(f"BLEU seed {seed}" for seed in seeds)
            + " | mean | Δ vs continued | p (paired bootstrap, per seed) |", "|---|---|---|" + "---|" * (len(seeds) + 3)]
    for arm in [name for name in ARMS if name in by_arm]:
        runs = by_arm[arm]
        bleus = [runs[seed]["test_metrics"]["test_bleu"] if seed in runs else None for seed in seeds]
        mean = sum(b for b in bleus if b is not None) / max(1, sum(b is not None for b in bleus))
        paired = [continued[seed]["test_metrics"]["test_bleu"] for seed in seeds if seed in runs and seed in continued]
        own = [runs[seed]["test_metrics"]["test_bleu"] for seed in seeds if seed in runs and seed in continued]
        delta = "–" if arm == "continued" or not paired else f"{(sum(own) - sum(paired)) / len(own):+.2f}"
        p_values = "–" if arm == "continued" else ", ".join(
            f"{runs[seed]['significance_vs_continued']['p_value']:.3f}" if "significance_vs_continued" in runs[seed]
            else "–" for seed in seeds if seed in runs)
        first = next(iter(runs.values()))
        trained = "added parameters only" if first["freeze_pretrained"] else "all parameters"
        rows.append(f"| {arm} | `{first['model_type']}` | {trained} | "
                    + " | ".join("–" if b is None else f"{b:.2f}" for b in bleus)
                    + f" | {mean:.2f} | {delta} | {p_values} |")
    if "test_scores" in pretrained:
        scores = pretrained["test_scores"]
        cells = ["the stand-in, not fine-tuned", "`marian`", "–", *[f"{scores['bleu']:.2f}"] * (len(seeds) + 1),
                 "–", "–"]
        rows.insert(2, "| " + " | ".join(cells) + " |")
    table = "\n".join(rows)
    steps = next(iter(results))["arguments"]["max_steps"]
    if pretrained.get("stopped_by_hand"):
        how_long = (f"stopped by hand after {pretrained['global_step']:,} of at most "
                    f"{pretrained['pretrain_max_steps']:,} steps, the time this machine had")
    elif pretrained.get("stopped_early"):
        how_long = f"{pretrained['global_step']:,} steps, until the validation loss stopped improving"
    else:
        evaluations = [entry["eval_loss"] for entry in pretrained["log_history"] if "eval_loss" in entry]
        falling = len(evaluations) > 1 and evaluations[-1] == min(evaluations)
        how_long = (f"{pretrained['global_step']:,} steps, its whole budget"
                    + (" (the time this machine had), the validation loss still falling" if falling else ""))
    check = pretrained.get("conversion_check", {})
    summary = (f"A `MarianMTModel` trained on Multi30k en→de with `Seq2SeqTrainer` ({how_long}; its best checkpoint "
               f"by validation loss, {pretrained['best_eval_loss']:.3f}, is kept) stands in for a pretrained "
               f"checkpoint; its conversion translates {check.get('identical_beam4_translations', '?')} of "
               f"{check.get('sentences', '?')} test sentences exactly as it does (beam 4). Each arm fine-tunes it for "
               f"the same {steps} steps with `hf-srcfeat-train --init_from`; test_2016_flickr, beam 4, sacreBLEU; "
               "p from paired bootstrap resampling against continued training of the same seed.")
    gates = [f"{result['arm']} seed {result['seed']}: " + ", ".join(
                 f"{value:.4f}" for values in result["graft_gates"].values() for value in values)
             for result in results if result.get("graft_gates")]
    if gates:
        summary += (" The gates that mix each grafted part in (0 at the start, 1 = the method as published) ended "
                    "at " + "; ".join(gates) + ".")
    return summary, table


def report(args: argparse.Namespace) -> str:
    """The results tables into the results folder's README, the docs page and the README's section."""
    from benchmarks.benchmark_report import replace_readme_section
    from hf_srcfeat.safe_writing import write_text_atomically

    summary, table = stand_in_report(args)
    page = ("# Methods grafted onto a pretrained model\n\n" + summary + "\n\n" + table + "\n\n"
            "Generated by `python -m benchmarks.pretrained_grafts report` from `benchmarks/results/pretrained_grafts/` "
            "(each file records its arguments, data and code version); blind-set translations are in its `blind/` "
            "folder, test translations in `predictions/`. Made with `python -m benchmarks.pretrained_grafts "
            "pretrain` (or `adopt`, for a pretraining stopped early) and `python -m benchmarks.pretrained_grafts "
            "run`.\n")
    earlier = args.results_dir / EARLIER_STAND_IN
    if any(earlier.glob("*_seed*.json")):
        current = json.loads((args.results_dir / "pretrained.json").read_text())
        first = json.loads((earlier / "pretrained.json").read_text())
        earlier_summary, earlier_table = stand_in_report(argparse.Namespace(**{**vars(args), "results_dir": earlier}))
        page += ("\n## Runs from a first stand-in\n\nA first stand-in, made by the same recipe and seed on another "
                 "machine, differs slightly in its weights (best validation loss "
                 f"{first['best_eval_loss']:.4f} against {current['best_eval_loss']:.4f}, test BLEU "
                 f"{first['test_scores']['bleu']:.2f} against {current['test_scores']['bleu']:.2f}); the runs "
                 f"fine-tuned from it (`{EARLIER_STAND_IN}/`) compare only with each other. " + earlier_summary
                 + "\n\n" + earlier_table + "\n")
        write_text_atomically(earlier / "README.md", "# Methods grafted onto a first stand-in\n\n" + earlier_summary
                              + "\n\n" + earlier_table + "\n")
    write_text_atomically(args.results_dir / "README.md", page)
    if args.docs_page:
        write_text_atomically(args.docs_page, page)
    if args.readme:
        replace_readme_section(args.readme, summary + "\n\n" + table, "<!-- pretrained-grafts:start -->",
                               "<!-- pretrained-grafts:end -->")
    print(page)
    return page


def optional_path(value: str) -> Path | None:
    return Path(value) if value else None


def main(argv: list[str] | None = None) -> int:
    import os

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["pretrain", "adopt", "check", "run", "report"])
    parser.add_argument("--runs_dir", type=Path, default=REPO / "runs" / "pretrained_grafts")
    parser.add_argument("--results_dir", type=Path, default=REPO / "benchmarks" / "results" / "pretrained_grafts")
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    parser.add_argument("--blind_dir", default=os.environ.get("HF_SRCFEAT_MULTI30K_BLIND_DIR"),
                        help="folder of the blind sources *.en.gz (default: $HF_SRCFEAT_MULTI30K_BLIND_DIR)")
    parser.add_argument("--seed", type=int, default=1, help="pretrain: the stand-in's seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="run: fine-tuning seeds")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--vocab_size", type=int, default=8000, help="the SentencePiece budget (the benchmark's)")
    parser.add_argument("--pretrain_max_steps", type=int, default=20000)
    parser.add_argument("--eval_steps", type=int, default=400)
    parser.add_argument("--patience", type=int, default=3, help="evaluations without a lower validation loss")
    parser.add_argument("--size", default=None, help="JSON overrides of MARIAN_SIZE (a smoke test's tiny model)")
    parser.add_argument("--overrides", default=None, help="JSON overrides of FINE_TUNING (a smoke test's budget)")
    parser.add_argument("--max_train_samples", type=int, default=None)
    parser.add_argument("--max_eval_samples", type=int, default=200)
    parser.add_argument("--max_test_samples", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--docs_page", type=optional_path, default=REPO / "docs" / "results" / "pretrained_grafts.md",
                        help="report: the docs page to write (empty: none)")
    parser.add_argument("--readme", type=optional_path, default=REPO / "README.md",
                        help="report: the README whose pretrained-grafts section is replaced (empty: none)")
    args = parser.parse_args(argv)
    if args.command == "pretrain":
        pretrain(args)
    elif args.command == "adopt":
        adopt_best_checkpoint(args)
    elif args.command == "report":
        report(args)
    elif args.command == "check":
        check_conversion(args)
    else:
        run_arms(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
