"""Monolingual corpora (e.g. for a denoising autoencoder), as `datasets.Dataset`s with one `text` column.

| given | read as |
|---|---|
| `*.txt` (`.gz` too) | one sentence a line |
| `*.json` / `*.jsonl` (`.gz` too) | JSON lines: the `text` field, `--text_column`, or the language's side of a `translation` dict |
| `--dataset_name NAME [--dataset_config_name CONFIG]` | `datasets.load_dataset`: the same columns, e.g. the English side of `wmt/wmt14` |

So the source side of any parallel corpus `hf-srcfeat-train` reads in JSON lines or from `datasets` serves as
monolingual data. An empty sentence is an error naming the file and line (or the dataset row).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, load_dataset

from hf_srcfeat.data.corpora import check_sentence, json_objects, numbered_lines
from hf_srcfeat.data.errors import DataError

from .corpora import load_named_dataset

TEXT_SUFFIXES = (".txt",)
JSON_SUFFIXES = (".json", ".jsonl")
VALIDATION_SPLITS = ("validation", "valid", "dev")


@dataclass
class MonolingualCorpus:
    """Training and validation sentences, and where each came from (files, or dataset and split)."""

    train: Dataset
    validation: Dataset | None
    origin: list[str] = field(default_factory=list)


def text_column_of(dataset: Dataset, origin: str, language: str, text_column: str | None = None) -> Dataset:
    """The dataset reduced to a checked `text` column: `text_column`, else `text`, else `translation[language]`."""
    columns = dataset.column_names
    if text_column and text_column not in columns:
        raise DataError(f"{origin} has no column {text_column!r} (it has {columns}).")
    column = text_column or ("text" if "text" in columns else "translation" if "translation" in columns else None)
    if column is None:
        raise DataError(f"{origin} has neither a `text` nor a `translation` column; name the text column with "
                         f"--text_column (it has {columns}).")

    def texts(batch, indices):
        values = batch[column]
        if column == "translation" and not text_column:
            missing = [index + 1 for index, pair in zip(indices, values, strict=True) if language not in (pair or {})]
            if missing:
                raise DataError(f"{origin} row {missing[0]}: the translation has no {language!r} side.")
            values = [pair[language] for pair in values]
        for index, text in zip(indices, values, strict=True):
            check_sentence(text, "sentence", f"{origin} row", index + 1)
        return {"text": values}

    return dataset.map(texts, batched=True, with_indices=True, remove_columns=columns)


def read_text_file(path: Path) -> Dataset:
    """One sentence a line; an empty line is an error naming it (it would train the model to reconstruct nothing)."""
    sentences = []
    for number, line in numbered_lines(path):
        if not line.strip():
            raise DataError(f"{path} line {number} is empty; monolingual data needs one sentence a line.")
        sentences.append(line)
    return Dataset.from_dict({"text": sentences})


def starts_with_array(path: Path) -> bool:
    """Whether a .json file holds one JSON array rather than JSON lines."""
    for _, line in numbered_lines(path):
        if line.strip():
            return line.lstrip().startswith("[")
    return False


def load_monolingual_file(path: str, language: str, text_column: str | None = None) -> Dataset:
    given = Path(path)
    if not given.is_file():
        raise FileNotFoundError(f"no monolingual file {path}")
    suffixes = [suffix for suffix in given.suffixes if suffix != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    if kind in TEXT_SUFFIXES:
        return read_text_file(given)
    if kind in JSON_SUFFIXES:
        if not starts_with_array(given):  # JSON lines (a whole-file array is left to datasets)
            for _ in json_objects(given):  # JSON, objects, encodable text: errors name the line
                pass
        return text_column_of(load_dataset("json", data_files=str(given), split="train"), str(given), language,
                              text_column)
    raise DataError(f"{path}: monolingual data must be a .txt file (one sentence a line) or JSON lines "
                     f"(.json/.jsonl), .gz allowed.")


def load_monolingual(language: str, dataset_name: str | None = None, dataset_config_name: str | None = None,
                     train_file: str | None = None, validation_file: str | None = None,
                     text_column: str | None = None) -> MonolingualCorpus:
    """Training sentences (and validation ones, if the source has them) from files or a `datasets` source; files
    given override the same split of the dataset."""
    train: Dataset | None = None
    validation: Dataset | None = None
    origin: list[str] = []
    if dataset_name:
        loaded = load_named_dataset(dataset_name, dataset_config_name)
        name = dataset_name + (f" ({dataset_config_name})" if dataset_config_name else "")
        if "train" in loaded and not train_file:
            train = text_column_of(loaded["train"], f"{name} train", language, text_column)
            origin.append(f"{name} split train")
        held_out = next((split for split in VALIDATION_SPLITS if split in loaded), None)
        if held_out and not validation_file:
            validation = text_column_of(loaded[held_out], f"{name} {held_out}", language, text_column)
            origin.append(f"{name} split {held_out}")
    if train_file:
        train = load_monolingual_file(train_file, language, text_column)
        origin.append(train_file)
    if validation_file:
        validation = load_monolingual_file(validation_file, language, text_column)
        origin.append(validation_file)
    if train is None:
        raise DataError("no monolingual training data: give --train_file, or a --dataset_name with a train split.")
    return MonolingualCorpus(train=train, validation=validation, origin=origin)
