#!/usr/bin/env python
"""`hf-srcfeat-train`: train a source-feature translation model with Seq2SeqTrainer (cf. Transformers'
run_translation.py), on Multi30k or your own corpus.

    hf-srcfeat-train --output_dir runs/baseline --do_train --max_steps 2000 --max_tokens_per_batch 1024
    hf-srcfeat-train --config examples/recipes/deps_san_multi30k_en_de.json --max_steps 100 --output_dir runs/try

Every Seq2SeqTrainingArguments option works. A recipe (`--config FILE`, JSON or YAML, or the file as the first
argument) gives arguments as a mapping; flags beside it override its values. The same command runs unchanged as
several processes: `torchrun --nproc_per_node 2 -m hf_srcfeat.commands.train ...` or
`accelerate launch -m hf_srcfeat.commands.train ...`.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.compute
import torch
import transformers
from datasets import Dataset, Features, Value, concatenate_datasets
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    EarlyStoppingCallback,
    HfArgumentParser,
    PreTrainedModel,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    TrainerState,
    set_seed,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import TrainOutput

import hf_srcfeat
from hf_srcfeat.annotated_sentence import FACTOR_SEPARATOR, AnnotatedSentence, carries_inline_factors
from hf_srcfeat.annotation_cache import check_cache_path, default_cache_path
from hf_srcfeat.annotator import DEFAULT_MAX_CHARACTERS, AnnotatorLoadError
from hf_srcfeat.annotator_stanza import STANZA_DIR_ENV
from hf_srcfeat.annotators import make_annotator as make_named_annotator
from hf_srcfeat.commands import check_model_source, error_summary, resolve_device, run_as_script
from hf_srcfeat.commands.train_arguments import HELP_ALL, DataArguments, ModelArguments
from hf_srcfeat.compilation import one_graph_for_all_batch_shapes
from hf_srcfeat.configuration_composed import (
    BACKBONE_ARGUMENTS,
    COMPONENT_ARGUMENTS,
    VOCABULARY_SIZE_ARGUMENTS,
)
from hf_srcfeat.configuration_relevance_features import FACTOR_VOCABULARY_SIZE_ARGUMENTS
from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.data.batching import SourceFeatureCollator, TokenBatchingSeq2SeqTrainer
from hf_srcfeat.data.corpora import SOURCE_CONLLU, SOURCE_FACTOR_PREFIX, load_corpora
from hf_srcfeat.data.errors import DataError
from hf_srcfeat.data.user_factors import attach_factors, split_factored_line
from hf_srcfeat.decoding_options import DECODING_OPTIONS, check_decoding_options, given_decoding_options
from hf_srcfeat.file_digests import file_digest
from hf_srcfeat.metrics.evaluation import make_compute_metrics
from hf_srcfeat.metrics.translation_scores import SCORE_NAMES, bleu_metric, bleu_target_language
from hf_srcfeat.process_memory import keep_freed_memory
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically, write_text_atomically
from hf_srcfeat.tokenization_pretrained_source_features import (
    SETTINGS_FILE,
    PretrainedSourceFeatureTokenizer,
    load_tokenizer,
)
from hf_srcfeat.tokenization_source_features import (
    BASE_FOLDER,
    check_tokenizer_matches,
    storage_features,
    stored_columns,
    train_source_feature_tokenizer,
)
from hf_srcfeat.trainer import (
    MetricsReport,
    SrcFeatSeq2SeqTrainer,
    TrainingTimeCallback,
    checkpoint_code_version,
    metrics_line,
    with_perplexity,
)
from hf_srcfeat.variants import VARIANTS, variant

logger = logging.getLogger("hf_srcfeat.train")

MODEL_CONFIGS = {config_class.model_type: config_class for config_class, _, _ in hf_srcfeat.MODEL_CLASSES}


class TimeBudgetCallback(TrainerCallback):
    """Stops training once a wall-clock budget is spent (the quickstart and benchmark use it)."""

    def __init__(self, minutes: float):
        self.seconds, self.start = minutes * 60.0, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= self.seconds:
            control.should_training_stop = True  # train.py then saves the model as after any training


def check_bleu_target_language(data_args: DataArguments, training_args) -> None:
    """BLEU can be computed for the target language as sacreBLEU tokenizes it (Japanese and Korean need sacreBLEU's
    extras): checked before any work when translations are scored."""
    if not (training_args.predict_with_generate or training_args.do_predict):
        return
    try:
        bleu_metric(data_args.target_lang)
    except (RuntimeError, ImportError) as error:
        raise SystemExit(f"--target_lang {data_args.target_lang}: BLEU tokenizes this language with sacreBLEU's "
                         f"{bleu_target_language(data_args.target_lang)} tokenizer, which cannot be made: "
                         f"{' '.join(str(error).split())}") from None


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 over all parameters: equal across processes iff they hold the same model."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


#: What a training run writes into its output_dir (and `--overwrite_output_dir` removes before a new run, so that
#: nothing of the old run, such as its tokenizer or checkpoints, is silently reused or mixed in).
RUN_OUTPUTS = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "feature_vocab.json",
               "config.json", "generation_config.json", "model.safetensors", "model-*.safetensors",
               "model.safetensors.index.json", "results.json", "eval_results.json", "test_predictions.txt",
               "training_args.json", "parameters_rank*.json", "checkpoint-*",
               # a tokenizer wrapping a pretrained checkpoint's (--init_from): its settings and the checkpoint's files
               SETTINGS_FILE, BASE_FOLDER)


#: Options of a model from scratch that the weights of an `--init_from` checkpoint fix (its sizes, its LayerNorm
#: placement, its vocabulary): refused with it, as `--config_overrides` of these settings are.
CHECKPOINT_FIXED_OPTIONS = ("d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "vocab_size",
                            "subword_model", "layernorm_position")
#: Options of a model from scratch that a model started from `--init_from` takes too when given (not given: the
#: checkpoint's dropout, the library's label smoothing): settings of its training, not of its weights.
PRETRAINED_MODEL_OPTIONS = ("dropout", "label_smoothing")


def check_pretrained_start(model_args: ModelArguments, factor_names: Sequence[str] = (),
                           factors_in_parses: bool = False) -> None:
    """Refuse, before any work, options of a pretrained start given without one, or with what replaces it, and
    user factors (`factor_names`; `factors_in_parses`: the parses may bring more) the grafted model would not
    read, or reads without any option providing them."""
    if not model_args.init_from:
        given = [name for name in ("source_lang_code", "target_lang_code", "added_learning_rate",
                                   "unfreeze_after_steps") if getattr(model_args, name) is not None]
        given += ["freeze_pretrained"] if model_args.freeze_pretrained else []
        if given:
            raise SystemExit(f"--{', --'.join(given)} only apply with --init_from (a pretrained checkpoint).")
        return
    for name in ("model_name_or_path", "tokenizer_name_or_path"):
        if getattr(model_args, name):
            raise SystemExit(f"--init_from and --{name} both say where to start; give one.")
    fixed = [name for name in CHECKPOINT_FIXED_OPTIONS if name in getattr(model_args, "_given", ())]
    if fixed:
        raise SystemExit(f"--{', --'.join(fixed)}: a model started from --init_from has the checkpoint's sizes, "
                         "layout and vocabulary; leave them out (--dropout and --label_smoothing may change).")
    if model_args.model_type == "srcfeat_transformer" and (model_args.freeze_pretrained
                                                           or model_args.added_learning_rate is not None):
        raise SystemExit("--freeze_pretrained and --added_learning_rate concern what a method adds; --model_type "
                         "srcfeat_transformer adds nothing to the checkpoint (with --freeze_pretrained nothing would "
                         "train).")
    if model_args.added_learning_rate is not None and not (math.isfinite(model_args.added_learning_rate)
                                                           and model_args.added_learning_rate > 0):
        raise SystemExit(f"--added_learning_rate must be a positive number, got {model_args.added_learning_rate}.")
    if model_args.unfreeze_after_steps is not None and (not model_args.freeze_pretrained
                                                        or model_args.unfreeze_after_steps < 1):
        raise SystemExit("--unfreeze_after_steps needs --freeze_pretrained and a positive step, got "
                         f"{model_args.unfreeze_after_steps}.")
    config = check_init_from(model_args.init_from)
    check_language_codes(config, model_args)
    started = check_start_settings(config, model_args)
    if not model_args.tokenizer_only:
        check_features_read(started, factor_names, factors_in_parses)


#: Config settings the tokenizer's feature vocabularies give (not the options), and the init's own arguments.
FEATURE_SIZE_SETTINGS = {*VOCABULARY_SIZE_ARGUMENTS, "self", "kwargs"}


def check_init_from(name: str):
    """`--init_from` names a pretrained translation checkpoint this run can read, checked from its config before
    the parsing (minutes to hours on a large corpus): a folder or a loadable Hub id, not a model of this library.
    Returns its config."""
    from transformers import AutoConfig

    if Path(name).is_dir() and not Path(name, "config.json").is_file():
        raise SystemExit(f"--init_from {name} is a folder without a config.json: not a checkpoint (a folder written "
                         "by save_pretrained, or a Hub id).")
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise SystemExit(f"--init_from {name}: no such folder, and it does not load as a Hub id "
                         f"({error_summary(error)}).") from None
    if config.model_type in MODEL_CONFIGS:
        raise SystemExit(f"--init_from {name} is a model of this library ({config.model_type}); continue training it "
                         "with --model_name_or_path.")
    return config


def check_language_codes(config, model_args: ModelArguments) -> None:
    """A multilingual checkpoint (NLLB, M2M100, mBART) is told its pair; a bilingual one (Marian) takes no codes."""
    from hf_srcfeat.pretrained_checkpoints import FAMILIES

    family = FAMILIES.get(str(getattr(config, "model_type", "")))
    if family is None:
        return  # named by the conversion's own check
    given = [option for option in ("source_lang_code", "target_lang_code") if getattr(model_args, option)]
    # A checkpoint fine-tuned for one pair (mbart-large-en-ro) starts its translations with its target language as
    # the decoder's start token; a many-to-many one (NLLB, mBART-50) starts with </s> and is told the language.
    many_to_many = family.language_codes and config.decoder_start_token_id in (None, config.eos_token_id)
    if many_to_many and len(given) < 2:
        raise SystemExit(f"--init_from {model_args.init_from} is a multilingual checkpoint ({config.model_type}): give "
                         "--source_lang_code and --target_lang_code (e.g. eng_Latn and deu_Latn for NLLB, en_XX and "
                         "de_DE for mBART-50), so that it reads and writes the languages of this corpus.")
    if not family.language_codes and given:
        raise SystemExit(f"--{', --'.join(given)}: --init_from {model_args.init_from} is a {config.model_type} "
                         "checkpoint, which takes no language codes (a multi-target OPUS-MT model reads its target "
                         "language as a token at the start of each source, e.g. >>fra<<); leave them out.")
    if not given:
        return
    try:
        base = AutoTokenizer.from_pretrained(model_args.init_from)
    except (OSError, ValueError) as error:
        raise SystemExit(f"--init_from {model_args.init_from}: its tokenizer does not load "
                         f"({error_summary(error)}).") from None
    check_codes_known(base, model_args)


def check_codes_known(base, model_args: ModelArguments) -> None:
    """`--source_lang_code` and `--target_lang_code` are language codes of the checkpoint's tokenizer `base`."""
    for option in ("source_lang_code", "target_lang_code"):
        code = getattr(model_args, option)
        if code and language_code_id(base, code) is None:
            raise SystemExit(unknown_language_code(base, f"--{option}", code, str(model_args.init_from)))


def language_code_ids(base) -> dict[str, int]:
    """The language codes a checkpoint's tokenizer `base` takes as `src_lang` / `tgt_lang`, each with the token id it
    puts into the encodings: M2M100's codes (`en`) stand for the tokens `__en__` (its `get_lang_id`); mBART's and
    NLLB's codes are tokens themselves (`en_XX`, `eng_Latn`), listed in mBART's `lang_code_to_id` and among NLLB's
    special tokens. Empty where the tokenizer lists none."""
    listed = getattr(base, "lang_code_to_id", None)
    if isinstance(listed, dict) and listed:
        get_lang_id = getattr(base, "get_lang_id", None)
        return {code: get_lang_id(code) if callable(get_lang_id) else token_id for code, token_id in listed.items()}
    extra = getattr(base, "extra_special_tokens", None) or getattr(base, "additional_special_tokens", None) or ()
    tokens = extra.values() if isinstance(extra, dict) else extra
    named = {getattr(base, name, None) for name in ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token",
                                                    "cls_token", "sep_token")}
    ids = {str(token): base.convert_tokens_to_ids(str(token)) for token in tokens if str(token) not in named}
    return {code: token_id for code, token_id in ids.items() if token_id != base.unk_token_id}


def language_code_id(base, code: str) -> int | None:
    """The token id the checkpoint's tokenizer `base` puts into the encodings for language `code` (what it forces as
    the first target token), as the tokenizer itself resolves the code; None: the tokenizer has no such code."""
    known = language_code_ids(base)
    if known:
        return known.get(code)
    token_id = base.convert_tokens_to_ids(code)  # a tokenizer listing no codes: the code is a token, or none
    return None if token_id == base.unk_token_id else token_id


def unknown_language_code(base, option: str, code: str, init_from: str) -> str:
    """Why `code` is no language code of the tokenizer `base` of checkpoint `init_from`, with the codes like it."""
    known = sorted(language_code_ids(base))
    bare = code.strip("_")
    spelling = ""
    if callable(getattr(base, "get_lang_id", None)) and bare in known:  # M2M100: en, for the token __en__
        spelling = f" (M2M100's codes are spelt without underscores: {bare}, whose token is {code})"
    like = [known_code for known_code in known if known_code.lower().startswith(bare[:2].lower())]
    like = like or difflib.get_close_matches(code, known, n=3, cutoff=0.5)
    guess = f"; did you mean {' or '.join(like[:3])}?" if like and not spelling else "."
    listing = f" Its {len(known)} codes include {', '.join(known[:5])}." if known else ""
    return f"{option} {code}: the tokenizer of {init_from} has no such language code{spelling}{guess}{listing}"


