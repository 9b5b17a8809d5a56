"""Parallel corpora from wherever a user keeps them, as `datasets.Dataset`s with `source` and `target` columns.

The forms Transformers' `run_translation.py` reads, and the plain ones NMT toolkits use:

| given | read as |
|---|---|
| `--dataset_name NAME [--dataset_config_name CONFIG]` | `datasets.load_dataset` (Hub id, local folder, loading script): a `translation` dict column as in `wmt16`, or `--source_column` / `--target_column` |
| `*.json` / `*.jsonl` (`.gz` too) | JSON lines `{"translation": {"en": ..., "de": ...}}`, as run_translation.py reads them |
| `*.tsv` (`.gz` too) | two tab-separated columns, source then target, no header |
| `PREFIX` with `PREFIX.<src>` and `PREFIX.<tgt>` beside it (`.gz` too) | a pair of plain-text files, one sentence a line |
| `--dataset_name multi30k` (the default) | Multi30k task 1 (`hf_srcfeat.data.multi30k`) |

Every pair is checked: a missing language, or an empty source or target, is a `DataError` naming the file and line
(or, with `skip_empty=True`, as OpenNMT-py and Sockeye do, the pair is dropped and counted).
A JSON-lines field or a dataset column can carry each source's CoNLL-U parse (`parse_column`), kept as
`source_conllu`.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datasets import Dataset

from hf_srcfeat.data.errors import DataError
from hf_srcfeat.data.multi30k import multi30k_file

MULTI30K = "multi30k"
#: Column of each source's CoNLL-U parse, when the corpus carries them (`--source_parse_column`).
SOURCE_CONLLU = "source_conllu"

#: Prefix of the columns carrying a user factor per source word (`--source_factor_columns ner` keeps the corpus's
#: `ner` column as `source_factor_ner`): space-separated values, one per whitespace-separated source word.
SOURCE_FACTOR_PREFIX = "source_factor_"


def _carried_columns(batch: dict, parse_column: str | None, factor_columns: Sequence[str]) -> dict:
    """The parse and factor columns a corpus keeps next to source and target, under their fixed names."""
    carried = {SOURCE_CONLLU: batch[parse_column]} if parse_column else {}
    carried.update({SOURCE_FACTOR_PREFIX + name: batch[name] for name in factor_columns})
    return carried


def _check_carried(origin: str, available: list[str], parse_column: str | None, factor_columns: Sequence[str]) -> None:
    if parse_column and parse_column not in available:
        raise DataError(f"{origin} has no {parse_column!r} column for the source parses (it has {available}).")
    missing = [name for name in factor_columns if name not in available]
    if missing:
        raise DataError(f"{origin} has no {missing} column for the source factors (it has {available}).")


@dataclass
class Corpus:
    """One split: its pairs and where they came from (recorded in results.json)."""

    name: str
    data: Dataset
    origin: list[str] = field(default_factory=list)
    skipped_empty: int = 0  # pairs dropped for an empty source or target (`skip_empty`)


def file_corpus(name: str, data: Dataset, origin: list[str], empty_pairs: int) -> Corpus:
    """The corpus a file (or file pair) holds, without its `empty_pairs` pairs with an empty side (counted by the
    line checks, which refuse them unless they are to be skipped)."""
    return Corpus(name, without_empty_pairs(data) if empty_pairs else data, origin, empty_pairs)


def _existing(path: Path) -> Path | None:
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file, streamed (a corpus is never held whole), UTF-8 checked; a byte-order mark
    at the start is dropped, and a truncated or damaged gzip file is an error naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    number = 0
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as error:
                    raise DataError(f"{path} line {number} is not UTF-8 ({error.reason}).") from None
                yield number, line.removeprefix("\ufeff") if number == 1 else line
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise DataError(f"{path} is a truncated or damaged gzip file (after line {number}: {error}).") from None


def _shown(value: object) -> str:
    """A value in a message: its type and the start of its repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def is_empty(text: object) -> bool:
    """A missing or blank sentence."""
    return text is None or isinstance(text, str) and not text.strip()


