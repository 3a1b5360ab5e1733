"""Server-sent events read strictly and within bounds: the `data:` payloads of a chat-completions
stream, each a JSON object, until `data: [DONE]` or the end of the body.

The framing follows the SSE specification (lines end in LF, CRLF or CR; an event ends at a blank
line; `:` starts a comment; `event`, `id` and `retry` fields are read and dropped), and every
bound is checked before the bytes are kept: the length of one line, the size of one event, the
number of events and the bytes of the whole stream. A stream that breaks a bound or the framing
raises `SseError`, whose message is a short phrase (the caller names the server).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import show

DONE = "[DONE]"
FIELDS = ("data", "event", "id", "retry")


class SseError(ValueError):
    """A stream that is not well-formed server-sent events of JSON objects, or too large."""


@dataclass(frozen=True)
class SseLimits:
    line_bytes: int = 256 * 1024  # one line (a chunk of a long tool call stays far below)
    event_bytes: int = 1024 * 1024  # one event's data, all its lines together
    events: int = 1_000_000  # events in one stream
    total_bytes: int = 256 * 1024 * 1024  # the whole stream


def _lines(chunks: Iterable[bytes], limits: SseLimits) -> Iterator[bytes]:
    """The stream's lines without their ends; each checked against the line bound before it grows."""
    buffer, total, pending_cr = b"", 0, False
    for chunk in chunks:
        total += len(chunk)
        if total > limits.total_bytes:
            raise SseError(f"the stream is longer than {limits.total_bytes} bytes")
        if pending_cr and chunk.startswith(b"\n"):  # a CRLF split across two reads
            chunk = chunk[1:]
        pending_cr = False
        buffer += chunk
        while True:
            cut = min((i for i in (buffer.find(b"\n"), buffer.find(b"\r")) if i >= 0), default=-1)
            if cut < 0:
                break
            line, end = buffer[:cut], buffer[cut:cut + 2]
            if end == b"\r\n":
                buffer = buffer[cut + 2:]
            else:
                buffer = buffer[cut + 1:]
                pending_cr = end == b"\r"  # CR at the end of this read: an LF may start the next one
            if len(line) > limits.line_bytes:
                raise SseError(f"a line is longer than {limits.line_bytes} bytes")
            yield line
        if len(buffer) > limits.line_bytes:
            raise SseError(f"a line is longer than {limits.line_bytes} bytes")
    if buffer:
        yield buffer  # the last line, with no end: the blank line after it is missing, so it is dropped


def events(chunks: Iterable[bytes], limits: SseLimits = SseLimits()) -> Iterator[dict]:
    """The JSON object of each event's data, in order, until `[DONE]` (or the body's end)."""
    data: list[str] = []
    size = count = 0
    for raw in _lines(chunks, limits):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SseError("a line is not UTF-8 text") from None
        if not line:  # the event is complete
            if not data:
                continue
            count += 1
            if count > limits.events:
                raise SseError(f"the stream has more than {limits.events} events")
            payload = "\n".join(data)
            data, size = [], 0
            if payload == DONE:
                return
            yield _object(payload)
            continue
        if line.startswith(":"):
            continue  # a comment (servers send them to keep the connection alive)
        name, _, value = line.partition(":")
        if name not in FIELDS:
            raise SseError(f"a line is not an SSE field ({show(line, 40)})")
        if name != "data":
            continue
        value = value[1:] if value.startswith(" ") else value
        size += len(value) + 1
        if size > limits.event_bytes:
            raise SseError(f"an event is larger than {limits.event_bytes} bytes")
        data.append(value)


def _object(payload: str) -> dict:
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):  # not JSON, nested too deeply, a number too long to convert
        raise SseError(f"an event is not JSON ({show(payload, 40)})") from None
    if not isinstance(value, dict):
        raise SseError("an event is not a JSON object")
    return value
