#!/usr/bin/env python
"""Train a source-feature translation model on Multi30k with Seq2SeqTrainer (cf. Transformers' run_translation.py).

    python training/train.py --output_dir runs/baseline --max_steps 2000 --per_device_train_batch_size 64

Every Seq2SeqTrainingArguments option works. The same script runs unchanged as several processes:
    torchrun --nproc_per_node 2 training/train.py ...      or      accelerate launch training/train.py ...
Arguments can also come from one JSON file: python training/train.py recipe.json
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)

import hf_srcfeat
from hf_srcfeat.annotation import StanzaAnnotator
from hf_srcfeat.evaluation import make_compute_metrics
from hf_srcfeat.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

logger = logging.getLogger("hf_srcfeat.train")

MODEL_CONFIGS = {config_class.model_type: config_class for config_class, _, _ in hf_srcfeat.MODEL_CLASSES}


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Start from this trained model (path or Hub id) instead of a new one."})
    tokenizer_name_or_path: str | None = field(default=None, metadata={
        "help": "Use this tokenizer; by default a joint subword tokenizer is trained on the training data."})
    model_type: str = field(default="srcfeat_transformer", metadata={"help": f"One of {list(MODEL_CONFIGS)}."})
    subword_model: str = field(default="bpe", metadata={"help": "bpe or unigram (for a new tokenizer)."})
    vocab_size: int = field(default=8000, metadata={"help": "Subword vocabulary size (for a new tokenizer)."})
    d_model: int = 256
    encoder_layers: int = 3
    decoder_layers: int = 3
    attention_heads: int = 4
    ffn_dim: int = 1024
    dropout: float = 0.1
    label_smoothing: float = 0.1
    layernorm_position: str = "post"
    config_overrides: str | None = field(default=None, metadata={
        "help": "JSON object of further config arguments, e.g. '{\"attention_dropout\": 0.1}'."})


@dataclass
class DataArguments:
    data_dir: str | None = field(default=None, metadata={
        "help": "Folder with Multi30k {split}.{lang}.gz (default: $HF_SRCFEAT_MULTI30K_DIR, else download)."})
    source_lang: str = "en"
    target_lang: str = "de"
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    max_predict_samples: int | None = None
    max_source_length: int = 128
    max_target_length: int = 128
    do_predict_test: bool = field(default=True, metadata={"help": "Translate and score test_2016_flickr."})
    stanza_dir: str | None = field(default=None, metadata={
        "help": "Stanza resources folder (default: $HF_SRCFEAT_STANZA_DIR, else Stanza's normal download)."})
    annotation_cache: str | None = field(default=None, metadata={
        "help": "SQLite file caching the parses (default: $HF_SRCFEAT_ANNOTATION_CACHE, else ~/.cache/hf_srcfeat)."})
    max_train_minutes: float | None = field(default=None, metadata={
        "help": "Stop training after this many minutes (wall clock), whatever max_steps says."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Allow writing into a non-empty output_dir (otherwise refused, so nothing saved is lost)."})


class TimeBudgetCallback(TrainerCallback):
    """Stops training once a wall-clock budget is spent (the quickstart and benchmark use it)."""

    def __init__(self, minutes: float):
        self.seconds, self.start = minutes * 60.0, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= self.seconds:
            control.should_training_stop = True  # train.py then saves the model as after any training


@functools.cache
def code_version() -> str:
    """Git commit of the code this process runs, taken at the first call (a long benchmark worker keeps the
    code it imported even when the checkout moves on), with '+dirty' when the library, the training scripts or
    pyproject.toml had uncommitted changes; 'unknown' outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                                check=True).stdout.strip()
        # Result files written by the measurement scripts themselves do not make the code dirty.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)hf_srcfeat",
                                ":(top)training", ":(top)pyproject.toml", ":(exclude,top)training/results"],
                               cwd=here, capture_output=True, text=True, check=True).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 over all parameters: equal across processes iff they hold the same model."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_output_dir(training_args: Seq2SeqTrainingArguments, data_args: DataArguments) -> None:
    output_dir = Path(training_args.output_dir)
    if (output_dir.is_dir() and any(output_dir.iterdir()) and not data_args.overwrite_output_dir
            and not training_args.resume_from_checkpoint):
        raise SystemExit(
            f"output_dir {output_dir} is not empty. Pass --overwrite_output_dir to write into it, or "
            "--resume_from_checkpoint to continue a run."
        )


