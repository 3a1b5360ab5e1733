"""Why an operation on a file failed, in a few words for a one-line message (no Qt): the one helper the
app's own files (history, settings, the data folder) use, so they all say it the same way."""

from __future__ import annotations


def why(e: BaseException) -> str:
    """"permission denied", "no space left on device", "nested too deeply", or the error's own text."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8 text"
    return str(e) or type(e).__name__