def check_start_settings(config, model_args: ModelArguments):
    """The config this run builds from the checkpoint, made before the parsing from the checkpoint's config alone,
    so that a setting the method refuses (`deps_san_layers` beyond the encoder's layers, a size the weights fix, ...)
    is named at once (after `check_model_type`, which names a misspelt setting as such). Returns it."""
    check_grafted_lfe_settings(config, model_args)
    try:
        return started_config(config, model_args)
    except (ValueError, TypeError) as error:
        raise SystemExit(f"--init_from {model_args.init_from} with --model_type {model_args.model_type}: "
                         f"{error}") from None


def check_grafted_lfe_settings(config, model_args: ModelArguments) -> None:
    """A latent feature encoder grafted onto a checkpoint (`latent_feedback`, alone or in a composition) starts as a
    copy of the checkpoint's encoder, with its own embeddings, and trains with the model: the settings of a
    pre-trained autoencoder's LFE (`lfe_pretrained_from`, `lfe_mode` frozen / fine_tuned), of an LFE of another depth
    and of one shared with the NMT encoder cannot apply. Named before the parsing, as what a graft does instead (the
    config's own messages speak of a model from scratch, whose advice would not work here)."""
    from hf_srcfeat.pretrained_checkpoints import grafted_methods

    overrides = given_config_overrides(model_args)
    try:
        methods = grafted_methods(model_args.model_type, overrides)
    except TypeError:  # `components` no list: named by the config
        return
    if "latent_feedback" not in methods:
        return
    copy = "a graft's LFE starts as a copy of the checkpoint's encoder"
    if overrides.get("lfe_pretrained_from"):
        raise SystemExit(f"--config_overrides lfe_pretrained_from={overrides['lfe_pretrained_from']!r}: {copy}, which "
                         "is its pre-training, and trains with the model (lfe_mode='joint'); no autoencoder is loaded "
                         "into it. Leave lfe_pretrained_from (and lfe_mode) out.")
    if overrides.get("lfe_mode", "joint") != "joint":
        raise SystemExit(f"--config_overrides lfe_mode={overrides['lfe_mode']!r}: {copy} and trains with the model "
                         "(lfe_mode='joint', the only mode a graft takes); leave lfe_mode out. --freeze_pretrained "
                         "and --added_learning_rate set how what the method adds trains.")
    if overrides.get("share_lfe_parameters"):
        raise SystemExit(f"--config_overrides share_lfe_parameters=True: {copy} with its own embeddings, beside the "
                         "NMT encoder, so it cannot share the NMT encoder's parameters; leave share_lfe_parameters "
                         "out.")
    layers = overrides.get("lfe_layers")
    if layers is not None and layers != config.encoder_layers:
        raise SystemExit(f"--config_overrides lfe_layers={layers!r}: {copy}, which has {config.encoder_layers} "
                         f"layers; leave lfe_layers out (or give {config.encoder_layers}).")


def pretrained_overrides(model_args: ModelArguments) -> dict:
    """The config settings a run from `--init_from` gives its model: `--dropout` and `--label_smoothing` where given
    (else the checkpoint's dropout and the library's label smoothing), then `--config_overrides`, which win (as from
    scratch)."""
    given = getattr(model_args, "_given", ())
    options = {name: getattr(model_args, name) for name in PRETRAINED_MODEL_OPTIONS if name in given}
    return {**options, **given_config_overrides(model_args)}


def started_config(config, model_args: ModelArguments):
    """The config of the model a run started from the checkpoint of config `config` builds: the converted backbone,
    with `--model_type` grafted onto it (feature vocabulary sizes aside, which only the tokenizer knows: the user
    factors `source_factors` names get a stand-in size)."""
    from hf_srcfeat.pretrained_checkpoints import backbone_config, grafted_config

    overrides = pretrained_overrides(model_args)
    if model_args.model_type == "srcfeat_transformer":
        return backbone_config(config, **overrides)
    stand_ins = user_factor_stand_ins(overrides)
    return grafted_config(backbone_config(config), model_args.model_type,
                          **{**({"extra_factors": stand_ins} if stand_ins else {}), **overrides})


def user_factor_stand_ins(overrides: dict, factor_names: Sequence[str] = ()) -> dict[str, int]:
    """The user factors a config made before the tokenizer must know of (`factor_names` and those the overrides'
    `source_factors` names), each with a stand-in vocabulary size: only the tokenizer knows the real one."""
    named = overrides.get("source_factors")
    named_user_factors = [name for name in named if name not in FACTOR_VOCABULARY_SIZE_ARGUMENTS] \
        if isinstance(named, list) and all(isinstance(name, str) for name in named) else []
    return {name: 2 for name in [*factor_names, *named_user_factors]}


def check_tokenizer_source(model_args: ModelArguments) -> None:
    """A `--tokenizer_name_or_path` that is no folder here must load as a Hub id: checked before the parsing, which
    would otherwise come first (minutes on a large corpus) and end in a connection error that names no option."""
    name = model_args.tokenizer_name_or_path
    if not name or Path(name).is_dir():
        return
    try:
        load_tokenizer(name)
    except (OSError, ValueError) as error:
        raise SystemExit(f"--tokenizer_name_or_path {name}: no such folder, and it does not load as a Hub id "
                         f"({error_summary(error)}).") from None


def check_vocabulary_arguments(model_args: ModelArguments) -> None:
    """Refuse, before any work, feature vocabulary limits that make no sense."""
    if model_args.max_lemmas < 0:
        raise SystemExit(f"--max_lemmas must be 0 (no limit) or positive, got {model_args.max_lemmas}.")
    if model_args.lemma_min_frequency < 1:
        raise SystemExit(f"--lemma_min_frequency must be at least 1, got {model_args.lemma_min_frequency}.")