def check_sentence(text: object, what: str, origin: str, number: int, empty_allowed: bool = False) -> bool:
    """`text` (`what`: "source sentence", ...) is text, not blank; else an error naming `origin` and `number`. With
    `empty_allowed`, a blank or missing sentence is no error: False says it is one."""
    if is_empty(text):
        if empty_allowed:
            return False
        raise DataError(f"{origin} {number}: the {what} is empty.")
    if not isinstance(text, str):
        raise DataError(f"{origin} {number}: the {what} is not text: {_shown(text)}.")
    return True


def without_empty_pairs(data: Dataset) -> Dataset:
    """The pairs of `data` whose source and target both hold text (a cached `filter`: the data stays on disk)."""
    return data.filter(lambda batch: [not (is_empty(source) or is_empty(target))
                                      for source, target in zip(batch["source"], batch["target"], strict=True)],
                       batched=True, desc="drop empty pairs")


def _carried_names(parse_column: str | None, factor_columns: Sequence[str]) -> list[str]:
    """The fields a corpus carries beside source and target: its parse column, then its factor columns."""
    return [*([parse_column] if parse_column else []), *factor_columns]


def _check_carried_value(value: object, name: str, parse_column: str | None, origin: str, number: int) -> None:
    """A parse or factor field of one row: a string (the parse's CoNLL-U, or the factor's values)."""
    if isinstance(value, str):
        return
    expected = "the source's CoNLL-U parse" if name == parse_column else \
        "the factor's values separated by spaces, one per whitespace-separated source word"
    problem = f"no {name!r} field" if value is None else f"the {name!r} field is not a string: {_shown(value)}"
    raise DataError(f"{origin} {number}: {problem}; it must hold {expected}, as one string.")


