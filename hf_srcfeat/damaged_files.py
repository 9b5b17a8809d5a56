"""Saved files that are truncated or damaged (an interrupted copy, a full disk) are named, file by file, before
Transformers, tokenizers or the Trainer meet them with an error that does not say which file it read."""

from __future__ import annotations

import os
from pathlib import Path


class DamagedFileError(OSError):
    """A saved file that cannot be read whole: a `.safetensors` file whose header or tensors do not fit the file,
    or a JSON file that does not parse."""


def check_weights_files(folder: str | os.PathLike) -> None:
    """Raise `DamagedFileError` naming the first `.safetensors` file in `folder` that cannot be read whole.

    Only the headers are read: safetensors checks that the tensors they list cover the file exactly, which is
    what a cut-off file fails."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise DamagedFileError(
                f"{path} is truncated or damaged ({error}); its weights cannot be loaded. Copy or download it "
                "again, or use an earlier checkpoint.") from None


def named_weights_error(name_or_path: str | os.PathLike, error: Exception) -> Exception:
    """The error to raise for a safetensors failure while loading `name_or_path`: the damaged file named when
    the model is a local folder, else the model named."""
    if Path(name_or_path).is_dir():
        try:
            check_weights_files(name_or_path)
        except DamagedFileError as named:
            return named
    return DamagedFileError(f"the weights of {name_or_path} cannot be read ({error}); a weights file is "
                               "truncated or damaged.")


def check_json_files(folder: str | os.PathLike) -> None:
    """Raise `DamagedFileError` naming the first `.json` file in `folder` that does not parse."""
    import json

    for path in sorted(Path(folder).glob("*.json")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise DamagedFileError(f"{path} is truncated or damaged ({error}); copy or download it again.") from None
