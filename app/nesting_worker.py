"""The nesting check's worker: runs `runtime.store.nesting.slice_check` in its own QThread.

Reading a slice (a few megabytes, over HTTP Range requests for a hub repo) and comparing its
tensors never runs on the GUI thread. Progress (bytes read so far) crosses to the GUI at most
about 10 times a second; cancel goes straight to the thread-safe stop event, which the next
read of either checkpoint obeys.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Signal, Slot

from .workers import PROGRESS_INTERVAL_S, Throttle

log = logging.getLogger(__name__)


class NestingWorker(QObject):
    sig_progress = Signal(int)  # bytes read so far (throttled)
    sig_finished = Signal(object, str)  # list of slice_check.SliceVerdict, an unexpected error ("" when none)

    def __init__(self, job):
        """`job(stop, on_read)` returns a list of verdicts: check_slice or check_catalog_slices, bound."""
        super().__init__()
        self.job = job
        self.stop = threading.Event()
        self._throttle = Throttle(PROGRESS_INTERVAL_S)
        self._lock = threading.Lock()  # reads come from several threads (a hub's ranges, 8 at a time)

    def _on_read(self, total: int) -> None:
        with self._lock:
            ready = self._throttle.ready("reading")
        if ready:
            self.sig_progress.emit(total)

    @Slot()
    def run(self) -> None:
        try:
            self.sig_finished.emit(self.job(self.stop, self._on_read), "")
        except Exception as e:  # a bug or a hostile file: the check fails, the app does not
            log.exception("nesting check failed")
            self.sig_finished.emit([], f"{type(e).__name__}: {e}")

    def cancel(self) -> None:
        """Thread-safe: the check stops at its next read."""
        self.stop.set()
