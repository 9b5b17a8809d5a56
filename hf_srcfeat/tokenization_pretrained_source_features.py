"""`PretrainedSourceFeatureTokenizer`: a pretrained checkpoint's own tokenizer (Marian's SentencePiece models,
NLLB / M2M100 with their language codes, mBART-50) with every word feature aligned to its subwords.

The checkpoint's tokenizer segments the raw source exactly as it always does, so `input_ids` are its own; each
subword then takes the features of the parsed word its characters belong to. Character spans come from the fast
tokenizers' offset mapping, or from SentencePiece's piece spans for the Python tokenizers (Marian, M2M100). A
subword that runs across a word boundary (SentencePiece does not split at punctuation: "▁dog." can be one piece)
takes the word of its first character; a bare "▁" takes the next subword's word. Targets and decoding are the
checkpoint tokenizer's own, untouched.

    base = AutoTokenizer.from_pretrained("Helsinki-NLP/opus-mt-en-de")
    tokenizer = PretrainedSourceFeatureTokenizer.build(base, annotator.annotate(training_sources))
    batch = tokenizer(["A dog runs."], text_target=["Ein Hund rennt."], return_tensors="pt")
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoTokenizer, BatchEncoding, PreTrainedTokenizerBase
from transformers.utils import cached_file, to_py_obj

from .annotated_sentence import AnnotatedSentence
from .annotator import Annotator
from .annotators import annotator_from_settings
from .damaged_files import check_json_files
from .feature_vocabulary import FeatureVocabularies
from .safe_writing import write_json_atomically
from .source_features import SOURCE_FEATURE_NAMES, is_user_factor_feature
from .tokenization_source_features import (
    BASE_FOLDER,
    FEATURE_VOCAB_FILE,
    LOADING_FLAGS,
    TREE_COLUMN,
    SourceFeatureTokenizer,
    check_same_text,
    dependency_distance_column,
    drop_unread_word_ids,
    encoding_reads_parse,
    implied_truncation,
    pad_feature_columns,
    vocabulary_fingerprint,
    word_features,
)

SETTINGS_FILE = "source_features_config.json"
#: `from_pretrained` options handed on to the checkpoint tokenizer's loading (AutoTokenizer adds others).
LOADING_OPTIONS = ("cache_dir", "revision", "token", "local_files_only", "force_download", "proxies")


def is_source_feature(name: str) -> bool:
    return name in SOURCE_FEATURE_NAMES or is_user_factor_feature(name)


def load_tokenizer(name_or_path: str | Path, **kwargs: Any):
    """A model's tokenizer: the wrapped checkpoint tokenizer where one was saved (a model started from a pretrained
    checkpoint), else `AutoTokenizer`'s (a `SourceFeatureTokenizer` for the zoo's own models)."""
    if Path(name_or_path).is_dir():
        check_json_files(name_or_path)  # a cut-off tokenizer.json would otherwise fail without its name
    try:
        wrapped = cached_file(str(name_or_path), SETTINGS_FILE, _raise_exceptions_for_missing_entries=False,
                              **{name: kwargs[name] for name in LOADING_OPTIONS if name in kwargs})
    except OSError:  # some Hub mirrors answer a missing file as a missing repository: AutoTokenizer says which
        wrapped = None
    if wrapped is not None:
        return PretrainedSourceFeatureTokenizer.from_pretrained(name_or_path, **kwargs)
    return AutoTokenizer.from_pretrained(str(name_or_path), **kwargs)


class _Encoding:
    """The two fields of a `tokenizers.Encoding` that feature alignment reads."""

    def __init__(self, ids: list[int], word_ids: list[int | None]):
        self.ids, self.word_ids = ids, word_ids


def word_starts(sentence: AnnotatedSentence, text: str) -> list[int]:
    """Character offset of each word in `text`, found in order; a word the text does not spell (a part of a
    multi-word token like French "du" -> "de" + "le") starts where the previous word ended."""
    starts, cursor = [], 0
    for word in sentence.words:
        start = text.find(word.text, cursor)
        if start < 0 or text[cursor:start].strip():
            starts.append(cursor)
            continue
        starts.append(start)
        cursor = start + len(word.text)
    return starts


def token_spans(base: PreTrainedTokenizerBase, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """The checkpoint tokenizer's ids of `text` without special tokens, and each one's character span."""
    if base.is_fast:
        encoding = base(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(encoding["input_ids"]), [tuple(span) for span in encoding["offset_mapping"]]
    processor = getattr(base, "spm_source", None) or getattr(base, "sp_model", None)
    if processor is None:
        raise ValueError(f"{type(base).__name__} gives no character offsets (not a fast tokenizer, no SentencePiece "
                         "model): its subwords cannot be aligned to words.")
    ids = base(text, add_special_tokens=False)["input_ids"]
    try:
        pieces = processor.encode(text, return_type="proto").pieces  # sentencepiece >= 0.2.1
    except TypeError:
        pieces = processor.encode(text, out_type="immutable_proto").pieces
    if len(pieces) != len(ids):
        raise ValueError(f"{type(base).__name__} gave {len(ids)} ids for {len(pieces)} SentencePiece pieces of "
                         f"{text[:60]!r}; its subwords cannot be aligned to words.")
    char_of_byte = np.zeros(len(text.encode("utf-8")) + 1, dtype=np.int64)
    position = 0
    for index, character in enumerate(text):
        width = len(character.encode("utf-8"))
        char_of_byte[position:position + width] = index
        position += width
    char_of_byte[position] = len(text)
    return ids, [(int(char_of_byte[piece.begin]), int(char_of_byte[piece.end])) for piece in pieces]


def token_words(spans: Sequence[tuple[int, int]], starts: Sequence[int], text: str) -> list[int]:
    """The word of each subword: the last word starting at or before its first non-space character; a subword
    of whitespace only takes the next subword's word (the previous one's at the end)."""
    firsts: list[int | None] = []
    for start, end in spans:
        first = next((index for index in range(start, end) if not text[index].isspace()), None)
        firsts.append(first)
    words: list[int | None] = [None if first is None else max(bisect.bisect_right(starts, first) - 1, 0)
                               for first in firsts]
    following: int | None = None
    for index in range(len(words) - 1, -1, -1):  # bare word-start markers: the next subword's word
        if words[index] is None:
            words[index] = following
        following = words[index]
    previous = 0
    for index, word in enumerate(words):  # trailing ones: the previous subword's word
        if word is None:
            words[index] = previous
        previous = words[index]  # type: ignore[assignment]
    return [int(word) for word in words]  # type: ignore[arg-type]


class PretrainedSourceFeatureTokenizer:
    """A checkpoint's tokenizer (`base`) that, for source text, also returns its words' linguistic features.

    Called as `SourceFeatureTokenizer` is: raw texts (parsed by the annotator, cached) or `annotations=`, with
    `text_target=` for labels and `source_features=False` for the plain encoding. Everything else (`decode`,
    special tokens, `src_lang` / `tgt_lang`) is the base tokenizer's.
    """

    _auto_class: str | None = None

    def __init__(self, base: PreTrainedTokenizerBase, feature_vocabularies: FeatureVocabularies,
                 language: str = "en", annotator: Annotator | None = None, annotator_settings: dict | None = None):
        self.base = base
        self.feature_vocabularies = feature_vocabularies
        self.language = language
        self.annotator_settings = annotator_settings or (annotator.settings() if annotator is not None
                                                         else {"backend": "stanza", "language": language})
        self._annotator = annotator
        self._words_only: tuple[Annotator, Annotator] | None = None  # (annotator, its words-only twin)

    @classmethod
    def build(cls, base: PreTrainedTokenizerBase, annotations: Iterable[AnnotatedSentence], *, language: str = "en",
              annotator: Annotator | None = None, pos_tagset: str = "upos", lemma_min_frequency: int = 2,
              max_lemmas: int | None = 10000) -> PretrainedSourceFeatureTokenizer:
        """Wrap `base` with feature vocabularies built from parsed training sources."""
        vocabularies = FeatureVocabularies.build(annotations, lemma_min_frequency, max_lemmas, pos_tagset)
        return cls(base, vocabularies, language=language, annotator=annotator)

    @classmethod
    def register_for_auto_class(cls, auto_class: str = "AutoTokenizer") -> None:
        """What `AutoTokenizer` calls on a class it loaded as remote code (as on Transformers' own tokenizers)."""
        cls._auto_class = auto_class

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, **kwargs: Any) -> PretrainedSourceFeatureTokenizer:
        """The base tokenizer (`AutoTokenizer`) and the feature vocabularies saved beside it (a folder or Hub id)."""
        settings_file = cached_file(str(name_or_path), SETTINGS_FILE, _raise_exceptions_for_missing_entries=False)
        vocabulary_file = cached_file(str(name_or_path), FEATURE_VOCAB_FILE,
                                      _raise_exceptions_for_missing_entries=False)
        if settings_file is None or vocabulary_file is None:
            raise ValueError(f"{name_or_path} has no {SETTINGS_FILE} and {FEATURE_VOCAB_FILE}: not a saved "
                             "PretrainedSourceFeatureTokenizer (build one with PretrainedSourceFeatureTokenizer.build).")
        settings = json.loads(Path(settings_file).read_text())
        options = {name: value for name, value in kwargs.items() if name in LOADING_OPTIONS}
        base = AutoTokenizer.from_pretrained(str(name_or_path), subfolder=BASE_FOLDER, **options)
        return cls(base, FeatureVocabularies.load(vocabulary_file), language=settings.get("language", "en"),
                   annotator_settings=settings.get("annotator_settings"))

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> tuple[str, ...]:
        """The checkpoint tokenizer's files in `checkpoint_tokenizer/`, the feature vocabularies and settings beside."""
        folder = Path(save_directory)
        folder.mkdir(parents=True, exist_ok=True)
        for flag in LOADING_FLAGS:  # how the checkpoint's tokenizer was found, not part of it
            self.base.init_kwargs.pop(flag, None)
        files = tuple(self.base.save_pretrained(str(folder / BASE_FOLDER)))
        self.feature_vocabularies.save(folder / FEATURE_VOCAB_FILE)
        write_json_atomically(folder / SETTINGS_FILE,
                              {"language": self.language, "annotator_settings": self.annotator_settings})
        return (*files, str(folder / FEATURE_VOCAB_FILE), str(folder / SETTINGS_FILE))

    def __getattr__(self, name: str):
        if name == "base":  # not set yet (e.g. during unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.base, name)

    def __len__(self) -> int:
        return len(self.base)

    def fingerprint(self) -> str:
        """SHA-256 (16 hex digits) of the subword and feature vocabularies, as `SourceFeatureTokenizer`'s."""
        return vocabulary_fingerprint(self.base.get_vocab(), self.feature_vocabularies)

    @property
    def annotator(self) -> Annotator:
        """The annotator of raw text: the one given, else re-created from the recorded settings on first use."""
        if self._annotator is None:
            self._annotator = annotator_from_settings(self.annotator_settings)
        return self._annotator

    @annotator.setter
    def annotator(self, annotator: Annotator) -> None:
        if annotator.language != self.language:
            raise ValueError(f"annotator language {annotator.language!r} differs from the tokenizer's "
                             f"{self.language!r}.")
        self._annotator = annotator

    def disable_annotation_cache(self) -> None:
        """Parse without the on-disk cache from now on (e.g. after its file turned out unreadable)."""
        self.annotator.cache = None
        if self._words_only is not None:
            self._words_only[1].cache = None

    def annotate(self, texts: Sequence[str], show_progress: bool = False, words_only: bool = False
                 ) -> list[AnnotatedSentence]:
        """Parse raw texts with the annotator; `words_only=True` only segments them into its words (as
        `SourceFeatureTokenizer.annotate`)."""
        annotator = self.annotator
        if words_only:
            if self._words_only is None or self._words_only[0] is not annotator:
                self._words_only = (annotator, annotator.with_words_only())
            annotator = self._words_only[1]
        return annotator.annotate(list(texts), show_progress=show_progress)

    def required_vocabularies(self) -> FeatureVocabularies:
        return self.feature_vocabularies

    def pad(self, encoded_inputs, padding=True, max_length: int | None = None, pad_to_multiple_of: int | None = None,
            padding_side: str | None = None, return_attention_mask: bool | None = None, return_tensors=None,
            verbose: bool = True) -> BatchEncoding:
        """The base tokenizer pads the token columns; the features are padded alongside (what collators call)."""
        rows = [dict(row) for row in encoded_inputs] if isinstance(encoded_inputs, (list, tuple)) else \
            [dict(zip(encoded_inputs, values, strict=True)) for values in zip(*encoded_inputs.values(), strict=True)]
        rows = [{name: to_py_obj(value) for name, value in row.items()} for row in rows]  # tensors from pipelines
        features = [{name: row.pop(name) for name in list(row) if is_source_feature(name)} for row in rows]
        padded = self.base.pad(rows, padding=padding, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
                               padding_side=padding_side, return_attention_mask=return_attention_mask)
        left = (padding_side or self.base.padding_side) == "left"
        data = {name: list(values) for name, values in padded.items()}
        for index, (row, columns) in enumerate(zip(rows, features, strict=True)):
            length = len(row["input_ids"])
            difference = len(data["input_ids"][index]) - length
            if difference > 0:
                pad_feature_columns(columns, length, difference, left)
            for name, values in columns.items():
                data.setdefault(name, []).append(values)
        return BatchEncoding(data, tensor_type=return_tensors)

    # ---------------------------------------------------------------- encoding

    def __call__(self, text=None, text_target=None, *, annotations=None, source_features: bool = True,
                 return_dep_distance: bool = True, return_word_heads: bool | None = None,
                 source_feature_names: Collection[str] | None = None, padding=False,
                 truncation=None, max_length: int | None = None, return_tensors=None, add_special_tokens: bool = True,
                 **kwargs) -> BatchEncoding:
        """Encodings with source features, `input_ids` exactly the base tokenizer's; `return_dep_distance` and
        `return_word_heads` and `source_feature_names` as for `SourceFeatureTokenizer`."""
        options = dict(padding=padding, truncation=truncation, max_length=max_length,
                       add_special_tokens=add_special_tokens)
        if not source_features or (text is None and annotations is None):
            return self.base(text, text_target=text_target, return_tensors=return_tensors, **options, **kwargs)
        return_attention_mask = kwargs.pop("return_attention_mask", None)
        if kwargs:
            raise ValueError(f"unexpected arguments for source encoding: {sorted(kwargs)}.")
        truncation = options["truncation"] = implied_truncation(truncation, max_length, padding)
        batched = not isinstance(text if annotations is None else annotations, (str, AnnotatedSentence))
        if annotations is not None:
            sentences = list(annotations) if batched else [annotations]
            texts = [sentence.raw_text for sentence in sentences] if text is None else (
                list(text) if batched else [text])
            if len(texts) != len(sentences):
                raise ValueError(f"{len(texts)} texts but {len(sentences)} annotations.")
            for index, (one, sentence) in enumerate(zip(texts, sentences, strict=True)):
                check_same_text(index, one, sentence)
        else:
            texts = list(text) if batched else [text]
            parse = encoding_reads_parse(source_feature_names, return_dep_distance, return_word_heads)
            sentences = self.annotate(texts, words_only=not parse)
        if not texts:
            raise ValueError("no sentences to encode.")
        limit = (max_length or self.base.model_max_length) if truncation not in (None, False, "do_not_truncate") \
            else None
        rows = [self.encode_sentence(one, sentence, add_special_tokens, limit, dep_distance=False,
                                     source_feature_names=source_feature_names)
                for one, sentence in zip(texts, sentences, strict=True)]
        heads = None  # the tree: [S, S] matrices, stored `word_heads` (left in the rows), or not at all
        if return_dep_distance or return_word_heads is False:
            heads = [row.pop(TREE_COLUMN) for row in rows]
        data: dict[str, Any]
        if padding not in (False, None, "do_not_pad"):
            # Truncation is done: max_length is a padding length only with padding="max_length".
            data = dict(self.pad(rows, padding=padding, max_length=max_length if padding == "max_length" else None))
            data = data if batched else {name: values[0] for name, values in data.items()}
        else:
            data = {name: [row[name] for row in rows] for name in rows[0]} if batched else rows[0]
        if return_attention_mask is False:
            data.pop("attention_mask", None)
        if return_dep_distance and heads is not None:
            data["dep_distance"] = dependency_distance_column(heads, data["word_ids"], batched,
                                                              as_lists=return_tensors is None)
        drop_unread_word_ids(data, source_feature_names)
        if text_target is not None:
            data["labels"] = self.base(text_target=text_target, **options)["input_ids"]
        return BatchEncoding(data, tensor_type=return_tensors, prepend_batch_axis=not batched)

    def encode_sentence(self, text: str, sentence: AnnotatedSentence, add_special_tokens: bool = True,
                        max_length: int | None = None, dep_distance: bool = True,
                        source_feature_names: Collection[str] | None = None) -> dict[str, list]:
        """One source's encoding: the base tokenizer's ids (truncated as it truncates, from the right) and the
        features of each subword's word."""
        ids, spans = token_spans(self.base, text)
        full = self.base(text, add_special_tokens=add_special_tokens)["input_ids"]
        prefix = next((start for start in range(len(full) - len(ids) + 1) if full[start:start + len(ids)] == ids),
                      None)
        if prefix is None:
            raise ValueError(f"{type(self.base).__name__} encodes {text[:60]!r} differently with and without special "
                             "tokens; its subwords cannot be aligned to words.")
        suffix = full[prefix + len(ids):]
        words = token_words(spans, word_starts(sentence, text), text)
        features = word_features(self.feature_vocabularies, sentence, words, source_feature_names)
        keep = len(ids) if max_length is None else max(min(len(ids), max_length - prefix - len(suffix)), 0)
        encoding = _Encoding(full[:prefix] + ids[:keep] + suffix,
                             [None] * prefix + words[:keep] + [None] * len(suffix))
        return SourceFeatureTokenizer._align(encoding, features, slice(0, keep), sentence.heads, dep_distance)


__all__ = ["PretrainedSourceFeatureTokenizer", "load_tokenizer", "token_spans", "token_words", "word_starts"]
