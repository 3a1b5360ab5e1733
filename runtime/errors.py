"""Errors the runtime raises on purpose, and how any text from outside is made printable.

Every problem with user input (a checkpoint folder, a command-line value) becomes a
`CheckpointError` or `UsageError` whose message names the file or value and says what
to do. The CLI prints that message as one line and exits non-zero; the GUI shows it.

The helpers here are the only ones: `printable` (control characters shown, never obeyed),
`for_approval` (what the user approves: format characters shown too, so nothing is reordered or
hidden), `one_line` (a message as one printable line) and `show` (a value quoted inside a message).
"""

import re
import unicodedata

# C0 and C1 control characters, DEL, and the line/paragraph separators: a file or submodel name
# holding them could move the cursor, recolour or retitle a terminal, or split one line into two.
# Lone surrogates (undecodable bytes of a file name, kept by Python's surrogateescape) are shown too:
# printing them raw would fail on a UTF-8 stdout.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def printable(text, keep_newlines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\x1b`), so printing it can
    neither drive the terminal nor break a one-line message. Tabs (and newlines when asked) stay."""
    keep = {"\t", "\n"} if keep_newlines else {"\t"}

    def escape(m):
        c = m.group()
        return c if c in keep else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
    return _CONTROL.sub(escape, str(text))


def for_approval(text, keep_newlines: bool = False) -> str:
    """`text` as it must be seen to be approved (a command, an argument, a tool's name or description):
    `printable`, and every format character (Unicode Cf: bidirectional embeddings, overrides, isolates
    and marks, zero-width characters, the BOM, the soft hyphen, tag characters) and every code point
    this Python does not know (a format character of a newer Unicode) shown as an escape. Otherwise an
    argument `"notes.txt\u202e\u2066 (read-only)\u2069"` shows "(read-only)" outside the string, as
    if the app had said it. Model text elsewhere keeps them (emoji sequences join with U+200D)."""
    text = printable(text, keep_newlines)
    if text.isascii():
        return text
    return "".join(_escape(c) if unicodedata.category(c) in ("Cf", "Cn") else c for c in text)


def _escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def one_line(text, limit: int | None = None) -> str:
    """A message as one printable line, cut to `limit` characters if given. A text of several lines
    has each one stripped and joined with ' / '; one line keeps its spacing (a table row of `models list`)."""
    lines = str(text).splitlines()
    line = printable(lines[0] if len(lines) == 1 else " / ".join(part.strip() for part in lines if part.strip()))
    return line if limit is None or len(line) <= limit else line[:limit] + "…"


def show(value, limit: int = 80) -> str:
    """`value` quoted for a one-line message: text in quotes with every control character escaped,
    anything else as Python writes it, cut to about `limit` characters (it may come from a file)."""
    if isinstance(value, str):
        text = repr(value if len(value) <= limit else value[:limit] + "…")
    else:
        try:
            text = repr(value)
        except ValueError:  # an int of more digits than Python converts (sys.get_int_max_str_digits)
            return "a number too long to show"
        text = text if len(text) <= limit else text[:limit] + "…"
    return printable(text)


class ElasticError(Exception):
    """Base class: an expected failure with a message meant for the user."""


class CheckpointError(ElasticError):
    """A checkpoint folder that cannot be used as it is."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UsageError(ElasticError):
    """A request the engine cannot honour (unknown submodel, bad token id, ...)."""
