"""CoNLL-U reading and writing: the format every parser can produce and `hf-srcfeat-annotate` writes."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

from .annotated_sentence import AnnotatedSentence, AnnotatedWord, multiword_spacing
from .data.errors import DataError


def read_conllu(source: str | os.PathLike | Iterable[str], first_line: int = 1) -> Iterator[AnnotatedSentence]:
    """Sentences of a CoNLL-U file (plain or .gz) or of an iterable of its lines (`first_line`: the number of the
    first, as errors name the lines).

    Multi-word token lines (`3-4`) and empty nodes (`8.1`) are skipped: features belong to syntactic words.
    The relation subtype is kept (`obl:tmod`); compare `deprel.split(':')[0]` for coarse LAS.
    """
    if isinstance(source, (str, os.PathLike)):
        opener = gzip.open if str(source).endswith(".gz") else open
        with opener(source, "rt", encoding="utf-8") as handle:  # streamed: a corpus is never read whole
            try:
                yield from read_conllu(handle)
            except UnicodeDecodeError as error:
                raise DataError(f"{source} is not UTF-8 text ({error.reason}, byte {error.object[error.start]:#x});"
                                " convert it, e.g. iconv -f latin1 -t utf-8.") from None
            except (EOFError, gzip.BadGzipFile, zlib.error) as error:
                raise DataError(f"{source} is a truncated or damaged gzip file ({error}).") from None
            except ValueError as error:
                raise DataError(f"{source}: {error}") from error
        return
    words: list[AnnotatedWord] = []
    sentence_id, text = "", ""
    multiword: tuple[int, int, str, bool] | None = None  # (first id, last id, form, space after) of a range

    def integer(value: str, what: str, line_number: int) -> int:
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"CoNLL-U line {line_number}: {what} {value!r} is not an integer.") from None

    def finished(line_number: int) -> AnnotatedSentence:
        if multiword is not None:
            raise ValueError(f"CoNLL-U line {line_number}: the sentence ends inside the multi-word token "
                             f"{multiword[0]}-{multiword[1]} ({multiword[2]!r}), whose words are missing.")
        return AnnotatedSentence(words=words, sentence_id=sentence_id, text=text)

    line_number = first_line - 1
    for line_number, raw in enumerate(source, start=first_line):
        line = raw.rstrip("\r\n")
        if line_number == first_line:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte order mark
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "sent_id":
                sentence_id = value.strip()
            elif key.strip() == "text":
                text = value.strip()
            continue
        if not line.strip():
            if words:
                yield finished(line_number)
            words, sentence_id, text, multiword = [], "", "", None
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise ValueError(f"CoNLL-U line {line_number} has {len(columns)} columns, expected 10: {line!r}")
        if "." in columns[0]:
            continue
        if "-" in columns[0]:
            first, _, last = columns[0].partition("-")
            first_id, last_id = integer(first, "id", line_number), integer(last, "id", line_number)
            multiword = (first_id, last_id, columns[1], "SpaceAfter=No" not in columns[9])
            continue
        word_id = integer(columns[0], "id", line_number)
        if word_id != len(words) + 1:
            raise ValueError(f"CoNLL-U line {line_number}: word id {columns[0]} out of order in sentence "
                             f"{sentence_id or line_number}.")
        words.append(AnnotatedWord(text=columns[1], lemma=columns[2], upos=columns[3], xpos=columns[4],
                                   head=integer(columns[6], "head", line_number), deprel=columns[7],
                                   space_after="SpaceAfter=No" not in columns[9], feats=columns[5],
                                   factors=misc_factors(columns[9])))
        if multiword is not None and word_id == multiword[1]:
            words[multiword[0] - 1:] = multiword_spacing(words[multiword[0] - 1:], multiword[2], multiword[3])
            multiword = None
    if words:
        yield finished(line_number + 1)


#: Prefix of a user factor in the CoNLL-U MISC column: `Factor_ner=B-PER`.
MISC_FACTOR_PREFIX = "Factor_"


def misc_factors(misc: str) -> tuple[tuple[str, str], ...]:
    """The `Factor_<name>=<value>` entries of a MISC column, as (name, value) pairs."""
    pairs = []
    for entry in misc.split("|"):
        name, separator, value = entry.partition("=")
        if separator and name.startswith(MISC_FACTOR_PREFIX) and len(name) > len(MISC_FACTOR_PREFIX):
            pairs.append((name[len(MISC_FACTOR_PREFIX):], value))
    return tuple(pairs)


def misc_column(word: AnnotatedWord) -> str:
    entries = [] if word.space_after else ["SpaceAfter=No"]
    entries += [f"{MISC_FACTOR_PREFIX}{name}={value}" for name, value in word.factors]
    return "|".join(entries) or "_"


def conllu_lines(sentence: AnnotatedSentence) -> list[str]:
    """One sentence as CoNLL-U lines (with `# text` when known, `SpaceAfter=No` and user factors in MISC), ending
    in a blank line; `read_conllu` reads it back to the same words. DEPS and other MISC entries are not kept."""
    lines = [f"# sent_id = {sentence.sentence_id}"] if sentence.sentence_id else []
    if sentence.text:
        lines.append(f"# text = {sentence.text}")
    for index, word in enumerate(sentence.words, start=1):
        lines.append("\t".join([str(index), word.text, word.lemma, word.upos, word.xpos, word.feats, str(word.head),
                                word.deprel, "_", misc_column(word)]))
    return [*lines, ""]


def write_conllu(sentences: Iterable[AnnotatedSentence], path: str | os.PathLike, compress: bool | None = None
                 ) -> int:
    """Write sentences as a CoNLL-U file, gzip when `compress` (default: when the name ends in .gz); returns how
    many were written."""
    compress = str(path).endswith(".gz") if compress is None else compress
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as handle:
        return write_conllu_lines(sentences, handle)


def write_conllu_lines(sentences: Iterable[AnnotatedSentence], handle: IO[str], comments: Sequence[str] = ()) -> int:
    """Write sentences as CoNLL-U into an open text file, after the comment lines `comments` (each starting with #);
    returns how many sentences were written."""
    for comment in comments:
        handle.write(comment + "\n")
    count = 0
    for sentence in sentences:
        handle.write("\n".join(conllu_lines(sentence)) + "\n")
        count += 1
    return count
