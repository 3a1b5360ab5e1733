"""The one reader for JSON files from outside (checkpoint configs, settings, the store's records,
a recorded hardware probe): bounded, and every failure one short phrase.

    data = read_json_file(path, 64 * MiB)            # a dict, or JsonFileError("not valid JSON (line 3: ...)")
    data = parse_json_bytes(raw, MAX, kind=list)     # bytes already read (a hub, a record opened safely)

Only a regular file is read, and no more than `max_bytes` of it: a named pipe would block forever,
/dev/zero never end, a planted 10 GB file fill the memory. A missing file raises FileNotFoundError
(each caller decides what a missing file means); anything else raises `JsonFileError`, whose
message says why without naming the file (the caller names it in its own words).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from .units import format_bytes


class JsonFileError(ValueError):
    """A JSON file that cannot be used; the message is a phrase such as "not valid JSON (line 1: ...)"."""


def read_json_file(path: Path | str, max_bytes: int, kind: type = dict, object_hook=None,
                   follow_links: bool = True) -> object:
    """The JSON value in `path`, which must be of type `kind` (dict, list; None: any). With
    `follow_links` False a link is refused ("a link, not a file"): the app's own files, where a
    link can only have been planted (a checkpoint's files are links in the hub's cache)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)  # a FIFO must not block open
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if not follow_links and e.errno == errno.ELOOP:
            raise JsonFileError("a link, not a file") from None
        raise JsonFileError(_os_reason(e)) from None
    try:
        with os.fdopen(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                raise JsonFileError("not a regular file")
            raw = src.read(max_bytes + 1)
    except OSError as e:
        raise JsonFileError(_os_reason(e)) from None
    return parse_json_bytes(raw, max_bytes, kind, object_hook)


def parse_json_bytes(raw: bytes, max_bytes: int, kind: type = dict, object_hook=None) -> object:
    """`read_json_file` for bytes already read. A UTF-8 byte-order mark (Windows editors add one) is allowed."""
    if len(raw) > max_bytes:
        raise JsonFileError(f"larger than {format_bytes(max_bytes)}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise JsonFileError("not a UTF-8 text file") from None
    try:
        data = json.loads(text, object_hook=object_hook)
    except json.JSONDecodeError as e:
        raise JsonFileError(f"not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise JsonFileError("not valid JSON (nested too deeply)") from None
    except ValueError as e:  # a number of more digits than Python converts
        raise JsonFileError(f"not valid JSON ({e})") from None
    if kind is not None and not isinstance(data, kind):
        raise JsonFileError(f"expected a JSON {_json_type(kind())} at the top level, not a {_json_type(data)}")
    return data


def _json_type(value) -> str:
    return {dict: "object", list: "list", str: "string", bool: "true/false", type(None): "null"}.get(
        type(value), "number")


def _os_reason(e: OSError) -> str:
    return f"cannot be read ({(e.strerror or type(e).__name__).lower()})"
