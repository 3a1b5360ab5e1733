"""Saves of replies that wait for the history's file: another program holds its write lock (DB Browser
with unsaved edits, `BEGIN IMMEDIATE` held open, a sync or backup tool), so SQLite refused them.

The one owner of what waits: per message, the latest state the window had for it (a streaming reply's
text so far, or its end; a refused reply's removal), written by a QTimer every few seconds until the
file is free. While one waits, every later save of a reply waits behind it without touching the file,
so a held lock costs the GUI thread one short wait (BUSY_TIMEOUT_S, app/state/history_recovery.py) per
retry, not one per save; a message the user sends first writes what waits (`write_waiting`), so the
history it is added to is the one the window shows. The replies stay shown meanwhile; the banner says
they are not saved yet, then that they are.
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


@dataclass
class PendingDelete:
    conversation_id: int  # the message is removed from this chat (a reply refused before it started)


class PendingSaves(QObject):
    def __init__(self, front):
        super().__init__(front)
        self.front = front  # app/controller.py ChatController: the history, the signals
        self.pending: dict[int, PendingSave | PendingDelete] = {}  # message id -> its latest state, oldest first
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
        earlier = self.pending.get(mid)
        if meta is None and isinstance(earlier, PendingSave):
            meta = earlier.meta
        self._keep(mid, PendingSave(content, thinking, meta, complete, finished))
        return finished

    def delete_message(self, cid: int, mid: int) -> None:
        """History.delete_message, or, while another program holds the file, kept to do later (whatever
        was waiting for that message is never written: its id may become another message's)."""
        if not self.pending:
            try:
                return self.front.history.delete_message(cid, mid)
            except HistoryBusy:
                pass
        self._keep(mid, PendingDelete(cid))

    def _keep(self, mid: int, change: PendingSave | PendingDelete) -> None:
        self.pending.pop(mid, None)  # (the latest goes last: written after what waited before it)
        self.pending[mid] = change
        if not self.timer.isActive():
            self.timer.start()
            self.front.sig_error.emit(self.waiting_line(), "")

    def write_waiting(self) -> None:
        """Before a write of the user's own (a message sent): what waits goes first, or HistoryBusy says
        the file is still held (a save that waits would otherwise land after what it came before)."""
        if self.pending and not self.retry():
            raise HistoryBusy(self.front.history.path.name)

    def waiting_line(self) -> str:
        return str(HistoryBusy(self.front.history.path.name, "the replies since then are shown but not saved yet",
                               "Elastic Chat saves them by itself when the file is free"))

    def retry(self) -> bool:
        """Writes what waits, oldest first, and stops at the first refusal; True once nothing waits."""
        for mid, save in list(self.pending.items()):
            try:
                self._write(mid, save)
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

    def _write(self, mid: int, change: PendingSave | PendingDelete) -> None:
        history = self.front.history
        if isinstance(change, PendingDelete):
            history.delete_message(change.conversation_id, mid)
        else:
            history.update_message(mid, change.content, change.thinking, change.meta, change.complete,
                                   finished=change.finished)

    def save_at_exit(self) -> None:
        """At quit: one more try, never a wait longer than one write's; what still waits is said in the log."""
        self.timer.stop()
        if self.pending and not self.retry():
            log.warning("quitting with %d repl%s not saved: %s is in use by another program (message ids %s keep "
                        "the text of their last save)", len(self.pending), "y" if len(self.pending) == 1 else "ies",
                        self.front.history.path.name, ", ".join(map(str, self.pending)))