#: The training command's numeric options and the values they take: (smallest, largest, whether the largest is
#: excluded). Checked when the command starts, so that a 0 or a negative value is named before any parsing (the
#: vocabulary limits and the pretrained-start options have checks of their own).
NUMERIC_RANGES: dict[str, tuple[float, float, bool]] = {
    **dict.fromkeys(["vocab_size", "d_model", "encoder_layers", "decoder_layers",
                     "attention_heads", "ffn_dim", "max_train_samples", "max_eval_samples", "max_predict_samples",
                     "preprocessing_num_workers", "annotation_num_proc", "max_tokens_per_batch", "batch_size_multiple",
                     "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                     "generation_num_beams", "generation_max_length", "eval_steps", "save_steps", "logging_steps"],
                    (1, math.inf, False)),
    "max_source_length": (2, math.inf, False), "max_target_length": (2, math.inf, False),
    "warmup_steps": (0, math.inf, False),
    "dropout": (0, 1, True), "label_smoothing": (0, 1, True),
    "learning_rate": (0, math.inf, False),
    "weight_decay": (0, math.inf, False), "max_train_minutes": (0, math.inf, False),
}


def check_numeric_arguments(*arguments, ranges: dict[str, tuple[float, float, bool]] | None = None) -> None:
    """Refuse, naming it, a numeric option outside the values it can take (a batch of 0, a dropout of 2, ...):
    `ranges` maps a name to (smallest, largest, largest excluded), by default NUMERIC_RANGES."""
    for group in arguments:
        for name, (smallest, largest, largest_excluded) in (NUMERIC_RANGES if ranges is None else ranges).items():
            value = getattr(group, name, None)
            if value is None or (name.endswith("_steps") and isinstance(value, float) and 0 < value < 1):
                continue  # unset, or eval/save/logging steps given as a fraction of the run (Trainer's convention)
            inside = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                and smallest <= value and (value < largest if largest_excluded else value <= largest)
            if not inside:
                allowed = f"{smallest} or more" if largest == math.inf else \
                    f"at least {smallest} and below {largest}" if largest_excluded else f"from {smallest} to {largest}"
                raise SystemExit(f"--{name} must be {allowed}, got {value!r}.")


def check_token_budget(budget: int | None, lengths: dict[str, int]) -> None:
    """A token budget that holds the longest example the truncation lets through (`lengths`: the length options and
    their values): otherwise the sampler would find one only after the parsing and tokenizing, with the output
    folder already written."""
    if budget and budget < max(lengths.values()):
        given = ", ".join(f"--{name} {value}" for name, value in lengths.items())
        raise SystemExit(f"--max_tokens_per_batch {budget} is below the longest example the truncation keeps "
                         f"({given}): such an example would fit in no batch; raise the budget or lower the lengths.")


def check_batch_size_multiple(batch_size_multiple: int, max_tokens_per_batch: int | None) -> None:
    """`--batch_size_multiple` shapes token batches; sentence batches hold --per_device_train_batch_size rows."""
    if batch_size_multiple > 1 and not max_tokens_per_batch:
        raise SystemExit(f"--batch_size_multiple {batch_size_multiple} rounds token batches "
                         "(--max_tokens_per_batch); sentence batches hold --per_device_train_batch_size rows.")


def evaluates_during_training(training_args: Seq2SeqTrainingArguments, data_args: DataArguments) -> bool:
    """Whether the run evaluates on validation data (and so needs it)."""
    strategy = getattr(training_args.eval_strategy, "value", training_args.eval_strategy)
    return bool(training_args.do_eval or strategy != "no" or training_args.load_best_model_at_end
                or data_args.early_stopping_patience)


def check_label_smoothing(training_args: Seq2SeqTrainingArguments) -> None:
    """One label smoothing: the model's own `--label_smoothing` (in its loss, so evaluation losses match); the
    Trainer's `--label_smoothing_factor` would smooth a second time."""
    if training_args.label_smoothing_factor:
        raise SystemExit(f"--label_smoothing_factor {training_args.label_smoothing_factor}: the models smooth their "
                         "own loss; give --label_smoothing instead (default 0.1).")


def check_averaging(data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> None:
    """Refuse, before any work, a decoding option outside its values, early stopping that cannot keep the best model and
    an `--average_last_checkpoints` the run's checkpoints cannot serve."""
    try:
        check_decoding_options(given_decoding_options(data_args))
    except ValueError as error:
        raise SystemExit(str(error).replace("`", "--", 1).replace("`", "", 1)) from None
    if data_args.early_stopping_patience is not None:
        if data_args.early_stopping_patience < 1:
            raise SystemExit(f"--early_stopping_patience must be at least 1, got {data_args.early_stopping_patience}.")
        if not (training_args.load_best_model_at_end and training_args.metric_for_best_model):
            raise SystemExit("--early_stopping_patience needs --load_best_model_at_end true and a "
                             "--metric_for_best_model (e.g. eval_loss or bleu; eval_strategy = save_strategy = steps), "
                             "so that the best model is kept.")
    count = data_args.average_last_checkpoints
    if count is None:
        return
    if training_args.load_best_model_at_end:
        raise SystemExit(f"--average_last_checkpoints {count} averages the last checkpoints, --load_best_model_at_end "
                         "keeps the best one (and checkpoint rotation keeps it in place of a later one): choose one.")
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise SystemExit(f"--average_last_checkpoints must be an integer of at least 2, got {count!r}.")
    if not training_args.do_train or training_args.save_strategy != "steps":
        raise SystemExit("--average_last_checkpoints averages the checkpoints this run saves: it needs --do_train "
                         f"and --save_strategy steps (got {training_args.save_strategy}).")
    if training_args.save_total_limit is not None and training_args.save_total_limit < count:
        raise SystemExit(f"--average_last_checkpoints {count} needs --save_total_limit >= {count} (got "
                         f"{training_args.save_total_limit}): older checkpoints would be deleted.")
    # The Trainer saves every save_steps steps and at the last step. A resumed run also has its earlier checkpoints,
    # and an epoch-based or fractional schedule is known only once the data is: those are checked after training.
    steps, every = training_args.max_steps, training_args.save_steps
    # Transformers keeps a save_steps of 1 as the float 1.0 (below 1, a fraction of max_steps): steps all the same.
    if not training_args.resume_from_checkpoint and steps > 0 and every >= 1:
        every = int(every)
        saved = math.ceil(steps / every)
        if saved < count:
            raise SystemExit(f"--average_last_checkpoints {count}: --max_steps {steps} with --save_steps {every} "
                             f"saves {saved} checkpoint(s); lower it or save more often.")


#: What an evaluation measures: its loss, and with --predict_with_generate the translations' scores.
EVALUATION_METRICS = ("loss", *SCORE_NAMES)


def check_processes_train_one_model(training_args: Seq2SeqTrainingArguments) -> None:
    """Several processes (torchrun, accelerate launch) train one model only as a distributed job. Without a GPU,
    Transformers makes them one only with --use_cpu: otherwise each trains a model of its own on all the data
    (the saved model is one of them) and the reported losses are wrong, without a word."""
    if training_args.world_size > 1 and training_args.parallel_mode.value == "not_parallel":
        raise SystemExit(f"{training_args.world_size} processes were started (torchrun or accelerate launch), but "
                         "without a GPU Transformers would train a separate model in each: add --use_cpu, which "
                         "makes them one distributed run (with --ddp_backend gloo).")


def check_beams_stop_early(data_args: DataArguments, num_beams: int) -> None:
    """`--early_stopping` is beam search's: with one beam the saved generation config would be refused (by
    Transformers, when the trained model is saved)."""
    if data_args.early_stopping and num_beams <= 1:
        raise SystemExit(f"--early_stopping stops beam search, and the run decodes with {num_beams} beam: add "
                         "--generation_num_beams N (N > 1), or leave --early_stopping out.")


def checkpoint_beams(name: str) -> int | None:
    """The beams a pretrained checkpoint's generation config decodes with (1 when it says none), None when it
    cannot be read here (the checkpoint's own loading then says why)."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(name).num_beams or 1
    except (OSError, ValueError):
        return None


def check_best_model_metric(training_args: Seq2SeqTrainingArguments) -> None:
    """`--metric_for_best_model` names what the evaluations measure (else the Trainer fails at the first one, after
    the parsing and the first steps)."""
    given = training_args.metric_for_best_model
    if not given or not (training_args.load_best_model_at_end or training_args.eval_strategy != "no"):
        return
    metric = given.removeprefix("eval_")
    if metric not in EVALUATION_METRICS:
        raise SystemExit(f"--metric_for_best_model {given}: the evaluations measure "
                         f"{', '.join(EVALUATION_METRICS)} (as eval_<name>).")
    if metric != "loss" and not training_args.predict_with_generate:
        raise SystemExit(f"--metric_for_best_model {given} is computed on translations: it needs "
                         "--predict_with_generate (or choose eval_loss).")


def load_checkpoint_average(model: PreTrainedModel, output_dir: Path, count: int) -> list[str]:
    """Replace the model's weights by the mean of the run's last `count` checkpoints; returns their names."""
    from hf_srcfeat.commands.average_checkpoints import average_state_dicts, read_checkpoint, run_checkpoints

    checkpoints = run_checkpoints(output_dir)[-count:]
    if len(checkpoints) < count:
        raise SystemExit(f"--average_last_checkpoints {count}: the run saved {len(checkpoints)} checkpoint(s) "
                         f"({', '.join(path.name for path in checkpoints) or 'none'}); lower it or save more often.")
    states = [read_checkpoint(checkpoint)[1] for checkpoint in checkpoints]
    averaged = average_state_dicts(states, [str(checkpoint) for checkpoint in checkpoints])
    missing, unexpected = model.load_state_dict(averaged, strict=False)
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    if unexpected or set(missing) - tied:
        raise SystemExit(f"the averaged checkpoints do not fit the model (missing {sorted(set(missing) - tied)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}).")
    if tied:
        model.tie_weights()
    logger.info("averaged the weights of %s", ", ".join(path.name for path in checkpoints))
    return [path.name for path in checkpoints]


def check_output_dir(training_args: Seq2SeqTrainingArguments, data_args: DataArguments,
                     model_args: ModelArguments | None = None) -> None:
    output_dir = Path(str(training_args.output_dir))
    if output_dir.exists() and not output_dir.is_dir():
        raise SystemExit(f"--output_dir {output_dir} is a file; name a folder for the run.")
    if model_args is not None and data_args.overwrite_output_dir and not training_args.resume_from_checkpoint \
            and output_dir.is_dir():
        # --overwrite_output_dir clears the folder before the model and tokenizer are loaded from it.
        for option in ("model_name_or_path", "tokenizer_name_or_path", "init_from"):
            source = getattr(model_args, option)
            if source and Path(source).is_dir() and Path(source).resolve().is_relative_to(output_dir.resolve()):
                where = "is also" if Path(source).resolve() == output_dir.resolve() else "holds"
                raise SystemExit(f"--output_dir {output_dir} {where} --{option} {source}: --overwrite_output_dir would "
                                 "remove what the run starts from. Write the new run to another folder.")
    try:
        check_cache_path(getattr(data_args, "annotation_cache", None))
    except ValueError as error:
        raise SystemExit(f"--annotation_cache: {error}") from None
    if (output_dir.is_dir() and any(output_dir.iterdir()) and not data_args.overwrite_output_dir
            and not training_args.resume_from_checkpoint):
        raise SystemExit(
            f"output_dir {output_dir} is not empty. Pass --overwrite_output_dir to write into it, or "
            "--resume_from_checkpoint to continue a run."
        )


def trained_steps(folder: str | Path) -> int:
    """The training step a (complete) checkpoint was saved at, from its trainer state."""
    return int(json.loads(Path(folder, TRAINER_STATE_NAME).read_text()).get("global_step", 0))


def check_resumed_checkpoint(training_args: Seq2SeqTrainingArguments) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint whose save was not interrupted (every state file there, none cut
    off), checked before any work (the Trainer would fail after the parsing, or resume with a fresh optimizer);
    `True`: the newest such checkpoint of the run, an interrupted newer one named and left."""
    from hf_srcfeat.trainer import checkpoint_problem, newest_complete_checkpoint

    given = training_args.resume_from_checkpoint
    if not given:
        return None
    if given is True or str(given).lower() == "true":  # the newest one whose save was not interrupted
        newest, skipped = newest_complete_checkpoint(str(training_args.output_dir))
        for skipped_problem in skipped:
            logger.warning("--resume_from_checkpoint: not resuming from %s", skipped_problem)
        if newest is None:
            raise SystemExit(f"--resume_from_checkpoint: no complete checkpoint folder in {training_args.output_dir}"
                             + (f" ({'; '.join(skipped)})" if skipped else "") + ".")
        return newest
    if not Path(given).is_dir():
        raise SystemExit(f"--resume_from_checkpoint: no checkpoint folder {given}.")
    problem = checkpoint_problem(given)
    if problem:
        raise SystemExit(f"--resume_from_checkpoint: {problem}; resume from an earlier checkpoint of the run.")
    return str(given)


#: The model settings a resumed checkpoint must share with the run: (argument, the config's name for it).
RESUMED_SETTINGS = (("model_type", "model_type"), ("d_model", "d_model"), ("encoder_layers", "encoder_layers"),
                    ("decoder_layers", "decoder_layers"), ("attention_heads", "encoder_attention_heads"),
                    ("ffn_dim", "encoder_ffn_dim"))


def check_resumed_model(folder: str, model_args: ModelArguments, output_dir: str) -> None:
    """A checkpoint resumed from has the model the arguments build, and a tokenizer this run will have: checked
    before any work (its weights would otherwise fail to load after the parsing, or, from another run, load over a
    new tokenizer's ids without a word)."""
    config_file = Path(folder, "config.json")
    if not config_file.is_file() or model_args.model_name_or_path:
        return
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if model_args.init_from:  # the sizes are the pretrained checkpoint's; the method grafted on must be the same
        if config.get("model_type") != model_args.model_type:
            raise SystemExit(f"--resume_from_checkpoint {folder} is a {config.get('model_type')} model, this run "
                             f"grafts {model_args.model_type}; resume with the options the run was started with.")
        from transformers import AutoConfig

        built = started_config(AutoConfig.from_pretrained(model_args.init_from), model_args).to_dict()
        method_settings = config_argument_names(MODEL_CONFIGS[model_args.model_type]) - FEATURE_SIZE_SETTINGS
        differing = [f"{key} {built[key]!r} (the checkpoint's: {config[key]!r})" for key in sorted(method_settings)
                     if key in built and key in config and built[key] != config[key]]
        if differing:
            raise SystemExit(f"--resume_from_checkpoint {folder} is another model than this run builds: "
                             f"{', '.join(differing)}; resume with the --config_overrides it was started with.")
        return
    overrides = given_config_overrides(model_args)  # they win over the size options, as when the model is built
    asked = {key: (f"config_overrides {key}", overrides[key]) if key in overrides else
             (f"--{argument}", getattr(model_args, argument)) for argument, key in RESUMED_SETTINGS}
    differing = [f"{option} {value} (the checkpoint's: {config[key]})" for key, (option, value) in asked.items()
                 if key in config and value != config[key]]
    if differing:
        raise SystemExit(f"--resume_from_checkpoint {folder} is another model than this run builds: "
                         f"{', '.join(differing)}; resume with the settings it was trained with.")
    own_run = Path(folder).resolve().parent == Path(output_dir).resolve()
    if not own_run and not model_args.tokenizer_name_or_path and not Path(output_dir, "tokenizer.json").exists():
        raise SystemExit(f"--resume_from_checkpoint {folder} is a checkpoint of another run than --output_dir "
                         f"{output_dir}, which would train a new tokenizer whose ids the checkpoint's weights do not "
                         f"know: resume in its own run (--output_dir {Path(folder).parent}), or keep its vocabulary "
                         f"with --tokenizer_name_or_path {folder}.")


def check_resumed_tokenizer(folder: str, tokenizer) -> None:
    """The tokenizer this run uses is the one the resumed checkpoint was trained with."""
    from transformers import AutoConfig

    try:
        check_tokenizer_matches(AutoConfig.from_pretrained(folder), tokenizer)
    except ValueError as error:
        raise SystemExit(f"--resume_from_checkpoint {folder}: {error}") from None


def generation_length(references: list, limit: int) -> int:
    """How long a translation may grow when evaluating: 1.5 times the longest reference (in tokens) of the tokenized
    sets `references` plus 5, at most `limit`, so that an under-trained model that repeats itself stops near where
    the references do."""
    longest = max((max(map(len, data["labels"]), default=0) for data in references if len(data)), default=0)
    return min(limit, int(1.5 * longest) + 5) if longest else limit


def earlier_results(output_dir: Path, resumed_from: str | None, results_file: str = "results.json",
                    measured: Sequence[str] = ("global_step", "train_seconds", "eval_metrics", "test_sets"),
                    ) -> list[dict]:
    """On a resumed run, what the run's earlier `results_file` measured (its `measured` entries, with the step), so
    that resuming adds to the history instead of replacing it."""
    path = output_dir / results_file
    if resumed_from is None or not path.exists():
        return []
    earlier = json.loads(path.read_text())
    kept = {name: earlier[name] for name in measured if name in earlier}
    return [*earlier.get("earlier_results", []), kept]


def remove_stale_predictions(output_dir: Path, written: set[str]) -> list[str]:
    """Remove test predictions of an earlier model of this run that this run did not write again: they would
    stand beside a model they no longer belong to."""
    stale = [path for path in output_dir.glob("test*_predictions.txt") if path.name not in written]
    for path in stale:
        path.unlink()
    return [path.name for path in stale]


#: What the wildcard of each RUN_OUTPUTS pattern stands for: the numbers the Trainer and Transformers write
#: (`checkpoint-best-copy`, a user's, matches `checkpoint-*` but is no output of a run).
RUN_OUTPUT_WILDCARDS = {"checkpoint-*": r"checkpoint-\d+", "model-*.safetensors": r"model-\d+-of-\d+\.safetensors",
                        "parameters_rank*.json": r"parameters_rank\d+\.json"}


def clear_previous_run(output_dir: Path, outputs: Sequence[str] = RUN_OUTPUTS) -> list[str]:
    """Remove an earlier run's `outputs` (file name patterns) from output_dir, leaving any other file; returns their
    names."""
    import shutil

    removed = []
    for pattern in outputs:
        written = RUN_OUTPUT_WILDCARDS.get(pattern)
        for path in sorted(output_dir.glob(pattern)):
            if written and not re.fullmatch(written, path.name):
                continue
            # A symlinked entry is unlinked, never followed: what it points to belongs to someone else.
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            removed.append(path.name)
    return removed


INIT_FROM_WITHOUT_TRAINING = (
    "--init_from starts a run that trains (--do_train); to evaluate the checkpoint with a method grafted on and "
    "untrained, train one step that changes nothing (--do_train --max_steps 1 --learning_rate 0), or evaluate a "
    "finished run with --model_name_or_path <its output_dir>.")


def model_to_evaluate(model_args: ModelArguments, training_args) -> None:
    """Without --do_train, evaluate a trained model: --model_name_or_path, else the run in output_dir; refuse to
    score a new, untrained model, and options that build one (they would be dropped without a word)."""
    if model_args.init_from:
        raise SystemExit(INIT_FROM_WITHOUT_TRAINING)
    if not model_args.model_name_or_path:
        if not Path(training_args.output_dir, "config.json").exists():
            raise SystemExit(f"nothing to evaluate: without --do_train, pass --model_name_or_path or an --output_dir "
                             f"holding a trained model ({training_args.output_dir} has no config.json).")
        model_args.model_name_or_path = training_args.output_dir
        logger.info("evaluating the trained model in %s", training_args.output_dir)
    saved = Path(model_args.model_name_or_path, "config.json")
    try:
        saved_type = json.loads(saved.read_text(encoding="utf-8")).get("model_type") if saved.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise SystemExit(f"{saved} is not a JSON config (damaged?); nothing to evaluate.") from None
    # Flags only: a recipe the run was trained with may be given again to evaluate it.
    given: set[str] = getattr(model_args, "_given_as_flags", set())
    building = ["config_overrides"] if "config_overrides" in given and model_args.config_overrides else []
    if given & {"model_type", "variant"} and saved_type and model_args.model_type != saved_type:
        building.append(f"model_type {model_args.model_type} (the model's: {saved_type})")
    if building:
        raise SystemExit(f"--{', --'.join(building)}: an evaluation-only run evaluates {model_args.model_name_or_path} "
                         "as it was trained; these options build a new model (with --do_train).")


PARSE_COLUMN = "source_parse"


#: Without `# text`, how alike (difflib's ratio) a parse's words and its source must spell, whitespace aside: a
#: multi-word token expanded into its syntactic words (French "du" as "de le") changes a few characters, a parse of
#: another sentence most of them.
SAME_SENTENCE_RATIO = 0.6


def parses_another_sentence(sentence: AnnotatedSentence, source: str) -> bool:
    """Whether a parse is of another sentence than the source it is paired with: by its `# text` where it gives one,
    else by its words."""
    if sentence.text:
        return sentence.text.strip() != source.strip()
    parsed, given = "".join(word.text for word in sentence.words), "".join(source.split())
    return parsed != given and difflib.SequenceMatcher(None, parsed, given).ratio() < SAME_SENTENCE_RATIO


def source_parses(path: str, split_name: str, data, cut: bool):
    """The split with the parses of its sources from a CoNLL-U file as a column (JSON), checked against the split:
    one sentence per source (the file may go on when `cut`, the split being cut short by --max_*_samples), and where
    the file gives `# text`, the same text; the first mismatch is named. The file is streamed twice (a check, then
    an Arrow column on disk), never held whole."""
    count = 0
    for index, sentence in enumerate(read_conllu(path)):
        if index == len(data):
            if cut:
                break
            raise DataError(f"{path} has more sentences than the {len(data)} sources of the {split_name} split; "
                             "the parses must follow the sources one to one.")
        source = data[index]["source"]
        if parses_another_sentence(sentence, source):
            raise DataError(f"{path}: sentence {index + 1} ({sentence.name}) is the parse of "
                             f"{sentence.raw_text!r}, but {split_name} source {index + 1} is {source!r}.")
        count += 1
    if count < len(data):
        raise DataError(f"{path} has {count} sentences but the {split_name} split has {len(data)} "
                         "sources; the parses must follow the sources one to one.")
    # The file's digest among the generator's arguments, which key the datasets cache: a file parsed again into the
    # same name is read again, not served from the cache as its earlier content.
    parses = Dataset.from_generator(conllu_rows, gen_kwargs={"path": path, "limit": len(data),
                                                             "content": file_digest(Path(path))},
                                    features=Features({PARSE_COLUMN: Value("string")}))
    return concatenate_datasets([data, parses], axis=1)


def check_source_text(data, origin: str, parsed_here: bool, limit: int = DEFAULT_MAX_CHARACTERS) -> None:
    """The sources of a split, checked before any parsing (columns scanned in Arrow): none carries OpenNMT-py factors
    inline (they would be trained on as text), and, where the split is parsed here, none is longer than the annotator
    takes (it would refuse it only when it comes to it, by its place in a chunk). The first is named by row."""
    offset = 0
    for batch in data.with_format("arrow").iter(batch_size=ANNOTATION_CHUNK):
        holding = pyarrow.compute.match_substring(batch["source"], FACTOR_SEPARATOR)
        for index in pyarrow.compute.indices_nonzero(holding).to_pylist():  # rare outside factored corpora
            if carries_inline_factors(batch["source"][index].as_py()):
                raise DataError(f"{origin} row {offset + index + 1}: the source carries factors inline "
                                f"(word{FACTOR_SEPARATOR}value, OpenNMT-py's format): name them with "
                                "--inline_source_factors.")
        lengths = pyarrow.compute.utf8_length(batch["source"])  # characters, as len() counts them
        too_long = pyarrow.compute.greater(lengths, limit)
        if parsed_here and pyarrow.compute.any(too_long).as_py():
            index = pyarrow.compute.index(too_long, True).as_py()
            raise DataError(f"{origin} row {offset + index + 1}: the source has {lengths[index].as_py():,} "
                            f"characters, more than the parser takes ({limit:,}, about 1,800 words): split it into "
                            "sentences (the models translate sentences), or give its parse.")
        offset += batch.num_rows


def split_inline_factors(data, names: list[str], origin: str):
    """The split with OpenNMT-py's `word￨value1￨value2` sources split into the words (`source`) and one factor column
    per name (`SOURCE_FACTOR_PREFIX + name`, space-separated values), which `attach_factor_columns` then attaches to
    the words' parses; a token with another number of values is an error naming the row."""
    def split(batch, indices):
        columns: dict[str, list[str]] = {"source": [], **{SOURCE_FACTOR_PREFIX + name: [] for name in names}}
        for index, source in zip(indices, batch["source"], strict=True):
            try:
                words, values = split_factored_line(source, names)
            except ValueError as error:
                raise DataError(f"{origin} row {index + 1}: {error}") from None
            columns["source"].append(" ".join(words))
            for name in names:
                columns[SOURCE_FACTOR_PREFIX + name].append(" ".join(values[name]))
        return columns

    return data.map(split, batched=True, with_indices=True, desc=f"inline factors of {origin}")


def conllu_rows(path: str, limit: int, content: str = ""):
    """The first `limit` parses of CoNLL-U file `path` as rows (`content`, its digest, only keys the cache)."""
    for _, sentence in zip(range(limit), read_conllu(path), strict=False):
        yield {PARSE_COLUMN: sentence.to_json()}


#: Raise when the stored encoding changes, so that cached encodings of older code are not reused.
STORAGE_FORMAT = 1

#: The modules whose code makes a stored encoding (this one holds the `tokenize` step): their content is part of the
#: encoding's fingerprint, so that changed code never reads an encoding of other code from the datasets cache.
ENCODING_MODULES = ("hf_srcfeat/commands/train.py", "hf_srcfeat/tokenization_source_features.py",
                    "hf_srcfeat/tokenization_pretrained_source_features.py", "hf_srcfeat/feature_vocabulary.py",
                    "hf_srcfeat/annotated_sentence.py", "hf_srcfeat/parse_phrases.py", "hf_srcfeat/dependency_tree.py",
                    "hf_srcfeat/data/user_factors.py", "hf_srcfeat/subword_training.py")


@functools.cache
def encoding_code_digest(root: Path | None = None) -> str:
    """A digest of the ENCODING_MODULES' content under `root` (default: where hf_srcfeat is imported from, a
    checkout or an installed package)."""
    root = root or Path(hf_srcfeat.__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for module in ENCODING_MODULES:
        digest.update(module.encode() + b"\0" + (root / module).read_bytes())
    return digest.hexdigest()[:16]


def tokenization_fingerprint(data, tokenizer, data_args: DataArguments) -> str:
    """What the tokenized split depends on, named explicitly: the split (its datasets fingerprint), the tokenizer's
    vocabularies, the lengths, the code that encodes, and the parser when the split is parsed here. The same on every
    rank and in every run, whether the tokenizer was just trained or loaded (datasets' own hash of the function would
    differ), so the ranks share one cached encoding and a second run reuses it."""
    parts = [data._fingerprint, tokenizer.fingerprint(), str(data_args.max_source_length),
             str(data_args.max_target_length), f"storage={STORAGE_FORMAT}", f"code={encoding_code_digest()}"]
    if PARSE_COLUMN not in data.column_names:
        parts.append(tokenizer.annotator.identity)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def dataset_column(data, name: str):
    """The values of one column, streamed in batches."""
    for batch in data.iter(batch_size=10_000):
        yield from batch[name]


#: Sources handed to the annotator at once: parsing goes through the cache chunk by chunk, so a large corpus is never
#: held whole as Python strings.
ANNOTATION_CHUNK = 100_000


def parses_from_column(batch: dict, indices: list[int], origin: str) -> dict:
    """The CoNLL-U parse of each source from its column, checked against the source (`# text`), as JSON."""
    parses = []
    for index, source, block in zip(indices, batch["source"], batch[SOURCE_CONLLU], strict=True):
        try:
            sentences = list(read_conllu(block.splitlines()))
        except ValueError as error:
            raise DataError(f"{origin} row {index + 1}: its source parse is not valid CoNLL-U: {error}") from None
        if len(sentences) != 1:
            raise DataError(f"{origin} row {index + 1}: its source parse holds {len(sentences)} sentences, not 1.")
        if parses_another_sentence(sentences[0], source):
            raise DataError(f"{origin} row {index + 1}: the parse is of {sentences[0].raw_text!r}, the source "
                             f"is {source!r}.")
        parses.append(sentences[0].to_json())
    return {PARSE_COLUMN: parses}


def attach_factor_columns(data, names: list[str], pretokenized_annotator, origin: str):
    """The split with each row's word-aligned factor columns attached to the words of its parse (PARSE_COLUMN): the
    given parse, or else a parse of the source's whitespace-separated words as they are split (so that values and
    words line up, as in OpenNMT-py's factor files); `pretokenized_annotator()` makes that parser when needed. A row
    whose values do not match its words is an error naming the row."""
    columns = [SOURCE_FACTOR_PREFIX + name for name in names]

    def attach(batch, indices):
        if PARSE_COLUMN in batch:
            parses = [AnnotatedSentence.from_json(parse) for parse in batch[PARSE_COLUMN]]
        else:
            parses = pretokenized_annotator().annotate(batch["source"], show_progress=False)
        attached = []
        for row, (index, parse) in enumerate(zip(indices, parses, strict=True)):
            values = {name: (batch[column][row] or "").split() for name, column in zip(names, columns, strict=True)}
            try:
                attached.append(attach_factors(parse, values).to_json())
            except ValueError as error:
                raise DataError(f"{origin} row {index + 1}: {error}") from None
        return {PARSE_COLUMN: attached}

    return data.map(attach, batched=True, with_indices=True, remove_columns=columns, desc=f"factors of {origin}")


#: The annotator `--annotator` names when not given, which a tokenizer records when built without one.
DEFAULT_ANNOTATOR = DataArguments.annotator

#: The option giving the parses of each kind of split, named where a split without parses cannot be parsed.
CONLLU_OPTIONS = {"train": "--train_source_conllu", "validation": "--validation_source_conllu",
                  "test": "--test_source_conllu"}


def annotator_given(data_args: DataArguments) -> bool:
    """Whether the run names its annotator (`--annotator`, `--spacy_model`, or an annotator other than the default),
    rather than leaving it to the default or to the recorded one of a given tokenizer."""
    given: set[str] = getattr(data_args, "_given", set())
    return bool(given & {"annotator", "spacy_model"}) or data_args.annotator != DEFAULT_ANNOTATOR


def check_annotator_options(data_args: DataArguments) -> None:
    """The `--annotator` options name an annotator, checked before any work (a spaCy pipeline's language is checked
    when it is loaded, `make_annotator`)."""
    from hf_srcfeat.annotators import annotator_class

    try:
        annotator_class(data_args.annotator)
    except ValueError as error:
        raise SystemExit(f"--annotator {data_args.annotator}: {error}") from None
    if data_args.annotator == "spacy" and not data_args.spacy_model:
        raise SystemExit("--annotator spacy needs --spacy_model: the spaCy pipeline package or folder of the source "
                         f"language ({data_args.source_lang}), e.g. fr_core_news_sm for French.")
    if data_args.spacy_model and data_args.annotator != "spacy":
        raise SystemExit(f"--spacy_model {data_args.spacy_model} is for --annotator spacy, and the annotator is "
                         f"{data_args.annotator}: give --annotator spacy too.")


def parsing_need(split_names: Sequence[str]) -> tuple[str, list[str]]:
    """Which splits need parsing, in words (`split_names`: the splits without parses, as `run` names them), and the
    options that would give their parses instead."""
    kinds = list(dict.fromkeys(name.split(":", 1)[0] for name in split_names))
    words = {"train": "training", "validation": "validation", "test": "test"}
    named = " and ".join(words.get(kind, kind) for kind in kinds)
    return (f"the {named} split{'s' if len(kinds) > 1 else ''}" if kinds else "",
            [CONLLU_OPTIONS[kind] for kind in kinds if kind in CONLLU_OPTIONS])


def make_annotator(data_args: DataArguments, split_names: Sequence[str] = (), purpose: str = ""):
    """The annotator of raw sources that `--annotator` names; options that name none (a spaCy pipeline of another
    language) or one that cannot be made (no models for the language) stop the command with the reason, the
    splits that need it (`split_names`, as `run` names them) and what to give instead. `purpose`: why it is made,
    when not to parse the splits named."""
    model = data_args.spacy_model if data_args.annotator == "spacy" else data_args.stanza_dir
    named = f"--annotator {data_args.annotator}" + (f" --spacy_model {model}" if data_args.annotator == "spacy" else "")
    try:
        return make_named_annotator(data_args.annotator, language=data_args.source_lang, model=model,
                                    device=resolve_device(data_args.annotation_device, "--annotation_device"),
                                    cache_path=data_args.annotation_cache)
    except (FileNotFoundError, AnnotatorLoadError) as error:
        splits, conllu = parsing_need(split_names)
        why = purpose or "the sources need parsing"
        without = f" ({splits} {'have' if len(conllu) > 1 else 'has'} no parses)" if splits and not purpose else ""
        instead = [f"give their parses as CoNLL-U ({', '.join(conllu)})"] if conllu and not purpose else []
        if data_args.annotator == "stanza":
            instead.insert(0, f"parse with spaCy (--annotator spacy --spacy_model <a {data_args.source_lang!r} "
                              "pipeline>, e.g. fr_core_news_sm for French)")
        raise SystemExit(f"{why}, but the {data_args.annotator} annotator cannot be made: {str(error).rstrip('.')}"
                         f"{without}." + (f" Instead, {', or '.join(instead)}." if instead else "")) from None
    except ValueError as error:  # options naming no annotator: a pipeline of another language, no pipeline
        raise SystemExit(f"{named} (--source_lang {data_args.source_lang}): {error}") from None


def saved_tokenizer_settings(name: str) -> dict | None:
    """The source language and recorded annotator (`language`, `annotator_settings`) of a saved feature-aware
    tokenizer (a `PretrainedSourceFeatureTokenizer`'s settings file, else a `SourceFeatureTokenizer`'s
    tokenizer_config.json), read without loading it; None where neither file says (another tokenizer)."""
    from transformers.utils import cached_file

    for file_name in (SETTINGS_FILE, "tokenizer_config.json"):
        try:
            found = cached_file(name, file_name, _raise_exceptions_for_missing_entries=False,
                                _raise_exceptions_for_connection_errors=False)
            settings = json.loads(Path(found).read_text(encoding="utf-8")) if found else None
        except (OSError, ValueError):  # unreadable or damaged: loading the tokenizer names the problem
            settings = None
        # Another tokenizer's config may have a `language` of its own (Whisper's): a feature-aware one records its
        # annotator beside it.
        if isinstance(settings, dict) and isinstance(settings.get("language"), str) \
                and (file_name == SETTINGS_FILE or "annotator_settings" in settings):
            return settings
    return None


def existing_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args,
                       trains: bool) -> tuple[str, str] | None:
    """The saved tokenizer this run will use, and the option that names it: --tokenizer_name_or_path,
    --model_name_or_path, or the run's own in --output_dir (resumed, or not cleared by --overwrite_output_dir);
    None: the run builds one."""
    output_dir = str(training_args.output_dir)
    kept = not (trains and data_args.overwrite_output_dir and not training_args.resume_from_checkpoint)
    if model_args.init_from:
        return (output_dir, "--output_dir") if kept and Path(output_dir, SETTINGS_FILE).exists() else None
    if model_args.tokenizer_name_or_path:
        return model_args.tokenizer_name_or_path, "--tokenizer_name_or_path"
    if model_args.model_name_or_path:
        return model_args.model_name_or_path, "--model_name_or_path"
    if kept and Path(output_dir, "tokenizer.json").exists():
        return output_dir, "--output_dir"
    return None


def check_existing_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args,
                             trains: bool) -> None:
    """A saved tokenizer the run uses is for the sources' language and parses as the options say, checked from its
    files before any parsing; with no annotator option, sources the run parses are parsed with its recorded
    annotator (a spaCy pipeline becomes --annotator spacy --spacy_model)."""
    found = existing_tokenizer(model_args, data_args, training_args, trains)
    settings = saved_tokenizer_settings(found[0]) if found else None
    if found is None or settings is None:
        return
    name, option = found
    language = settings["language"]
    if language != data_args.source_lang:
        raise SystemExit(f"--source_lang {data_args.source_lang}, but the tokenizer of {option} {name} was built for "
                         f"{language!r} sources (its feature vocabularies hold that language's words and tags): give "
                         f"--source_lang {language}, or another tokenizer.")
    recorded = settings.get("annotator_settings") or {"backend": DEFAULT_ANNOTATOR, "language": language}
    backend, model = recorded.get("backend", DEFAULT_ANNOTATOR), recorded.get("model")
    if not annotator_given(data_args):
        if backend == "spacy" and model:  # the options of the annotator it records
            data_args.annotator, data_args.spacy_model = backend, str(model)
            logger.info("raw sources are parsed with the annotator the tokenizer of %s records: --annotator spacy "
                        "--spacy_model %s", name, model)
        return
    asked = data_args.spacy_model if data_args.annotator == "spacy" else None
    if backend != data_args.annotator or (data_args.annotator == "spacy" and not same_pipeline(model, asked)):
        recorded_options = f"--annotator {backend}" + (f" --spacy_model {model}" if model else "")
        raise SystemExit(f"--annotator {data_args.annotator}" + (f" --spacy_model {asked}" if asked else "")
                         + f": the tokenizer of {option} {name} was built with another annotator ({recorded_options}), "
                         "whose tags and trees its feature vocabularies and the model expect; give its options, or "
                         "another tokenizer.")


def same_pipeline(recorded: str | None, asked: str | None) -> bool:
    """Whether two spaCy pipeline names or folders are the same: a package by name, a folder by its resolved path
    (`./pipe` and its absolute path alike), or by its name where the recorded folder is not on this machine."""
    if recorded is None or asked is None:
        return recorded == asked
    if Path(recorded).exists() and Path(asked).exists():
        return Path(recorded).resolve() == Path(asked).resolve()
    return Path(recorded.rstrip("/")).name == Path(asked.rstrip("/")).name


def build_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args, train_data,
                    unparsed: list, unparsed_names: Sequence[str] = ()):
    """Load the given feature-aware tokenizer, or train one on the main process and share it through
    output_dir; either way its annotator parses every source sentence without a given parse once (cached) before
    tokenization. A tokenizer built here records the annotator the options name (re-created to parse raw text at
    translation), also when every source came parsed. `unparsed_names`: the names of the `unparsed` splits, for the
    messages."""
    # Stanza is made only when some sources come without parses, so that fully pre-parsed data needs no Stanza
    # models (a tokenizer records it without them); another annotator is made to record its settings (a spaCy
    # pipeline's version), which loads it.
    saved = Path(training_args.output_dir) / "tokenizer.json"
    loads = bool(model_args.tokenizer_name_or_path or model_args.model_name_or_path or saved.exists()) \
        if not model_args.init_from else (Path(training_args.output_dir) / SETTINGS_FILE).exists()
    records_other = data_args.annotator != DEFAULT_ANNOTATOR and not loads  # a loaded tokenizer records its own
    annotator = make_annotator(data_args, unparsed_names) if unparsed else make_annotator(
        data_args, purpose=f"the tokenizer records the annotator (--annotator {data_args.annotator}) that parses "
                           "raw text at translation") if records_other else None
    if not unparsed and not loads and not annotator_given(data_args):
        logger.warning("every source comes parsed and no --annotator is given: the new tokenizer records the default "
                       "annotator, Stanza for %r, which will parse raw text at translation (hf-srcfeat-translate, the "
                       "pipeline). Unless the given parses came from Stanza, give the parser's options (--annotator "
                       "spacy --spacy_model ...) so that translation parses as the training data were.",
                       data_args.source_lang)
    # The main process annotates and trains first; the others then read its cache and files.
    with training_args.main_process_first(desc="annotation and tokenizer"):
        for data in unparsed:
            assert annotator is not None  # made above whenever some sources have no parse
            for chunk in data.iter(batch_size=ANNOTATION_CHUNK):
                annotator.annotate(chunk["source"], show_progress=training_args.local_process_index == 0,
                                   num_proc=data_args.annotation_num_proc)
        if annotator is not None:
            annotator.close()  # its helper processes: everything is parsed and cached now
        if model_args.init_from:
            tokenizer = pretrained_tokenizer(model_args, data_args, training_args, train_data, annotator)
        elif model_args.tokenizer_name_or_path or model_args.model_name_or_path or saved.exists():
            tokenizer = load_tokenizer(
                model_args.tokenizer_name_or_path or model_args.model_name_or_path or training_args.output_dir)
            if not isinstance(tokenizer, (hf_srcfeat.SourceFeatureTokenizer, PretrainedSourceFeatureTokenizer)):
                raise ValueError(f"{type(tokenizer).__name__} is not a SourceFeatureTokenizer; train.py needs the "
                                 "source features (train a new one by leaving --tokenizer_name_or_path out).")
        else:
            tokenizer = train_source_feature_tokenizer(
                dataset_column(train_data, "source"), dataset_column(train_data, "target"),
                vocab_size=model_args.vocab_size, subword_model=model_args.subword_model,
                language=data_args.source_lang, source_annotations=training_annotations(train_data, annotator),
                pos_tagset=model_args.pos_tagset, annotator=annotator, max_lemmas=model_args.max_lemmas or None,
                lemma_min_frequency=model_args.lemma_min_frequency)
            tokenizer.save_pretrained(training_args.output_dir)
    # Translation (the pipeline, hf-srcfeat-translate) cuts a source at the tokenizer's model_max_length: where this
    # run's training, evaluation and test predictions cut it, saved with the tokenizer.
    getattr(tokenizer, "base", tokenizer).model_max_length = data_args.max_source_length
    if annotator is not None:
        tokenizer.annotator = annotator
    return tokenizer


