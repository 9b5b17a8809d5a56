"""Digests of files and folders by content: the identity of a parser's models in the annotation cache's keys, and
what result files record of the models and data they ran on."""

from __future__ import annotations

import hashlib
from pathlib import Path

_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """SHA-256 of a file's content, computed once per process for each (path, size, mtime)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        _FILE_DIGESTS[key] = digest.hexdigest()[:16]
    return _FILE_DIGESTS[key]


def folder_digest(folder: Path) -> str:
    """A digest of every file under `folder`, by relative name and content: a model's weights retrained in place,
    or another folder's, give another digest; a copied or moved folder the same one."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    listing = ";".join(f"{path.relative_to(folder)}:{file_digest(path)}" for path in files)
    return hashlib.sha256(listing.encode()).hexdigest()[:16]
