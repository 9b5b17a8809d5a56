"""Saved configs and models keep loading: what is refused when a config or a model is made is warned about while a
saved one loads (it was accepted when it was saved)."""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator

#: True while a saved config or model loads: what is refused when a config or a model is made (another method's
#: argument, feature dropout of a feature not read) is then warned about, so that what was saved keeps loading.
LOADING_SAVED: contextvars.ContextVar[bool] = contextvars.ContextVar("loading_saved", default=False)


@contextlib.contextmanager
def loading_saved() -> Iterator[None]:
    """Within: a saved config or model is being loaded (`LOADING_SAVED`)."""
    token = LOADING_SAVED.set(True)
    try:
        yield
    finally:
        LOADING_SAVED.reset(token)


def refuse_or_warn_when_loading(message: str) -> None:
    """A ValueError of `message` where a config or model is made; a warning while a saved one loads."""
    if LOADING_SAVED.get():
        warnings.warn(f"{message} (loaded as saved)", stacklevel=3)
    else:
        raise ValueError(message)
