"""`SourceFeatureTokenizer`: raw text -> Stanza words -> subwords, with every word feature aligned to them.

Alignment: the source is segmented into subwords *within* Stanza's words (as in factored NMT, Sennrich &
Haddow 2016), so every subword belongs to exactly one word and carries that word's features. Each word is
encoded with the whitespace that preceded it in the raw text (a word that touched its predecessor, like the
"." in "dog.", gets no word-start marker), so the subwords are those the raw text gives whenever the subword
model does not merge across a word boundary. Words of a multi-word token that spell it ("does" + "n't")
touch; words that do not ("du" -> "de" + "le") are encoded apart.

Source tensors, aligned to the subword tokens ([batch, seq], `dep_distance` [batch, seq, seq]):

| name | value at a word's token | special token (`</s>`) | padding |
|---|---|---|---|
| `pos_ids`, `lemma_ids`, `deprel_ids`, `subword_tag_ids`, `feats_ids` | vocabulary id (unseen label: 1 `<unk>`) | 2 | 0 |
| `word_ids` | index of the word in the annotated sentence | -1 | -1 |
| `phrase_ids` | index of its parse phrase (`parse_phrases`), from 0 | -1 | -1 |
| `dep_distance` | tree-path edges between the two tokens' words, 0 within a word | -1 | -1 |

`feats_ids` (morphological features) comes only from tokenizers whose vocabularies have them (built since they
exist). Features are computed on the whole sentence and then cut with the tokens, so a truncated encoding is exactly
the start of the full one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import warnings
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from tokenizers import Tokenizer
from transformers import BatchEncoding
from transformers.tokenization_utils_tokenizers import TokenizersBackend
from transformers.utils import PaddingStrategy

from .annotated_sentence import AnnotatedSentence, check_text
from .annotator import Annotator
from .annotator_stanza import StanzaAnnotator
from .annotators import annotator_from_settings
from .dependency_tree import token_distance_matrix
from .feature_vocabulary import PAD_ID, SPECIAL_ID, UNK_ID, UNK_LABEL, FeatureVocabularies
from .parse_phrases import parse_phrases, phrase_token_limit
from .safe_writing import write_json_atomically
from .source_features import (
    PARSED_FEATURE_NAMES,
    SOURCE_FEATURE_NAMES,
    is_user_factor_feature,
    user_factor_feature,
)
from .subword_training import SPECIAL_TOKENS, build_subword_tokenizer

FEATURE_VOCAB_FILE = "feature_vocab.json"
#: Where a tokenizer wrapping a pretrained checkpoint's own (`tokenization_pretrained_source_features`) saves
#: that tokenizer's files, so that its tokenizer_config.json stays its own.
BASE_FOLDER = "checkpoint_tokenizer"
#: Value of each per-token feature at padding positions ([S, S] `dep_distance` pads rows and columns with -1).
FEATURE_PADDING = {"pos_ids": PAD_ID, "lemma_ids": PAD_ID, "deprel_ids": PAD_ID, "subword_tag_ids": PAD_ID,
                   "feats_ids": PAD_ID,
                   "word_ids": -1, "phrase_ids": -1}
NO_WORD = -1
#: The words' heads (1-based, 0 = root) of a stored encoding, instead of its [S, S] `dep_distance`.
TREE_COLUMN = "word_heads"
#: `__call__` options that have no meaning for word-aligned source features.
UNSUPPORTED_OPTIONS = ("stride", "return_overflowing_tokens", "return_offsets_mapping")


#: How `from_pretrained` found a tokenizer (Transformers passes them to `__init__`): not a property of the tokenizer,
#: so never saved with it (a Hub repository's tokenizer_config.json would otherwise say `"is_local": true`).
LOADING_FLAGS = ("is_local", "local_files_only")


class SourceFeatureTokenizer(TokenizersBackend):
    """A fast subword tokenizer that, for source text, also returns the linguistic features of its words.

    `tokenizer(texts)` annotates the texts with Stanza (cached on disk) and returns `input_ids`,
    `attention_mask` and the features of `hf_srcfeat.SOURCE_FEATURE_NAMES`; `annotations=` takes pre-parsed
    sentences (e.g. from `read_conllu`) instead; `text_target=` adds `labels` (plain subwords, no parsing);
    `source_features=False` gives the plain subword encoding of the raw text.

    Args:
        feature_vocab_file: JSON file of the feature vocabularies (written by `save_pretrained`).
        feature_vocabularies: the vocabularies themselves (instead of the file).
        language: language of the source.
        annotator: the annotator to use (any `hf_srcfeat.Annotator`: `StanzaAnnotator`, `SpacyAnnotator`, ...); by
            default the one the tokenizer was built with is re-created on first use (a `StanzaAnnotator(language)`,
            with its models from `$HF_SRCFEAT_STANZA_DIR` or Stanza's normal download, for tokenizers that
            recorded none).
        annotator_settings: what `Annotator.settings()` recorded when the tokenizer was built (saved with it).
    """

    vocab_files_names = {"tokenizer_file": "tokenizer.json", "feature_vocab_file": FEATURE_VOCAB_FILE}
    model_input_names = ["input_ids", "attention_mask", *SOURCE_FEATURE_NAMES]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except ValueError as error:
            # A model started from a pretrained checkpoint keeps that checkpoint's own tokenizer in a folder: the
            # error Transformers gives then (about sentencepiece) would not say so.
            if Path(str(pretrained_model_name_or_path), BASE_FOLDER).is_dir():
                raise ValueError(
                    f"{pretrained_model_name_or_path} holds a pretrained checkpoint's tokenizer with source features; "
                    "load it with hf_srcfeat.tokenization_pretrained_source_features.load_tokenizer(...) "
                    "(AutoTokenizer reads the zoo's own tokenizers only).") from error
            raise

    def __init__(self, *args, feature_vocab_file: str | None = None,
                 feature_vocabularies: FeatureVocabularies | None = None, language: str = "en",
                 annotator: Annotator | None = None, annotator_settings: dict | None = None, **kwargs):
        if annotator is not None and annotator_settings is None:
            annotator_settings = annotator.settings()
        kwargs = {name: value for name, value in kwargs.items() if name not in LOADING_FLAGS}
        super().__init__(*args, language=language, annotator_settings=annotator_settings, **kwargs)
        self.language = language
        self.annotator_settings = annotator_settings or {"backend": "stanza", "language": language}
        if feature_vocabularies is None and feature_vocab_file is not None:
            feature_vocabularies = FeatureVocabularies.load(feature_vocab_file)
        self.feature_vocabularies = feature_vocabularies
        # (pretokenized, words_only) -> the annotator for that input and depth, derived from the plain one
        self._annotators: dict[tuple[bool, bool], Annotator] = {}
        if annotator is not None:
            self.annotator = annotator
        self._word_tokenizer: tuple[int, Tokenizer] | None = None

    @classmethod
    def convert_to_native_format(cls, trust_remote_code: bool = False, **kwargs):
        # Load tokenizer.json verbatim: with a custom __init__, Transformers 5 would otherwise rebuild a BPE
        # without merges from the bare vocabulary, silently (../shared/notes/transformers5.md, item 4).
        return super().convert_to_native_format(trust_remote_code=True, **kwargs)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        for name in file_names:  # truncation and padding are per call, never a property of the saved tokenizer
            if Path(name).name.endswith("tokenizer.json"):
                state = json.loads(Path(name).read_text(encoding="utf-8"))
                state["truncation"], state["padding"] = None, None
                # Always written again: the same tokenizer gives the same bytes, whatever calls it served before
                write_json_atomically(name, state, ensure_ascii=False)
        if self.feature_vocabularies is None:
            return file_names
        path = Path(save_directory, (filename_prefix + "-" if filename_prefix else "") + FEATURE_VOCAB_FILE)
        self.feature_vocabularies.save(path)
        return (*file_names, str(path))

    def fingerprint(self) -> str:
        """SHA-256 (16 hex digits) of the subword vocabulary and the feature vocabularies: what a model trained with
        this tokenizer records (`tokenizer_fingerprint` in its config), so a different tokenizer is noticed."""
        return vocabulary_fingerprint(self.get_vocab(), self.feature_vocabularies)

    # ---------------------------------------------------------------- annotation

    @property
    def annotator(self) -> Annotator:
        """The annotator of raw text: the one the tokenizer was built with, re-created on first use."""
        if (False, False) not in self._annotators:
            self._annotators[(False, False)] = annotator_from_settings(self.annotator_settings)
        return self._annotators[(False, False)]

    @annotator.setter
    def annotator(self, annotator: Annotator) -> None:
        self.set_annotator(annotator)

    def set_annotator(self, annotator: Annotator, allow_different: bool = False) -> None:
        """Use `annotator` for raw text. One of another backend or model than the tokenizer was built with is refused
        (its tags and trees would not be what the feature vocabularies and the model learned) unless
        `allow_different=True`; then it becomes the recorded one."""
        if annotator.language != self.language:
            raise ValueError(f"annotator language {annotator.language!r} differs from the tokenizer's "
                             f"{self.language!r}.")
        recorded, given = self.annotator_settings, annotator.settings()
        same = recorded.get("backend", "stanza") == given.get("backend") and \
            recorded.get("model") == given.get("model")
        if not same and not allow_different:
            raise ValueError(f"this tokenizer was built with the annotator {recorded}, not {given}: its feature "
                             "vocabularies (and any model trained with it) expect that annotator's tags and trees. "
                             "Use tokenizer.set_annotator(annotator, allow_different=True) to switch anyway.")
        if not same:
            self.annotator_settings = given
            self.init_kwargs["annotator_settings"] = given
        self._annotators = {(False, False): annotator}

    def disable_annotation_cache(self) -> None:
        """Parse without the on-disk cache from now on (e.g. after its file turned out unreadable)."""
        self.annotator.cache = None
        for annotator in self._annotators.values():
            annotator.cache = None

    def _annotator_for(self, pretokenized: bool, words_only: bool) -> Annotator:
        if (pretokenized, words_only) not in self._annotators:
            annotator = self.annotator.with_pretokenized_input() if pretokenized else self.annotator
            self._annotators[(pretokenized, words_only)] = annotator.with_words_only() if words_only else annotator
        return self._annotators[(pretokenized, words_only)]

    def annotate(self, texts: Sequence[str] | Sequence[Sequence[str]], is_split_into_words: bool = False,
                 show_progress: bool = False, words_only: bool = False) -> list[AnnotatedSentence]:
        """Parse raw texts (or lists of words) with the tokenizer's annotator; `words_only=True` only segments
        them into its words (for a model whose `config.reads_parse` is False: the same words, no tags or tree)."""
        if is_split_into_words:
            for index, words in enumerate(texts):
                if not words or any(not isinstance(word, str) or not word.strip() or " " in word.strip()
                                    for word in words):
                    raise ValueError(f"text {index}: with is_split_into_words=True each text must be a non-empty "
                                     f"list of non-empty words without spaces, got {words!r}.")
            joined = [" ".join(word.strip() for word in words) for words in texts]
            return self._annotator_for(True, words_only).annotate(joined, show_progress=show_progress)
        return self._annotator_for(False, words_only).annotate(list(cast(Sequence[str], texts)),
                                                               show_progress=show_progress)

    # ---------------------------------------------------------------- encoding

    def __call__(self, text=None, text_pair=None, text_target=None, text_pair_target=None, *,
                 annotations: AnnotatedSentence | Sequence[AnnotatedSentence] | None = None,
                 source_features: bool = True, return_dep_distance: bool = True,
                 return_word_heads: bool | None = None, source_feature_names: Collection[str] | None = None,
                 **kwargs) -> BatchEncoding:
        """Encodings with source features. `return_dep_distance=False` gives the tree as the words' heads
        (`word_heads`, O(S), for storing encodings; `SourceFeatureCollator` builds the matrices per batch), or, with
        `return_word_heads=False` too, no tree at all (for a model that reads no tree distances).
        `source_feature_names` keeps only those features (`encoding_options(config)`: what a model reads); when none
        of them and no tree needs the parse, raw text is only segmented into the annotator's words."""
        if not source_features or (text is None and annotations is None):
            return super().__call__(text, text_pair, text_target, text_pair_target, **kwargs)
        if text_pair is not None or text_pair_target is not None:
            raise ValueError("source features are computed for single sentences; text pairs are not supported.")
        unsupported = [name for name in UNSUPPORTED_OPTIONS if kwargs.get(name)]
        if unsupported:
            raise ValueError(f"{unsupported} are not supported together with source features.")
        is_split_into_words = kwargs.pop("is_split_into_words", False)
        return_tensors = kwargs.pop("return_tensors", None)
        padding = kwargs.pop("padding", False)
        truncation = kwargs.pop("truncation", None)
        max_length = kwargs.pop("max_length", None)
        pad_to_multiple_of = kwargs.pop("pad_to_multiple_of", None)
        padding_side = kwargs.pop("padding_side", None)
        add_special_tokens = kwargs.pop("add_special_tokens", True)
        return_attention_mask = kwargs.pop("return_attention_mask", None)
        kwargs.pop("verbose", None)
        if kwargs:
            raise ValueError(f"unexpected arguments for source encoding: {sorted(kwargs)}.")

        words_only = not encoding_reads_parse(source_feature_names, return_dep_distance, return_word_heads)
        batched, sentences = self._source_sentences(text, annotations, is_split_into_words, words_only)
        truncation = implied_truncation(truncation, max_length, padding)
        if truncation and max_length is None:
            max_length = self.model_max_length
        limit = max_length if truncation not in (None, False, "do_not_truncate") else None
        if (not return_dep_distance and return_word_heads is not False
                and padding not in (False, None, PaddingStrategy.DO_NOT_PAD, "do_not_pad")):
            raise ValueError("return_dep_distance=False is for storing encodings (no padding): the word-level "
                             "`word_heads` are not padded; SourceFeatureCollator builds `dep_distance` per batch. "
                             "For no tree at all, pass return_word_heads=False.")
        rows = self.encode_annotated(sentences, add_special_tokens=add_special_tokens, max_length=limit,
                                     dep_distance=False, source_feature_names=source_feature_names)
        # The [S, S] matrices are built once the word_ids are padded, as arrays (not lists padded row by row).
        heads = None  # the tree: [S, S] matrices, stored `word_heads` (left in the rows), or not at all
        if return_dep_distance or return_word_heads is False:
            heads = [row.pop(TREE_COLUMN) for row in rows]
        columns = {name: [row[name] for row in rows] for name in rows[0]}
        # Truncation is done; `pad` reads max_length as a padding length only, and warns when it cannot use it.
        pad_length = max_length if padding == PaddingStrategy.MAX_LENGTH else None
        encoded = self.pad(columns if batched else rows[0], padding=padding, max_length=pad_length,
                           pad_to_multiple_of=pad_to_multiple_of, padding_side=padding_side,
                           return_attention_mask=return_attention_mask)
        data = dict(encoded)
        if return_attention_mask is False:
            data.pop("attention_mask", None)
        if return_dep_distance and heads is not None:
            data["dep_distance"] = dependency_distance_column(heads, data["word_ids"], batched,
                                                              as_lists=return_tensors is None)
        drop_unread_word_ids(data, source_feature_names)
        if text_target is not None:
            data["labels"] = super().__call__(
                text_target=text_target, add_special_tokens=add_special_tokens, padding=padding,
                truncation=truncation, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
                padding_side=padding_side)["input_ids"]
        return BatchEncoding(data, tensor_type=return_tensors, prepend_batch_axis=not batched)

    def _source_sentences(self, text, annotations, is_split_into_words: bool, words_only: bool = False
                          ) -> tuple[bool, list[AnnotatedSentence]]:
        """(whether the input was a batch, its annotated sentences: raw texts parsed, or only segmented into words
        with `words_only`)."""
        if isinstance(text, (bytes, bytearray)) or (text is not None and not isinstance(text, (str, list, tuple))):
            check_text(0, text)
        if annotations is not None:
            batched = not isinstance(annotations, AnnotatedSentence)
            sentences = list(annotations) if batched else [annotations]
            for index, sentence in enumerate(sentences):
                if not isinstance(sentence, AnnotatedSentence):
                    raise TypeError(f"annotation {index} is {type(sentence).__name__} ({sentence!r:.60}), not an "
                                    "AnnotatedSentence (e.g. from read_conllu or tokenizer.annotate).")
            if text is not None:
                texts = [text] if isinstance(text, str) or (is_split_into_words and _is_word_list(text)) else text
                if len(texts) != len(sentences):
                    raise ValueError(f"{len(texts)} texts but {len(sentences)} annotations.")
                for index, (one, sentence) in enumerate(zip(texts, sentences, strict=True)):
                    check_same_text(index, one, sentence)
            if not sentences:
                raise ValueError("no sentences to encode.")
            return batched, sentences
        single = isinstance(text, str) or (is_split_into_words and _is_word_list(text))
        texts = [text] if single else list(text)
        if not texts:
            raise ValueError("no sentences to encode.")
        return not single, self.annotate(texts, is_split_into_words=is_split_into_words, words_only=words_only)

    def encode_annotated(self, sentences: Sequence[AnnotatedSentence], add_special_tokens: bool = True,
                         max_length: int | None = None, dep_distance: bool = True,
                         source_feature_names: Collection[str] | None = None) -> list[dict[str, list]]:
        """Unpadded encodings (lists) of annotated sentences, one dict per sentence (see `_align` for
        `dep_distance`; `word_features` for `source_feature_names`)."""
        self.required_vocabularies()
        word_tokenizer = self.word_tokenizer()
        pieces = [[(" " if index == 0 or sentence.words[index - 1].space_after else "") + word.text
                   for index, word in enumerate(sentence.words)] for sentence in sentences]
        encodings = word_tokenizer.encode_batch(pieces, is_pretokenized=True, add_special_tokens=False)
        added = self.backend_tokenizer.num_special_tokens_to_add(False) if add_special_tokens else 0
        if max_length is not None and max_length <= added:
            raise ValueError(f"max_length={max_length} leaves no room for tokens next to {added} special ones.")
        rows = []
        for sentence, encoding in zip(sentences, encodings, strict=True):
            features = word_features(self.required_vocabularies(), sentence, encoding.word_ids, source_feature_names)
            keep = len(encoding.ids) if max_length is None else min(len(encoding.ids), max_length - added)
            kept = slice(len(encoding.ids) - keep, None) if self.truncation_side == "left" else slice(0, keep)
            encoding.truncate(keep, direction=self.truncation_side)
            # The word tokenizer carries no truncation state: the backend's (set by an earlier plain call with
            # truncation=True) would cut the tokens here without cutting their features.
            final = word_tokenizer.post_process(encoding, None, add_special_tokens)
            rows.append(self._align(final, features, kept, sentence.heads, dep_distance))
        return rows

    def required_vocabularies(self) -> FeatureVocabularies:
        """The feature vocabularies, or an error saying how a tokenizer gets them."""
        if self.feature_vocabularies is None:
            raise ValueError("this tokenizer has no feature vocabularies; create it with "
                             "train_source_feature_tokenizer() or pass feature_vocabularies=.")
        return self.feature_vocabularies

    @staticmethod
    def _align(encoding, features: dict[str, np.ndarray], kept: slice, heads: list[int],
               dep_distance: bool = True) -> dict[str, list]:
        """Place the kept tokens' features at the non-special positions of the final encoding; the tree as the
        [S, S] `dep_distance` matrix, or (O(S)) as the words' `word_heads`, from which `SourceFeatureCollator`
        builds the same matrix per batch."""
        length = len(encoding.ids)
        is_word = np.array([word is not None for word in encoding.word_ids], dtype=bool)
        row: dict[str, list] = {"input_ids": list(encoding.ids), "attention_mask": [1] * length}
        for name in [*SOURCE_FEATURE_NAMES, *(key for key in features if is_user_factor_feature(key))]:
            if name == "dep_distance" or name not in features:
                continue
            values = features[name][kept]
            if name == "phrase_ids" and len(values):
                values = values - values.min()  # a left-truncated sentence's first kept phrase is phrase 0
            column = np.full(length, NO_WORD if name in ("word_ids", "phrase_ids") else SPECIAL_ID, dtype=np.int64)
            column[is_word] = values
            row[name] = column.tolist()
        if dep_distance:
            row["dep_distance"] = token_distance_matrix(heads, row["word_ids"]).tolist()
        else:
            row[TREE_COLUMN] = list(heads)
        return row

    def word_tokenizer(self) -> Tokenizer:
        """The backend tokenizer, modified to encode a word with exactly the leading space it is given.

        Word-start markers are normally added by the pre-tokenizer (Metaspace's "always" prepend scheme,
        ByteLevel's add_prefix_space); here each word brings its own space, so those are switched off.
        """
        if self._word_tokenizer is None or self._word_tokenizer[0] != len(self):
            state = json.loads(self.backend_tokenizer.to_str())
            state["truncation"], state["padding"] = None, None
            _no_automatic_prefix(state.get("pre_tokenizer"))
            self._word_tokenizer = (len(self), Tokenizer.from_str(json.dumps(state)))
        return self._word_tokenizer[1]

    # ---------------------------------------------------------------- padding

    def _pad(self, encoded_inputs, max_length=None, padding_strategy=PaddingStrategy.DO_NOT_PAD,
             pad_to_multiple_of=None, padding_side=None, return_attention_mask=None):
        length = len(encoded_inputs["input_ids"])
        for name in [*SOURCE_FEATURE_NAMES, *(key for key in encoded_inputs if is_user_factor_feature(key))]:
            if name in encoded_inputs and len(encoded_inputs[name]) != length:
                raise ValueError(f"`{name}` has {len(encoded_inputs[name])} entries but input_ids has {length}; "
                                 "features must be aligned to the tokens.")
        encoded_inputs = super()._pad(encoded_inputs, max_length, padding_strategy, pad_to_multiple_of,
                                      padding_side, return_attention_mask)
        difference = len(encoded_inputs["input_ids"]) - length
        if difference > 0:
            pad_feature_columns(encoded_inputs, length, difference, (padding_side or self.padding_side) == "left")
        return encoded_inputs


