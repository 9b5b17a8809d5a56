"""Writing a file safely: what a command writes appears whole or not at all.

New content goes to a unique temporary file in the target's folder and is renamed over the target only when it is
complete, so an interrupted or failed write (a full disk, a file size limit) leaves the old file as it was, and
two processes writing the same output never mix their lines: the file is one of theirs, whole. A symlink is
followed (the link stays, the file it points to is replaced); a device, FIFO or socket (`/dev/null`, `/dev/stdout`,
a process substitution) is written through, as a shell redirection would, and never replaced by a regular file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast


def is_special_file(path: Path) -> bool:
    """Whether `path` exists and is not a regular file or a folder (a device, FIFO or socket)."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextmanager
def output_path(path: str | os.PathLike) -> Iterator[Path]:
    """A path to write the new content of `path` to: a unique temporary file beside it, renamed over it when the
    block ends without an error (removed when it raises); for a device or FIFO, the path itself."""
    if is_special_file(Path(path)):  # stat follows links: /dev/stdout, a process substitution's /dev/fd/63
        yield Path(path)
        return
    target = Path(os.path.realpath(path))  # through a symlink: the link stays, its file is replaced
    if target.is_dir():
        raise IsADirectoryError(f"{path} is a directory; name a file to write.")
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    os.close(handle)
    try:
        yield Path(temporary)
        if target.exists():  # keep the old file's permissions, as an in-place write would
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        else:
            os.chmod(temporary, 0o666 & ~current_umask())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def replaced_atomically(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8",
                        compress: bool | None = None) -> Iterator[IO]:
    """`open(path, mode)` through `output_path`: the file is replaced only by complete content; gzip-compressed when
    `compress` (by default when the name ends in .gz, as the commands read such a name)."""
    compress = str(path).endswith(".gz") if compress is None else compress
    text_encoding = None if "b" in mode else encoding
    with output_path(path) as writable:
        if not compress:
            with open(writable, mode, encoding=text_encoding) as handle:
                yield handle
            return
        # The gzip header records a file name (`gunzip -N`, `file`): the one asked for, not the temporary file's.
        with open(writable, "wb") as raw, gzip.GzipFile(filename=Path(path).name, mode="wb", fileobj=raw) as packed:
            with (packed if "b" in mode else io.TextIOWrapper(packed, encoding=text_encoding)) as handle:
                yield cast(IO, handle)


def write_text_atomically(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    with replaced_atomically(path, "w", encoding=encoding) as handle:
        handle.write(text)


def write_json_atomically(path: str | os.PathLike, data: Any, **dumps_options: Any) -> None:
    """JSON (indent 2 unless given, a final newline) replacing `path` whole."""
    write_text_atomically(path, json.dumps(data, **{"indent": 2, **dumps_options}) + "\n")


def overwritten_input(outputs: dict[str, str | None], inputs: dict[str, str | None],
                      input_folders: dict[str, str | None] | None = None) -> str | None:
    """The error to give when an output (`--name` -> path) is one of the inputs (the files read, among them the parse
    cache), an existing file of an input folder (a model's), or another output (so that a writer never destroys
    what it reads), else None. "-" (stdout/stdin) and None are no files."""
    def same(first: str, second: str) -> bool:  # a device or FIFO (/dev/null both ways) loses nothing
        return not is_special_file(Path(first)) and Path(first).resolve() == Path(second).resolve()

    files = [(name, path) for name, path in outputs.items() if path not in (None, "-")]
    for name, path in files:
        for input_name, input_path in inputs.items():
            if input_path not in (None, "-") and same(path, input_path):
                return f"{name} {path} is the {input_name} file; it would be overwritten."
        for folder_name, folder in (input_folders or {}).items():
            # A file of the folder (a model's weights, config, tokenizer) is read; a new file beside them is not.
            if folder is not None and Path(folder).is_dir() and Path(path).is_file() \
                    and Path(path).resolve().is_relative_to(Path(folder).resolve()):
                return f"{name} {path} is a file of the {folder_name} folder {folder}; it would be overwritten."
    for index, (name, path) in enumerate(files):
        for other_name, other_path in files[index + 1:]:
            if same(path, other_path):
                return f"{name} and {other_name} are the same file ({path}); one would overwrite the other."
    return None


__all__ = ["is_special_file", "output_path", "overwritten_input", "replaced_atomically", "write_json_atomically", "write_text_atomically"]