def training_annotations(train_data, annotator) -> Iterable[AnnotatedSentence]:
    """The parses of the training sources: their parse column, else the annotator's (cached: read chunk by chunk)."""
    if PARSE_COLUMN in train_data.column_names:
        return map(AnnotatedSentence.from_json, dataset_column(train_data, PARSE_COLUMN))
    assert annotator is not None  # build_tokenizer makes one whenever a split has no parses
    return (sentence for batch in train_data.iter(batch_size=ANNOTATION_CHUNK)
            for sentence in annotator.annotate(batch["source"], show_progress=False))


def pretrained_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args, train_data,
                         annotator):
    """The `--init_from` checkpoint's own tokenizer with feature vocabularies from the training sources (or the one
    an earlier run of this output_dir saved)."""
    languages = {name: code for name, code in (("src_lang", model_args.source_lang_code),
                                               ("tgt_lang", model_args.target_lang_code)) if code}
    if (Path(training_args.output_dir) / SETTINGS_FILE).exists():
        saved = PretrainedSourceFeatureTokenizer.from_pretrained(training_args.output_dir)
        # The run's tokenizer puts its language codes into every encoding: other codes would not reach it.
        differing = [f"--{option} {code} (the run's: {getattr(saved.base, name, None)})"
                     for name, option, code in (("src_lang", "source_lang_code", model_args.source_lang_code),
                                                ("tgt_lang", "target_lang_code", model_args.target_lang_code))
                     if code and getattr(saved.base, name, code) != code]
        if differing:
            raise SystemExit(f"{training_args.output_dir} was started with other language codes: "
                             f"{', '.join(differing)}; resume with the run's own, or start a new run.")
        return saved
    # The codes were checked before any work (check_language_codes): M2M100's and mBART-50's tokenizers would fail
    # on an unknown one here.
    base = AutoTokenizer.from_pretrained(model_args.init_from, **languages)
    tokenizer = PretrainedSourceFeatureTokenizer.build(
        base, training_annotations(train_data, annotator), language=data_args.source_lang, annotator=annotator,
        pos_tagset=model_args.pos_tagset, lemma_min_frequency=model_args.lemma_min_frequency,
        max_lemmas=model_args.max_lemmas or None)
    tokenizer.save_pretrained(training_args.output_dir)
    return tokenizer


