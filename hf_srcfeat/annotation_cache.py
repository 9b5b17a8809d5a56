"""The on-disk parse cache: SQLite, JSON values, keyed by the text and the annotator's identity, so that a
corpus is parsed once."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

from .annotated_sentence import AnnotatedSentence

ANNOTATION_CACHE_ENV = "HF_SRCFEAT_ANNOTATION_CACHE"


class AnnotationCacheError(RuntimeError):
    """The annotation cache file is not a readable cache."""


class AnnotationCache:
    """Persistent map (annotator identity, text) -> AnnotatedSentence in one SQLite file of JSON values.

    Each thread gets its own connection (SQLite connections may not cross threads), so a tokenizer or pipeline can
    serve a threaded web server or a thread pool."""

    #: Seconds to wait for a cache another process holds locked before going on without it.
    lock_timeout = 30.0

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._local = threading.local()
        self.usable = True  # False once the file could not be opened or written: parsing goes on without it

    @property
    def connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:  # no such folder can be made: the same as a file that cannot be opened
                raise sqlite3.OperationalError(f"cannot create {self.path.parent}: {error.strerror}") from error
            connection = sqlite3.connect(self.path, timeout=self.lock_timeout)
            connection.execute("CREATE TABLE IF NOT EXISTS annotations (key TEXT PRIMARY KEY, value TEXT)")
            self._local.connection = connection
        return connection

    def _unusable(self, error: Exception) -> None:
        """A file that is not a cache is an error naming it; one that cannot be opened, read or written right now
        (read-only, locked, no room) is a warning, and parsing goes on without caching."""
        if not isinstance(error, sqlite3.OperationalError):
            # Deleting is advised only for a damaged cache, never for a file that is something else.
            remedy = "it is a text file: is it the right path? choose" if is_other_file(self.path) else \
                "delete it (it is rebuilt as texts are parsed) or choose"
            raise AnnotationCacheError(
                f"annotation cache {self.path} is unreadable ({error}); {remedy} another file (cache_path=, "
                f"--annotation_cache, ${ANNOTATION_CACHE_ENV}).") from error
        if self.usable:
            warnings.warn(f"annotation cache {self.path} cannot be used ({error}); parsing goes on without caching.",
                          stacklevel=3)
        self.usable = False

    def __getstate__(self) -> dict:
        # Picklable (datasets.map hashes and ships the tokenizer): connections are reopened where needed.
        return {"path": self.path, "usable": self.usable}

    def __setstate__(self, state: dict) -> None:
        self.path, self.usable, self._local = state["path"], state.get("usable", True), threading.local()

    @staticmethod
    def key(identity: str, text: str) -> str:
        return hashlib.sha256(f"{identity}\n{text}".encode()).hexdigest()

    def get_many(self, identity: str, texts: Sequence[str]) -> dict[str, AnnotatedSentence]:
        keys = {self.key(identity, text): text for text in texts}
        found: dict[str, AnnotatedSentence] = {}
        if not self.usable:
            return found
        key_list = list(keys)
        try:
            for start in range(0, len(key_list), 500):
                chunk = key_list[start:start + 500]
                rows = self.connection.execute(
                    f"SELECT key, value FROM annotations WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                for key, value in rows:
                    try:
                        sentence = AnnotatedSentence.from_json(value)
                        sentence.check()
                    except (ValueError, TypeError, KeyError, IndexError):
                        continue  # a damaged row is a miss: the text is parsed again and its row replaced
                    found[keys[key]] = sentence
        except sqlite3.DatabaseError as error:
            self._unusable(error)
        return found

    def put_many(self, identity: str, sentences: dict[str, AnnotatedSentence] | dict[str, str]) -> None:
        """Store parses, given as AnnotatedSentence or as their JSON (`to_json`, as helper processes send them)."""
        if not self.usable:
            return
        try:
            with self.connection:
                self.connection.executemany(
                    "INSERT OR REPLACE INTO annotations VALUES (?, ?)",
                    [(self.key(identity, text), sentence if isinstance(sentence, str) else sentence.to_json())
                     for text, sentence in sentences.items()])
        except sqlite3.DatabaseError as error:
            self._unusable(error)

    def __len__(self) -> int:
        return self.connection.execute("SELECT COUNT(*) FROM annotations").fetchone()[0]


#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def is_other_file(path: Path) -> bool:
    """Whether `path` is a text file (a corpus, notes, ...), not a parse cache: a damaged cache, or one this process
    may not read, is not (it is reported when used, and parsing goes on without it)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as file:
            start = file.read(4096)
    except OSError:
        return False
    if not start or start.startswith(SQLITE_HEADER):
        return False
    try:
        start.decode("utf-8")
    except UnicodeDecodeError as error:  # binary, unless only a character cut at the end of the block
        if error.start < len(start) - 3:
            return False
    return b"\n" in start  # lines of text


def check_cache_path(path: str | os.PathLike | None) -> None:
    """Refuse, naming it, a cache path that cannot become a cache file: a folder, a path under a file, or a file
    that is something else (the input given twice, say), which the cache would write into."""
    if path is None:
        return
    given = Path(path)
    if given.is_dir():
        raise ValueError(f"annotation cache {given} is a folder; name a file, e.g. {given / 'annotations.sqlite'}.")
    if is_other_file(given):
        raise ValueError(f"annotation cache {given} is a text file, not an SQLite parse cache (a corpus? the input "
                         "given twice?); name another file (it is made on first use).")
    for parent in given.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"annotation cache {given} is under {parent}, which is a file, not a folder.")
            return


def default_cache_path() -> Path:
    """`$HF_SRCFEAT_ANNOTATION_CACHE`, else `annotations.sqlite` in the user's cache folder."""
    if os.environ.get(ANNOTATION_CACHE_ENV):
        return Path(os.environ[ANNOTATION_CACHE_ENV])
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "hf_srcfeat" / "annotations.sqlite"

