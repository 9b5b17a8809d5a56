"""Multi30k task 1 (Elliott et al. 2016): raw, untokenized, line-aligned files per language.

Where the files come from is settable: an explicit `data_dir`, else the environment variable
`HF_SRCFEAT_MULTI30K_DIR`, else the official raw files are downloaded once into the user's cache.
"""

from __future__ import annotations

import gzip
import os
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DataError

if TYPE_CHECKING:
    from datasets import Dataset

MULTI30K_ENV = "HF_SRCFEAT_MULTI30K_DIR"
MULTI30K_BLIND_ENV = "HF_SRCFEAT_MULTI30K_BLIND_DIR"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
SPLITS = ("train", "val", "test_2016_flickr")
#: Further test sets whose sources the benchmark translates as a blind check; their references are not read here.
BLIND_SPLITS = ("test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
LANGUAGES = ("en", "de", "fr", "cs")


def multi30k_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding `{split}.{lang}.gz`: the argument, then $HF_SRCFEAT_MULTI30K_DIR, then the cache."""
    chosen = data_dir or os.environ.get(MULTI30K_ENV)
    if chosen:
        path = Path(chosen)
        if not path.is_dir():
            raise FileNotFoundError(f"Multi30k folder {path} does not exist (from "
                                    f"{'data_dir' if data_dir else MULTI30K_ENV}).")
        return path
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hf_srcfeat" / "multi30k"


def multi30k_file(split: str, language: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of one gzip file, downloading it into the cache when no folder was configured."""
    if split not in SPLITS + BLIND_SPLITS:
        raise ValueError(f"Unknown Multi30k split {split!r}; choose from {list(SPLITS + BLIND_SPLITS)}.")
    if language not in LANGUAGES:  # a DataError: the commands say it in a line
        raise DataError(f"Unknown Multi30k language {language!r}; choose from {list(LANGUAGES)} (other pairs: "
                        "--train_file, --dataset_name).")
    folder = multi30k_dir(data_dir)
    path = folder / f"{split}.{language}.gz"
    if not path.exists():
        if data_dir or os.environ.get(MULTI30K_ENV):
            raise FileNotFoundError(f"Multi30k file {path} is missing.")
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".gz.part")
        urllib.request.urlretrieve(MULTI30K_URL.format(name=path.name), partial)
        partial.rename(path)
    return path


def blind_source_file(split: str, language: str = "en", blind_dir: str | os.PathLike | None = None) -> Path:
    """Source side of a blind test set: `{split}.{language}.gz` in `blind_dir`, else $HF_SRCFEAT_MULTI30K_BLIND_DIR,
    else the Multi30k folder (the official raw files include these sets)."""
    if split not in BLIND_SPLITS:
        raise ValueError(f"Unknown blind Multi30k split {split!r}; choose from {list(BLIND_SPLITS)}.")
    chosen = blind_dir or os.environ.get(MULTI30K_BLIND_ENV)
    if not chosen:
        return multi30k_file(split, language)
    path = Path(chosen) / f"{split}.{language}.gz"
    if not path.exists():
        raise FileNotFoundError(f"blind test source {path} is missing (from "
                                f"{'blind_dir' if blind_dir else MULTI30K_BLIND_ENV}).")
    return path


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a (gzip) text file without their newlines."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def load_multi30k(split: str, source_language: str = "en", target_language: str = "de",
                  data_dir: str | os.PathLike | None = None, limit: int | None = None) -> Dataset:
    """A `datasets.Dataset` with `source` and `target` columns (the first `limit` pairs when given)."""
    sources = read_lines(multi30k_file(split, source_language, data_dir))
    targets = read_lines(multi30k_file(split, target_language, data_dir))
    if len(sources) != len(targets):
        raise ValueError(f"Multi30k {split}: {len(sources)} {source_language} lines but "
                         f"{len(targets)} {target_language} lines.")
    if limit is not None:
        sources, targets = sources[:limit], targets[:limit]
    from datasets import Dataset

    return Dataset.from_dict({"source": sources, "target": targets})
