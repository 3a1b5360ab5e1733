"""One engine, one reply at a time: every user of the engine (the chat window, each server request,
a model load) takes a turn in arrival order.

    ticket = queue.enter("POST /v1/chat/completions", controls, bounded=True)  # QueueFull when full
    for event in reply_in_turn(queue, ticket, request): ...   # waits its turn, replies, lets go

`reply_in_turn` is the one loop that takes turns for a reply (the server's requests use it as it is,
the window through `stream_in_turn`, which turns a reply that never began into its Done);
`with queue.turn(controls, "chat") as engine:` holds the engine for anything else (a load). A ticket
whose `Controls` are stopped while it waits leaves the line (`wait` raises `StopRequested`), so a
client that hangs up frees its place at once. Only bounded entries (the server's) count against
`max_waiting` and get `QueueFull`; the chat window's own replies always get in line, behind whoever
came first.

The engine in the slot is any `chat_engine.ChatEngine`: a model on this PC, which the server's
requests share, or one on another server, which is the window's alone (`set_engine(engine,
shared=False)`: the server then answers as if no model were loaded).

Plain threads and a condition variable: no asyncio, no Qt, so the app's engine thread and the
server's request threads share one line.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .controls import Controls, StopRequested
from .errors import ElasticError
from .events import ERROR, STOPPED, Event, Token
from .reply_record import ReplyRecord

POLL_S = 0.05  # how often a waiting ticket looks at its stop flag

EMPTY, LOADING, READY, FAILED = "empty", "loading", "ready", "failed"


class QueueFull(ElasticError):
    """The line is as long as it may get; try again later (HTTP 429)."""


class EngineUnavailable(ElasticError):
    """No engine to run on: none loaded yet, loading, or the load failed (HTTP 503)."""

    def __init__(self, state: str, message: str):
        self.state = state
        super().__init__(message)


@dataclass
class Ticket:
    who: str  # shown in the live strip: "chat", "server 127.0.0.1:51234"
    controls: "Controls"
    bounded: bool  # a server request's: it counts against max_waiting, and runs only on a shared engine
    number: int
    entered: float = field(default_factory=time.monotonic)
    began: float | None = None  # time.monotonic() when its turn came (None: it has not)
    # Progress of its reply, written by `reply_in_turn` while it runs (read by `snapshot` for the live strip).
    tokens: int = 0
    phase: str = ""
    submodel: str = ""


@dataclass(frozen=True)
class QueueState:
    state: str  # EMPTY, LOADING, READY or FAILED
    running: str | None  # who holds the engine, with its progress
    waiting: tuple[str, ...]  # who waits, first in line first
    message: str = ""  # why the engine is not ready


class EngineQueue:
    def __init__(self, max_waiting: int = 8):
        if max_waiting < 0:
            raise ValueError("max_waiting must be 0 or more")
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._numbers = itertools.count(1)
        self._holder: Ticket | None = None
        self._line: deque[Ticket] = deque()
        self._engine = None
        self._shared = True
        self._state, self._message = EMPTY, "no model is loaded yet"

    # ------------------------------------------------------------------ the engine in the slot

    def set_loading(self, message: str = "the model is loading") -> None:
        with self._cond:
            self._engine, self._state, self._message = None, LOADING, message
            self._cond.notify_all()

    def set_engine(self, engine, shared: bool = True) -> None:
        """`engine` in the slot; `shared` False: the window's alone (a model on another server), so the
        server's requests find no model (EMPTY, 503) as when none is loaded."""
        with self._cond:
            self._engine, self._shared = engine, shared
            ready = engine is not None and shared
            self._state, self._message = (READY, "") if ready else (EMPTY, "no model is loaded")
            self._cond.notify_all()

    def set_failed(self, message: str) -> None:
        with self._cond:
            self._engine, self._state, self._message = None, FAILED, f"the model failed to load: {message}"
            self._cond.notify_all()

    @property
    def engine(self):
        return self._engine

    @property
    def served_engine(self):
        """The engine the server's requests run on: None when none is loaded, or when the one loaded is
        the window's alone (a model on another server: it is not served again)."""
        with self._cond:
            return self._engine if self._shared else None

    @property
    def unshared(self) -> bool:
        """True while the engine in the slot is the window's alone (a model on another server)."""
        with self._cond:
            return self._engine is not None and not self._shared

    def check_ready(self):
        """The engine, or `EngineUnavailable` saying why there is none."""
        with self._cond:
            if self._state != READY:
                raise EngineUnavailable(self._state, self._message)
            return self._engine

    # ------------------------------------------------------------------ taking turns

    def enter(self, who: str, controls: "Controls | None" = None, bounded: bool = False) -> Ticket:
        """Gets in line (does not wait). Bounded entries raise `QueueFull` when `max_waiting`
        bounded tickets already wait."""
        with self._cond:
            if bounded and sum(t.bounded for t in self._line) >= self.max_waiting:
                raise QueueFull(f"{len(self._line)} requests are already waiting for the model; "
                                "try again when one has finished")
            ticket = Ticket(who, controls or Controls(), bounded, next(self._numbers))
            self._line.append(ticket)
            self._cond.notify_all()
            return ticket

    def wait(self, ticket: Ticket):
        """Blocks until `ticket` is first in line and the engine is free; returns the engine (None while
        loading, and for a bounded ticket while the engine is not shared: the caller decides). Raises
        `StopRequested`, having left the line, when the ticket's controls are stopped while it waits."""
        with self._cond:
            while self._holder is not None or self._line[0] is not ticket:
                if ticket.controls.stop_requested:
                    self._line.remove(ticket)
                    self._cond.notify_all()
                    raise StopRequested
                self._cond.wait(POLL_S)
            self._line.popleft()
            self._holder, ticket.began = ticket, time.monotonic()
            return self._engine if self._shared or not ticket.bounded else None

    def leave(self, ticket: Ticket) -> None:
        """Ends the ticket's turn (or its wait); the next in line goes."""
        with self._cond:
            if self._holder is ticket:
                self._holder = None
            elif ticket in self._line:
                self._line.remove(ticket)
            self._cond.notify_all()

    @contextmanager
    def turn(self, controls: "Controls | None" = None, who: str = "chat", bounded: bool = False):
        """`with queue.turn(controls) as engine:` waits its turn, holds the engine, then lets go."""
        ticket = self.enter(who, controls, bounded)
        try:
            yield self.wait(ticket)
        finally:
            self.leave(ticket)

    @contextmanager
    def exclusive(self, message: str = "the model is loading"):
        """For loading or unloading a model: stops every reply (waiting ones leave the line), waits
        for the engine to be free, then holds it with the state LOADING (the server answers 503).
        Inside, call `set_engine` (or `set_failed`) before leaving."""
        self.stop_all()
        with self.turn(None, message):
            self.set_loading(message)
            yield

    def stop_all(self) -> None:
        """Stops the running reply and every waiting one (before a model is unloaded)."""
        with self._cond:
            for ticket in ([self._holder] if self._holder else []) + list(self._line):
                ticket.controls.stop()

    def snapshot(self) -> QueueState:
        with self._cond:
            h = self._holder
            running = None
            if h is not None:
                running = h.who + (f" · {h.phase} on {h.submodel} · {h.tokens} tokens" if h.phase else "")
            return QueueState(self._state, running, tuple(t.who for t in self._line), self._message)

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._line)