def pretrained_model(model_args: ModelArguments, tokenizer):
    """The `--init_from` checkpoint converted into the backbone, with `--model_type` grafted onto it."""
    from hf_srcfeat.pretrained_checkpoints import convert_pretrained, graft

    assert model_args.init_from  # only called with --init_from
    overrides = pretrained_overrides(model_args)
    grafts = model_args.model_type != "srcfeat_transformer"
    # The backbone's own settings (its dropouts) go to the conversion; a graft takes them with the method's.
    model: PreTrainedModel = convert_pretrained(model_args.init_from, **({} if grafts else overrides))
    if len(tokenizer) > model.config.vocab_size:
        raise SystemExit(f"the tokenizer of {model_args.init_from} has {len(tokenizer)} tokens, its model "
                         f"{model.config.vocab_size}.")
    if grafts:
        config_class = MODEL_CONFIGS[model_args.model_type]
        model = graft(model, model_args.model_type, **feature_vocabulary_arguments(config_class, tokenizer),
                      **overrides)
    if model_args.target_lang_code:
        # As the tokenizer starts the labels: M2M100's code de stands for the token __de__ (de is also a subword).
        base = getattr(tokenizer, "base", tokenizer)
        target = language_code_id(base, model_args.target_lang_code)
        if target is None:  # checked before any work (check_language_codes); a resumed run's tokenizer is its own
            raise SystemExit(unknown_language_code(base, "--target_lang_code", model_args.target_lang_code,
                                                   model_args.init_from))
        model.generation_config.forced_bos_token_id = target
    model.config.tokenizer_fingerprint = tokenizer.fingerprint()
    return model


def feature_vocabulary_arguments(config_class, tokenizer) -> dict[str, int]:
    """The tokenizer's feature vocabulary sizes (`num_lemmas`, ...), for the configs that take them."""
    accepted = config_argument_names(config_class)
    return {name: size for name, size in tokenizer.feature_vocabularies.sizes().items() if name in accepted}


def config_argument_names(config_class) -> set[str]:
    """The arguments a config class takes (a composed config: every component's)."""
    if issubclass(config_class, hf_srcfeat.SrcFeatComposedConfig):
        return {*BACKBONE_ARGUMENTS, *(name for arguments in COMPONENT_ARGUMENTS.values() for name in arguments)}
    return set(inspect.signature(config_class.__init__).parameters)


def given_config_overrides(model_args: ModelArguments) -> dict:
    """`--config_overrides` as a mapping; not a JSON object, it is named (it is read again only once the data is
    parsed and the tokenizer built)."""
    if not model_args.config_overrides:
        return {}
    if isinstance(model_args.config_overrides, dict):  # a YAML or JSON recipe may give the mapping itself
        return model_args.config_overrides
    try:
        overrides = json.loads(model_args.config_overrides)
    except json.JSONDecodeError as error:
        raise SystemExit(f"--config_overrides is not valid JSON ({error.msg} at column {error.colno}): "
                         f"{model_args.config_overrides!r}.") from None
    if not isinstance(overrides, dict):
        raise SystemExit(f"--config_overrides must be a JSON object of config settings ('{{\"name\": value}}'), got "
                         f"{model_args.config_overrides!r}.")
    return overrides


def known_config_settings(config_class) -> set[str]:
    """Every setting a config class takes: its own arguments and those of the configs it extends (a method's config
    passes the backbone's on), and Transformers' common ones."""
    from transformers import PretrainedConfig

    known = set(config_argument_names(config_class)) | set(PretrainedConfig().to_dict())
    for base in config_class.__mro__:
        if "__init__" in vars(base):
            known |= set(inspect.signature(base.__init__).parameters)
    return known - {"self", "kwargs"}


def check_model_type(model_args: ModelArguments) -> None:
    """`--model_type` and `--config_overrides` checked before any work: the model is built only after the parsing
    and the tokenizer, which would otherwise be written to the output folder first. A setting the model type does
    not take would be stored in its config and read by nothing: a misspelt name is named with the closest ones."""
    if model_args.model_type not in MODEL_CONFIGS:
        raise SystemExit(f"--model_type {model_args.model_type!r} is not a model type; choose from "
                         f"{', '.join(MODEL_CONFIGS)} (or a --variant).")
    overrides = given_config_overrides(model_args)
    known = known_config_settings(MODEL_CONFIGS[model_args.model_type])
    for name in overrides:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.75)
            raise SystemExit(f"--config_overrides {name!r}: {model_args.model_type} has no such setting"
                             + (f" (did you mean {' or '.join(repr(one) for one in close)}?)" if close else "")
                             + f"; `--help_model {model_args.model_type}` lists them.")


def check_new_model_settings(model_args: ModelArguments, factor_names: Sequence[str] = (),
                             factors_in_parses: bool = False) -> None:
    """The config a run from scratch builds, made before any work from the options alone (feature vocabulary sizes
    at their defaults; the user factors with a stand-in size), so that a value it refuses is named at once instead
    of after the parsing, and the pre-trained parts it names (a denoising autoencoder) are there and fit.
    `factors_in_parses`: CoNLL-U parses may bring user factors of their own (MISC `Factor_<name>=`)."""
    from hf_srcfeat.modeling_latent_feedback import autoencoder_mismatches, is_hub_id

    stand_ins = user_factor_stand_ins(given_config_overrides(model_args), factor_names)
    try:
        # A tokenizer given decides the vocabulary: the option's size, unused then, must not fail the check.
        vocab_size = 32000 if model_args.tokenizer_name_or_path else model_args.vocab_size
        config = model_config(model_args, vocab_size=vocab_size, feature_vocabulary_sizes={"extra_factors": stand_ins})
    except (ValueError, TypeError) as error:
        raise SystemExit(f"--model_type {model_args.model_type} with these settings: {error}") from None
    if getattr(config, "gives_feedback", True) is False:  # a tiny smoke-test size may still want to run
        logger.warning("--model_type %s: no NMT layer gets feedback (layer i takes the LFE layers above it and the "
                       "top layer none), with encoder_layers=%d and feedback_layers %s: the model trains as a "
                       "baseline carrying an unused LFE; use at least 2 encoder layers and a feedback layer below "
                       "the top.", model_args.model_type, config.encoder_layers, config.layers_with_feedback)
    check_features_read(config, factor_names, factors_in_parses)
    source = getattr(config, "lfe_pretrained_from", None)
    if not source:
        return
    from transformers import AutoConfig

    try:
        if not Path(source).is_dir() and not is_hub_id(source):
            raise OSError("no such folder, nor a Hub id org/name")
        autoencoder = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:
        raise SystemExit(f"lfe_pretrained_from={source!r}: {error_summary(error)}; point it at the denoising "
                         "autoencoder hf-srcfeat-pretrain-dae wrote.") from None
    # The vocabulary size only the tokenizer gives is compared when the model is built.
    differing = [f"{name} {theirs!r} (this model's: {ours!r})" for name, theirs, ours
                 in autoencoder_mismatches(autoencoder, config) if name != "vocab_size"]
    if autoencoder.model_type != "srcfeat_transformer" or differing:
        raise SystemExit(f"lfe_pretrained_from={source!r} is not a denoising autoencoder this model's LFE can start "
                         f"from: {', '.join(differing) or f'a {autoencoder.model_type} model'}.")