def pad_feature_columns(encoded_inputs: dict, length: int, difference: int, left: bool) -> None:
    """Pad one encoding's feature columns (of `length` tokens) by `difference` positions, in place, with
    FEATURE_PADDING (and -1 rows and columns of `dep_distance`), as its input_ids were padded."""

    def pad(values: list, fill) -> list:
        return [fill] * difference + list(values) if left else list(values) + [fill] * difference

    for name, fill in FEATURE_PADDING.items():
        if name in encoded_inputs:
            encoded_inputs[name] = pad(encoded_inputs[name], fill)
    for name in [key for key in encoded_inputs if is_user_factor_feature(key)]:
        encoded_inputs[name] = pad(encoded_inputs[name], PAD_ID)
    if "dep_distance" in encoded_inputs:
        rows = [pad(row, NO_WORD) for row in encoded_inputs["dep_distance"]]
        blank = [[NO_WORD] * (length + difference) for _ in range(difference)]
        encoded_inputs["dep_distance"] = blank + rows if left else rows + blank


def implied_truncation(truncation, max_length: int | None, padding) -> Any:
    """`truncation` as Transformers' tokenizers read it: a `max_length` without padding or truncation asks for
    truncation (with a warning)."""
    if truncation is None and max_length is not None and padding in (False, None):
        warnings.warn("max_length is given without truncation: truncating to it (pass truncation=True to say so, or "
                      "truncation=False to keep every token).", stacklevel=3)
        return True
    return truncation