#: A JSON escape of a UTF-16 surrogate (\ud800-\udfff). Two of them make one character; one alone is no character:
#: UTF-8 cannot encode it, and `datasets` fails on the line without naming it.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON-lines file, checked: valid JSON, an object, and text
    that UTF-8 can encode (no lone surrogate escape)."""
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path} line {number} is not valid JSON ({error.msg} at column {error.colno}).") from None
        if not isinstance(value, dict):
            raise DataError(f"{path} line {number} is a JSON {type(value).__name__}, not an object.")
        if _SURROGATE_ESCAPE.search(line):  # rare: the full check only then
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as error:
                escape = f"\\u{ord(error.object[error.start]):04x}"
                raise DataError(f"{path} line {number} holds {escape}, half of a UTF-16 surrogate pair without its "
                                "other half: no character (a text cut inside an emoji or a broken converter?); "
                                "remove or repair it.") from None
        yield number, value


def check_json_lines(path: Path, source_lang: str, target_lang: str, parse_column: str | None = None,
                     factor_columns: Sequence[str] = (), skip_empty: bool = False) -> int:
    """Every line a JSON object whose translation dict holds both languages, non-empty (with `skip_empty`, the
    pairs with an empty side are counted instead), and the parse and factor fields named, as strings (blank lines
    are skipped). Returns the count of empty pairs."""
    empty = 0
    for number, value in json_objects(path):
        pair = value.get("translation")
        if not isinstance(pair, dict):
            raise DataError(f"{path} line {number}: not a JSON object with a \"translation\" dict (it has "
                            f"{sorted(value)}).")
        missing = [lang for lang in (source_lang, target_lang) if lang not in pair]
        if missing:
            raise DataError(f"{path} line {number}: the translation has no {missing} (it has {sorted(pair)}).")
        full = [check_sentence(pair[lang], f"{side} sentence", f"{path} line", number, skip_empty)
                for lang, side in ((source_lang, "source"), (target_lang, "target"))]
        if not all(full):
            empty += 1
            continue
        for name in _carried_names(parse_column, factor_columns):
            _check_carried_value(value.get(name), name, parse_column, f"{path} line", number)
    return empty


def single_line(line: str, path: Path, number: int) -> str:
    """A carriage return inside a line would start a new line for the readers that follow (universal newlines) and
    shift every later pair: refuse it here, by line."""
    if "\r" in line:
        raise DataError(f"{path} line {number} holds a carriage return inside the line; remove it (e.g. tr -d '\\r').")
    return line


def check_tsv(path: Path, skip_empty: bool = False) -> int:
    """Two columns a line, both non-empty (with `skip_empty`, blank lines and pairs with an empty side are counted
    instead); returns the count of empty pairs."""
    empty = 0
    for number, line in numbered_lines(path):
        line = single_line(line, path, number)
        if skip_empty and not line.strip():
            empty += 1
            continue
        columns = line.split("\t")
        if len(columns) != 2:
            raise DataError(f"{path} line {number} has {len(columns)} tab-separated columns, expected 2 "
                             "(source, target).")
        full = [check_sentence(column, f"{side} sentence", f"{path} line", number, skip_empty)
                for column, side in zip(columns, ("source", "target"), strict=True)]
        empty += not all(full)
    return empty


def check_text_pair(source_file: Path, target_file: Path, skip_empty: bool = False) -> int:
    """Line-aligned files without empty lines (with `skip_empty`, the pairs with an empty side are counted
    instead); returns the count of empty pairs."""
    counts = {}
    empty_lines: set[int] = set()
    for path, side in ((source_file, "source"), (target_file, "target")):
        number = 0
        for number, line in numbered_lines(path):
            if not check_sentence(single_line(line, path, number), f"{side} sentence", f"{path} line", number,
                                  skip_empty):
                empty_lines.add(number)
        counts[side] = number
    if counts["source"] != counts["target"]:
        raise DataError(f"{source_file} has {counts['source']} lines but {target_file} has {counts['target']}; "
                         "the two sides must be line-aligned.")
    return len(empty_lines)


# The files are checked line by line first (errors name the line), then read by `datasets` into Arrow files on
# disk: memory-mapped, and `map` over them is cached, so a second run over the same corpus reuses the work.
def read_json_lines(path: Path, source_lang: str, target_lang: str, parse_column: str | None = None,
                    factor_columns: Sequence[str] = (), skip_empty: bool = False) -> Corpus:
    from datasets import load_dataset

    empty = check_json_lines(path, source_lang, target_lang, parse_column, factor_columns, skip_empty)
    loaded = load_dataset("json", data_files=str(path), split="train")
    _check_carried(str(path), loaded.column_names, parse_column, factor_columns)

    def pairs(batch):
        columns = {"source": [pair[source_lang] for pair in batch["translation"]],
                   "target": [pair[target_lang] for pair in batch["translation"]]}
        return {**columns, **_carried_columns(batch, parse_column, factor_columns)}

    data = loaded.map(pairs, batched=True, remove_columns=loaded.column_names)
    return file_corpus(path.name.split(".")[0], data, [str(path)], empty)


def read_tsv(path: Path, skip_empty: bool = False) -> Corpus:
    from datasets import Features, Value, load_dataset

    empty = check_tsv(path, skip_empty)
    # QUOTE_NONE and string columns: quotes, "NA" or "12" in a sentence stay text.
    data = load_dataset("csv", data_files=str(path), split="train", delimiter="\t", column_names=["source", "target"],
                        quoting=csv.QUOTE_NONE, keep_default_na=False,
                        features=Features({"source": Value("string"), "target": Value("string")}))
    return file_corpus(path.name.split(".")[0], data, [str(path)], empty)


def read_text_pair(source_file: Path, target_file: Path, skip_empty: bool = False, name: str | None = None) -> Corpus:
    """The pair of line-aligned files as one corpus (named `name`, by default after the source file)."""
    from datasets import concatenate_datasets, load_dataset

    empty = check_text_pair(source_file, target_file, skip_empty)
    # utf-8-sig: a byte-order mark at the start of a file is not part of its first sentence.
    sides = [load_dataset("text", data_files=str(path), split="train", encoding="utf-8-sig").rename_column("text", side)
             for path, side in ((source_file, "source"), (target_file, "target"))]
    data = concatenate_datasets(sides, axis=1)
    return file_corpus(name or source_file.name.split(".")[0], data, [str(source_file), str(target_file)], empty)


def load_file(path: str, source_lang: str, target_lang: str, parse_column: str | None = None,
              factor_columns: Sequence[str] = (), skip_empty: bool = False) -> Corpus:
    """One parallel file (or text-file pair by prefix), by its form; the corpus is named after the file. JSON lines
    may carry each source's CoNLL-U parse in the field `parse_column` and word-aligned factors in `factor_columns`.
    `skip_empty`: pairs with an empty side are dropped (and counted) instead of refused."""
    given = Path(path)
    suffixes = [suffix for suffix in given.suffixes if suffix != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    if kind in (".json", ".jsonl", ".tsv") and not given.is_file():
        raise DataError(f"{path}: no such file.")
    if kind in (".json", ".jsonl"):
        return read_json_lines(given, source_lang, target_lang, parse_column, factor_columns, skip_empty)
    if parse_column or factor_columns:
        raise DataError(f"{path}: source parses or factors in a column need JSON lines or a datasets source; for "
                         "other files give them as CoNLL-U (--train_source_conllu etc., factors in MISC).")
    if kind == ".tsv":
        return read_tsv(given, skip_empty)
    source_file = _existing(given.with_name(f"{given.name}.{source_lang}"))
    target_file = _existing(given.with_name(f"{given.name}.{target_lang}"))
    if source_file and target_file:
        return read_text_pair(source_file, target_file, skip_empty, name=given.name)
    raise DataError(f"{path}: not a .json/.jsonl/.tsv file, and no {given.name}.{source_lang} and "
                    f"{given.name}.{target_lang} (.gz) beside it.")


def from_dataset(dataset, origin: str, source_lang: str, target_lang: str, source_column: str | None,
                 target_column: str | None, parse_column: str | None = None,
                 factor_columns: Sequence[str] = (), skip_empty: bool = False) -> Dataset:
    """`source`/`target` columns from a `translation` dict column or from named columns (a cached `map`: the
    data stays on disk); an empty or missing sentence is an error naming its row (with `skip_empty`, its pair is
    dropped)."""
    if source_column or target_column:
        missing = [column for column in (source_column, target_column) if column not in dataset.column_names]
        if missing:
            raise DataError(f"{origin} has no column {missing} (it has {dataset.column_names}).")
    _check_carried(origin, dataset.column_names, parse_column, factor_columns)
    if not (source_column or target_column) and "translation" not in dataset.column_names:
        raise DataError(f"{origin} has no `translation` column; name the text columns with --source_column and "
                         f"--target_column (it has {dataset.column_names}).")

    def pairs(batch, indices):
        if source_column or target_column:
            sources, targets = batch[source_column], batch[target_column]
        else:
            sources = [(pair or {}).get(source_lang) for pair in batch["translation"]]
            targets = [(pair or {}).get(target_lang) for pair in batch["translation"]]
        for row, (index, source, target) in enumerate(zip(indices, sources, targets, strict=True)):
            full = [check_sentence(text, f"{side} sentence", f"{origin} row", index + 1, skip_empty)
                    for text, side in ((source, "source"), (target, "target"))]
            if not all(full):
                continue
            for name in _carried_names(parse_column, factor_columns):
                _check_carried_value(batch[name][row], name, parse_column, f"{origin} row", index + 1)
        return {"source": sources, "target": targets, **_carried_columns(batch, parse_column, factor_columns)}

    data = dataset.map(pairs, batched=True, with_indices=True, remove_columns=dataset.column_names)
    return without_empty_pairs(data) if skip_empty else data


@dataclass
class Corpora:
    """The splits of one training run; each test set is scored and written apart."""

    train: Corpus | None  # needed only to train (`need_train`)
    validation: Corpus | None  # needed only to evaluate during training
    tests: list[Corpus]

    @property
    def all(self) -> list[Corpus]:
        return [corpus for corpus in (self.train, self.validation, *self.tests) if corpus is not None]


def load_named_dataset(name: str, config_name: str | None = None):
    """`datasets.load_dataset(name, config_name)`, or a DataError naming the dataset when it does not load (not on
    the Hub, the Hub out of reach, no such configuration), instead of the client's traceback."""
    from datasets import load_dataset

    try:
        return load_dataset(name, config_name)
    except (OSError, ValueError) as error:  # ConnectionError and DatasetNotFoundError are OSErrors
        from hf_srcfeat.commands import error_summary

        raise DataError(f"--dataset_name {name}{f' --dataset_config_name {config_name}' if config_name else ''} does "
                        f"not load ({error_summary(error)}); offline, give a local folder as --dataset_name, or the "
                        "files (--train_file ...).") from None