def check_factor_names(factor_names: Sequence[str]) -> None:
    """User factors (`--source_factor_columns`, `--inline_source_factors`) are named once each, and not like a
    built-in feature, whose vocabulary a user factor of that name would replace."""
    if len(set(factor_names)) < len(factor_names):
        raise SystemExit(f"--source_factor_columns and --inline_source_factors name a factor twice: "
                         f"{list(factor_names)}.")
    reserved = [name for name in factor_names if name in FACTOR_VOCABULARY_SIZE_ARGUMENTS]
    if reserved:
        raise SystemExit(f"--source_factor_columns/--inline_source_factors {', '.join(reserved)}: a built-in "
                         f"feature's name ({', '.join(FACTOR_VOCABULARY_SIZE_ARGUMENTS)} come from the parse); name "
                         "your factor otherwise, e.g. my_pos.")


def check_features_read(config, factor_names: Sequence[str], factors_in_parses: bool = False,
                        trained_model: str | None = None) -> None:
    """Refuse user factors the model would not read (trained on as a column, then dropped without a word), factors it
    reads that no option provides (unless the parses may), and feature dropout of a feature it does not read
    (recorded, but nothing dropped). `trained_model`: the folder or Hub id of a trained model of `config` (its
    factors are fixed), else the config is of the model this run builds."""
    from hf_srcfeat.source_features import user_factors_read

    read = user_factors_read(config)
    if read is None:  # a config that does not say reads every feature it is given
        return
    features = config.source_features_read
    missing = [] if factors_in_parses else [name for name in read if name not in factor_names]
    if missing:
        reader = f"{trained_model} reads the user factors" if trained_model else "--config_overrides source_factors"
        raise SystemExit(f"{reader} {', '.join(missing)}: no such factor comes with the corpus; name its column with "
                         "--source_factor_columns, or its inline values (word￨value) with --inline_source_factors.")
    unread = [name for name in factor_names if name not in read]
    if unread:
        them = "them" if len(unread) > 1 else "it"
        remedy = f"leave {them} out" if trained_model else (
            f"add {them} to `source_factors` in --config_overrides (relevance_features models read user factors), or "
            f"leave {them} out")
        raise SystemExit(f"--source_factor_columns/--inline_source_factors {', '.join(unread)}: "
                         f"{trained_model or config.model_type} would not read {them} "
                         f"({'its user factors: ' + ', '.join(read) if read else 'it reads no user factor'}); "
                         f"{remedy}.")
    if trained_model:
        return
    dropped = getattr(config, "feature_dropout", None)
    unread = sorted(set(dropped) - set(features)) if isinstance(dropped, dict) else []
    if unread:
        raise SystemExit(f"--config_overrides feature_dropout {', '.join(unread)}: {config.model_type} reads no such "
                         f"feature (it reads {', '.join(features) or 'none'}), so nothing would be dropped.")


def check_trained_model_factors(name: str, factor_names: Sequence[str], factors_in_parses: bool) -> None:
    """The user factors a trained model (`--model_name_or_path`) reads are the ones the corpus brings: checked from
    its config before any work. A config that does not load is left to the model's own loading, which names it."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError):
        return
    check_features_read(config, factor_names, factors_in_parses, trained_model=name)


def model_config(model_args: ModelArguments, vocab_size: int, feature_vocabulary_sizes: dict[str, Any] | None = None,
                 special_token_ids: dict[str, int] | None = None):
    """The config of a new `--model_type` model from the arguments (size, `--config_overrides`) and the
    tokenizer's vocabulary sizes; `config_overrides` win over everything else."""
    check_model_type(model_args)
    overrides = given_config_overrides(model_args)
    config_class = MODEL_CONFIGS[model_args.model_type]
    accepted = config_argument_names(config_class)
    feature_sizes = {name: size for name, size in (feature_vocabulary_sizes or {}).items() if name in accepted}
    settings: dict[str, Any] = dict(
        vocab_size=vocab_size, d_model=model_args.d_model,
        encoder_layers=model_args.encoder_layers, decoder_layers=model_args.decoder_layers,
        encoder_attention_heads=model_args.attention_heads, decoder_attention_heads=model_args.attention_heads,
        encoder_ffn_dim=model_args.ffn_dim, decoder_ffn_dim=model_args.ffn_dim, dropout=model_args.dropout,
        label_smoothing=model_args.label_smoothing, layernorm_position=model_args.layernorm_position,
        **(special_token_ids or {}), **feature_sizes)
    return config_class(**{**settings, **overrides})  # the overrides win, also over the size options


def build_model(model_args: ModelArguments, tokenizer, seed: int):
    """A new model of `--model_type` initialised from `seed`, or the pretrained `--model_name_or_path`."""
    # Seeded here, not only at start-up: annotating uncached sentences loads Stanza, whose layers draw from the global
    # RNG when built, so without this the initial weights would depend on what the annotation cache held.
    set_seed(seed)
    if model_args.init_from:
        return pretrained_model(model_args, tokenizer)
    if model_args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)
        check_tokenizer_matches(model.config, tokenizer)
        return model
    config = model_config(model_args, len(tokenizer), feature_vocabulary_sizes=tokenizer.feature_vocabularies.sizes(),
                          special_token_ids=dict(pad_token_id=tokenizer.pad_token_id,
                                                 bos_token_id=tokenizer.bos_token_id,
                                                 eos_token_id=tokenizer.eos_token_id,
                                                 decoder_start_token_id=tokenizer.bos_token_id))
    config.tokenizer_fingerprint = tokenizer.fingerprint()  # checked wherever model and tokenizer meet again
    model = AutoModelForSeq2SeqLM.from_config(config)
    if hasattr(model, "load_pretrained_parts"):
        try:
            model.load_pretrained_parts()  # e.g. a latent feature encoder pre-trained as a denoising autoencoder
        except (ValueError, OSError) as error:
            raise SystemExit(f"--model_type {model_args.model_type}: {error_summary(error)}") from None
    return model


def adapter_optimizer_class(training_args, model: PreTrainedModel | None) -> tuple[Any, dict]:
    """The optimizer class `--optim` chooses and its arguments (`--learning_rate`, the Adam betas and epsilon,
    `--optim_args`), as the Trainer's own optimizer gets them, for the parameter groups of the adapter options; an
    optimizer that makes its own groups or optimizers (GaLore, APOLLO, LOMO, the layer-wise ones, an optimizer
    factory) is refused."""
    from transformers import Trainer
    from transformers.trainer_optimizer import is_optimizer_factory

    optim = str(getattr(training_args.optim, "value", training_args.optim))
    refusal = (f"--optim {optim} makes its own parameter groups (or optimizers), and --freeze_pretrained / "
               "--added_learning_rate give the pretrained and the added parameters groups of their own: choose an "
               "optimizer that takes parameter groups (adamw_torch, adafactor, sgd, ...), or leave the adapter "
               "options out.")
    if any(name in optim for name in ("galore", "apollo", "lomo", "layerwise")):  # (they also need the model)
        raise SystemExit(refusal)
    try:
        optimizer_class, arguments = Trainer.get_optimizer_cls_and_kwargs(training_args, model)
    except (ValueError, ImportError) as error:
        raise SystemExit(f"--optim {optim}: {error_summary(error)}") from None
    if is_optimizer_factory(optimizer_class) or {"params", "model", "optimizer_dict"} & set(arguments):
        raise SystemExit(refusal)
    return optimizer_class, dict(arguments)


def check_adapter_optimizer(model_args: ModelArguments, training_args) -> None:
    """`--optim` with the adapter options, checked before any work (without the model: the optimizers that take
    parameter groups do not need it for their class and arguments)."""
    if model_args.init_from and (model_args.freeze_pretrained or model_args.added_learning_rate):
        adapter_optimizer_class(training_args, None)


def adapter_optimizer(model, model_args: ModelArguments, training_args, callbacks: list) -> tuple:
    """For a grafted model with --freeze_pretrained / --added_learning_rate: the optimizer `--optim` chooses (AdamW
    by default), with its arguments as the Trainer gives them, over the pretrained and the added parameters at their
    own rates (the Trainer's schedule scales both), and the unfreezing callback; else (None, None), the Trainer's own
    optimizer."""
    if not (model_args.freeze_pretrained or model_args.added_learning_rate):
        return None, None
    from hf_srcfeat.graft_training import UnfreezeCallback, freeze_pretrained, parameter_groups

    if model_args.freeze_pretrained:
        frozen = freeze_pretrained(model)
        logger.info("--freeze_pretrained: %d pretrained parameter tensors frozen; the method's %d train", frozen,
                    len(getattr(model.config, "grafted_parameters", None) or ()))
    if model_args.unfreeze_after_steps:
        callbacks.append(UnfreezeCallback(model, model_args.unfreeze_after_steps))
    groups = parameter_groups(model, training_args.learning_rate, model_args.added_learning_rate,
                              training_args.weight_decay)
    optimizer_class, arguments = adapter_optimizer_class(training_args, model)
    return optimizer_class(groups, **arguments), None  # each group's own rate wins over the arguments' lr


CONFIG_SUFFIXES = (".json", ".yaml", ".yml")


def read_config_file(path: str) -> dict:
    """The arguments a recipe file (JSON or YAML mapping of argument names to values) gives, or an error naming the
    file."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SystemExit(f"--config {path}: cannot be read ({error.strerror or error}).") from None
    try:
        values = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise SystemExit(f"--config {path} is not valid {'JSON' if path.endswith('.json') else 'YAML'}: {error}") \
            from None
    if not isinstance(values, dict):
        raise SystemExit(f"--config {path} must hold a mapping of argument names to values, not "
                         f"{type(values).__name__}.")
    return values


def parse_arguments(argv: list[str] | None = None):
    """The three argument groups of `hf-srcfeat-train` (see `parse_with_config`), a `--variant` applied;
    `--help_model TYPE` prints that model type's settings and exits."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help_model" in argv:
        position = argv.index("--help_model")
        print(model_help(argv[position + 1] if position + 1 < len(argv) else ""))
        raise SystemExit(0)
    parser = HfArgumentParser((ModelArguments, DataArguments, Seq2SeqTrainingArguments))  # type: ignore[arg-type]
    model_args, data_args, training_args = parse_with_config(parser, argv)
    apply_variant(model_args)
    apply_training_defaults(model_args, data_args, training_args)
    return model_args, data_args, training_args


#: Seq2SeqTrainingArguments defaults for a model trained from scratch (Transformers' own suit fine-tuning): the
#: recipes' optimiser and schedule (Vaswani et al.'s inverse square root with warm-up, beta2 0.98) and batches.
FROM_SCRATCH_DEFAULTS = {"learning_rate": 1e-3, "lr_scheduler_type": "inverse_sqrt", "warmup_steps": 400,
                         "adam_beta2": 0.98, "per_device_train_batch_size": 64, "per_device_eval_batch_size": 64}
#: The recipes' training batches from scratch, unless a batch size is given: token batches of about 60 Multi30k
#: pairs, as many as the 64-sentence batches hold, with 2.3% of the source and target positions padding instead of
#: 51% (benchmarks/results/batching_efficiency_recipes_1024_full_corpus.json). Never below the longest example
#: allowed.
FROM_SCRATCH_TOKENS_PER_BATCH = 1024


def flags_ask_for_sentence_batches(arguments) -> bool:
    """Whether the command line gives `--per_device_train_batch_size` without `--max_tokens_per_batch`: sentence
    batches, also over a recipe's token budget."""
    flags: set[str] = getattr(arguments, "_given_as_flags", set())
    return "per_device_train_batch_size" in flags and "max_tokens_per_batch" not in flags


def apply_training_defaults(model_args: ModelArguments, data_args: DataArguments,
                            training_args: Seq2SeqTrainingArguments) -> None:
    """From scratch (no --init_from, --model_name_or_path), the options not given take FROM_SCRATCH_DEFAULTS and
    token batches, unless a batch size is given; a `--per_device_train_batch_size` flag without a
    `--max_tokens_per_batch` flag asks for sentence batches, also over a recipe's token budget. On a machine
    without CUDA batches are not pinned (pinning needs an accelerator, and torch warns every run)."""
    given: set[str] = getattr(training_args, "_given", set())
    if "dataloader_pin_memory" not in given and (training_args.use_cpu or not torch.cuda.is_available()):
        training_args.dataloader_pin_memory = False
    if flags_ask_for_sentence_batches(training_args):
        data_args.max_tokens_per_batch = None
    if model_args.init_from or model_args.model_name_or_path:
        return
    for name, value in FROM_SCRATCH_DEFAULTS.items():
        if name not in given:
            setattr(training_args, name, value)
    if not given & {"max_tokens_per_batch", "per_device_train_batch_size"}:
        data_args.max_tokens_per_batch = max(FROM_SCRATCH_TOKENS_PER_BATCH, data_args.max_source_length,
                                             data_args.max_target_length)


def model_help(model_type: str) -> str:
    """A model type's settings (its config class's documentation, every argument with its default)."""
    if model_type not in MODEL_CONFIGS:
        raise SystemExit(f"--help_model: give one of {', '.join(MODEL_CONFIGS)}, got {model_type!r}.")
    config_class = MODEL_CONFIGS[model_type]
    defaults = [f"  {name} = {parameter.default!r}" for name, parameter in
                inspect.signature(config_class.__init__).parameters.items()
                if parameter.default is not inspect.Parameter.empty]
    named = [f"  --variant {name}: {one.description}" for name, one in VARIANTS.items() if one.model_type == model_type]
    return (f"{model_type} ({config_class.__name__}); set any of these with --config_overrides '{{\"name\": value}}' "
            f"(or a recipe's config_overrides).\n\n{inspect.getdoc(config_class)}\n\nDefaults:\n" + "\n".join(defaults)
            + ("\n\nNamed variants:\n" + "\n".join(named) if named else ""))


