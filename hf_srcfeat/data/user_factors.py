"""Factors no parser gives (named-entity tags, domain tags, word clusters, ...), supplied by the user.

They travel on the words (`AnnotatedWord.factors`), so every part of the feature path carries them: the tokenizer
builds one vocabulary per factor name, aligns each word's value to its subwords as `factor_<name>_ids` (a word
without a value gets `<unk>`, with a warning), and the relevance-feature models embed them by name
(`source_factors=[..., "<name>"]`). They come in

- as CoNLL-U: `Factor_<name>=<value>` in a word's MISC column (`read_conllu`, `--train_source_conllu`, parses in a
  dataset column);
- in OpenNMT-py's factored text format, one sentence a line, `word￨value1￨value2 ...` (the format of its
  `src_feats` and `inferfeats`): `parse_factored_lines` parses the words as given (no re-tokenization) and attaches
  the values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hf_srcfeat.annotated_sentence import FACTOR_SEPARATOR, AnnotatedSentence
from hf_srcfeat.annotator import Annotator


def split_factored_line(line: str, names: Sequence[str], line_number: int | None = None
                        ) -> tuple[list[str], dict[str, list[str]]]:
    """The words of one `word￨v1￨v2` line and, per factor name, its values; a token with another number of
    values than `names` is an error naming the line and the token."""
    where = f"line {line_number}: " if line_number is not None else ""  # else the caller says where
    words: list[str] = []
    values: dict[str, list[str]] = {name: [] for name in names}
    tokens = line.split()
    if not tokens:
        raise ValueError(f"{where}the sentence is empty.")
    expected = f"word{FACTOR_SEPARATOR}" + FACTOR_SEPARATOR.join(names)
    for token in tokens:
        parts = token.split(FACTOR_SEPARATOR)
        if len(parts) != len(names) + 1:
            raise ValueError(f"{where}token {token!r} has {len(parts) - 1} factor values, expected {len(names)} "
                             f"({', '.join(names)}) as {expected}")
        if not all(parts):
            empty = "the word" if not parts[0] else \
                f"the value of {', '.join(name for name, value in zip(names, parts[1:], strict=True) if not value)}"
            raise ValueError(f"{where}token {token!r}: {empty} is empty (expected {expected})")
        words.append(parts[0])
        for name, value in zip(names, parts[1:], strict=True):
            values[name].append(value)
    return words, values


def attach_factors(sentence: AnnotatedSentence, values: Mapping[str, Sequence[str]]) -> AnnotatedSentence:
    """`sentence` with each word's user factors set from `values` (name -> one value per word)."""
    for name, column in values.items():
        if len(column) != len(sentence.words):
            raise ValueError(f"sentence {sentence.name}: factor {name!r} has {len(column)} values for "
                             f"{len(sentence.words)} words.")
    words = [replace(word, factors=tuple((name, values[name][index]) for name in values))
             for index, word in enumerate(sentence.words)]
    return AnnotatedSentence(words=words, sentence_id=sentence.sentence_id, text=sentence.text)


def parse_factored_lines(annotator: Annotator, lines: Sequence[str], names: Sequence[str],
                         show_progress: bool = False, first_line_number: int | None = 1) -> list[AnnotatedSentence]:
    """Parse `word￨v1￨v2` lines: the annotator parses the words as they are split (pre-tokenized), then every
    word gets its values. Use the result as `tokenizer(annotations=...)`. A malformed line is an error naming it,
    counted from `first_line_number` (None: not named, the caller does)."""
    split = [split_factored_line(line, names, None if first_line_number is None else first_line_number + offset)
             for offset, line in enumerate(lines)]
    parses = annotator.with_pretokenized_input().annotate([" ".join(words) for words, _ in split],
                                                          show_progress=show_progress)
    return [attach_factors(parse, values) for parse, (_, values) in zip(parses, split, strict=True)]
