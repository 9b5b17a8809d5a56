"""Parallel corpora from wherever a user keeps them, as `datasets.Dataset`s with `source` and `target` columns.

The forms Transformers' `run_translation.py` reads, and the plain ones NMT toolkits use:

| given | read as |
|---|---|
| `--dataset_name NAME [--dataset_config_name CONFIG]` | `datasets.load_dataset` (Hub id, local folder, loading script): a `translation` dict column as in `wmt16`, or `--source_column` / `--target_column` |
| `*.json` / `*.jsonl` (`.gz` too) | JSON lines `{"translation": {"en": ..., "de": ...}}`, as run_translation.py reads them |
| `*.tsv` (`.gz` too) | two tab-separated columns, source then target, no header |
| `PREFIX` with `PREFIX.<src>` and `PREFIX.<tgt>` beside it (`.gz` too) | a pair of plain-text files, one sentence a line |
| `--dataset_name multi30k` (the default) | Multi30k task 1 (`hf_srcfeat.multi30k`) |

Every pair is checked: a missing language, or an empty source or target, is an error naming the file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, load_dataset

from .multi30k import load_multi30k, multi30k_file

MULTI30K = "multi30k"


@dataclass
class Corpus:
    """One split: its pairs and where they came from (recorded in results.json)."""

    name: str
    data: Dataset
    origin: list[str] = field(default_factory=list)


def _existing(path: Path) -> Path | None:
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def _lines(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            return [line.rstrip("\r\n") for line in handle]
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start}).") from None


def check_pairs(sources: list[str], targets: list[str], origin: str) -> None:
    """Refuse empty sentences, naming the file and line (1-based)."""
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        for side, text in (("source", source), ("target", target)):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{origin} line {number}: the {side} sentence is empty.")


def read_json_lines(path: Path, source_lang: str, target_lang: str) -> Dataset:
    sources, targets = [], []
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        try:
            pair = json.loads(line)["translation"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{path} line {number}: not a JSON object with a \"translation\" dict ({error}).") from None
        missing = [lang for lang in (source_lang, target_lang) if lang not in pair]
        if missing:
            raise ValueError(f"{path} line {number}: the translation has no {missing} (it has {sorted(pair)}).")
        sources.append(pair[source_lang])
        targets.append(pair[target_lang])
    check_pairs(sources, targets, str(path))
    return Dataset.from_dict({"source": sources, "target": targets})


def read_tsv(path: Path) -> Dataset:
    sources, targets = [], []
    for number, line in enumerate(_lines(path), start=1):
        columns = line.split("\t")
        if len(columns) != 2:
            raise ValueError(f"{path} line {number} has {len(columns)} tab-separated columns, expected 2 "
                             "(source, target).")
        sources.append(columns[0])
        targets.append(columns[1])
    check_pairs(sources, targets, str(path))
    return Dataset.from_dict({"source": sources, "target": targets})


def read_text_pair(source_file: Path, target_file: Path) -> Dataset:
    sources, targets = _lines(source_file), _lines(target_file)
    if len(sources) != len(targets):
        raise ValueError(f"{source_file} has {len(sources)} lines but {target_file} has {len(targets)}; the two "
                         "sides must be line-aligned.")
    check_pairs(sources, targets, f"{source_file} / {target_file}")
    return Dataset.from_dict({"source": sources, "target": targets})


def load_file(path: str, source_lang: str, target_lang: str) -> Corpus:
    """One parallel file (or text-file pair by prefix), by its form; the corpus is named after the file."""
    given = Path(path)
    suffixes = [suffix for suffix in given.suffixes if suffix != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    name = given.name.split(".")[0]
    if kind in (".json", ".jsonl") and given.is_file():
        return Corpus(name, read_json_lines(given, source_lang, target_lang), [str(given)])
    if kind == ".tsv" and given.is_file():
        return Corpus(name, read_tsv(given), [str(given)])
    source_file = _existing(given.with_name(f"{given.name}.{source_lang}"))
    target_file = _existing(given.with_name(f"{given.name}.{target_lang}"))
    if source_file and target_file:
        return Corpus(given.name, read_text_pair(source_file, target_file), [str(source_file), str(target_file)])
    raise FileNotFoundError(f"{path}: not a .json/.jsonl/.tsv file, and no {given.name}.{source_lang} and "
                            f"{given.name}.{target_lang} (.gz) beside it.")


def from_dataset(dataset, origin: str, source_lang: str, target_lang: str, source_column: str | None,
                 target_column: str | None) -> Dataset:
    """`source`/`target` columns from a `translation` dict column or from named columns."""
    if source_column or target_column:
        missing = [column for column in (source_column, target_column) if column not in dataset.column_names]
        if missing:
            raise ValueError(f"{origin} has no column {missing} (it has {dataset.column_names}).")
        sources, targets = list(dataset[source_column]), list(dataset[target_column])
    elif "translation" in dataset.column_names:
        pairs = dataset["translation"]
        for number, pair in enumerate(pairs, start=1):
            missing = [lang for lang in (source_lang, target_lang) if lang not in pair or pair[lang] is None]
            if missing:
                raise ValueError(f"{origin} row {number}: the translation has no {missing}.")
        sources, targets = [pair[source_lang] for pair in pairs], [pair[target_lang] for pair in pairs]
    else:
        raise ValueError(f"{origin} has no `translation` column; name the text columns with --source_column and "
                         f"--target_column (it has {dataset.column_names}).")
    check_pairs(sources, targets, origin)
    return Dataset.from_dict({"source": sources, "target": targets})


@dataclass
class Corpora:
    """The splits of one training run; each test set is scored and written apart."""

    train: Corpus
    validation: Corpus
    tests: list[Corpus]

    @property
    def all(self) -> list[Corpus]:
        return [self.train, self.validation, *self.tests]


def load_corpora(dataset_name: str | None, dataset_config_name: str | None, train_file: str | None,
                 validation_file: str | None, test_files: list[str] | None, source_lang: str, target_lang: str,
                 source_column: str | None = None, target_column: str | None = None,
                 data_dir: str | None = None) -> Corpora:
    """Train, validation and test sets from files, a `datasets` source or Multi30k (the default when nothing else
    is given); files given override the same split of the named dataset."""
    splits: dict[str, Corpus] = {}
    tests: list[Corpus] = []
    if dataset_name and dataset_name != MULTI30K:
        loaded = load_dataset(dataset_name, dataset_config_name)
        origin = dataset_name + (f" ({dataset_config_name})" if dataset_config_name else "")
        for split in loaded:
            corpus = Corpus(split, from_dataset(loaded[split], f"{origin} {split}", source_lang, target_lang,
                                                source_column, target_column), [f"{origin} split {split}"])
            if split.startswith("test"):
                tests.append(corpus)
            else:
                splits["validation" if split in ("validation", "valid", "dev") else split] = corpus
    elif dataset_name == MULTI30K or not any([train_file, validation_file, test_files]):
        for split, key in (("train", "train"), ("val", "validation"), ("test_2016_flickr", None)):
            corpus = Corpus(split, load_multi30k(split, source_lang, target_lang, data_dir),
                            [str(multi30k_file(split, lang, data_dir)) for lang in (source_lang, target_lang)])
            if key:
                splits[key] = corpus
            else:
                tests.append(corpus)
    if train_file:
        splits["train"] = load_file(train_file, source_lang, target_lang)
    if validation_file:
        splits["validation"] = load_file(validation_file, source_lang, target_lang)
    if test_files:
        tests = [load_file(path, source_lang, target_lang) for path in test_files]
    missing = [split for split in ("train", "validation") if split not in splits]
    if missing:
        raise ValueError(f"no {missing} data: give --{missing[0]}_file, or a --dataset_name that has that split.")
    names = [corpus.name for corpus in tests]
    if len(set(names)) != len(names):
        raise ValueError(f"test sets need distinct names (their predictions are written as test_<name>_predictions"
                         f".txt): {names}.")
    return Corpora(splits["train"], splits["validation"], tests)
