"""How often a streaming reply is shown: at the base rate while frames are cheap, less often while they are
not (issue 38, item 1: the window keeps its engine's pace).

The engine's worker thread and the GUI thread share the GIL: every millisecond a frame holds the GUI thread
is a millisecond the decode loop may wait. A frame that costs more than SHARE of its interval (a tenth of a
core) stretches the interval to cost / SHARE, up to CAP_MS; cheap frames bring it back to the base. The
cost is the frame's time on a monotonic clock (descheduled while holding the GIL counts: the worker waits
then too), smoothed over a few frames so that one slow frame (a reply's end, a switch) does not slow the
next ones by itself. Qt-free, so it is tested as plain Python with a clock the test moves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SHARE = 0.1  # the GUI thread's most share of a core for showing a reply
CAP_MS = 250  # the longest interval: a reply still moves four times a second
SMOOTHING = 0.3  # the weight of the newest frame in the running cost


class FrameBudget:
    def __init__(self, base_ms: int, cap_ms: int = CAP_MS, share: float = SHARE,
                 clock: Callable[[], float] = time.perf_counter):
        """`clock`: seconds on a monotonic clock (a test passes its own)."""
        self.base_ms, self.cap_ms, self.share, self.clock = base_ms, cap_ms, share, clock
        self.interval_ms = base_ms
        self.cost_ms = 0.0  # the smoothed cost of a frame
        self._started: float | None = None

    def reset(self) -> None:
        """A new reply starts at the base rate: the last one's frames say nothing of its."""
        self.interval_ms, self.cost_ms, self._started = self.base_ms, 0.0, None

    def start(self) -> None:
        self._started = self.clock()

    def end(self) -> int:
        """Ends the frame `start` began; returns the interval to wait before the next one (ms)."""
        if self._started is None:
            return self.interval_ms
        spent_ms = max(0.0, (self.clock() - self._started) * 1000)
        self._started = None
        self.cost_ms = spent_ms if self.cost_ms == 0.0 else (
            SMOOTHING * spent_ms + (1 - SMOOTHING) * self.cost_ms)
        self.interval_ms = min(self.cap_ms, max(self.base_ms, round(self.cost_ms / self.share)))
        return self.interval_ms
