"""Hostile input is bounded by the work it causes, never by the wall clock: a PC busy with other
programs slows honest work down, and it must not have it refused (issue 37: the demo's own chat
template was refused under load by a 3-second wall-clock limit).

`cpu_clock(thread)` reads one thread's CPU seconds (pthread_getcpuclockid: Linux, the BSDs); where
the OS offers no clock per thread (Windows, macOS) it reads the whole process's, which other
programs' load does not advance either. `wait_for_work` waits for a thread doing native work that
no trace function can interrupt (a tokenizer) and gives up on it past a CPU budget. The one
wall-clock bound left is for a thread that does no work at all (a deadlock): it is waiting, not
working, and `STALL_SECONDS` without a tick of CPU time gives it up too.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

STALL_SECONDS = 60.0  # of waiting with no CPU time spent at all: a thread that waits, not works
POLL_SECONDS = 0.05  # the longest wait between two looks at a thread's CPU time


def cpu_clock(thread: threading.Thread) -> Callable[[], float]:
    """A function giving `thread`'s CPU seconds so far (the process's where no per-thread clock exists).
    Call it while the thread is alive; afterwards it reads the last value it saw."""
    get_id = getattr(time, "pthread_getcpuclockid", None)
    if get_id is None or thread.ident is None:
        return time.process_time
    try:
        clock = get_id(thread.ident)
        last = [time.clock_gettime(clock)]
    except OSError:  # the thread ended already, or the OS refuses
        return time.process_time

    def read() -> float:
        try:
            last[0] = time.clock_gettime(clock)
        except OSError:  # it ended: its CPU time no longer grows
            pass
        return last[0]
    return read


def wait_for_work(thread: threading.Thread, cpu_seconds: float, stall_seconds: float = STALL_SECONDS) -> str:
    """Waits for the started `thread` to end: "" when it did, else why it was given up ("cpu": it
    spent more than `cpu_seconds` of CPU time; "stalled": no CPU time at all for `stall_seconds`,
    counted in waits of POLL_SECONDS on the thread, so a clock set forward cannot end it early)."""
    clock = cpu_clock(thread)
    start = clock()
    wait, progress, idle = 0.001, start, 0.0
    while True:
        thread.join(wait)
        if not thread.is_alive():
            return ""
        now = clock()
        if now - start > cpu_seconds:
            return "cpu"
        idle = 0.0 if now > progress else idle + wait
        progress = max(progress, now)
        if idle > stall_seconds:
            return "stalled"
        wait = min(wait * 2, POLL_SECONDS)
