"""One server request's reply: a thread that runs it in turn (engine_queue.reply_in_turn, the one loop
that takes turns) and hands each event to the request's asyncio loop.

The HTTP side reads `next_batch()`; the first item is STARTED (the reply began: status 200 can go out)
or an ApiError (the reply never began: its status goes out instead). `cancel()` (the client hung up)
sets the engine's stop flag, so the decode loop ends within a token, or the ticket leaves the line.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from ..controls import Controls, StopRequested
from ..engine_queue import EngineQueue, EngineUnavailable, Ticket, reply_in_turn
from ..errors import ElasticError
from ..events import Done, Progress
from ..generate import ChatRequest
from ..grammar import GrammarError
from .serving import ApiError

log = logging.getLogger(__name__)
STARTED = object()  # the reply holds the engine and its prompt was accepted


@dataclass(frozen=True)
class JobRecord:
    """How a finished request went (kept for the live strip and for tests)."""
    number: int  # place in line (ticket number): lower entered earlier
    who: str
    finish_reason: str  # the engine's, or "cancelled" (left the line before its turn), or "refused"
    tokens: int  # tokens generated
    tokens_at_cancel: int | None  # tokens generated when the client hung up (None: it did not)
    entered: float  # time.monotonic() of each step
    started: float | None
    finished: float


class Job:
    def __init__(self, queue: EngineQueue, request: ChatRequest, who: str, loop: asyncio.AbstractEventLoop,
                 on_finished=None):
        self.queue, self.request, self.loop = queue, request, loop
        self.controls = Controls()
        self.ticket: Ticket = queue.enter(who, self.controls, bounded=True)  # QueueFull: nothing started
        self.items: asyncio.Queue = asyncio.Queue()
        self.on_finished = on_finished
        self.progress = Progress()  # the reply's totals, as its last event said
        self.tokens_at_cancel: int | None = None
        self.replied = False  # the engine's Done event came: there is nothing left to cancel
        self.thread = threading.Thread(target=self._run, name=f"reply {self.ticket.number}", daemon=True)
        self.thread.start()

    @property
    def queue_ms(self) -> float:
        return ((self.ticket.began or time.monotonic()) - self.ticket.entered) * 1000

    # ------------------------------------------------------------------ the engine side (its own thread)

    def _post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the server's loop is gone: nobody reads, so stop
            self.controls.stop()

    def _run(self) -> None:
        finish = "refused"
        try:
            for event in reply_in_turn(self.queue, self.ticket, self.request, lambda: self._post(STARTED)):
                self.progress = event.progress
                if isinstance(event, Done):
                    finish, self.replied = event.finish_reason, True
                self._post(event)
        except StopRequested:  # the client hung up, or the app is replacing the model
            finish = "cancelled"
            self._post(ApiError(503, "the model is being replaced or unloaded; try again shortly", None,
                                "model_not_ready"))
        except EngineUnavailable:
            self._post(ApiError(503, "the model is loading or was unloaded; try again shortly", None,
                                "model_not_ready"))
        except GrammarError as e:  # a schema llguidance cannot compile with this tokenizer
            self._post(ApiError(400, str(e), e.param, "invalid_value"))
        except ElasticError as e:  # e.g. the conversation does not fit the context
            self._post(ApiError(400, str(e), "messages", "invalid_value"))
        except Exception as e:  # the reply fails, the server does not
            log.exception("reply %s failed", self.ticket.number)
            finish = "error"
            self._post(ApiError(500, f"the reply failed: {type(e).__name__}: {e}", None, "generation_failed"))
        self._finish(finish)

    def _finish(self, finish: str) -> None:
        t = self.ticket
        record = JobRecord(t.number, t.who, finish, self.progress.tokens, self.tokens_at_cancel, t.entered, t.began,
                           time.monotonic())
        if self.on_finished is not None:
            self.on_finished(record)

    # ------------------------------------------------------------------ the HTTP side (the event loop)

    async def next_batch(self, timeout: float | None = None) -> list:
        """The next item, and every other one already waiting (a batch is written to the socket at
        once). Empty when `timeout` passes first."""
        try:
            first = await asyncio.wait_for(self.items.get(), timeout)
        except asyncio.TimeoutError:
            return []
        batch = [first]
        while not self.items.empty():
            batch.append(self.items.get_nowait())
        return batch

    def cancel(self) -> None:
        """The client hung up: stop the reply (or leave the line)."""
        if not self.replied and not self.controls.stop_requested:
            self.tokens_at_cancel = self.progress.tokens
            self.controls.stop()