def encoding_options(config) -> dict[str, Any]:
    """Tokenizer options for encoding a model's inputs: only the features its config reads (`source_features_read`;
    a config that does not say is given every one), the [S, S] `dep_distance` only when among them, and never the
    stored `word_heads`."""
    names = getattr(config, "source_features_read", None)
    return {"return_dep_distance": getattr(config, "reads_dependency_distances", True), "return_word_heads": False,
            "source_feature_names": None if names is None else tuple(names)}


def encoding_reads_parse(source_feature_names: Collection[str] | None, return_dep_distance: bool,
                return_word_heads: bool | None) -> bool:
    """Whether an encoding with these options needs raw text parsed, not only segmented into words: a feature from
    tagging or parsing is asked for (all are, without names), or the tree."""
    return (source_feature_names is None or any(name in PARSED_FEATURE_NAMES for name in source_feature_names)
            or return_dep_distance or return_word_heads is not False)


def drop_unread_word_ids(data: dict, source_feature_names: Collection[str] | None) -> None:
    """`word_ids` serve the tree's distances; once those are built, they go unless asked for."""
    if source_feature_names is not None and "word_ids" not in source_feature_names:
        data.pop("word_ids", None)


def dependency_distance_column(heads: Sequence[Sequence[int]], word_ids: list, batched: bool, as_lists: bool):
    """The `dep_distance` of encodings from their words' heads and their (padded) `word_ids`: one [S, S] matrix
    per encoding (rows and columns of special tokens and padding -1), stacked into one array when the lengths
    agree, nested lists only when no tensors were asked for."""
    matrices = [token_distance_matrix(tree, words) for tree, words in zip(heads, word_ids if batched else [word_ids],
                                                                          strict=True)]
    column: Any
    if as_lists:
        column = [matrix.tolist() for matrix in matrices]
    elif len({matrix.shape for matrix in matrices}) == 1:
        column = np.stack(matrices)
    else:
        column = matrices
    return column if batched else column[0]


