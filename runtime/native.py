"""The boundary with native libraries: whatever a call into one raises becomes one line of the runtime's.

tokenizers and safetensors are Rust; when Rust panics (a backtracking regex in a downloaded
`tokenizer.json` hits Oniguruma's retry limit, a damaged file trips an `unwrap`), pyo3 raises
`PanicException`, which derives from BaseException, not Exception, so `except Exception` lets it
through and it ends whatever thread it crosses: the app's engine worker, the server's runner. Their
ordinary errors (`SafetensorError`, tokenizers' `Exception`) carry Rust's debug text. torch's C++ raises
RuntimeError with a page of context. A file or a request from outside can trigger any of these, so
every call from the runtime into such a library on outside data goes through `guarded`:

    with guarded(lambda why: UsageError(f"the tokenizer cannot encode this text ({why})")):
        ids = tokenizer.encode(text)

Only the three exceptions that mean "stop now" pass unchanged (KeyboardInterrupt, SystemExit,
GeneratorExit), and so do the runtime's own errors (ElasticError), which already say what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import ElasticError, one_line

PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, ElasticError)


def is_panic(e: BaseException) -> bool:
    """A native library's failure that escapes `except Exception` (pyo3's PanicException)."""
    return not isinstance(e, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))


def describe(e: BaseException, limit: int = 200) -> str:
    """A native failure as a short phrase: `Rust panic: Onig: retry-limit-in-match over`."""
    kind = "Rust panic" if is_panic(e) else type(e).__name__
    text = one_line(e, limit) if str(e) else ""
    return f"{kind}: {text}" if text else kind


@contextmanager
def guarded(error: Callable[[str], ElasticError]) -> Iterator[None]:
    """Runs the block; any failure but PASS_THROUGH is raised as `error(describe(failure))`."""
    try:
        yield
    except PASS_THROUGH:
        raise
    except BaseException as e:  # a panic is a BaseException: that is the point
        raise error(describe(e)) from None