def build_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args, train_data,
                    source_texts: list[str]):
    """Load the given feature-aware tokenizer, or train one on the main process and share it through
    output_dir; either way its annotator parses every source sentence once (cached) before tokenization."""
    annotator = StanzaAnnotator(language=data_args.source_lang, model_dir=data_args.stanza_dir,
                                cache_path=data_args.annotation_cache)
    saved = Path(training_args.output_dir) / "tokenizer.json"
    # The main process annotates and trains first; the others then read its cache and files.
    with training_args.main_process_first(desc="annotation and tokenizer"):
        annotations = annotator.annotate(source_texts, show_progress=training_args.local_process_index == 0)
        if model_args.tokenizer_name_or_path or model_args.model_name_or_path or saved.exists():
            tokenizer = AutoTokenizer.from_pretrained(
                model_args.tokenizer_name_or_path or model_args.model_name_or_path or training_args.output_dir)
            if not isinstance(tokenizer, hf_srcfeat.SourceFeatureTokenizer):
                raise ValueError(f"{type(tokenizer).__name__} is not a SourceFeatureTokenizer; train.py needs the "
                                 "source features (train a new one by leaving --tokenizer_name_or_path out).")
        else:
            tokenizer = train_source_feature_tokenizer(
                list(train_data["source"]), list(train_data["target"]), vocab_size=model_args.vocab_size,
                subword_model=model_args.subword_model, language=data_args.source_lang,
                source_annotations=annotations[:len(train_data)])  # source_texts starts with the train split
            tokenizer.save_pretrained(training_args.output_dir)
    tokenizer.annotator = annotator
    return tokenizer


def feature_vocabulary_arguments(config_class, tokenizer) -> dict[str, int]:
    """The tokenizer's feature vocabulary sizes (`num_lemmas`, ...), for the configs that take them."""
    accepted = inspect.signature(config_class.__init__).parameters
    return {name: size for name, size in tokenizer.feature_vocabularies.sizes().items() if name in accepted}


def build_model(model_args: ModelArguments, tokenizer, seed: int):
    """A new model of `--model_type` initialised from `seed`, or the pretrained `--model_name_or_path`."""
    # Seeded here, not only at start-up: annotating uncached sentences loads Stanza, whose layers draw from the global
    # RNG when built, so without this the initial weights would depend on what the annotation cache held.
    set_seed(seed)
    if model_args.model_name_or_path:
        return AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)
    if model_args.model_type not in MODEL_CONFIGS:
        raise ValueError(f"Unknown --model_type {model_args.model_type!r}; choose from {list(MODEL_CONFIGS)}.")
    overrides = json.loads(model_args.config_overrides) if model_args.config_overrides else {}
    config_class = MODEL_CONFIGS[model_args.model_type]
    overrides = {**feature_vocabulary_arguments(config_class, tokenizer), **overrides}
    config = config_class(
        vocab_size=len(tokenizer), d_model=model_args.d_model,
        encoder_layers=model_args.encoder_layers, decoder_layers=model_args.decoder_layers,
        encoder_attention_heads=model_args.attention_heads, decoder_attention_heads=model_args.attention_heads,
        encoder_ffn_dim=model_args.ffn_dim, decoder_ffn_dim=model_args.ffn_dim, dropout=model_args.dropout,
        label_smoothing=model_args.label_smoothing, layernorm_position=model_args.layernorm_position,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id, **overrides,
    )
    model = AutoModelForSeq2SeqLM.from_config(config)
    if hasattr(model, "load_pretrained_parts"):
        model.load_pretrained_parts()  # e.g. a latent feature encoder pre-trained as a denoising autoencoder
    return model


