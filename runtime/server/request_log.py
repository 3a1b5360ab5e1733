"""The server's recent requests, for the app's view beside its on/off switch: method, route, status,
duration and client address of the last `KEEP` requests, newest first, in memory only.

Nothing a client sent is kept beyond its method and path (no query string, no headers, no body): the
log says that someone asked, never what. It is an ASGI middleware outside every other (gate.py's
refusals are logged too), so each request is seen exactly once, when its response has been sent in
full (a streamed reply's duration is the whole stream's). No HTTP library is imported here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass

KEEP = 100  # the requests kept; older ones are forgotten
CLOSED_BEFORE_ANSWER = 499  # nginx's name for a client that left before any response began


@dataclass(frozen=True)
class RequestEntry:
    """One finished request."""
    at: float  # when it arrived: time.time() seconds
    method: str
    route: str  # the path alone, never its query string
    status: int
    duration_ms: float
    client: str  # the client's address ("" when the server was not told it)

    def time_text(self) -> str:
        """Its arrival as local hours, minutes and seconds."""
        return time.strftime("%H:%M:%S", time.localtime(self.at))


class RequestLog:
    """The last `keep` requests, safe to add to from the server's thread and read from any other.
    `total` counts every request ever added, so a reader polls it to learn whether anything changed."""

    def __init__(self, keep: int = KEEP):
        self._entries: deque[RequestEntry] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self.total = 0

    def add(self, entry: RequestEntry) -> None:
        with self._lock:
            self._entries.append(entry)
            self.total += 1

    def newest_first(self) -> tuple[RequestEntry, ...]:
        with self._lock:
            return tuple(reversed(self._entries))


class RequestLogging:
    """ASGI middleware: adds one RequestEntry to `log` per HTTP request once its response ends (or the
    request fails or the client leaves: then the status is what was sent, else 500 or 499)."""

    def __init__(self, app, log: RequestLog):
        self.app, self.log = app, log

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrived, started = time.time(), time.perf_counter()
        status: list[int] = []

        async def watched_send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        unfinished = 500  # the status logged when no response began: an error, or a client gone
        try:
            await self.app(scope, receive, watched_send)
            unfinished = CLOSED_BEFORE_ANSWER
        except asyncio.CancelledError:  # the client hung up and the server cancelled its request
            unfinished = CLOSED_BEFORE_ANSWER
            raise
        finally:
            client = scope.get("client") or ("", 0)
            self.log.add(RequestEntry(arrived, scope.get("method", ""), scope.get("path", ""),
                                      status[0] if status else unfinished,
                                      round((time.perf_counter() - started) * 1000, 1), str(client[0] or "")))
