"""The mailbox between a running reply and whoever steers it: thread-safe flags and requests set
from any thread (the GUI, a server request's connection) and polled by the decode loop every token
and between prefill chunks, so nothing waits in the worker's event queue."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from .auto_depth import Escalation


class StopRequested(Exception):
    """Raised inside a prefill when the user pressed stop."""


class Controls:
    """Thread-safe controls for a running reply: set from any thread, polled by the decode loop
    every token and between prefill chunks."""

    def __init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._submodel: str | None = None
        self._thinking = ThinkingRequest()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def request_submodel(self, name: str) -> None:
        """Continue the current phase on submodel `name`, from the next token."""
        with self._lock:
            self._submodel = name

    def take_submodel_request(self) -> str | None:
        with self._lock:
            name, self._submodel = self._submodel, None
            return name

    # -- steering the thought in flight (ignored once the answer has started)

    def request_depth(self, think_submodel: str | None, budget: int | None,
                      escalation: Escalation | None = None) -> None:
        """Go on thinking on `think_submodel` with `budget` thinking tokens in all (what was already
        thought counts), climbing as `escalation` says (an Auto stop) or fixed there (None);
        `think_submodel` None or budget 0 ends thinking now."""
        with self._lock:
            if think_submodel is None or budget == 0:
                self._thinking = replace(self._thinking, answer_now=True)
            else:
                self._thinking = replace(self._thinking, think_submodel=think_submodel, budget=budget, more=0,
                                         escalation=escalation)

    def answer_now(self) -> None:
        """End thinking at once and answer (as a budget hit does)."""
        with self._lock:
            self._thinking = replace(self._thinking, answer_now=True)

    def think_longer(self, tokens: int) -> None:
        """Give the thought `tokens` more budget."""
        with self._lock:
            self._thinking = replace(self._thinking, more=self._thinking.more + max(0, int(tokens)))

    def take_thinking_request(self) -> "ThinkingRequest":
        with self._lock:
            request, self._thinking = self._thinking, ThinkingRequest()
            return request


@dataclass(frozen=True)
class ThinkingRequest:
    """What the user asked of the thought since the last token (all empty: nothing)."""

    think_submodel: str | None = None  # go on thinking on this submodel
    escalation: Escalation | None = None  # ...climbing from it as Auto does (None: fixed there)
    budget: int | None = None  # the new budget, in thinking tokens in all
    more: int = 0  # tokens to add to the budget
    answer_now: bool = False

    @property
    def empty(self) -> bool:
        return self == ThinkingRequest()