def reply_in_turn(queue: EngineQueue, ticket: Ticket, request,
                  started: Callable[[], None] = lambda: None) -> Iterator[Event]:
    """The one loop that takes turns for a reply: waits for `ticket`'s turn, runs `request` on the
    engine (`ChatEngine.stream`, with the ticket's controls), keeps the ticket's progress for the live
    strip, and lets the next ticket go when the reply ends or its reader lets go of it. Before any
    event it raises what kept the reply from beginning: `StopRequested` (stopped while waiting; it left
    the line), `EngineUnavailable` (no model to run on) or the engine's refusal of the request (an
    ElasticError). `started` is called once the engine has accepted the request."""
    try:
        engine = queue.wait(ticket)
        if engine is None:
            raise EngineUnavailable(EMPTY, "no model is loaded")
        events = engine.stream(request, ticket.controls)
        started()
        for event in events:
            if isinstance(event, Token):
                ticket.tokens, ticket.phase, ticket.submodel = event.progress.tokens, event.phase, event.submodel
            yield event
    finally:
        queue.leave(ticket)


def stream_in_turn(queue: EngineQueue, request, controls: Controls, who: str = "chat") -> Iterator[Event]:
    """A reply in turn, as the window wants it: the last event is always a Done, as a reply's is.
    Stopped while still waiting, it is a Done with finish reason STOPPED and nothing generated; with no
    engine loaded, ERROR. An engine's refusal of the request is raised, as `ChatEngine.stream` raises it."""
    ticket = queue.enter(who, controls)
    try:
        yield from reply_in_turn(queue, ticket, request)
    except StopRequested:
        yield ReplyRecord.of(request).done(STOPPED)
    except EngineUnavailable as e:
        yield ReplyRecord.of(request).done(ERROR, str(e))
