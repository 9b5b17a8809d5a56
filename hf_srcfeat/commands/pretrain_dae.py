#!/usr/bin/env python
"""Pre-train a latent feature encoder as a denoising autoencoder (Li, Li & Zhang 2021, Section 3).

    hf-srcfeat-pretrain-dae --output_dir runs/dae_multi30k_en --do_train --max_steps 4000 \
        --max_tokens_per_batch 1024 --learning_rate 1e-3 --warmup_steps 400 --use_cpu --report_to none

Each English source sentence s is corrupted on the fly into s' (new noise every time it is drawn): N_swap = 3
swaps of two random words, round(0.1 n) random words dropped, round(0.2 n) of the remaining words replaced by
the placeholder `<pad>` (the paper's token: its embedding is zero, and the encoder still attends to its position,
as OpenNMT-py's length-based source mask does); a Transformer encoder-decoder learns to reconstruct s from s'. Only its encoder is used later,
as the LFE of a `latent_feedback` translation model (`lfe_pretrained_from=<output_dir>`).

The LFE shares the translation model's vocabulary, so this script trains (or loads, `--tokenizer_name_or_path`)
the same joint Multi30k subword tokenizer that `train.py` would, and saves it; the translation run then loads
it with `--tokenizer_name_or_path <output_dir>`. Monolingual data: by default the Multi30k training sources; or
any corpus, as `--train_file` / `--validation_file` (plain text, one sentence a line, or JSON lines) or
`--dataset_name` (e.g. the English side of `wmt/wmt14`), with the translation run's tokenizer built first:

    hf-srcfeat-train examples/recipes/paper/latent_feedback_joint_wmt14_en_de.json --tokenizer_only \
        --output_dir runs/paper/tokenizer_wmt14_en_de
    hf-srcfeat-pretrain-dae examples/recipes/paper/pretraining/dae_wmt14_en.json

plus the UD English-EWT training sentences with `--ewt_dir`. Also reported: reconstruction BLEU of validation
sentences from their corrupted and from their original versions (the paper's Table 3); without validation data
the last `--max_eval_samples` training sentences are held out for it.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from datasets import Dataset
from transformers import HfArgumentParser, Seq2SeqTrainingArguments, set_seed

from hf_srcfeat.commands import run_as_script, train
from hf_srcfeat.commands.pretrain_dae_arguments import DaeArguments
from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.data.batching import TokenBatchingSeq2SeqTrainer
from hf_srcfeat.data.monolingual import load_monolingual
from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.process_memory import keep_freed_memory
from hf_srcfeat.safe_writing import write_json_atomically, write_text_atomically
from hf_srcfeat.trainer import SrcFeatSeq2SeqTrainer

logger = logging.getLogger("hf_srcfeat.pretrain_dae")


#: The autoencoder's own numeric options, checked beside train.py's (name -> smallest, largest, largest excluded).
NOISE_RANGES: dict[str, tuple[float, float, bool]] = {
    "max_length": (2, math.inf, False), "swaps": (0, math.inf, False),
    "drop_ratio": (0, 1, False), "mask_ratio": (0, 1, False),
}


DAE_RESULTS = "dae_results.json"
#: What an autoencoder run writes into its output_dir (`--overwrite_output_dir` removes it before a new run).
DAE_OUTPUTS = (*train.RUN_OUTPUTS, DAE_RESULTS)


@dataclass
class Corruption:
    """A corrupted sentence and what was done to it (positions refer to the sentence at that stage)."""

    words: list[str]
    swapped_pairs: list[tuple[int, int]]
    dropped: list[int]
    masked: list[int]


def corrupt(words: list[str], rng: random.Random, swaps: int = 3, drop_ratio: float = 0.1,
            mask_ratio: float = 0.2, placeholder: str = "<pad>") -> Corruption:
    """Section 3's noise: `swaps` swaps of two random words, then round(drop_ratio n) words dropped, then
    round(mask_ratio n) of the remaining words masked (n: the sentence's original number of words)."""
    words, n = list(words), len(words)
    swapped_pairs = []
    for _ in range(swaps if n >= 2 else 0):
        first, second = rng.sample(range(n), 2)
        words[first], words[second] = words[second], words[first]
        swapped_pairs.append((first, second))
    dropped = sorted(rng.sample(range(n), min(round(n * drop_ratio), max(n - 1, 0))))  # never drop every word
    words = [word for index, word in enumerate(words) if index not in set(dropped)]
    masked = sorted(rng.sample(range(len(words)), min(round(n * mask_ratio), len(words))))
    for index in masked:
        words[index] = placeholder
    return Corruption(words=words, swapped_pairs=swapped_pairs, dropped=dropped, masked=masked)


class DenoisingCollator:
    """Turns raw sentences into (corrupted source, original target) batches, with fresh noise per batch."""

    def __init__(self, tokenizer, max_length: int, seed: int, swaps: int, drop_ratio: float, mask_ratio: float):
        self.tokenizer, self.max_length = tokenizer, max_length
        self.rng = random.Random(seed)
        self.noise = dict(swaps=swaps, drop_ratio=drop_ratio, mask_ratio=mask_ratio,
                          placeholder=tokenizer.pad_token)  # Section 3: "a placeholder token <pad>"

    def corrupt_text(self, text: str) -> str:
        return " ".join(corrupt(text.split(), self.rng, **self.noise).words)

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        originals = [example["text"] for example in examples]
        # Plain subwords: the autoencoder reads no linguistic features.
        batch = self.tokenizer([self.corrupt_text(text) for text in originals], text_target=originals,
                               source_features=False, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt")
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == self.tokenizer.pad_token_id, -100)
        return dict(batch)


def sentence_lengths(tokenizer, sentences: list[str], max_length: int, mask_ratio: float) -> list[int]:
    """An upper bound on each training pair's length in subwords, as the collator truncates it: the original
    sentence (the target) plus one per masked word, since the placeholder is tokenized as "▁" and `<pad>` (words
    dropped, swapped or masked never add more)."""
    lengths = []
    for start in range(0, len(sentences), 10_000):  # a large corpus's token ids are never held whole
        chunk = sentences[start:start + 10_000]
        targets = tokenizer(text_target=chunk, source_features=False)["input_ids"]
        lengths += [min(len(target) + round(len(text.split()) * mask_ratio), max_length)
                    for text, target in zip(chunk, targets, strict=True)]
    return lengths


def ewt_sentences(args: DaeArguments) -> tuple[list[str], list[str]]:
    """UD English-EWT's training sentences with `--ewt_dir`, and the file they came from."""
    sentences: list[str] = []
    files: list[str] = []
    if args.ewt_dir:
        path = next((p for p in (Path(args.ewt_dir) / "en_ewt-ud-train.conllu.gz",
                                 Path(args.ewt_dir) / "en_ewt-ud-train.conllu") if p.exists()), None)
        if path is None:
            raise SystemExit(f"no en_ewt-ud-train.conllu(.gz) in {args.ewt_dir}")
        sentences += [sentence.text for sentence in read_conllu(path) if sentence.text]
        files.append(str(path))
    return sentences, files


def reconstruction_bleu(model, tokenizer, sentences: list[str], collator: DenoisingCollator,
                        batch_size: int = 50) -> dict[str, float]:
    """Table 3: BLEU of the greedy reconstructions against the originals, from corrupted and original input."""
    import sacrebleu

    model.eval()
    scores = {}
    for name, inputs in (("from_corrupted", [collator.corrupt_text(text) for text in sentences]),
                         ("from_original", sentences)):
        outputs = []
        for start in range(0, len(inputs), batch_size):
            batch = tokenizer(inputs[start:start + batch_size], source_features=False, padding=True,
                              truncation=True, max_length=collator.max_length, return_tensors="pt").to(model.device)
            with torch.no_grad():
                generated = model.generate(**batch, num_beams=1, max_new_tokens=collator.max_length)
            outputs += [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
        scores[f"bleu_{name}"] = round(sacrebleu.corpus_bleu(outputs, [sentences]).score, 2)
    return scores


def custom_corpus(args: DaeArguments) -> bool:
    return bool(args.dataset_name or args.train_file or args.validation_file)


def monolingual_data(args: DaeArguments) -> tuple[list[str], list[str], list[str], str]:
    """Training sentences, validation sentences, the data files (for the results) and where validation came from."""
    if not custom_corpus(args):
        train_pairs = load_multi30k("train", args.source_lang, args.target_lang, args.data_dir, args.max_train_samples)
        sentences = list(train_pairs["source"])
        validation = list(load_multi30k("val", args.source_lang, args.target_lang, args.data_dir,
                                        args.max_eval_samples)["source"])
        files = [str(multi30k_file("train", args.source_lang, args.data_dir))]
        validation_origin = str(multi30k_file("val", args.source_lang, args.data_dir))
    else:
        try:
            corpus = load_monolingual(args.source_lang, args.dataset_name, args.dataset_config_name, args.train_file,
                                      args.validation_file, args.text_column)
        except (FileNotFoundError, ValueError) as error:  # a file's name, kind or line: say it without a traceback
            raise SystemExit(str(error)) from None
        train = corpus.train
        if corpus.validation is None:
            if len(train) <= args.max_eval_samples:
                raise SystemExit(f"{corpus.origin[0]} has {len(train)} sentences and no validation data: give "
                                 f"--validation_file, or a lower --max_eval_samples ({args.max_eval_samples}) than "
                                 "its size to hold them out of training.")
            validation = list(train.select(range(len(train) - args.max_eval_samples, len(train)))["text"])
            train = train.select(range(len(train) - args.max_eval_samples))
            validation_origin = f"the last {args.max_eval_samples} sentences of {corpus.origin[0]} (held out)"
        else:
            validation = list(corpus.validation.select(
                range(min(args.max_eval_samples, len(corpus.validation))))["text"])
            validation_origin = corpus.origin[-1]
        if args.max_train_samples is not None:
            train = train.select(range(min(args.max_train_samples, len(train))))
        sentences, files = list(train["text"]), list(corpus.origin)
    extra, extra_files = ewt_sentences(args)
    return sentences + extra, validation, files + extra_files, validation_origin


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((DaeArguments, Seq2SeqTrainingArguments))  # type: ignore[arg-type]
    args, training_args = train.parse_with_config(parser, argv)
    keep_freed_memory()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    training_args.remove_unused_columns = False  # the collator reads the raw "text" column
    train.check_numeric_arguments(args, training_args, ranges={**train.NUMERIC_RANGES, **NOISE_RANGES})
    if train.flags_ask_for_sentence_batches(training_args):
        args.max_tokens_per_batch = None
    train.check_processes_train_one_model(training_args)
    train.check_batch_size_multiple(args.batch_size_multiple, args.max_tokens_per_batch)
    train.check_token_budget(args.max_tokens_per_batch, {"max_length": args.max_length})
    if custom_corpus(args) and not args.tokenizer_name_or_path:
        raise SystemExit("a monolingual corpus (--dataset_name / --train_file) needs --tokenizer_name_or_path: the "
                         "LFE shares the translation model's joint vocabulary, which monolingual data cannot build; "
                         "build it first with hf-srcfeat-train <the translation recipe> --tokenizer_only "
                         "--output_dir DIR.")
    if not training_args.do_train:  # without it, a new untrained model's results would replace a trained one's
        raise SystemExit("hf-srcfeat-pretrain-dae trains a denoising autoencoder: add --do_train (its reconstruction "
                         "BLEU is measured at the end of training, into dae_results.json).")
    # The autoencoder is a baseline Transformer, built as train.py builds one, and checked as it checks one.
    model_args = train.ModelArguments(
        tokenizer_name_or_path=args.tokenizer_name_or_path, vocab_size=args.vocab_size,
        subword_model=args.subword_model, d_model=args.d_model, encoder_layers=args.encoder_layers,
        decoder_layers=args.decoder_layers, attention_heads=args.attention_heads, ffn_dim=args.ffn_dim,
        dropout=args.dropout, layernorm_position=args.layernorm_position)
    # With the model's options: an output_dir that holds the tokenizer to load is not cleared by an overwrite.
    train.check_output_dir(training_args, args, model_args)
    train.check_tokenizer_source(model_args)
    # `True` resumes from the newest checkpoint, which must be of the model these options build.
    resumed_from = train.check_resumed_checkpoint(training_args)
    if resumed_from:
        train.check_resumed_model(resumed_from, model_args, training_args.output_dir)
    set_seed(training_args.seed)

    sentences, validation, data_files, validation_origin = monolingual_data(args)
    # The previous run goes only once the data has been read: a refused corpus leaves it as it was.
    output_dir = Path(training_args.output_dir)
    if args.overwrite_output_dir and not resumed_from and training_args.process_index == 0 and output_dir.is_dir():
        removed = train.clear_previous_run(output_dir, DAE_OUTPUTS)
        if removed:
            logger.warning("--overwrite_output_dir: removed the previous run's %s from %s", removed, output_dir)
    data_args = train.DataArguments(source_lang=args.source_lang, stanza_dir=args.stanza_dir,
                                    annotation_cache=args.annotation_cache)
    train.check_existing_tokenizer(model_args, data_args, training_args, trains=True)  # its language, before parsing
    if args.tokenizer_name_or_path:
        tokenizer = train.build_tokenizer(model_args, data_args, training_args, Dataset.from_dict({"source": []}), [])
    else:  # the joint Multi30k tokenizer train.py would build; only it needs the parses (feature vocabularies)
        multi30k_train = load_multi30k("train", args.source_lang, args.target_lang, args.data_dir,
                                       args.max_train_samples)
        tokenizer = train.build_tokenizer(model_args, data_args, training_args, multi30k_train, [multi30k_train])

    model = train.build_model(model_args, tokenizer, training_args.seed)
    collator = DenoisingCollator(tokenizer, args.max_length, training_args.seed, args.swaps, args.drop_ratio,
                                 args.mask_ratio)
    trainer_options = dict(model=model, args=training_args, train_dataset=Dataset.from_dict({"text": sentences}),
                           data_collator=collator, processing_class=tokenizer)
    trainer: SrcFeatSeq2SeqTrainer
    if args.max_tokens_per_batch:
        lengths = sentence_lengths(tokenizer, sentences, args.max_length, args.mask_ratio)
        trainer = TokenBatchingSeq2SeqTrainer(**trainer_options, max_tokens_per_batch=args.max_tokens_per_batch,
                                              lengths=lengths, batch_size_multiple=args.batch_size_multiple)
    else:
        trainer = SrcFeatSeq2SeqTrainer(**trainer_options)
    results: dict = {"code_version": train.code_version(), "dae_args": asdict(args), "seed": training_args.seed,
                     "training_args": json.loads(training_args.to_json_string()),
                     "resumed_from": str(Path(resumed_from).resolve()) if resumed_from else None,
                     "library_versions": train.library_versions(),
                     "data_files": data_files, "sentences": len(sentences), "config": model.config.to_dict(),
                     "num_parameters": model.num_parameters()}
    start = time.monotonic()
    trainer.train(resume_from_checkpoint=resumed_from)
    results["train_seconds"] = time.monotonic() - start
    results["global_step"] = trainer.state.global_step
    results["earlier_results"] = train.earlier_results(output_dir, resumed_from, DAE_RESULTS,
                                                       ("global_step", "train_seconds", "reconstruction"))
    results["log_history"] = trainer.state.log_history
    trainer.save_model()
    (output_dir / "training_args.bin").unlink(missing_ok=True)
    write_text_atomically(output_dir / "training_args.json", training_args.to_json_string())
    results["reconstruction"] = reconstruction_bleu(model, tokenizer, validation, collator)
    results["reconstruction_data_file"] = validation_origin
    logger.info("reconstruction BLEU on %d validation sentences: %s", len(validation), results["reconstruction"])
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(output_dir / DAE_RESULTS, results, default=str)
    return results


def cli() -> int:
    """The `hf-srcfeat-pretrain-dae` console script."""
    return run_as_script(main)


if __name__ == "__main__":
    sys.exit(cli())
