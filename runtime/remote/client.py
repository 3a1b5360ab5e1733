"""One OpenAI-compatible server, spoken to over plain HTTP(S) with the standard library.

Each call is one connection (`http.client`), bounded in time and in size, and read as hostile:

- Time: connecting (`Timeouts.connect`), the first byte of the answer and of the stream
  (`first_byte`: the server may be busy prefilling), and then between any two reads of a stream
  (`between_chunks`). Each answer also has a total deadline (`Timeouts.total`: a JSON answer's
  `answer`, a stream's `per_token` for each token asked), so a server that sends a byte now and then
  cannot hold the caller. A watcher thread shuts the socket at once at that deadline or when the
  `stop` predicate (the user's Stop) says so, while waiting for the answer or mid-stream. This is
  wall-clock time on purpose: it bounds a wait on another program, not work done here.
- Size: a JSON answer is read to at most `MAX_JSON_BYTES`; a stream goes through sse.py's bounds.
- No redirect is followed (an API key must not travel to another address): a 3xx is one line
  asking for the final address. TLS certificates are verified by Python's default context.
- Every failure is a `RemoteError`: one line that names the server and says what to do (a dead
  server, a timeout, 401/403, 404, 429, 5xx, an answer that is not what the API promises).

Why not httpx or requests: neither is a dependency of the runtime, and the hub client
(runtime/store/download/hub_http.py) already works this way with the standard library.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ElasticError, one_line, show
from ..json_file import JsonFileError, parse_json_bytes
from .sse import SseError, SseLimits, events

MAX_JSON_BYTES = 4 * 1024 * 1024  # /v1/models of a server with many models is far below this
MAX_URL_CHARS = 2048
READ = 64 * 1024
POLL_S = 0.05  # how often the watcher looks at the stop predicate
MESSAGE_CHARS = 200  # of a server's own error message, quoted in ours
# Events a stream may send beyond one a token: the role chunk, the finish, the usage, keep-alives, a
# server's own extras. A stream of `max_tokens` tokens that sends more events than that is cut.
EXTRA_EVENTS = 256


class RemoteError(ElasticError):
    """A remote server that cannot be used right now; the message says what to do."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RemoteDropped(RemoteError):
    """The server dropped the connection while it sent its answer; `during` says in which part of a reply."""

    def __init__(self, address: str, how: str, what: str = "answer"):
        self.address, self.how = address, how
        super().__init__(f"the server at {address} dropped the connection mid-{what} ({how}); the reply was cut "
                         "there")

    def during(self, what: str) -> "RemoteDropped":
        """The same drop, said of the part of the reply it cut ("thought" or "answer")."""
        return RemoteDropped(self.address, self.how, what)


class RemoteStopped(ElasticError):
    """The call was stopped by its `stop` predicate (the user's Stop)."""


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    first_byte: float = 300.0  # a long prompt on a busy GPU server takes a while to prefill
    between_chunks: float = 60.0
    answer: float = 30.0  # a plain JSON answer (/v1/models): nothing to compute, so no reason to wait long
    per_token: float = 2.0  # the slowest average a stream may keep up, on top of its first byte

    def total(self, max_tokens: int | None = None) -> float:
        """The whole answer's deadline: a JSON answer's (`max_tokens` None) or a stream's of that many tokens."""
        if max_tokens is None:
            return self.connect + self.answer
        return self.connect + self.first_byte + self.between_chunks + self.per_token * max_tokens


