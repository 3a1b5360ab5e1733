"""Saves of replies that wait for the history's file: another program holds its write lock (DB Browser
with unsaved edits, `BEGIN IMMEDIATE` held open, a sync or backup tool), so SQLite refused them.

The one owner of what waits: per message, the latest state the window had for it (a streaming reply's
text so far, or its end), written by a QTimer every few seconds until the file is free. While one
waits, every later save of a reply waits behind it without touching the file, so a held lock costs
the GUI thread one short wait (BUSY_TIMEOUT_S, app/state/history_recovery.py) per retry, not one per
save. The replies stay shown meanwhile; the banner says they are not saved yet, then that they are.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer

from .state.history import HistoryBusy, HistoryReadOnly

log = logging.getLogger(__name__)
RETRY_MS = 3000  # a few seconds: the banner has said what to do, and each try may wait BUSY_TIMEOUT_S


@dataclass
class PendingSave:
    content: str
    thinking: str
    meta: dict | None
    complete: bool
    finished: float | None  # when the reply ended (a complete save), kept for the file whenever it is written


class PendingSaves(QObject):
    def __init__(self, front):
        super().__init__(front)
        self.front = front  # app/controller.py ChatController: the history, the signals
        self.pending: dict[int, PendingSave] = {}  # message id -> its latest state, oldest first
        self._said = ""  # the last line shown about a retry's failure (said once)
        self.timer = QTimer(self)
        self.timer.setInterval(RETRY_MS)
        self.timer.timeout.connect(self.retry)

    def update_message(self, mid: int, content: str, thinking: str, meta: dict | None = None,
                       complete: bool = False) -> float | None:
        """History.update_message, or, while another program holds the file, the state kept to write later:
        never raises HistoryBusy (other refusals, a read-only history or a full disk, still raise)."""
        finished = time.time() if complete else None
        if not self.pending:
            try:
                return self.front.history.update_message(mid, content, thinking, meta, complete)
            except HistoryBusy:
                pass
        earlier = self.pending.pop(mid, None)
        if meta is None and earlier is not None:
            meta = earlier.meta
        self.pending[mid] = PendingSave(content, thinking, meta, complete, finished)
        if not self.timer.isActive():
            self.timer.start()
            self.front.sig_error.emit(self.waiting_line(), "")
        return finished

    def forget(self, mid: int) -> None:
        """Message `mid` is deleted: nothing of it is written later (its id may become another message's)."""
        self.pending.pop(mid, None)
        if not self.pending and self.timer.isActive():  # nothing was saved: the line goes without a "Saved"
            self.timer.stop()
            self.front.sig_error_withdrawn.emit(self.waiting_line())

    def waiting_line(self) -> str:
        return str(HistoryBusy(self.front.history.path.name, "the replies since then are shown but not saved yet",
                               "Elastic Chat saves them by itself when the file is free"))

    def retry(self) -> bool:
        """Writes what waits, oldest first, and stops at the first refusal; True once nothing waits."""
        for mid, save in list(self.pending.items()):
            try:
                self.front.history.update_message(mid, save.content, save.thinking, save.meta, save.complete,
                                                  finished=save.finished)
            except HistoryBusy:
                return False  # still held: the next tick tries again
            except HistoryReadOnly as e:  # a full disk now: said once, and kept for the next tick
                if str(e) != self._said:
                    self._said = str(e)
                    self.front.sig_error.emit(str(e), "")
                return False
            del self.pending[mid]
        if self.timer.isActive():
            self.timer.stop()
            self._said = ""
            self.front.sig_error_withdrawn.emit(self.waiting_line())
            self.front.sig_notice.emit(f"Saved: {self.front.history.path.name} is free again, and the replies "
                                       "that waited are in it.")
        return True

    def save_at_exit(self) -> None:
        """At quit: one more try, never a wait longer than one write's; what still waits is said in the log."""
        self.timer.stop()
        if self.pending and not self.retry():
            log.warning("quitting with %d repl%s not saved: %s is in use by another program (message ids %s keep "
                        "the text of their last save)", len(self.pending), "y" if len(self.pending) == 1 else "ies",
                        self.front.history.path.name, ", ".join(map(str, self.pending)))
