"""`hf-srcfeat-translate`: translate a file or a stream, one sentence a line, with a source-feature model.

    hf-srcfeat-translate --model runs/quickstart --input test.en --output test.de --num_beams 4
    cat test.en | hf-srcfeat-translate --model org/name > test.de
    hf-srcfeat-translate --model runs/quickstart --input parsed.conllu --input_format conllu

Like `onmt_translate`, `sockeye-translate` and `marian-decoder`, but the source features are computed from the
raw text on the way (or read from CoNLL-U). The output is aligned line for line with the input: an empty input
line gives an empty output line, and a line that cannot be translated (invalid UTF-8, a sentence the model cannot
handle) is reported on stderr with its line number and gives an empty output line, so the rest of the file never
shifts. A sentence the parser fails on is translated without its parse, and reported (factored input and CTranslate2
exports that read factors give it an empty line). With `--input_format conllu` there is one output line per sentence.

n-best output (`--num_return_sequences N`, beam search, or N samples with `--do_sample`): N lines per input
sentence in the Moses/Marian n-best format `INDEX ||| TRANSLATION ||| SCORE`, INDEX counting input sentences from 0
and SCORE the beam's ranking score (sum of token log-probabilities over length ** length_penalty; a sample's is
computed the same way); an empty or failed input gives N entries with an empty translation and score `-inf`.

Translations are the translation pipeline's (`hf_srcfeat.pipeline("translation")`): the same model, tokenizer
and generation settings give the same output. Only translations go to stdout; progress, errors and the closing
throughput line (parsing and translation timed apart) go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import io
import math
import os
import sys
import time
import warnings
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, cast

from hf_srcfeat.annotated_sentence import AnnotatedSentence
from hf_srcfeat.annotation_cache import AnnotationCacheError, check_cache_path
from hf_srcfeat.annotator import AnnotatorLoadError
from hf_srcfeat.annotators import annotator_from_settings
from hf_srcfeat.commands import (
    check_counts,
    check_model_source,
    error_summary,
    interruptible,
    resolve_device,
    used_cache_path,
)
from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.decoding_options import add_decoding_arguments, check_decoding_options, given_decoding_options
from hf_srcfeat.integrations.ctranslate2 import is_export
from hf_srcfeat.process_memory import keep_freed_memory
from hf_srcfeat.provenance import code_version, weights_digests
from hf_srcfeat.safe_writing import (
    is_special_file,
    overwritten_input,
    replaced_atomically,
    write_json_atomically,
)

#: `--dtype` choices: names of torch dtypes (torch itself loads only when a model does, so `--help` is quick).
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class SourceItem:
    """One unit of input: a raw line (`text`) or a CoNLL-U sentence (`sentence`), or why it cannot be used."""

    line_number: int
    text: str | None = None
    sentence: AnnotatedSentence | None = None
    error: str | None = None
    parse_failure: str | None = None  # why the annotator failed on it: then translated from its subwords alone

    @property
    def unparsed(self) -> bool:
        return self.parse_failure is not None

    @property
    def is_empty(self) -> bool:
        return self.error is None and self.sentence is None and not (self.text or "").strip()


@dataclass
class TranslationStatistics:
    """What a run did and how fast; printed at the end and written by `--report_json`."""

    sentences: int = 0
    translated: int = 0
    empty: int = 0
    failed: int = 0
    parse_seconds: float = 0.0
    translate_seconds: float = 0.0
    total_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)  # translated without a parse, and why
    # False when no sentence was given its parse: --no_parse, or a CTranslate2 export that reads none
    parsed: bool = True

    def summary(self) -> str:
        def rate(count: int, seconds: float) -> str:
            return f"{count / seconds:.1f} sentences/s" if seconds > 0 else "n/a"

        parsed = self.translated + self.failed
        unparsed = f", {len(self.unparsed)} of them without a parse" if self.unparsed else ""
        if not self.parsed:
            unparsed = ", none of them parsed"
        return (f"{self.sentences} sentences ({self.translated} translated{unparsed}, {self.empty} empty, "
                f"{self.failed} failed)"
                f" in {self.total_seconds:.1f} s: parsing {self.parse_seconds:.1f} s "
                f"({rate(parsed, self.parse_seconds)}), translation {self.translate_seconds:.1f} s "
                f"({rate(self.translated, self.translate_seconds)}), overall {rate(self.sentences, self.total_seconds)}")


def open_binary_input(path: str, option: str = "--input") -> IO[bytes]:
    """The file (gzip read through, `-` stdin) that `option` names; a directory or a missing file stops the command
    with a message naming the option."""
    if path == "-":
        return sys.stdin.buffer
    if Path(path).is_dir():
        raise SystemExit(f"{option} {path} is a directory; give a file.")
    if not Path(path).exists():
        raise SystemExit(f"{option} {path}: no such file.")
    return cast(IO[bytes], gzip.open(path, "rb")) if path.endswith(".gz") else open(path, "rb")


def read_raw_lines(stream: IO[bytes]) -> Iterator[SourceItem]:
    """One item per line; a line that is not UTF-8 becomes an error item instead of stopping the file."""
    for line_number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            yield SourceItem(line_number, error=f"not valid UTF-8 ({error.reason} at byte {error.start})")
            continue
        yield SourceItem(line_number, text=text.removeprefix("\ufeff") if line_number == 1 else text)


def input_name(path: str) -> str:
    """How messages name an input file (`-`: stdin)."""
    return "stdin" if path == "-" else path


def read_conllu_sentences(stream: IO[bytes], name: str = "the input") -> Iterator[SourceItem]:
    """One item per CoNLL-U sentence (blank-line separated block), numbered by its first line of `name`; a block
    that is not a valid sentence, or has a line that is not UTF-8, becomes an error item, and the following
    sentences are read as usual."""
    block: list[str] = []
    first_line = 0
    undecodable = ""  # why the block's first line that is not UTF-8 is not
    seen_a_word = False
    for line_number, raw_bytes in enumerate(stream, start=1):
        try:
            raw = raw_bytes.decode("utf-8")
        except UnicodeDecodeError as error:
            raw = raw_bytes.decode("utf-8", errors="replace")  # still read, so that the block's end is found
            if raw.strip() and not undecodable:
                undecodable = f"line {line_number} is not valid UTF-8 ({error.reason} at byte {error.start})"
        if line_number == 1:
            raw = raw.removeprefix("\ufeff")
        if raw.strip():
            if not seen_a_word and not raw.startswith("#"):
                # Plain text read as CoNLL-U would be one long invalid sentence: say so at once instead.
                if "\t" not in raw:
                    raise SystemExit(f"{name} line {line_number} ({raw.strip()[:40]!r}) is not CoNLL-U (no "
                                     "tab-separated columns); plain sentences, one a line, are --input_format text "
                                     "(--source_format text for hf-srcfeat-score).")
                seen_a_word = True
            if not block:
                first_line = line_number
            block.append(raw)
            continue
        if block:
            yield from conllu_block_item(block, first_line, undecodable)
            block, undecodable = [], ""
    if block:
        yield from conllu_block_item(block, first_line, undecodable)


def conllu_block_item(block: list[str], first_line: int, undecodable: str = "") -> Iterator[SourceItem]:
    if all(line.startswith("#") for line in block):
        return  # comments between sentences (e.g. `# newdoc`) are not a sentence
    if undecodable:
        yield SourceItem(first_line, error=f"invalid CoNLL-U sentence: {undecodable}")
        return
    try:
        sentences = list(read_conllu(block, first_line=first_line))
    except ValueError as error:
        yield SourceItem(first_line, error=f"invalid CoNLL-U sentence: {error}")
        return
    yield SourceItem(first_line, sentence=sentences[0])


def chunks(items: Iterable[SourceItem], size: int) -> Iterator[list[SourceItem]]:
    chunk: list[SourceItem] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class FileTranslator:
    """Parses and translates chunks of `SourceItem`s with the translation pipeline, keeping every item's place.

    A chunk is parsed in one annotator call and translated in batches sorted by length (less padding); should
    either step fail, its items are retried one by one so that only the offending sentence is lost.
    """

    def __init__(self, translator, num_return_sequences: int = 1, batch_size: int = 32, sort_by_length: bool = True,
                 factor_names: list[str] | None = None, parse: bool = True):
        import torch

        self.translator = translator
        self.parse_sources = parse  # False: raw text in, the model's features take their defaults
        self.factor_names = factor_names  # lines are OpenNMT-py's word￨value format with these user factors
        self.num_return_sequences = num_return_sequences
        self.batch_size = batch_size
        self.sort_by_length = sort_by_length
        # A translator that reads no parse (a CTranslate2 export whose tokenizer has no annotator) gets raw text.
        self.reads_parses = parse and getattr(translator, "reads_parses", True)
        # The transformers pipeline and a CTranslate2 export without factors translate a sentence the annotator
        # fails on from its raw text (features at their defaults); an export with factors cannot, and loses it.
        self.translates_unparsed = getattr(translator, "translates_unparsed", True)
        # The GPU whose random state sampling draws from, kept apart from the parser's draws (`translate_chunk`).
        device = getattr(translator, "device", None)
        self.sampling_gpus = [device.index if device.index is not None else torch.cuda.current_device()] \
            if isinstance(device, torch.device) and device.type == "cuda" else []
        self.statistics = TranslationStatistics(parsed=self.reads_parses)
        # The labels the model knows, and which of the parse's features it reads
        self.vocabularies = getattr(getattr(translator, "tokenizer", None), "feature_vocabularies", None)
        self.features_read = features_read(translator)
        self.unknown_labels_said = False

    def translate_chunk(self, items: list[SourceItem]) -> list[list[dict]]:
        """The translations (dicts of the pipeline) of every item; `[]` for empty and failed items."""
        import torch

        if not self.factor_names:
            from hf_srcfeat.annotated_sentence import carries_inline_factors

            for item in items:  # the values would be translated as part of the words
                if item.error is None and item.text and carries_inline_factors(item.text):
                    item.error = ("the line carries factors inline (word￨value, OpenNMT-py's format): give "
                                  "--input_format factored --factor_names NAME ...")
        start = time.perf_counter()
        # The parser leaves the random state as it found it (loading its models draws from it), so that --seed
        # gives the same samples whether the sentences were parsed or read from the parse cache: the CPU's, and the
        # GPU's the model samples on.
        with torch.random.fork_rng(devices=self.sampling_gpus):
            self.parse(items)
        parsed = time.perf_counter()
        self.say_unknown_labels(items)
        ready = [index for index, item in enumerate(items) if item.error is None and not item.is_empty
                 and (item.sentence is not None or not self.reads_parses or item.unparsed)]
        if self.sort_by_length:
            ready.sort(key=lambda index: -self.source_length(items[index]))
        outputs: list[list[dict]] = [[] for _ in items]
        for unparsed in (False, True):
            group = [index for index in ready if items[index].unparsed == unparsed]
            for index, translations in zip(group, self.generate([items[index] for index in group],
                                                                parse=self.parse_sources and not unparsed),
                                           strict=True):
                outputs[index] = translations
        statistics = self.statistics
        statistics.parse_seconds += parsed - start
        statistics.translate_seconds += time.perf_counter() - parsed
        statistics.sentences += len(items)
        statistics.empty += sum(item.is_empty for item in items)
        for item in items:
            if item.error is not None:
                statistics.failed += 1
                statistics.failures.append(f"line {item.line_number}: {item.error}")
            elif item.unparsed:
                statistics.unparsed.append(f"line {item.line_number}: {item.parse_failure}")
        statistics.translated += sum(1 for output in outputs if output)
        return outputs

    def say_unknown_labels(self, items: list[SourceItem]) -> None:
        """Once a run, on stderr: a sentence most of whose POS tags or relations the model never saw (CoNLL-U of
        another tag set, or with `_` in those columns) is translated with those features unknown."""
        from hf_srcfeat.pipeline_translation import UNKNOWN_LABELS_CONSEQUENCE, unknown_labels

        if self.unknown_labels_said or self.vocabularies is None or not self.reads_parses:
            return
        for item in items:
            if item.sentence is None or item.unparsed:
                continue
            said = unknown_labels(item.sentence, self.vocabularies, self.features_read)
            if said is not None:
                print(f"hf-srcfeat-translate: line {item.line_number}: {said}: {UNKNOWN_LABELS_CONSEQUENCE}; said "
                      "once.", file=sys.stderr)
                self.unknown_labels_said = True
                return

    def source(self, item: SourceItem):
        """What the translator reads: the parsed sentence, or the raw text for a model without source features (or
        a sentence the annotator failed on)."""
        if self.reads_parses and not item.unparsed:
            return item.sentence
        if item.text is not None:
            return item.text
        assert item.sentence is not None  # an item is a raw line or a CoNLL-U sentence
        return item.sentence.raw_text

    def source_length(self, item: SourceItem) -> int:
        """Words of what the translator reads (`source`), for sorting by length."""
        source = self.source(item)
        return len(source.words) if isinstance(source, AnnotatedSentence) else len(source.split())

    def parse(self, items: list[SourceItem]) -> None:
        if not self.reads_parses:
            return
        pending = [item for item in items if item.error is None and item.sentence is None and not item.is_empty]
        if not pending:
            return
        tokenizer = self.translator.tokenizer

        def annotate(texts: list[str]) -> list:
            if self.factor_names:
                from hf_srcfeat.data.user_factors import parse_factored_lines

                # Not numbered: a failing sentence is retried alone and reported with its line of the input.
                return parse_factored_lines(tokenizer.annotator, texts, self.factor_names, first_line_number=None)
            # The pipeline parses only as deep as its model reads (words alone for a model without tags or tree).
            return getattr(self.translator, "annotate", tokenizer.annotate)(texts)

        try:
            for item, sentence in zip(pending, annotate([item.text or "" for item in pending]), strict=True):
                item.sentence = sentence
        except AnnotatorLoadError:
            raise  # nothing could be parsed: a failure of the run, not of these sentences
        except AnnotationCacheError as error:
            # The cache file, not a sentence, is at fault: said once, and this run parses without it.
            print(f"hf-srcfeat-translate: {error}\nhf-srcfeat-translate: parsing without the annotation cache for "
                  "this run.", file=sys.stderr)
            tokenizer.disable_annotation_cache()
            self.parse(items)
        except Exception:  # noqa: BLE001 - isolate the sentence the parser failed on, keep the others
            for item in pending:
                try:
                    item.sentence = annotate([item.text or ""])[0]
                except AnnotatorLoadError:
                    raise
                except Exception as error:  # noqa: BLE001
                    failure = str(error) if self.factor_names and isinstance(error, ValueError) else \
                        f"the annotator failed: {type(error).__name__}: {error}"
                    if self.translates_unparsed and not self.factor_names:
                        item.parse_failure = failure
                    else:
                        item.error = failure

    def generate(self, items: list[SourceItem], parse: bool = True) -> list[list[dict]]:
        from hf_srcfeat.pipeline_translation import UnknownLabelsWarning

        if not items:
            return []
        options = {"batch_size": self.batch_size, "num_return_sequences": self.num_return_sequences}
        if not parse:
            options["parse"] = False
        if self.num_return_sequences > 1:
            options["return_scores"] = True
        try:
            with warnings.catch_warnings():  # said here once a run, with its line (`say_unknown_labels`)
                warnings.simplefilter("ignore", UnknownLabelsWarning)
                translations = self.translator([self.source(item) for item in items], **options)
            return [as_list(output) for output in translations]
        except (ValueError, RuntimeError, IndexError) as error:
            if len(items) == 1:
                items[0].error = f"the model failed: {type(error).__name__}: {error}"
                return [[]]
            return [translations for item in items for translations in self.generate([item], parse)]


def as_list(output) -> list[dict]:
    return output if isinstance(output, list) else [output]


def format_output(index: int, translations: list[dict], num_return_sequences: int) -> str:
    """The output lines of one input sentence, each ending in a newline."""
    if num_return_sequences == 1:
        return (translations[0]["translation_text"] if translations else "") + "\n"
    if not translations:
        translations = [{"translation_text": "", "score": -math.inf}] * num_return_sequences
    # Best first, as beam search and CTranslate2 rank them (the pipeline gives samples in the order drawn).
    translations = sorted(translations, key=lambda one: -one["score"])
    return "".join(f"{index} ||| {one['translation_text']} ||| {one['score']:.6f}\n" for one in translations)


#: What makes the tokenizer's annotator load, as the commands that parse say it.
PARSER_REMEDY = ("give Stanza's models (--stanza_dir, or $HF_SRCFEAT_STANZA_DIR), or install the spaCy pipeline the "
                 "tokenizer names")


def command_annotator(tokenizer, args: argparse.Namespace, device: str):
    """The annotator the tokenizer was built with (Stanza, spaCy, ...), with the command's cache options."""
    settings = tokenizer.annotator_settings
    options = dict(cache_path=args.annotation_cache, use_cache=not args.no_annotation_cache)
    if settings.get("backend", "stanza") == "stanza":
        options.update(model_dir=args.stanza_dir, device=device)
    try:
        return annotator_from_settings(settings, **options)
    except (FileNotFoundError, ValueError) as error:  # no models for its language here, an unknown backend
        raise AnnotatorLoadError(f"the tokenizer's {settings.get('backend', 'stanza')} annotator "
                                 f"({settings.get('language')}) cannot be made: {error}") from None


