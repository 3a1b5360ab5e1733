"""The app's local server: serves the engine the app already loaded (one copy of the weights) to other
programs over the OpenAI-compatible API, taking turns with the chat window in one first-in-first-out line.

It lives on the GUI thread next to the chat controller and never blocks it: starting and stopping run
in a short-lived thread, and the live strip learns what the server is doing from `sig_status`, polled
at 4 Hz from the engine queue (never once per token). Its recent requests (method, route, status,
duration, client; never what was asked) are kept in memory by the server's request log
(runtime/server/request_log.py) and reach the settings' view as `sig_requests`, at the same 4 Hz and
only when a request has finished since the last poll.

The engine queue is the one the engine worker uses: the worker puts the engine in it when a model has
loaded and takes a turn for every chat reply (see runtime/engine_queue.py).
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from runtime.api import ElasticError, EngineQueue, RequestLog, served_model_id

log = logging.getLogger(__name__)
POLL_MS = 250


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    address: str  # e.g. "http://127.0.0.1:8000/v1" while running, else ""
    in_flight: str | None  # the server request holding the engine, with its progress
    waiting: int  # requests (the chat's included) waiting for the engine
    error: str = ""  # why the server is not running, in one line
    free_port: int | None = None  # the port was taken: a nearby one that was free (None: none, or not that)
    model: str = ""  # while running with a model loaded: the id clients name it by
    keyed: bool = False  # while running: clients must send the API key
    remote: bool = False  # while running: the window chats with a model on another server, not served here

    @property
    def summary(self) -> str:
        """One line for the live strip."""
        if self.error:  # (the strip's shortest forms keep "Server off" and the error's gist: live_strip.server_forms)
            return f"Server off: {self.error}"
        if not self.running:
            return ""
        if not self.model and not self.in_flight:  # nothing to serve: no model, or a server's (not served again)
            return f"Serving {self.address} · no local model: requests get 503"
        busy = f" · {self.in_flight}" if self.in_flight else " · idle"
        return f"Serving {self.address}{busy}" + (f" · {self.waiting} waiting" if self.waiting else "")


def curl_example(status: ServerStatus) -> str:
    """A command the user can paste in a terminal to ask the running server one question ("" when it
    is not running). The key is never written out: the command reads it from $ELASTIC_CHAT_API_KEY."""
    if not status.running or not status.model:
        return ""  # (nothing served: every request would get 503)
    body = json.dumps({"model": status.model or "MODEL", "max_tokens": 300,
                       "messages": [{"role": "user", "content": "What is 45 + 23?"}]}, ensure_ascii=False)
    lines = [f"curl {shlex.quote(status.address + '/chat/completions')}",
             "-H 'Content-Type: application/json'"]
    if status.keyed:
        lines.append('-H "Authorization: Bearer $ELASTIC_CHAT_API_KEY"')
    lines.append(f"-d {shlex.quote(body)}")
    return " \\\n  ".join(lines)


class ServerControl(QObject):
    sig_status = Signal(object)  # ServerStatus, whenever it changes
    sig_requests = Signal(object)  # tuple[RequestEntry, ...] newest first, whenever a request has finished

    def __init__(self, queue: EngineQueue, parent=None):
        super().__init__(parent)
        self.queue = queue
        self.server = None  # runtime.server.runner.ServerThread
        self.error = ""
        self.free_port: int | None = None  # with a taken port's error: a nearby free one to offer
        self._busy = threading.Lock()  # one start or stop at a time
        self._last: ServerStatus | None = None
        self.requests = RequestLog()  # kept across restarts of the server, in memory only
        self._requests_seen = 0  # the log's total at the last sig_requests
        self._wanted = 0  # bumped by every start and stop: a start that finishes late sees it was undone
        self._served: tuple | None = None  # (host, port, key, names, origins) it was last started with by `apply`
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self._poll)
        self.timer.start()

    def apply(self, s) -> None:
        """Starts, stops or restarts serving as the settings `s` (app/state/settings.py) now say (a start
        that failed is tried again); the outcome arrives as `sig_status`."""
        wanted = (s.server_host, s.server_port, s.server_api_key, tuple(s.server_allow_hosts),
                  tuple(s.server_allow_origins)) if s.server_enabled else None
        if wanted == self._served and not self.status().error:
            return
        self._served = wanted
        if wanted is None:
            self.stop()
        else:
            self.start(*wanted)

    def start(self, host: str = "127.0.0.1", port: int = 8000, api_key: str = "", allow_hosts=(),
              allow_origins=()) -> None:
        """Starts serving in the background; the outcome arrives as `sig_status` (address or error).
        `allow_hosts`, `allow_origins`: the names and web pages it accepts besides its own (the
        settings' server_allow_hosts and server_allow_origins, runtime/server/web_rules.py)."""
        self.stop()
        self._wanted += 1
        web = (tuple(allow_hosts), tuple(allow_origins))
        threading.Thread(target=self._start, args=(host, port, api_key or None, web, self._wanted),
                         name="server start", daemon=True).start()

    def _start(self, host: str, port: int, api_key: str | None, web: tuple, wanted: int) -> None:
        from runtime.api import PortTaken, ServerThread  # FastAPI loads only when serving

        with self._busy:
            if wanted != self._wanted:
                return  # stopped (or started again) before this start began
            try:
                server = ServerThread(self.queue, host, port, api_key, allow_hosts=web[0],
                                      allow_origins=web[1], requests=self.requests).start()
                self.error, self.free_port = "", None
            except PortTaken as e:  # in the app's words (the message is the command line's)
                self.error, self.free_port = f"port {e.port} is taken (used by another program on {e.host})", e.free
                return
            except ElasticError as e:  # an open host without a key: one line for the user
                self.error, self.free_port = str(e), None
                return
            except Exception as e:
                log.exception("the server did not start")
                self.error = f"{type(e).__name__}: {e}"
                return
            if wanted != self._wanted:
                server.stop()
            else:
                self.server = server

    def stop(self, wait: bool = False) -> None:
        """Stops the server's replies and the server (the chat window's reply is not touched)."""
        self._wanted += 1
        self.error, self.free_port = "", None
        server, self.server = self.server, None
        if server is None:
            return
        thread = threading.Thread(target=self._stop, args=(server,), name="server stop", daemon=True)
        thread.start()
        if wait:
            thread.join()

    def _stop(self, server) -> None:
        with self._busy:
            server.stop()

    def shutdown(self) -> None:
        """At app exit: stop polling, stop the server and wait for it."""
        self.timer.stop()
        self.stop(wait=True)
        with self._busy:  # a start still in progress finishes first, sees it was undone and stops
            pass

    def status(self) -> ServerStatus:
        server = self.server
        running = server is not None and server.running
        state = self.queue.snapshot()
        in_flight = state.running if state.running and state.running.startswith("server") else None
        error = self.error or (f"stopped: {server.error}" if server is not None and server.error else "")
        engine = self.queue.served_engine if running else None  # (a model on another server is not served)
        return ServerStatus(running, server.address if running else "", in_flight, len(state.waiting), error,
                            self.free_port if self.error else None,
                            served_model_id(engine) if engine is not None else "",
                            running and server.api_key is not None, running and self.queue.unshared)

    def recent_requests(self) -> tuple:
        """The server's last requests (RequestEntry), newest first."""
        return self.requests.newest_first()

    def _poll(self) -> None:
        status = self.status()
        if status != self._last:
            self._last = status
            self.sig_status.emit(status)
        total = self.requests.total
        if total != self._requests_seen:
            self._requests_seen = total
            self.sig_requests.emit(self.recent_requests())
