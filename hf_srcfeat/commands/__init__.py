"""The installed commands (`hf-srcfeat-train`, `hf-srcfeat-annotate`, `hf-srcfeat-translate`, `hf-srcfeat-export-ct2`,
`hf-srcfeat-publish`, `hf-srcfeat-pretrain-dae`, `hf-srcfeat-average-checkpoints`, `hf-srcfeat-score`): each
module's `main(argv)` is one command."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar, cast


def run_as_script(main: Callable[[list[str] | None], object], on_interrupt: str = "") -> int:
    """Run a command whose `main` returns a result for Python callers (a metrics dict, a folder) as a console
    script: the result is not the exit status (`sys.exit(dict)` would print it and exit 1); errors still exit
    through `SystemExit`, and bad data (`DataError`, named by file and line) or a parser that cannot load as one
    line, without a traceback."""
    from hf_srcfeat.annotator import AnnotatorLoadError
    from hf_srcfeat.data.errors import DataError

    try:
        main(sys.argv[1:])
    except (DataError, AnnotatorLoadError) as error:
        raise SystemExit(f"{Path(sys.argv[0]).name}: {error}") from None
    except KeyboardInterrupt:
        exit_interrupted(on_interrupt)
    return 0


def exit_interrupted(what_next: str = "") -> NoReturn:
    """Ctrl-C: said in a line (and what to do next), with the shell's exit status for it, not a traceback."""
    print(f"{Path(sys.argv[0]).name}: interrupted.{' ' + what_next if what_next else ''}", file=sys.stderr)
    raise SystemExit(130) from None


CommandMain = TypeVar("CommandMain", bound=Callable[..., int])


def interruptible(main: CommandMain) -> CommandMain:
    """A command's `main` (exit status as its result) that ends on Ctrl-C with `exit_interrupted`."""

    @functools.wraps(main)
    def command(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            exit_interrupted()

    return cast(CommandMain, command)


def check_model_source(name: str, option: str = "--model") -> None:
    """Refuse, naming it, a model that is neither a local folder nor a Hub id (org/name), instead of the Hub
    client's "Repo id must be in the form ..." for a mistyped path."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(name).is_dir():
        return
    if Path(name).exists():
        raise SystemExit(f"{option} {name} is a file; give the model's folder or a Hub id.")
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise SystemExit(f"{option}: no model folder or Hub id {name!r}.") from None
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not org/name
        raise SystemExit(f"{option}: no model folder or Hub id {name!r}.")


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> None:
    """Refuse, naming it, a count option (batch size, beams, processes, ...) below 1, before any work."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1, got {value}.")


def resolve_device(name: str, option: str = "--device") -> str:
    """A device option (`option`): cpu, cuda, cuda:N or auto (cuda when there is one)."""
    if not (name in ("cpu", "cuda", "auto") or (name.startswith("cuda:") and name[5:].isdigit())):
        raise SystemExit(f"{option} must be cpu, cuda, cuda:N or auto, got {name!r}.")
    if name == "cpu":
        return name
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"{option} {name}: this machine has no CUDA device (torch {torch.__version__}); use "
                         f"{option} cpu or auto.")
    return name


def error_summary(error: BaseException) -> str:
    """An exception in a few words for a one-line message: its first line, else its type (loading errors of the
    Hub client run to several lines of advice)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def used_cache_path(args: argparse.Namespace) -> str | None:
    """The parse cache file a command run reads and writes: `--annotation_cache`, else the default (environment
    variable, else the user's cache folder); None when it parses nothing (CoNLL-U input, `--no_parse`) or caches
    nothing (`--no_annotation_cache`)."""
    from hf_srcfeat.annotation_cache import default_cache_path

    parses = getattr(args, "input_format", getattr(args, "source_format", "text")) != "conllu" \
        and not getattr(args, "no_parse", False)
    if getattr(args, "no_annotation_cache", False) or not parses:
        return None
    return str(args.annotation_cache or default_cache_path())