def features_read(translator) -> list[str] | None:
    """The input features a translator's model reads (`pos_ids`, `factor_case_ids`, ...): a CTranslate2 export's
    factors (those it has embeddings for), else its config's `source_features_read`; None where neither says (the
    model reads every feature it is given)."""
    from hf_srcfeat.source_features import user_factor_feature

    factors = getattr(translator, "factors", None)
    if factors is not None:
        user_factors = translator.tokenizer.feature_vocabularies.extra if factors else {}
        return [user_factor_feature(name) if name in user_factors else f"{name}_ids" for name in factors]
    return getattr(getattr(getattr(translator, "model", None), "config", None), "source_features_read", None)


def check_factors_read(translator, factor_names: list[str]) -> None:
    """Refuse `word￨value` factors the model does not read: they would be parsed and dropped without a word (or, by
    a model without source features, translated as part of the words)."""
    from hf_srcfeat.source_features import is_user_factor_feature, user_factor_name

    features = features_read(translator)
    if features is None:
        return
    read = [user_factor_name(feature) for feature in features if is_user_factor_feature(feature)]
    unread = [name for name in factor_names if name not in read]
    if unread:
        raise SystemExit(f"hf-srcfeat-translate: --factor_names {' '.join(unread)}: the model reads no such factor "
                         f"({'its user factors: ' + ', '.join(read) if read else 'it reads no user factor'}); remove "
                         f"{'them' if len(unread) > 1 else 'it'} from the input and --factor_names, or translate "
                         "plain text.")