def load_corpora(dataset_name: str | None, dataset_config_name: str | None, train_file: str | None,
                 validation_file: str | None, test_files: list[str] | None, source_lang: str, target_lang: str,
                 source_column: str | None = None, target_column: str | None = None,
                 data_dir: str | None = None, parse_column: str | None = None,
                 factor_columns: Sequence[str] = (), need_train: bool = True,
                 skip_empty_pairs: bool = False) -> Corpora:
    """Train, validation and test sets from files, a `datasets` source or Multi30k (the default when nothing else
    is given); files given override the same split of the named dataset. Every split keeps the parse column and the
    word-aligned factor columns named (`SOURCE_CONLLU`, `SOURCE_FACTOR_PREFIX + name`). A run that only evaluates
    neither needs nor reads training data (`need_train=False`). `skip_empty_pairs`: the training and validation
    pairs with an empty side are dropped (and counted in `Corpus.skipped_empty`) instead of refused; test sets keep
    every line, as their predictions are written line for line."""
    factor_columns = tuple(factor_columns)
    splits: dict[str, Corpus] = {}
    tests: list[Corpus] = []
    if dataset_name and dataset_name != MULTI30K:
        loaded = load_named_dataset(dataset_name, dataset_config_name)
        origin = dataset_name + (f" ({dataset_config_name})" if dataset_config_name else "")
        for split in loaded:
            skip_empty = skip_empty_pairs and not split.startswith("test")
            data = from_dataset(loaded[split], f"{origin} {split}", source_lang, target_lang, source_column,
                                target_column, parse_column, factor_columns, skip_empty)
            corpus = Corpus(split, data, [f"{origin} split {split}"], len(loaded[split]) - len(data))
            if split.startswith("test"):
                tests.append(corpus)
            else:
                splits["validation" if split in ("validation", "valid", "dev") else split] = corpus
    elif dataset_name == MULTI30K or not any([train_file, validation_file, test_files]):
        if factor_columns:
            raise DataError(f"Multi30k has no factor columns {list(factor_columns)}; give the corpus as JSON lines "
                             "or a datasets source with them.")
        for split, key in (("train", "train"), ("val", "validation"), ("test_2016_flickr", None)):
            if key == "train" and not need_train:
                continue
            source_file, target_file = (multi30k_file(split, lang, data_dir) for lang in (source_lang, target_lang))
            corpus = read_text_pair(source_file, target_file, skip_empty=skip_empty_pairs and key is not None,
                                    name=split)
            if key:
                splits[key] = corpus
            else:
                tests.append(corpus)
    if train_file and need_train:
        splits["train"] = load_file(train_file, source_lang, target_lang, parse_column, factor_columns,
                                    skip_empty_pairs)
    if validation_file:
        splits["validation"] = load_file(validation_file, source_lang, target_lang, parse_column,
                                         factor_columns, skip_empty_pairs)
    if test_files:
        tests = [load_file(path, source_lang, target_lang, parse_column, factor_columns) for path in test_files]
    if "train" not in splits and need_train:
        raise DataError("no training data: give --train_file, or a --dataset_name that has a train split.")
    names = [corpus.name for corpus in tests]
    if len(set(names)) != len(names):
        raise DataError(f"test sets need distinct names (their predictions are written as test_<name>_predictions"
                         f".txt): {names}.")
    return Corpora(splits.get("train"), splits.get("validation"), tests)