def apply_variant(model_args: ModelArguments) -> None:
    """`--variant NAME`: its model type, and its settings under any --config_overrides."""
    if model_args.variant is None:
        return
    try:
        chosen = variant(model_args.variant)
    except ValueError as error:
        raise SystemExit(f"--variant: {error}") from None
    if model_args.model_type not in ("srcfeat_transformer", chosen.model_type):
        raise SystemExit(f"--variant {model_args.variant} is a {chosen.model_type} model; --model_type "
                         f"{model_args.model_type} says otherwise. Give one of them.")
    given = given_config_overrides(model_args)
    model_args.model_type = chosen.model_type
    model_args.config_overrides = json.dumps({**chosen.config, **given})


def parse_with_config(parser: HfArgumentParser, argv: list[str] | None = None) -> tuple:
    """The parser's dataclasses from flags, from a recipe file (`--config FILE`, or the file as the first
    argument), or both: flags given beside a recipe override its values (a mapping's, MERGED_OPTIONS, add to it)."""
    argv = ["--help" if argument == HELP_ALL else argument for argument in (sys.argv[1:] if argv is None else argv)]
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        argv = ["--config", *argv]
    config_parser = argparse.ArgumentParser(add_help=False)
    config_parser.add_argument("--config", default=None)
    config, argv = config_parser.parse_known_args(argv)
    values: dict = {}
    if config.config is not None:
        values = read_config_file(config.config)
        actions = {action.dest: action for action in parser._actions}
        unknown = sorted(set(values) - set(actions) - {"help"})
        if unknown:
            raise SystemExit(f"--config {config.config}: unknown argument(s) {', '.join(unknown)} (see --help).")
        for name in values:
            actions[name].required = False  # given by the file; a flag may still override it
        parser.set_defaults(**values)
    try:
        *parsed, unused = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ValueError as error:  # Transformers' checks of its TrainingArguments (bf16 without a GPU, ...)
        source = f" (--config {config.config} or the flags)" if config.config else ""
        raise SystemExit(f"the training arguments{source}: {error_summary(error)}") from None
    if unused:
        raise SystemExit(unknown_options_message(parser, unused))
    flags = given_flags(parser, argv)
    for name in MERGED_OPTIONS & set(values) & flags:
        for arguments in parsed:
            if hasattr(arguments, name):
                setattr(arguments, name, merged_mapping(values[name], getattr(arguments, name)))
    for arguments in parsed:  # which options were set, for defaults that depend on the run
        arguments.__dict__["_given"] = set(values) | flags
        arguments.__dict__["_given_as_flags"] = flags
    return tuple(parsed)


#: Options whose value is a mapping: a flag beside a recipe adds to the recipe's mapping (its keys win), as
#: `--variant` does, instead of replacing it.
MERGED_OPTIONS = {"config_overrides"}


def merged_mapping(recipe_value: object, flag_value: object) -> object:
    """The recipe's mapping updated with the flag's, as a JSON object; either not a mapping: the flag's value as
    given (named later if it is no JSON object)."""
    def as_mapping(value: object) -> dict | None:
        if isinstance(value, dict):
            return value
        try:
            loaded = json.loads(value) if isinstance(value, str) else None
        except json.JSONDecodeError:
            return None
        return loaded if isinstance(loaded, dict) else None

    recipe, flag = as_mapping(recipe_value), as_mapping(flag_value)
    return json.dumps({**recipe, **flag}) if recipe is not None and flag is not None else flag_value


def unknown_options_message(parser: argparse.ArgumentParser, unused: list[str]) -> str:
    """What to say of arguments no option takes: each unknown option with the closest known ones."""
    known = [option for action in parser._actions for option in action.option_strings
             if option.startswith("--") and "-" not in option[2:]]  # not the dashed spellings of the same options
    unknown = [argument for argument in unused if argument.startswith("-")]
    if not unknown:
        return f"unexpected argument(s) {' '.join(unused)}: every value follows its option (see --help)."
    parts = []
    for option in unknown:
        close = difflib.get_close_matches(option.split("=", 1)[0], known, n=3, cutoff=0.75)
        parts.append(f"{option}" + (f" (did you mean {' or '.join(close)}?)" if close else ""))
    return f"unknown option(s) {', '.join(parts)}; --help lists the options, --help_all the Trainer's too."