def load_translator(args: argparse.Namespace):
    """The translation pipeline for the model, its tokenizer and the annotator the options ask for (or, with
    `--backend ctranslate2`, the translator of a CTranslate2 export)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat.pipeline_translation import pipeline
    from hf_srcfeat.single_row_products import set_cpu_threads
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    device = "cpu" if args.quantize else resolve_device(args.device)  # int8 dynamic quantization is CPU-only
    args.device = device  # the report says where it ran, not "auto"
    if args.seed is not None:
        torch.manual_seed(args.seed)
    if args.threads is not None:  # the parser runs PyTorch in this process whatever the backend
        set_cpu_threads(args.threads)
    if args.backend == "ctranslate2":
        from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator

        compute_type = args.compute_type or {"float32": "default"}.get(args.dtype, args.dtype)
        if args.seed is not None:
            import ctranslate2

            ctranslate2.set_random_seed(args.seed)
        try:
            translator = CTranslate2Translator(args.model, device=device.split(":")[0], compute_type=compute_type,
                                               num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
                                               intra_threads=args.threads or 0, **given_decoding_options(args))
        except (ValueError, ImportError) as error:
            raise SystemExit(f"hf-srcfeat-translate: {error}") from None
        if translator.reads_parses and args.input_format in ("text", "factored"):
            translator.tokenizer.annotator = command_annotator(translator.tokenizer, args, device)
        return translator
    try:
        tokenizer = load_tokenizer(args.tokenizer or args.model)
    except OSError as error:  # not a folder here, and the Hub has no such model or cannot be reached
        name, option = (args.tokenizer, "--tokenizer") if args.tokenizer else (args.model, "--model")
        raise SystemExit(f"hf-srcfeat-translate: {option} {name}: no such folder here, and it does not load from "
                         f"the Hub ({error_summary(error)}).") from None
    if not hasattr(tokenizer, "annotate"):
        raise SystemExit(f"{args.tokenizer or args.model}: its tokenizer is a {type(tokenizer).__name__}, not a "
                         "hf_srcfeat SourceFeatureTokenizer; pass --tokenizer with the model's tokenizer folder.")
    if args.input_format in ("text", "factored") and not args.no_parse:
        tokenizer.annotator = command_annotator(tokenizer, args, device)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
    if args.quantize:
        from hf_srcfeat.quantization import quantize_linear_layers

        quantize_linear_layers(model, args.quantize)
    generation = {"num_beams": args.num_beams, **given_decoding_options(args)}
    if args.max_new_tokens is not None:
        generation["max_new_tokens"] = args.max_new_tokens
        model.generation_config.max_length = None  # the saved limit yields to the one asked for, without a warning
    try:
        return pipeline("translation", model=model, tokenizer=tokenizer, device=device, **generation)
    except ValueError as error:  # a tokenizer of another model
        raise SystemExit(f"hf-srcfeat-translate: {error}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-srcfeat-translate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", "-m", required=True, help=(
        "trained model folder or Hub id (with --backend ctranslate2: a folder written by hf-srcfeat-export-ct2)"))
    parser.add_argument("--backend", choices=["transformers", "ctranslate2"], default="transformers",
                        help="run the model with Transformers (default) or a CTranslate2 export of it")
    parser.add_argument("--compute_type", default=None, help=(
        "CTranslate2's compute type (int8, int8_float32, float32, float16, ...; default: the export's, or --dtype)"))
    parser.add_argument("--tokenizer", help="tokenizer folder or Hub id (default: the model's)")
    parser.add_argument("--input", "-i", default="-", help="input file (.gz read as gzip); - or absent: stdin")
    parser.add_argument("--output", "-o", default="-", help="output file (.gz written as gzip); - or absent: stdout")
    parser.add_argument("--factor_names", nargs="+", default=None, help=(
        "with --input_format factored: the names of the user factors of each word￨value1￨value2 token"))
    parser.add_argument("--input_format", choices=["text", "conllu", "factored"], default="text",
                        help="text: raw sentences, one a line, parsed on the way; conllu: pre-parsed sentences")
    parser.add_argument("--no_parse", action="store_true", help=(
        "translate raw text without parsing it (no annotator for the language, or none wanted; --backend transformers): "
        "the model's source features take their defaults, with a warning; quality depends on the model "
        "(documentation: 'Translating without a parse')"))
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per generate call (default 32)")
    parser.add_argument("--num_beams", type=int, default=None,
                        help="beam size (default 4, or 1 with --do_sample; 1 is greedy)")
    parser.add_argument("--num_return_sequences", type=int, default=1,
                        help="n-best: translations per sentence, in the n-best format above (needs num_beams >= n, or "
                             "--do_sample: n samples)")
    add_decoding_arguments(parser)  # --length_penalty, --no_repeat_ngram_size, ..., --do_sample --top_k ...
    parser.add_argument("--seed", type=int, default=None, help="random seed for --do_sample (reproducible samples)")
    parser.add_argument("--max_new_tokens", type=int, default=None,
                        help="longest translation in tokens (default: the model's generation config)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=None, help=(
        "CPU threads for parsing and decoding: PyTorch's and numpy's BLAS's, or CTranslate2's threads per batch "
        "(default: the libraries' own). With 1, as in one process per core, greedy decoding of one sentence "
        "multiplies its single rows through numpy's OpenBLAS"))
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="weights' precision")
    parser.add_argument("--quantize", choices=["int8"], default=None, help=(
        "int8: dynamic int8 quantization of the linear layers, on the CPU with float32 weights (faster; a few "
        "translations differ from float32's; for CTranslate2 use --compute_type int8)"))
    parser.add_argument("--annotation_cache", default=None,
                        help="SQLite parse cache (default: $HF_SRCFEAT_ANNOTATION_CACHE, else "
                             "~/.cache/hf_srcfeat/annotations.sqlite)")
    parser.add_argument("--no_annotation_cache", action="store_true", help="parse every line, cache nothing")
    parser.add_argument("--stanza_dir", default=None,
                        help="Stanza resources folder (default: $HF_SRCFEAT_STANZA_DIR, else Stanza's download)")
    parser.add_argument("--buffer_size", type=int, default=None, help=(
        "lines parsed and translated together (default 1000; 1 when stdin is a terminal, so each line is "
        "translated as soon as it is typed)"))
    parser.add_argument("--no_sort", action="store_true",
                        help="translate in input order instead of grouping sentences of similar length")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no closing summary")
    parser.add_argument("--report_json", default=None, help="also write the throughput and failures to this JSON file")
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_counts(parser, args, ("batch_size", "num_beams", "num_return_sequences", "max_new_tokens", "buffer_size",
                                "threads"))
    try:
        check_decoding_options(given_decoding_options(args))
    except ValueError as error:
        parser.error(str(error).replace("`", "--", 1).replace("`", "", 1))
    if args.do_sample and (args.num_beams or 1) > 1:
        parser.error(f"--do_sample draws each translation token by token: give --num_beams 1 (or leave it out), "
                     f"got {args.num_beams}.")
    if args.seed is not None and not args.do_sample:
        parser.error("--seed makes sampling reproducible: it needs --do_sample.")
    # The command searches unless told to sample, whatever the model's generation config says (a model trained with
    # sampled evaluations keeps do_sample there), as fairseq's and Marian's decoders do.
    args.do_sample = bool(args.do_sample)
    args.num_beams = args.num_beams or (1 if args.do_sample else 4)
    if args.early_stopping and args.num_beams == 1:
        parser.error("--early_stopping stops beam search: give --num_beams above 1 (sampling and greedy decoding "
                     "stop when the translation ends).")
    if args.num_return_sequences > args.num_beams and not args.do_sample:
        parser.error(f"--num_return_sequences {args.num_return_sequences} needs --num_beams >= "
                     f"{args.num_return_sequences} (n-best lists come from beam search; or draw that many samples "
                     f"with --do_sample), got {args.num_beams}.")
    problem = overwritten_input({"--output": args.output, "--report_json": args.report_json},
                                {"input": args.input, "annotation cache": used_cache_path(args)},
                                {"model": args.model, "tokenizer": args.tokenizer})
    if problem:
        parser.error(problem)
    if (args.input_format == "factored") != bool(args.factor_names):
        parser.error("--input_format factored and --factor_names go together (the names of the word￨value factors).")
    if args.output != "-" and Path(args.output).is_dir():
        parser.error(f"--output {args.output} is a folder; name a file.")
    check_model_source(args.model)
    if args.backend == "transformers" and is_export(args.model):
        parser.error(f"--model {args.model} is a CTranslate2 export (hf-srcfeat-export-ct2): add --backend "
                     "ctranslate2.")
    try:
        check_cache_path(used_cache_path(args))
    except ValueError as error:
        parser.error(f"--annotation_cache: {error}")
    if args.quantize and (args.backend != "transformers" or args.dtype != "float32" or args.device.startswith("cuda")):
        parser.error(f"--quantize {args.quantize} quantizes a float32 model on the CPU (--backend transformers); got "
                     f"--backend {args.backend} --dtype {args.dtype} --device {args.device}"
                     + (" (CTranslate2 takes --compute_type int8)" if args.backend == "ctranslate2" else "") + ".")
    if args.tokenizer and args.backend == "ctranslate2":
        parser.error("--tokenizer applies to --backend transformers: a CTranslate2 export encodes with the tokenizer "
                     "saved in its folder.")
    if args.no_parse and (args.input_format != "text" or args.backend != "transformers"):
        parser.error("--no_parse translates plain text (--input_format text) with --backend transformers; "
                     f"got --input_format {args.input_format} --backend {args.backend}.")


def count_lines(path: str, input_format: str) -> int | None:
    """The input's lines, for the progress bar; None for stdin, a FIFO or a process substitution (read once)."""
    if path == "-" or input_format not in ("text", "factored") or is_special_file(Path(path)):
        return None
    try:
        with open_binary_input(path) as stream:
            return sum(1 for _ in stream)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:  # read before anything is written
        raise SystemExit(f"--input {path} is a truncated or damaged gzip file ({error}).") from None


