"""Running the server: uvicorn in a thread of its own, over an `EngineQueue` shared with whoever else
uses the engine (the app's chat window), and `python -m runtime serve`.

Safe by default: it listens on 127.0.0.1; any address that is not loopback needs an API key; it
answers only the names it was given and no web page the user did not allow (gate.py), and bounds
what one client may hold (connections.py).
The port is bound before anything slow happens, so a taken port fails at once, in one line.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from ..engine_queue import EngineQueue
from ..errors import UsageError
from ..options import ALLOW_HOSTS, ALLOW_ORIGINS, PORT, SERVER_LIMITS, OptionError
from .access_rules import check_listen
from .request_log import RequestLog
from .web_rules import WebRules

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", PORT.default
PORT_IN_USE = (98, 10048, 48)  # EADDRINUSE on Linux, Windows, macOS


class PortTaken(UsageError):
    """The port is in use by another program; `free` is a nearby port that is not (None: none found).
    The message is the command line's; the app words it for its own controls."""

    def __init__(self, host: str, port: int, strerror: str, free: int | None):
        super().__init__(f"cannot listen on {host}:{port}: {strerror}; choose another with --port")
        self.host, self.port, self.free = host, port, free


def nearby_free_port(host: str, port: int, tries: int = 20) -> int | None:
    """The first port after `port` that `host` can listen on now (it may be taken again by the time it
    is used: the caller binds it as usual)."""
    for candidate in range(port + 1, min(65535, port + tries) + 1):
        try:
            bind(host, candidate).close()
        except UsageError:
            continue
        return candidate
    return None


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UsageError(f"--host {host} is not an address of this computer ({e.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno in PORT_IN_USE:
            raise PortTaken(host, port, e.strerror, nearby_free_port(host, port)) from None
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(64)
    sock.setblocking(False)
    return sock


class ServerThread:
    """The HTTP server in a daemon thread. `start()` binds (raising UsageError) and returns once it
    accepts connections; `stop()` ends every server reply and the thread."""

    def __init__(self, queue: EngineQueue, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 api_key: str | None = None, log_level: str = "warning", allow_hosts=(), allow_origins=(),
                 limits: dict | None = None, requests: RequestLog | None = None):
        """`allow_hosts`, `allow_origins`: see web_rules.py; `limits`: what one client may hold
        (connections.py), by option name (options.SERVER_LIMITS), each defaulting to its option's;
        `requests`: the log of recent requests to add to (request_log.py; a new one by default)."""
        check_listen(host, port, api_key, allow_hosts, allow_origins)
        limits = limits or {}
        try:
            self.limits = {o.name: o.parse(limits.get(o.name, o.default), "--" + o.name.replace("_", "-"))
                           for o in SERVER_LIMITS}
        except OptionError as e:
            raise UsageError(str(e)) from None
        self.queue, self.host, self.port, self.api_key = queue, host, port, api_key or None
        self.allow_hosts, self.allow_origins = ALLOW_HOSTS.parse(allow_hosts), ALLOW_ORIGINS.parse(allow_origins)
        self.log_level = log_level
        self.requests = requests if requests is not None else RequestLog()
        self.app = None
        self.server = None
        self.thread: threading.Thread | None = None
        self.error: str | None = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, timeout: float = 30.0) -> "ServerThread":
        try:
            import uvicorn  # only when serving

            from .connections import bounded_protocol
            from .gate import MAX_HEAD_BYTES
            from .http_app import create_app
        except ImportError as e:
            raise UsageError(f"the server needs FastAPI and uvicorn ({e.name} is missing): "
                             "pip install -e . in the app's environment") from None

        sock = bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        web = WebRules.serving(self.host, self.port, self.allow_hosts, self.allow_origins)
        self.app = create_app(self.queue, self.api_key, web=web, requests=self.requests)
        limits = self.limits
        config = uvicorn.Config(self.app, log_level=self.log_level, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=3, server_header=False, ws="none",
                                http=bounded_protocol(limits["request_timeout"], limits["max_connections"]),
                                timeout_keep_alive=limits["keep_alive_timeout"],
                                h11_max_incomplete_event_size=MAX_HEAD_BYTES)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, args=(sock,), name="http server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            self.stop()
            raise UsageError(f"the server did not start on {self.host}:{self.port}: {self.error or 'timed out'}")
        return self

    def _run(self, sock: socket.socket) -> None:
        try:
            self.server.run(sockets=[sock])
        except BaseException as e:  # reported by start() or the caller's status, never a traceback
            self.error = f"{type(e).__name__}: {e}"
        finally:
            sock.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self.app is not None:
            for job in list(self.app.state.jobs):
                job.cancel()
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    @property
    def records(self):
        return self.app.state.records if self.app is not None else ()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def serve_command(args) -> int:
    """`python -m runtime serve`: listen first (so a taken port fails at once), load the model while
    answering 503, then serve until Ctrl+C. Its numbers were checked with every flag (cli.check_values)."""
    from ..command_load import load_engine  # torch, only when a command loads a model

    folder = Path(args.checkpoint)
    if not folder.is_dir():  # before the port is taken (load_engine says the same)
        raise UsageError(f"--checkpoint {args.checkpoint} is not a folder; point it at a checkpoint folder")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    queue = EngineQueue(max_waiting=args.max_queue)
    queue.set_loading(f"the model {folder.name} is loading")
    server = ServerThread(queue, args.host, args.port, args.api_key, allow_hosts=args.allow_host,
                          allow_origins=args.allow_origin,
                          limits={o.name: getattr(args, o.name) for o in SERVER_LIMITS}).start()
    print(f"listening on {server.address} (OpenAI-compatible); loading {folder} ...", flush=True)
    try:
        engine = load_engine(args)
    except BaseException:
        server.stop()
        raise
    queue.set_engine(engine)
    models = ", ".join([folder.name] + [f"{folder.name}:{s}" for s in engine.submodels_by_size()])
    print(f"ready: models {models}; Ctrl+C stops", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop ends replies cleanly too
    try:
        while server.running:
            server.join(0.5)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
    finally:
        server.stop()
    if server.error:
        raise UsageError(f"the server stopped: {server.error}")
    return 0
