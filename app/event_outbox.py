"""The engine thread's reply events on their way to the GUI thread, handed over at the frame rate.

A signal per token made the two threads trade the interpreter hundreds of times a second: each token
woke the GUI thread, which ran Python for it while the decode loop waited for the GIL (on a busy
machine the window replied at a fraction of the CLI's speed). Here the engine thread only appends to
a list; the GUI thread takes the whole list on its ~30 Hz flush. An event that should not wait for
the next frame (anything but a Token: the turn beginning, a switch, a tool call, the end) asks for a
wake-up at once, and the GUI then takes everything before it too, so the order is kept. No Qt here:
the wake-up is the caller's (a queued signal in app/workers.py).
"""

from __future__ import annotations

import threading


class Outbox:
    def __init__(self):
        self._lock = threading.Lock()
        self._items: list[tuple[int, object]] = []

    def put(self, request_id: int, event) -> bool:
        """Engine thread: queues `event` of reply `request_id`; True when the GUI should take it now
        rather than at its next frame."""
        with self._lock:
            self._items.append((request_id, event))
        return getattr(event, "type", "") != "token"

    def take(self) -> list[tuple[int, object]]:
        """GUI thread: every event queued so far, oldest first."""
        with self._lock:
            items, self._items = self._items, []
        return items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
