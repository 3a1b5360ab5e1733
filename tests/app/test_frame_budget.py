"""Frames come less often while they cost (issue 38, item 1: the window at its engine's pace). The flush
showed a streaming reply every FLUSH_MS whatever a frame cost, so an expensive frame took its share of the
GIL from the engine's worker 30 times a second. app/frame_budget.py `FrameBudget` stretches the interval
while a frame costs more than SHARE of it (up to CAP_MS) and brings it back when frames are cheap. Plain
Python: the clock is the test's, moved by hand; nothing here reads the wall clock."""

import pytest

from app.frame_budget import CAP_MS, SHARE, FrameBudget
from app.replies import FLUSH_MS
from tests.app_support import finish, hold, make_window


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def frames(budget: FrameBudget, clock: Clock, cost_ms: float, n: int) -> list[int]:
    """`n` frames of `cost_ms` each; the interval after each."""
    out = []
    for _ in range(n):
        budget.start()
        clock.now += cost_ms / 1000
        out.append(budget.end())
    return out


def budget_and_clock() -> tuple[FrameBudget, Clock]:
    clock = Clock()
    return FrameBudget(FLUSH_MS, clock=clock), clock


@pytest.mark.parametrize("cost_ms", [0.0, 0.5, 2.0, FLUSH_MS * SHARE])
def test_cheap_frames_keep_the_base_rate(cost_ms):
    budget, clock = budget_and_clock()
    assert frames(budget, clock, cost_ms, 20) == [FLUSH_MS] * 20


@pytest.mark.parametrize("cost_ms", [5.0, 11.0, 20.0])
def test_a_costly_frame_stretches_the_interval_to_a_tenth_of_a_core(cost_ms):
    budget, clock = budget_and_clock()
    intervals = frames(budget, clock, cost_ms, 30)
    assert intervals[-1] == round(cost_ms / SHARE)  # settled: the frames take a tenth of the interval
    assert all(a <= b for a, b in zip(intervals, intervals[1:]))  # it never comes back while they cost
    assert intervals[-1] > FLUSH_MS


@pytest.mark.parametrize("cost_ms", [30.0, 43.0, 200.0])
def test_the_interval_never_passes_the_cap(cost_ms):
    budget, clock = budget_and_clock()
    assert frames(budget, clock, cost_ms, 30)[-1] == CAP_MS


@pytest.mark.parametrize("cost_ms", [11.0, 43.0])
def test_cheap_frames_bring_the_base_rate_back(cost_ms):
    budget, clock = budget_and_clock()
    assert frames(budget, clock, cost_ms, 30)[-1] > FLUSH_MS
    assert frames(budget, clock, 0.5, 30)[-1] == FLUSH_MS


def test_one_slow_frame_does_not_slow_the_reply_by_itself():
    """A reply's end or a switch costs one frame; the running cost weighs it against the ones before."""
    budget, clock = budget_and_clock()
    frames(budget, clock, 1.0, 20)
    slow = frames(budget, clock, 20.0, 1)[0]
    assert slow < round(20.0 / SHARE)  # not the whole stretch a frame that slow would ask for
    assert frames(budget, clock, 1.0, 20)[-1] == FLUSH_MS


def test_a_new_reply_starts_at_the_base_rate():
    budget, clock = budget_and_clock()
    frames(budget, clock, 43.0, 10)
    budget.reset()
    assert budget.interval_ms == FLUSH_MS and frames(budget, clock, 1.0, 1) == [FLUSH_MS]


def test_an_end_without_a_start_changes_nothing():
    budget, clock = budget_and_clock()
    frames(budget, clock, 20.0, 5)
    before = budget.interval_ms
    clock.now += 5.0  # time passing between frames is not a frame's cost
    assert budget.end() == before


@pytest.mark.slow
def test_the_windows_flush_follows_the_budget_and_a_new_reply_starts_at_the_base(qtbot, tmp_path, gate):
    """In the window (app/replies.py `Replies._flush`): frames that cost stretch the flush timer while the
    reply streams; the next reply starts at the base rate. A frame's cost comes from the test's clock: 20 ms
    between a frame's start and its end."""
    w = make_window(qtbot, tmp_path / "data")
    replies = w.controller.replies
    ticks = iter(range(10**9))
    replies.frame_budget.clock = lambda: next(ticks) * 0.02
    _, controls = hold(qtbot, w, gate, "Max", 4)
    qtbot.waitUntil(lambda: replies.flush_timer.interval() == round(20 / SHARE), timeout=30000)
    gate.at = None
    finish(qtbot, w, controls)
    assert not replies.flush_timer.isActive()
    gate.at = 4
    w.input.setPlainText("What is 12 + 30?")
    w.send()
    assert replies.flush_timer.isActive() and replies.flush_timer.interval() == FLUSH_MS  # before its first frame
    gate.release_all()
    qtbot.waitUntil(lambda: not replies.busy, timeout=60000)
    w.close()