@interruptible
def main(argv: list[str] | None = None) -> int:
    keep_freed_memory()
    try:
        return translate_files(argv)
    except AnnotatorLoadError as error:
        raise SystemExit(f"hf-srcfeat-translate: {error}. Nothing can be parsed, so nothing is translated; "
                         f"{PARSER_REMEDY}, or give parsed input (--input_format conllu), or translate without source "
                         "features (--no_parse).") from None
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop quietly, and keep the interpreter's final flush from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


@contextlib.contextmanager
def without_transformers_progress_bars() -> Iterator[None]:
    """Transformers' progress bars (loading the weights) off inside, as they were after."""
    from transformers.utils import logging as transformers_logging

    were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if were_on:
            transformers_logging.enable_progress_bar()


def translate_files(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    interactive = args.input == "-" and sys.stdin.isatty()
    buffer_size = args.buffer_size = args.buffer_size or (1 if interactive else 1000)  # the report says what was used

    from torch import nn

    import hf_srcfeat  # noqa: F401  (registers the model classes with the Auto classes)
    from hf_srcfeat.linear import prepared_inference_weights

    started = time.perf_counter()
    with contextlib.nullcontext() if not args.quiet else without_transformers_progress_bars():
        translator = load_translator(args)
    if args.input_format == "factored":
        check_factors_read(translator, args.factor_names)
    file_translator = FileTranslator(translator, args.num_return_sequences, args.batch_size,
                                     sort_by_length=not args.no_sort,
                                     factor_names=args.factor_names if args.input_format == "factored" else None,
                                     parse=not args.no_parse)
    total = count_lines(args.input, args.input_format)
    reader = functools.partial(read_conllu_sentences, name=input_name(args.input)) \
        if args.input_format == "conllu" else read_raw_lines
    from tqdm.auto import tqdm

    progress = tqdm(total=total, unit="sent", file=sys.stderr, disable=args.quiet or args.input == "-",
                    desc="translating")
    index = 0
    # Written whole or not at all (hf_srcfeat.safe_writing): an interrupted run never leaves a short file that looks
    # finished, and an existing output is replaced only by a complete new one.
    # The model stays as loaded for the whole run: its linear layers read weights prepared once for inference.
    model = getattr(translator, "model", None)
    prepared = prepared_inference_weights(model) if isinstance(model, nn.Module) else contextlib.nullcontext()
    with prepared, open_binary_input(args.input) as source, \
            (replaced_atomically(args.output) if args.output != "-" else _stdout()) as target:
        for chunk in chunks(reader(source), buffer_size):
            for item, translations in zip(chunk, file_translator.translate_chunk(chunk), strict=True):
                if item.error is not None:
                    print(f"hf-srcfeat-translate: {args.input} line {item.line_number}: {item.error}; "
                          "writing an empty translation.", file=sys.stderr)
                elif item.unparsed:
                    print(f"hf-srcfeat-translate: {args.input} line {item.line_number}: {item.parse_failure}; "
                          "translated without a parse.", file=sys.stderr)
                target.write(format_output(index, translations, args.num_return_sequences))
                index += 1
            target.flush()
            progress.update(len(chunk))
    progress.close()
    statistics = file_translator.statistics
    statistics.total_seconds = time.perf_counter() - started
    if not args.quiet:
        print(f"hf-srcfeat-translate: {statistics.summary()}", file=sys.stderr)
    if args.report_json:
        write_json_atomically(args.report_json, {"code_version": code_version(), "arguments": vars(args),
                                                 "model_weights": weights_digests(args.model),
                                                 **asdict(statistics)})
    if statistics.failed and not statistics.translated:
        print(f"hf-srcfeat-translate: nothing was translated: every one of the {statistics.failed} non-empty "
              "sentences failed (see above).", file=sys.stderr)
        return 1
    return 0


class _stdout:
    """stdout as UTF-8 text whatever the locale, left open on exit."""

    def __enter__(self) -> IO[str]:
        self.stream = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n", write_through=True)
        return self.stream

    def __exit__(self, *exc) -> None:
        self.stream.flush()
        self.stream.detach()


if __name__ == "__main__":
    sys.exit(main())