def vocabulary_fingerprint(subwords: dict[str, int], feature_vocabularies: FeatureVocabularies | None) -> str:
    """SHA-256 (16 hex digits) of a subword vocabulary and the feature vocabularies."""
    content = {"subwords": sorted(subwords.items()),
               "features": feature_vocabularies.to_dict() if feature_vocabularies else None}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def word_features(vocabularies: FeatureVocabularies, sentence: AnnotatedSentence,
                  word_ids: Sequence[int | None], names: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """Per-token features of a whole (untruncated, special-free) token sequence whose tokens belong to the
    sentence's words `word_ids` (BIES tags from runs of one word): those in `names` (default: every one the
    vocabularies have), and always `word_ids`, from which the tree's distances are built."""

    def wanted(name: str) -> bool:
        return names is None or name in names

    def per_word(labels) -> np.ndarray:
        return np.array(list(labels), dtype=np.int64)[words]

    words = np.asarray(word_ids, dtype=np.int64)
    features = {"word_ids": words}
    if wanted("pos_ids"):
        features["pos_ids"] = per_word(vocabularies.pos.id(vocabularies.pos_tag(w)) for w in sentence.words)
    if wanted("lemma_ids"):
        features["lemma_ids"] = per_word(vocabularies.lemma.id(w.lemma) for w in sentence.words)
    if wanted("deprel_ids"):
        features["deprel_ids"] = per_word(vocabularies.deprel.id(w.deprel) for w in sentence.words)
    if wanted("subword_tag_ids"):
        starts = np.r_[True, words[1:] != words[:-1]] if len(words) else np.zeros(0, bool)
        ends = np.r_[words[1:] != words[:-1], True] if len(words) else np.zeros(0, bool)
        tags = np.where(starts & ends, "S", np.where(starts, "B", np.where(ends, "E", "I")))
        features["subword_tag_ids"] = np.array([vocabularies.subword_tag.id(tag) for tag in tags], dtype=np.int64)
    if wanted("phrase_ids"):
        token_counts = np.bincount(words, minlength=len(sentence.words)) if len(words) else \
            np.zeros(len(sentence.words), np.int64)
        phrases = parse_phrases(sentence.heads, token_counts.tolist(), phrase_token_limit(len(words)))
        phrase_of_word = np.empty(len(sentence.words), dtype=np.int64)
        for index, phrase in enumerate(phrases):
            phrase_of_word[phrase] = index
        features["phrase_ids"] = phrase_of_word[words]
    if vocabularies.feats is not None and wanted("feats_ids"):
        features["feats_ids"] = per_word(vocabularies.feats.id(w.feats) for w in sentence.words)
    for name, vocabulary in vocabularies.extra.items():
        if not wanted(user_factor_feature(name)):
            continue
        values = [w.factor(name) for w in sentence.words]
        if any(value is None for value in values):
            # No value given (e.g. raw text without the factor): <unk>, as OpenNMT-py's src_feats_defaults do.
            # One message for every sentence (Python shows it once), not one per sentence of a file.
            warnings.warn(f"words without a value of the {name!r} factor get <unk> (raw text given to a model trained "
                          "with it?).", stacklevel=5)
        ids = [vocabulary.id(value) if value is not None else UNK_ID for value in values]
        unseen = next((value for value, index in zip(values, ids, strict=True)
                       if index == UNK_ID and value not in (None, UNK_LABEL)), None)
        if unseen is not None and not vocabulary.unseen_reported:
            # A value the training data never had (a typo, another tag set?) reads as <unk>, as in OpenNMT-py;
            # said once per factor, with the first such value, so that a file of them gives one message.
            vocabulary.unseen_reported = True
            warnings.warn(f"values of the {name!r} factor not seen in training get <unk> (the first: {unseen!r} in "
                          f"{sentence.text!r}); said once per factor.", stacklevel=5)
        features[user_factor_feature(name)] = per_word(ids)
    return features


#: Narrowest integer type of each stored column (Arrow stores what `datasets.map` returns as int64 otherwise): ids
#: of vocabularies that may exceed 32k are int32, small label sets int16, flags int8.
STORAGE_DTYPES = {"input_ids": "int32", "attention_mask": "int8", "pos_ids": "int16", "lemma_ids": "int32",
                  "deprel_ids": "int16", "subword_tag_ids": "int8", "word_ids": "int16", "phrase_ids": "int16",
                  "feats_ids": "int16",
                  TREE_COLUMN: "int16", "labels": "int32"}


def stored_columns(tokenizer: SourceFeatureTokenizer) -> list[str]:
    """The columns a stored encoding of this tokenizer has (`return_dep_distance=False`, with `labels`): the
    optional features only when its vocabularies have them (tokenizers saved before FEATS have no `feats_ids`)."""
    vocabularies = tokenizer.required_vocabularies()
    columns = [column for column in STORAGE_DTYPES if column != "feats_ids" or vocabularies.feats is not None]
    return columns + [user_factor_feature(name) for name in vocabularies.extra]


def storage_features(columns: Sequence[str]):
    """`datasets.Features` storing tokenized columns (O(S) trees, `return_dep_distance=False`) in their narrowest
    integer types, for `Dataset.map(..., features=...)`: about a third of the int64 default."""
    try:  # in a try block, so that a published tokenizer's code loads without `datasets` installed
        from datasets import Features, List, Value
    except ImportError as error:
        raise ImportError("storing encodings as a dataset needs the datasets package: pip install datasets") from error

    unknown = [column for column in columns if column not in STORAGE_DTYPES and not is_user_factor_feature(column)]
    if unknown:
        raise ValueError(f"no storage type for columns {unknown} (store trees as word_heads, not dep_distance).")
    return Features({column: List(Value(STORAGE_DTYPES.get(column, "int32"))) for column in columns})


def check_tokenizer_matches(config, tokenizer) -> None:
    """Raise a ValueError when a tokenizer is not the one the model was trained with: ids beyond the model's
    embeddings, feature vocabularies of other sizes, or (for models that record it) another fingerprint, which
    would otherwise translate silently with the wrong ids."""
    if not isinstance(tokenizer, SourceFeatureTokenizer):
        return
    problems = []
    if len(tokenizer) > config.vocab_size:
        problems.append(f"the tokenizer has {len(tokenizer)} subwords, the model's embeddings {config.vocab_size}")
    if tokenizer.feature_vocabularies is not None:
        for name, size in tokenizer.feature_vocabularies.sizes().items():
            expected = getattr(config, name, None)
            if isinstance(expected, (int, dict)) and expected != size:
                problems.append(f"{name}: the tokenizer has {size}, the model was built for {expected}")
    recorded = getattr(config, "tokenizer_fingerprint", None)
    if recorded and recorded != tokenizer.fingerprint() and not problems:
        problems.append(f"the model was trained with tokenizer {recorded}, this one is {tokenizer.fingerprint()} "
                        f"(subwords: {len(tokenizer)}, model vocab_size {config.vocab_size})")
    if problems:
        raise ValueError("this tokenizer does not belong to this model: " + "; ".join(problems) +
                         ". Load the tokenizer saved with the model (its folder or Hub id).")


def check_same_text(index: int, text: str | Sequence[str], sentence: AnnotatedSentence) -> None:
    """Text and annotation given together must be of the same sentence (compared without whitespace, which
    tokenization moves), else the features would silently belong to another sentence."""
    given = "".join((text if isinstance(text, str) else "".join(text)).split())
    parsed = "".join(word.text for word in sentence.words)
    spoken = "".join((sentence.text or "").split())
    if given not in (parsed, spoken):
        shown = text if isinstance(text, str) else " ".join(text)
        raise ValueError(f"text {index} ({shown[:60]!r}) is not the sentence its annotation parses "
                         f"({sentence.name}); pass one of them, or both of the same sentence.")


def _is_word_list(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


def _no_automatic_prefix(pre_tokenizer: dict | None) -> None:
    if not pre_tokenizer:
        return
    if pre_tokenizer.get("type") == "Sequence":
        for item in pre_tokenizer["pretokenizers"]:
            _no_automatic_prefix(item)
    elif pre_tokenizer.get("type") == "Metaspace":
        pre_tokenizer["prepend_scheme"] = "never"
    elif pre_tokenizer.get("type") == "ByteLevel":
        pre_tokenizer["add_prefix_space"] = False


def train_source_feature_tokenizer(
    source_texts: Iterable[str], target_texts: Iterable[str] = (), *, vocab_size: int = 8000,
    subword_model: str = "bpe", min_frequency: int = 2, annotator: Annotator | None = None,
    source_annotations: Iterable[AnnotatedSentence] | None = None, language: str = "en",
    lemma_min_frequency: int = 2, max_lemmas: int | None = 10000, model_max_length: int = 256,
    pos_tagset: str = "upos",
) -> SourceFeatureTokenizer:
    """Train the subword model on source and target texts together (one joint vocabulary, as the models
    share embeddings) and build the feature vocabularies from the annotated source.

    The source is annotated with `annotator` (default: a Stanza annotator for `language`, cached on disk)
    unless `source_annotations` gives it pre-parsed. `pos_tagset` picks what `pos_ids` holds: `"upos"`
    (universal tags) or `"xpos"` (the parser's language-specific tags, e.g. Penn Treebank for English); it is
    saved with the tokenizer.
    """
    if source_annotations is None:
        source_texts = list(source_texts)  # read twice: by the annotator and by the subword trainer
    if isinstance(source_texts, Sequence) and not source_texts:
        raise ValueError("source_texts is empty; the tokenizer needs a training corpus.")
    # Iterables are streamed into the trainers (a large corpus is never held whole as Python strings).
    subwords = build_subword_tokenizer(itertools.chain(source_texts, target_texts), vocab_size, subword_model,
                                       min_frequency)
    if source_annotations is None:
        annotator = annotator or StanzaAnnotator(language=language)
        source_annotations = annotator.annotate(list(source_texts), show_progress=True)
    vocabularies = FeatureVocabularies.build(source_annotations, lemma_min_frequency, max_lemmas, pos_tagset)
    return SourceFeatureTokenizer(tokenizer_object=subwords, feature_vocabularies=vocabularies, language=language,
                                  annotator=annotator, model_max_length=model_max_length,
                                  **SPECIAL_TOKENS)  # type: ignore[arg-type]  # mypy matches **dict to every parameter

