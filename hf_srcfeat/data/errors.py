"""The error of unusable training data."""

from __future__ import annotations


class DataError(ValueError):
    """Something in the user's data that training cannot use, named in the message by file and line (or dataset and
    row). The commands print it as one line, without a traceback: the fix is in the data, not in the code. A
    `ValueError`, so callers that catch those keep working."""