def parse_arguments(argv: list[str] | None = None):
    parser = HfArgumentParser((ModelArguments, DataArguments, Seq2SeqTrainingArguments))
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=argv)


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    if training_args.do_train:
        check_output_dir(training_args, data_args)
    set_seed(training_args.seed)

    def load(split: str, limit: int | None):
        return load_multi30k(split, data_args.source_lang, data_args.target_lang, data_args.data_dir, limit)

    train_data = load("train", data_args.max_train_samples)
    eval_data = load("val", data_args.max_eval_samples)
    test_data = load("test_2016_flickr", data_args.max_predict_samples)

    source_texts = [text for split in (train_data, eval_data, test_data) for text in split["source"]]
    tokenizer = build_tokenizer(model_args, data_args, training_args, train_data, source_texts)
    model = build_model(model_args, tokenizer, training_args.seed)
    model.generation_config.max_length = training_args.generation_max_length or data_args.max_target_length
    model.generation_config.num_beams = training_args.generation_num_beams or 1

    def tokenize(batch):
        encoded = tokenizer(batch["source"], truncation=True, max_length=data_args.max_source_length)
        encoded["labels"] = tokenizer(text_target=batch["target"], truncation=True,
                                      max_length=data_args.max_target_length)["input_ids"]
        return encoded

    with training_args.main_process_first(desc="tokenization"):
        columns = train_data.column_names
        train_set = train_data.map(tokenize, batched=True, remove_columns=columns, desc="tokenize train")
        eval_set = eval_data.map(tokenize, batched=True, remove_columns=columns, desc="tokenize val")
        test_set = test_data.map(tokenize, batched=True, remove_columns=columns, desc="tokenize test")

    callbacks = [TimeBudgetCallback(data_args.max_train_minutes)] if data_args.max_train_minutes else []
    trainer = Seq2SeqTrainer(
        model=model, args=training_args, train_dataset=train_set, eval_dataset=eval_set,
        processing_class=tokenizer, data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        compute_metrics=make_compute_metrics(tokenizer) if training_args.predict_with_generate else None,
        callbacks=callbacks,
    )

    results: dict = {
        "code_version": code_version(),
        "model_args": asdict(model_args),
        "data_args": asdict(data_args),
        "data_files": [str(multi30k_file(split, lang, data_args.data_dir))
                       for split in ("train", "val", "test_2016_flickr")
                       for lang in (data_args.source_lang, data_args.target_lang)],
        "seed": training_args.seed,
        "num_parameters": model.num_parameters(),
        "config": model.config.to_dict(),
    }
    if training_args.do_train:
        start = time.monotonic()
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        results["train_seconds"] = time.monotonic() - start
        results["train_metrics"] = train_result.metrics
        results["log_history"] = list(trainer.state.log_history)  # a copy: later evaluations append to it
        trainer.save_model()
        if trainer.is_world_process_zero():
            # Trainer pickles its arguments (training_args.bin); keep a JSON copy instead in the model folder.
            Path(training_args.output_dir, "training_args.bin").unlink(missing_ok=True)
            Path(training_args.output_dir, "training_args.json").write_text(training_args.to_json_string())
        if training_args.world_size > 1:
            fingerprint = {"rank": training_args.process_index, "fingerprint": parameter_fingerprint(model)}
            Path(training_args.output_dir, f"parameters_rank{training_args.process_index}.json").write_text(
                json.dumps(fingerprint))
    if training_args.do_eval:
        results["eval_metrics"] = trainer.evaluate(metric_key_prefix="eval")
    if data_args.do_predict_test and training_args.predict_with_generate:
        prediction = trainer.predict(test_set, metric_key_prefix="test")
        results["test_metrics"] = prediction.metrics
        if trainer.is_world_process_zero():
            ids = prediction.predictions
            ids = ids.clip(min=0) if hasattr(ids, "clip") else ids
            hypotheses = tokenizer.batch_decode(ids, skip_special_tokens=True)
            Path(training_args.output_dir, "test_predictions.txt").write_text(
                "\n".join(text.strip() for text in hypotheses) + "\n", encoding="utf-8")
    if trainer.is_world_process_zero():
        Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
        Path(training_args.output_dir, "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results


if __name__ == "__main__":
    main()
