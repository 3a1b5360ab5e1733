"""The server's connections: uvicorn's h11 protocol with the bounds it lacks.

Any local program, and any web page through the browser, can open connections. uvicorn closes a
connection idle between requests (`timeout_keep_alive`), but not one that never finishes a request:
a client that sends its headers a byte at a time (slowloris), or opens a connection and sends nothing,
held it for as long as it liked, and the file-descriptor limit decided how many it could hold. Here:

- a request must arrive whole (its headers and body) within `request_timeout` seconds of the
  connection opening or of the previous response; else 408 and the connection closes;
- at most `max_connections` are open at once; one more is answered 503 and closed at once;
- a request's head still arriving is at most MAX_HEAD_BYTES (h11 answers 400 beyond that; the gate
  answers 431 to a head over it that came whole).
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.h11_impl import H11Protocol

from .serving import error_body


def _raw_response(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps(error_body(status, message, None, code)).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


def bounded_protocol(request_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with these bounds (uvicorn.Config's `http`)."""
    too_slow = _raw_response(408, "Request Timeout", f"the request did not arrive whole within {request_timeout:g} "
                             "seconds; send it at once", "request_timeout")
    busy = _raw_response(503, "Service Unavailable", f"{max_connections} connections are open already; close "
                         "one or try again shortly", "too_many_connections")

    class BoundedH11Protocol(H11Protocol):
        refused = False  # this connection was one too many: answered and closed in connection_made
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            if len(self.connections) >= max_connections:
                self.refused = True
                transport.write(busy)
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            if not self.refused:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete and not cycle.more_body:
                self._disarm()  # the request is whole: what the reply takes is the engine's business

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a request already sent (pipelined)
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # the next request gets the same time

        def _arm(self) -> None:
            self._disarm()
            self.deadline = self.loop.call_later(request_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _too_slow(self) -> None:
            self.deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
                self.transport.write(too_slow)
            self.transport.close()

    return BoundedH11Protocol