def given_flags(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The fields the command-line flags set, as argparse matches them: `--name`, `--name=value`, the dashed
    spelling `--per-device-train-batch-size`, or an unambiguous prefix."""
    options = parser._option_string_actions  # argparse's own table of option strings
    fields = set()
    for argument in argv:
        if not argument.startswith("--"):
            continue
        option = argument.split("=", 1)[0]
        if option in options:
            fields.add(options[option].dest)
        elif parser.allow_abbrev:
            matches = {action.dest for string, action in options.items() if string.startswith(option)}
            fields |= matches if len(matches) == 1 else set()
    return fields


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(argv)
    with one_graph_for_all_batch_shapes(enabled=training_args.torch_compile):
        return run(model_args, data_args, training_args)


def run(model_args: ModelArguments, data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> dict:
    """Checks the arguments, prepares the data, tokenizer and model, then trains, evaluates and tests as asked; returns
    (and, training, writes to the output folder's results.json) what it measured."""
    assert training_args.output_dir is not None  # TrainingArguments sets a default output folder
    keep_freed_memory()
    check_numeric_arguments(model_args, data_args, training_args)
    check_batch_size_multiple(data_args.batch_size_multiple, data_args.max_tokens_per_batch)
    check_token_budget(data_args.max_tokens_per_batch, {"max_source_length": data_args.max_source_length,
                                                       "max_target_length": data_args.max_target_length})
    check_label_smoothing(training_args)
    check_processes_train_one_model(training_args)
    check_averaging(data_args, training_args)
    check_best_model_metric(training_args)
    check_vocabulary_arguments(model_args)
    if model_args.init_from and not (training_args.do_train or model_args.tokenizer_only):
        raise SystemExit(INIT_FROM_WITHOUT_TRAINING)  # said before the checkpoint's own checks, which need its config
    check_model_type(model_args)
    if model_args.model_name_or_path:
        check_model_source(model_args.model_name_or_path, "--model_name_or_path")
    # A pretrained checkpoint and a trained model keep their own beams (their generation config's), a model from
    # scratch has one.
    kept_from = model_args.init_from or model_args.model_name_or_path
    beams = training_args.generation_num_beams or (checkpoint_beams(kept_from) if kept_from
                                                   and data_args.early_stopping else 1)
    if beams is not None:
        check_beams_stop_early(data_args, beams)
    factor_names = [*(data_args.source_factor_columns or ()), *(data_args.inline_source_factors or ())]
    check_factor_names(factor_names)
    factors_in_parses = bool(data_args.train_source_conllu or data_args.validation_source_conllu
                             or data_args.source_parse_column)
    check_pretrained_start(model_args, factor_names, factors_in_parses)
    check_adapter_optimizer(model_args, training_args)
    if training_args.do_train and not (model_args.tokenizer_only or model_args.init_from or
                                       model_args.model_name_or_path):
        check_new_model_settings(model_args, factor_names, factors_in_parses)
    check_tokenizer_source(model_args)
    check_annotator_options(data_args)
    check_bleu_target_language(data_args, training_args)
    if training_args.dataloader_drop_last and (training_args.predict_with_generate or training_args.do_predict):
        # The Trainer drops evaluation's last batch too: its sentences would have no translation to score.
        raise SystemExit("--dataloader_drop_last leaves the last batch of the validation and test sets untranslated "
                         "(the Trainer drops it there too): leave it out when translations are scored "
                         "(--predict_with_generate, --do_predict).")
    if isinstance(data_args.test_source_conllu, str):  # one file, as a recipe written for one test set gives it
        data_args.test_source_conllu = [data_args.test_source_conllu]
    for option in ("train_source_conllu", "validation_source_conllu", "test_source_conllu"):
        given = getattr(data_args, option)
        for path in [given] if isinstance(given, str) else given or []:
            if not Path(path).is_file():
                raise SystemExit(f"--{option} {path}: no such file.")
    aligned = [option for option in ("train_source_conllu", "validation_source_conllu") if getattr(data_args, option)]
    if data_args.skip_empty_pairs and aligned:
        raise SystemExit(f"--skip_empty_pairs drops pairs, and the parses of --{aligned[0]} follow the corpus line for "
                         "line: remove the empty pairs from both files instead.")
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    resumed_from = None
    # A run that only evaluates a trained model reads (and parses) neither the training data nor, unless it
    # evaluates on it, the validation split.
    trains = training_args.do_train or model_args.tokenizer_only
    if trains:
        check_output_dir(training_args, data_args, model_args)
        resumed_from = check_resumed_checkpoint(training_args)
        if resumed_from:
            check_resumed_model(resumed_from, model_args, training_args.output_dir)
    else:
        model_to_evaluate(model_args, training_args)
    check_existing_tokenizer(model_args, data_args, training_args, trains)
    if model_args.model_name_or_path and not model_args.tokenizer_only:
        check_trained_model_factors(model_args.model_name_or_path, factor_names, factors_in_parses or bool(
            not trains and data_args.test_source_conllu))
    set_seed(training_args.seed)

    corpora = load_corpora(data_args.dataset_name, data_args.dataset_config_name, data_args.train_file,
                           data_args.validation_file, data_args.test_file, data_args.source_lang,
                           data_args.target_lang, data_args.source_column, data_args.target_column, data_args.data_dir,
                           data_args.source_parse_column, data_args.source_factor_columns or (),
                           need_train=trains, skip_empty_pairs=data_args.skip_empty_pairs)
    skipped_empty = {split: corpus.skipped_empty for split, corpus in (("train", corpora.train),
                                                                       ("validation", corpora.validation))
                     if corpus is not None and corpus.skipped_empty}
    for split, count in skipped_empty.items():
        origin = getattr(corpora, split).origin
        logger.warning("%s (%s): %d pairs with an empty source or target dropped (--skip_empty_pairs)", split,
                       ", ".join(origin), count)
    if corpora.validation is None and evaluates_during_training(training_args, data_args):
        raise SystemExit("evaluating during training (--do_eval, --eval_strategy, --load_best_model_at_end or "
                         "--early_stopping_patience) needs validation data: give --validation_file, or a "
                         "--dataset_name with a validation split.")
    # Made once, only if a split with factor columns comes without parses.
    pretokenized_annotator = functools.cache(lambda: make_annotator(
        data_args, purpose="the sources with factor columns and no parses need parsing (their words as split)"
    ).with_pretokenized_input())

    def prepared(corpus, limit: int | None, conllu: str | None):
        """The split cut to `limit`, with a PARSE_COLUMN when its parses are given (column or CoNLL-U file) or its
        factors are (columns, attached to the parses)."""
        data = corpus.data.select(range(min(limit, len(corpus.data)))) if limit is not None else corpus.data
        if data_args.inline_source_factors:
            data = split_inline_factors(data, data_args.inline_source_factors, corpus.origin[0])
        check_source_text(data, corpus.origin[0], parsed_here=SOURCE_CONLLU not in data.column_names and not conllu)
        if SOURCE_CONLLU in data.column_names:
            if conllu:
                raise SystemExit(f"{corpus.name}: the parses come both from --source_parse_column and from {conllu}; "
                                 "give one.")
            data = data.map(functools.partial(parses_from_column, origin=corpus.origin[0]), batched=True,
                            with_indices=True, remove_columns=[SOURCE_CONLLU])
        elif conllu:
            data = source_parses(conllu, corpus.name, data, cut=limit is not None)
        if factor_names:
            data = attach_factor_columns(data, factor_names, pretokenized_annotator,
                                         corpus.origin[0])
        return data

    splits = {"train": prepared(corpora.train, data_args.max_train_samples, data_args.train_source_conllu)} \
        if trains and corpora.train is not None else {}
    if corpora.validation is not None and (trains or training_args.do_eval):
        splits["validation"] = prepared(corpora.validation, data_args.max_eval_samples,
                                        data_args.validation_source_conllu)
    if training_args.do_predict:
        test_parses: list[str | None] = [*data_args.test_source_conllu] if data_args.test_source_conllu else \
            [None] * len(corpora.tests)
        if len(test_parses) != len(corpora.tests):
            raise SystemExit(f"--test_source_conllu gives {len(test_parses)} file(s) for {len(corpora.tests)} test "
                             f"set(s) ({', '.join(corpus.name for corpus in corpora.tests)}); give one per test set, "
                             "in their order.")
        for corpus, parses in zip(corpora.tests, test_parses, strict=True):
            splits[f"test:{corpus.name}"] = prepared(corpus, data_args.max_predict_samples, parses)
    train_data = splits.get("train")

    # The previous run goes only now that the data has passed its checks: a refused corpus leaves it as it was.
    if (trains and data_args.overwrite_output_dir
            and not training_args.resume_from_checkpoint and training_args.process_index == 0
            and Path(training_args.output_dir).is_dir()):
        removed = clear_previous_run(Path(training_args.output_dir))
        if removed:
            logger.warning("--overwrite_output_dir: removed the previous run's %s from %s", removed,
                           training_args.output_dir)
    unparsed_names = [name for name, data in splits.items() if PARSE_COLUMN not in data.column_names]
    tokenizer = build_tokenizer(model_args, data_args, training_args, train_data,
                                [splits[name] for name in unparsed_names], unparsed_names)
    if resumed_from:
        check_resumed_tokenizer(resumed_from, tokenizer)
    if model_args.tokenizer_only:
        tokenizer.save_pretrained(training_args.output_dir)
        logger.info("--tokenizer_only: saved the tokenizer (%d subwords, features %s) to %s", len(tokenizer),
                    tokenizer.feature_vocabularies.sizes(), training_args.output_dir)
        return {"code_version": code_version(), "model_args": asdict(model_args), "data_args": asdict(data_args),
                "vocab_size": len(tokenizer), "feature_vocabulary_sizes": tokenizer.feature_vocabularies.sizes()}
    model = build_model(model_args, tokenizer, training_args.seed)
    # A pretrained checkpoint keeps its own decoding settings (its beams, its length limit) unless told otherwise.
    keeps_its_settings = bool(model_args.init_from)
    # A model trained here (evaluated again) decodes up to the limit its training run set, when no references say.
    saved_length = model.generation_config.max_length if model_args.model_name_or_path else None
    if training_args.generation_max_length or not keeps_its_settings:
        model.generation_config.max_length = training_args.generation_max_length or data_args.max_target_length
    # A model trained here keeps the beams its training run set too (evaluated again, or trained on).
    saved_beams = model.generation_config.num_beams if model_args.model_name_or_path else None
    if training_args.generation_num_beams or not keeps_its_settings:
        model.generation_config.num_beams = training_args.generation_num_beams or saved_beams or 1
    for name, value in given_decoding_options(data_args).items():
        setattr(model.generation_config, name, value)
    check_beams_stop_early(data_args, model.generation_config.num_beams)

    def tokenize(batch):
        if PARSE_COLUMN in batch:
            parses = [AnnotatedSentence.from_json(parse) for parse in batch[PARSE_COLUMN]]
            encoded = tokenizer(annotations=parses, truncation=True, max_length=data_args.max_source_length,
                                return_dep_distance=False)
        else:
            encoded = tokenizer(batch["source"], truncation=True, max_length=data_args.max_source_length,
                                return_dep_distance=False)  # O(S): the collator builds the [S, S] distances
        encoded["labels"] = tokenizer(text_target=batch["target"], truncation=True,
                                      max_length=data_args.max_target_length)["input_ids"]
        return encoded

    with training_args.main_process_first(desc="tokenization"):
        stored = storage_features(stored_columns(tokenizer))  # narrow integer types: a third of the int64 default
        # Cached next to the corpus's Arrow files: a second run with the same corpus and tokenizer reuses them,
        # and under torchrun the other ranks read what the main process wrote.
        tokenized = {name: data.map(tokenize, batched=True, remove_columns=data.column_names, features=stored,
                                    num_proc=data_args.preprocessing_num_workers, desc=f"tokenize {name}",
                                    new_fingerprint=tokenization_fingerprint(data, tokenizer, data_args))
                     for name, data in splits.items()}
        train_set, eval_set = tokenized.get("train"), tokenized.get("validation")
        test_sets = {name.split(":", 1)[1]: data for name, data in tokenized.items() if name.startswith("test:")}
    if not keeps_its_settings and not training_args.generation_max_length \
            and "generation_max_length" not in getattr(training_args, "_given", ()):
        # From the validation references, never the test sets' (a decoding setting taken from the test references
        # would be tuned on them); without validation data, --max_target_length (set above) or a trained model's own.
        if eval_set is not None:
            model.generation_config.max_length = generation_length([eval_set], data_args.max_target_length)
            logger.info("generation length %d tokens: 1.5 x the longest validation reference + 5 (at most "
                        "--max_target_length); --generation_max_length sets it", model.generation_config.max_length)
        elif saved_length:
            model.generation_config.max_length = saved_length

    callbacks: list[TrainerCallback] = [TimeBudgetCallback(data_args.max_train_minutes)] if data_args.max_train_minutes \
        else []
    if data_args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=data_args.early_stopping_patience))
    optimizers = adapter_optimizer(model, model_args, training_args, callbacks)
    # Scored against the raw reference text of the split evaluated (in the dataset's order, which evaluation keeps),
    # as sacreBLEU on the files would: the validation split's, a test set's while it is predicted.
    validation_references = list(splits["validation"]["target"]) if "validation" in splits else None
    compute_metrics = make_compute_metrics(tokenizer, target_lang=data_args.target_lang,
                                           references=validation_references) \
        if training_args.predict_with_generate else None
    # The tokenized sets hold model inputs only, plus the trees (`word_heads`) the collator turns into dep_distance.
    training_args.remove_unused_columns = False
    training_time = TrainingTimeCallback(resumed_from if training_args.do_train else None)
    metrics_report = MetricsReport()
    callbacks += [training_time, metrics_report]
    trainer_options = dict(
        model=model, args=training_args, train_dataset=train_set, eval_dataset=eval_set,
        processing_class=tokenizer, data_collator=SourceFeatureCollator(tokenizer, model=model),
        compute_metrics=compute_metrics,
        callbacks=callbacks, optimizers=optimizers,
    )
    trainer = TokenBatchingSeq2SeqTrainer(**trainer_options, max_tokens_per_batch=data_args.max_tokens_per_batch,
                                          batch_size_multiple=data_args.batch_size_multiple) \
        if data_args.max_tokens_per_batch else SrcFeatSeq2SeqTrainer(**trainer_options)

    data_files = [str(Path(origin).resolve()) if Path(origin).is_file() else origin for origin in
                  [origin for corpus in corpora.all for origin in corpus.origin]
                  + [conllu for conllu in (data_args.train_source_conllu, data_args.validation_source_conllu,
                                           *(data_args.test_source_conllu or ())) if conllu]]
    results: dict = {
        "code_version": code_version(),
        "model_args": recorded_model_arguments(model_args, model.config),
        "data_args": asdict(data_args),
        "tokenized_cache_files": {name: [entry["filename"] for entry in data.cache_files]
                                  for name, data in tokenized.items()},
        # Files by absolute path (where the command ran is not recorded); a dataset's splits by name.
        "data_files": data_files,
        # and by content: a file edited or replaced under the same name gives another digest
        "data_file_digests": {name: file_digest(Path(name)) for name in data_files if Path(name).is_file()}
        if training_args.process_index == 0 else {},  # read whole: once, by the process that writes the results
        "seed": training_args.seed,
        "training_args": json.loads(training_args.to_json_string()),
        "resumed_from": str(Path(resumed_from).resolve()) if resumed_from else None,
        "resumed_from_code_version": checkpoint_code_version(resumed_from) if resumed_from else None,
        "library_versions": library_versions(),
        # The folders the options left to their environment variables or defaults
        "resolved_paths": {"annotation_cache": str(data_args.annotation_cache or default_cache_path()),
                           "stanza_dir": data_args.stanza_dir or os.environ.get(STANZA_DIR_ENV)},
        "train_examples": len(train_set) if train_set is not None else None,
        "skipped_empty_pairs": skipped_empty,
        "num_parameters": model.num_parameters(),
        "config": model.config.to_dict(),
    }
    if training_args.do_train:
        start = time.monotonic()
        if resumed_from and 0 < training_args.max_steps <= trained_steps(resumed_from):
            # The run had reached --max_steps (interrupted before its final save): finished from the checkpoint,
            # without the one more step the Trainer would take.
            logger.info("%s is at --max_steps %d: no more training; the run is finished from it.", resumed_from,
                        training_args.max_steps)
            trainer._load_from_checkpoint(resumed_from)  # as Trainer.train loads a checkpoint it resumes from
            trainer.state = TrainerState.load_from_json(str(Path(resumed_from, TRAINER_STATE_NAME)))
            trainer.state.is_local_process_zero = trainer.is_local_process_zero()
            trainer.state.is_world_process_zero = trainer.is_world_process_zero()
            if training_args.load_best_model_at_end and trainer.state.best_model_checkpoint:
                trainer._load_best_model()  # as Trainer.train ends
            losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
            train_result = TrainOutput(trainer.state.global_step, losses[-1] if losses else float("nan"),
                                       {"train_runtime": 0.0, "train_loss": losses[-1] if losses else float("nan")})
        else:
            train_result = trainer.train(resume_from_checkpoint=resumed_from)
        results["train_seconds_this_run"] = time.monotonic() - start
        results["train_seconds"] = training_time.seconds  # across resumptions
        results["earlier_results"] = earlier_results(Path(training_args.output_dir), resumed_from)
        results["train_metrics"] = train_result.metrics
        results["log_history"] = list(trainer.state.log_history)  # a copy: later evaluations append to it
        results["global_step"] = trainer.state.global_step
        if training_args.load_best_model_at_end:
            results["best_model_checkpoint"] = trainer.state.best_model_checkpoint
            results["best_metric"] = {training_args.metric_for_best_model: trainer.state.best_metric}
        if data_args.average_last_checkpoints:
            results["averaged_checkpoints"] = load_checkpoint_average(
                model, Path(training_args.output_dir), data_args.average_last_checkpoints)
        if trainer.is_world_process_zero():
            # Before the earlier model's weights are replaced, its results (kept in `earlier_results`) and
            # translations give way to this training's: a save cut off leaves no results of another model beside
            # the new weights. The evaluations are added at the end.
            Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
            remove_stale_predictions(Path(training_args.output_dir), set())
            write_json_atomically(Path(training_args.output_dir, "results.json"), {**results, "finished": False},
                                  default=str)
        trainer.save_model()
        if trainer.is_world_process_zero():
            # Trainer pickles its arguments (training_args.bin); keep a JSON copy instead in the model folder.
            Path(training_args.output_dir, "training_args.bin").unlink(missing_ok=True)
            write_text_atomically(Path(training_args.output_dir, "training_args.json"), training_args.to_json_string())
        if training_args.world_size > 1:
            fingerprint = {"rank": training_args.process_index, "fingerprint": parameter_fingerprint(model),
                           "tokenized_cache_files": results["tokenized_cache_files"]}
            write_json_atomically(Path(training_args.output_dir, f"parameters_rank{training_args.process_index}.json"),
                                  fingerprint)
    if training_args.do_eval:
        best = trainer.state.best_model_checkpoint
        if training_args.load_best_model_at_end and best:
            metrics_report.evaluated_model = f"{Path(best).name} (the best, loaded at the end)"
        if results.get("averaged_checkpoints"):
            metrics_report.evaluated_model = f"the average of {', '.join(results['averaged_checkpoints'])}"
        results["eval_metrics"] = trainer.evaluate(metric_key_prefix="eval")
    written_predictions: set[str] = set()
    if test_sets:
        training_args.predict_with_generate = True  # a test set is scored on its translations (BLEU, chrF)
    for index, (name, test_set) in enumerate(test_sets.items()):
        if compute_metrics is not None:
            compute_metrics.references = list(splits[f"test:{name}"]["target"])  # type: ignore[attr-defined]
        try:
            prediction = trainer.predict(test_set, metric_key_prefix="test")
        finally:
            if compute_metrics is not None:
                compute_metrics.references = validation_references  # type: ignore[attr-defined]
        test_metrics = with_perplexity(prediction.metrics or {}, "test")
        logger.info("test set %s (%d sentences): %s", name, len(test_set), metrics_line(test_metrics, "test"))
        # What exactly was measured, for the model card: the set, its size, the decoding and the metric signatures.
        setup = {"set": f"{'Multi30k ' if name == 'test_2016_flickr' else ''}{data_args.source_lang}→"
                        f"{data_args.target_lang} {name}",
                 "sentences": len(test_set), "num_beams": model.generation_config.num_beams,
                 **{name: getattr(model.generation_config, name) for name in DECODING_OPTIONS},
                 "max_length": model.generation_config.max_length,
                 **(compute_metrics.signatures if compute_metrics is not None else {})}
        results.setdefault("test_sets", {})[name] = {"metrics": prediction.metrics, "setup": setup}
        if index == 0:  # the first test set is also reported under the names used before several were possible
            results["test_metrics"], results["test_setup"] = prediction.metrics, setup
        if trainer.is_world_process_zero():
            ids = prediction.predictions
            # Transformers types predictions as an array or a tuple of arrays; mypy does not narrow on hasattr
            ids = ids.clip(min=0) if hasattr(ids, "clip") else ids  # type: ignore[union-attr]
            text = "\n".join(hypothesis.strip() for hypothesis in tokenizer.batch_decode(ids, skip_special_tokens=True))
            prefix = "" if training_args.do_train else "eval_"
            # One file per test set: test_predictions.txt for a single set, test_<name>_predictions.txt for several.
            file_name = f"{prefix}test_predictions.txt" if len(test_sets) == 1 else \
                f"{prefix}test_{name}_predictions.txt"
            write_text_atomically(Path(training_args.output_dir, file_name), text + "\n")
            written_predictions.add(file_name)
    if trainer.is_world_process_zero():
        Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
        if training_args.do_train:
            remove_stale_predictions(Path(training_args.output_dir), written_predictions)
            write_json_atomically(Path(training_args.output_dir, "results.json"), results, default=str)
        else:  # an evaluation of an existing run is added to its evaluations; its training results stay
            evaluations = Path(training_args.output_dir, "eval_results.json")
            earlier = json.loads(evaluations.read_text()) if evaluations.exists() else []
            write_json_atomically(evaluations, [*earlier, results], default=str)
    return results


#: The options that shape a model built here, and the config setting each becomes: the sizes a resumed checkpoint
#: must share, and what else the options set.
MODEL_SHAPING_ARGUMENTS = {**dict(RESUMED_SETTINGS), "dropout": "dropout", "label_smoothing": "label_smoothing",
                           "layernorm_position": "layernorm_position", "vocab_size": "vocab_size"}


def library_versions() -> dict[str, str]:
    """The versions of the libraries a run's numbers depend on (Transformers' is also in the config)."""
    import datasets
    import sacrebleu

    return {"torch": torch.__version__, "transformers": transformers.__version__, "datasets": datasets.__version__,
            "sacrebleu": sacrebleu.__version__}


def recorded_model_arguments(model_args: ModelArguments, config) -> dict:
    """The model arguments as the results record them. A model loaded rather than built here (`--model_name_or_path`,
    `--init_from`) has its own type and sizes: those are recorded, not the options' defaults, which shaped nothing."""
    recorded = asdict(model_args)
    if model_args.model_name_or_path or model_args.init_from:
        recorded.update({name: getattr(config, setting, None) for name, setting in MODEL_SHAPING_ARGUMENTS.items()})
    return recorded


def cli() -> int:
    """The `hf-srcfeat-train` console script."""
    return run_as_script(main, on_interrupt="Resume from its newest checkpoint with the same options and "
                                            "--resume_from_checkpoint True.")


if __name__ == "__main__":
    sys.exit(cli())