def parse_base_url(url) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix ending in /v1) of a server address such as
    `http://gpu-box:8000` or `https://llm.example.com/v1`; RemoteError for anything else."""
    if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL_CHARS:
        raise RemoteError("enter the server's address, such as http://gpu-box:8000/v1")
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        raise RemoteError(f"the server address {show(url)} has a port that is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"the server address {show(url)} is not an http:// or https:// address")
    if parts.username or parts.password:
        raise RemoteError("put the API key in its own field, not in the server address")
    if parts.query or parts.fragment:
        raise RemoteError(f"the server address {show(url)} has a query or fragment; enter only scheme, host, "
                          "port and path")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    host = parts.hostname
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path


class RemoteServer:
    """The address, the key and the timeouts of one server; each call opens its own connection."""

    def __init__(self, url: str, api_key: str | None = None, timeouts: Timeouts = Timeouts(),
                 sse_limits: SseLimits | None = None):
        self.scheme, self.host, self.port, self.prefix = parse_base_url(url)
        if api_key is not None and (not isinstance(api_key, str) or not api_key.isprintable()
                                    or len(api_key) > 4096 or any(c.isspace() for c in api_key)):
            raise RemoteError("the API key must be one line of printable characters without spaces")
        self.api_key = api_key or None
        self.timeouts, self.sse_limits = timeouts, sse_limits or SseLimits()

    @property
    def address(self) -> str:
        """What the window shows as the machine that answers: host:port."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}{self.prefix}"

    # ------------------------------------------------------------------ calls

    def get_json(self, path: str, stop: Callable[[], bool] | None = None, root: bool = False) -> dict:
        """GET `path` (under /v1, or with `root` under the server's root: llama.cpp's /props): its JSON object."""
        with _Call(self, "GET", path, None, stop, self.timeouts.answer, self.timeouts.total(), root) as call:
            call.expect("application/json")
            raw = call.read_all(MAX_JSON_BYTES)
        try:
            return parse_json_bytes(raw, MAX_JSON_BYTES)
        except JsonFileError as e:
            raise RemoteError(f"the server at {self.address} answered {path} with something that is not the "
                              f"API's JSON ({e}); check that the address is an OpenAI-compatible server") from None

    def stream(self, path: str, body: dict, stop: Callable[[], bool] | None = None) -> Iterator[dict]:
        """POST `body` to `path` with streaming on: the JSON object of each event. Closing the generator
        closes the connection (the server stops generating). The stream's deadline is that of the
        `max_tokens` the body asks for."""
        asked = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else None
        most = self.sse_limits.events if asked is None else asked + EXTRA_EVENTS
        with _Call(self, "POST", path, body, stop, deadline=self.timeouts.total(asked)) as call:
            call.expect("text/event-stream")
            try:
                for count, event in enumerate(events(call.chunks(), self.sse_limits), 1):
                    if count > most:
                        raise RemoteError(f"the server at {self.address} sent more than {most} events for a reply "
                                          f"of at most {asked} tokens, the rest without text; the reply was cut there")
                    yield event
            except SseError as e:
                raise RemoteError(f"the server at {self.address} sent a broken stream ({e}); the reply was cut "
                                  "there") from None

    def post_json(self, path: str, body: dict, stop: Callable[[], bool] | None = None, root: bool = False) -> dict:
        """POST `body` to `path` (under /v1, or with `root` under the server's root: llama.cpp's /tokenize)."""
        with _Call(self, "POST", path, body, stop, deadline=self.timeouts.total(), root=root) as call:
            call.expect("application/json")
            raw = call.read_all(MAX_JSON_BYTES)
        try:
            return parse_json_bytes(raw, MAX_JSON_BYTES)
        except JsonFileError as e:
            raise RemoteError(f"the server at {self.address} answered {path} with broken JSON ({e})") from None


class _Call:
    """One request on its own connection, with the watcher that enforces `stop` and the total deadline
    (`deadline` seconds from the start: the answer must be whole by then)."""

    def __init__(self, server: RemoteServer, method: str, path: str, body: dict | None,
                 stop: Callable[[], bool] | None, wait: float | None = None, deadline: float | None = None,
                 root: bool = False):
        self.server, self.method, self.path, self.body, self.stop = server, method, path, body, stop
        self.target = (server.prefix.removesuffix("/v1") if root else server.prefix) + path
        self.wait = min(wait, server.timeouts.first_byte) if wait else server.timeouts.first_byte
        self.deadline = deadline if deadline is not None else server.timeouts.total()
        self.expired = False  # the watcher shut the socket at the deadline
        self.conn: http.client.HTTPConnection | None = None
        # The socket, kept here: http.client drops its own reference when an answer says Connection: close
        # (the answer's file still reads from it), and the timeouts and the stop watcher need it throughout.
        self.sock: socket.socket | None = None
        self.response: http.client.HTTPResponse | None = None
        self.done = threading.Event()
        self.stopped = False

    # ------------------------------------------------------------------ opening

    def __enter__(self) -> "_Call":
        s = self.server
        t = s.timeouts
        if s.scheme == "https":
            self.conn = http.client.HTTPSConnection(s.host, s.port, timeout=t.connect,
                                                    context=ssl.create_default_context())
        else:
            self.conn = http.client.HTTPConnection(s.host, s.port, timeout=t.connect)
        threading.Thread(target=self._watch, args=(time.monotonic() + self.deadline,), name="remote call watcher",
                         daemon=True).start()
        headers = {"Accept": "text/event-stream" if self.method == "POST" else "application/json",
                   "User-Agent": "elastic-chat"}
        data = None
        if self.body is not None:
            data = json.dumps(self.body, ensure_ascii=False, allow_nan=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if s.api_key:
            headers["Authorization"] = f"Bearer {s.api_key}"
        try:
            try:
                self.conn.connect()
            except TimeoutError:
                raise RemoteError(f"the server at {s.address} did not accept a connection within {t.connect:g} s: "
                                  "check the address and that the machine is on") from None
            self.sock = self.conn.sock
            self.sock.settimeout(self.wait)
            self.conn.request(self.method, self.target, body=data, headers=headers)
            self.response = self.conn.getresponse()
        except RemoteError:
            self.close()
            raise
        except BaseException as e:
            self.close()
            raise self._failure(e) from None
        try:
            self._check_status()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.done.set()
        if self.conn is not None:
            self.conn.close()

    def _watch(self, deadline: float) -> None:
        while not self.done.wait(POLL_S):
            if self.stop is not None and self.stop():
                self.stopped = True
            elif time.monotonic() >= deadline and self.sock is not None:
                self.expired = True
            else:
                continue
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except (OSError, AttributeError):  # not connected yet (the stop then ends the connect's wait)
                pass
            return

    def _too_slow(self) -> RemoteError:
        return RemoteError(f"the server at {self.server.address} did not finish its answer to {self.path} within "
                           f"{self.deadline:g} s (it sends too slowly, or without end); the answer was cut there")

    def _failure(self, e: BaseException) -> ElasticError:
        """What a socket failure means, as one line."""
        s = self.server
        if self.stopped:
            return RemoteStopped("stopped")
        if self.expired:
            return self._too_slow()
        if isinstance(e, TimeoutError | socket.timeout):
            return RemoteError(f"the server at {s.address} did not answer within {self.wait:g} s: "
                               "it may be overloaded; try again, or check it")
        if isinstance(e, ConnectionRefusedError):
            return RemoteError(f"nothing answers at {s.address} (connection refused): start the server, or check "
                               "the address and port")
        if isinstance(e, socket.gaierror):
            return RemoteError(f"the server name {show(s.host)} is not known: check the address")
        if isinstance(e, ssl.SSLError):
            return RemoteError(f"the TLS connection to {s.address} failed ({one_line(e, 120)}): check that the "
                               "address should be https and that its certificate is valid")
        if isinstance(e, http.client.HTTPException | OSError):
            return RemoteError(f"the server at {s.address} closed the connection ({type(e).__name__}): check "
                               "that it is running and is an OpenAI-compatible server")
        if isinstance(e, Exception):
            return RemoteError(f"talking to {s.address} failed ({type(e).__name__}: {one_line(e, 120)})")
        raise e  # KeyboardInterrupt, SystemExit

    # ------------------------------------------------------------------ the answer

    def _check_status(self) -> None:
        r, s = self.response, self.server
        status = r.status
        if 200 <= status < 300:
            return
        said = self._their_message()
        said = f": it said {said}" if said else ""
        where = f"{s.address}{self.target}"
        if 300 <= status < 400:
            message = (f"the server at {s.address} redirects ({status}); enter the address it redirects to, "
                       "ending in /v1")
        elif status in (401, 403):
            message = (f"the server at {s.address} refused the API key ({status}){said}; enter the key its "
                       "administrator gave you")
        elif status == 404:
            message = (f"the server at {s.address} has no {where} (404){said}; check the address (it ends in "
                       "the API's /v1) and the model id")
        elif status == 429:
            wait = r.getheader("Retry-After", "")
            later = f" in {int(wait)} s" if wait.isdigit() and int(wait) <= 86400 else " in a moment"
            message = f"the server at {s.address} is busy (429){said}; try again{later}"
        elif 500 <= status < 600:
            message = (f"the server at {s.address} failed ({status}){said}; try again, or ask whoever runs "
                       "it to look at its log")
        else:
            message = f"the server at {s.address} refused the request ({status}){said}"
        raise RemoteError(message, status)

    def _their_message(self) -> str:
        """The error message in an OpenAI-shaped error body, quoted and cut; "" when there is none."""
        try:
            raw = self.response.read(16 * 1024 + 1)[:16 * 1024]
            data = json.loads(raw.decode("utf-8", "replace"))
        except Exception:
            return ""
        error = data.get("error") if isinstance(data, dict) else None
        text = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
        if not isinstance(text, str):
            text = data.get("detail") if isinstance(data, dict) and isinstance(data.get("detail"), str) else None
        return show(text, MESSAGE_CHARS) if text else ""

    def expect(self, kind: str) -> None:
        got = (self.response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if got != kind:
            raise RemoteError(f"the server at {self.server.address} answered {self.path} with {show(got or 'no type')}"
                              f", not {kind}; check that the address is an OpenAI-compatible server")

    def read_all(self, limit: int) -> bytes:
        length = self.response.getheader("Content-Length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise RemoteError(f"the server at {self.server.address} announced an answer of {show(length)} bytes "
                              f"for {self.path}; more than the {limit} this program reads")
        parts, size = [], 0
        for chunk in self.chunks(first_timeout=self.wait):
            size += len(chunk)
            if size > limit:
                raise RemoteError(f"the server at {self.server.address} sent more than {limit} bytes for "
                                  f"{self.path}; this program reads no more")
            parts.append(chunk)
        return b"".join(parts)

    def chunks(self, first_timeout: float | None = None) -> Iterator[bytes]:
        """The body as it arrives: the first read may wait `first_timeout` (the first token), every later
        one `between_chunks`. The end of the body ends it; a stop raises RemoteStopped."""
        t = self.server.timeouts
        waited = first_timeout or t.first_byte
        while True:
            try:
                self.sock.settimeout(waited)
            except OSError:  # closed under us (a stop): the read below says so
                pass
            try:
                chunk = self.response.read1(READ)
            except BaseException as e:
                if self.stopped:
                    raise RemoteStopped("stopped") from None
                if self.expired:
                    raise self._too_slow() from None
                if isinstance(e, TimeoutError | socket.timeout):
                    raise RemoteError(f"the server at {self.server.address} sent nothing for {waited:g} s; "
                                      "it may be overloaded or stuck: the reply was cut there") from None
                if isinstance(e, http.client.IncompleteRead | http.client.HTTPException | OSError):
                    raise RemoteDropped(self.server.address, type(e).__name__) from None
                raise
            if self.stopped:
                raise RemoteStopped("stopped")
            if self.expired:
                raise self._too_slow()
            if not chunk:
                if self.response.length:  # read1 ends quietly where the body is shorter than it said
                    raise RemoteDropped(self.server.address,
                                        f"{self.response.length} bytes short of the length it announced")
                return
            waited = t.between_chunks
            yield chunk
