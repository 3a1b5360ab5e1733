"""Quitting while a model loads or warms up (issue 37, item 4): the quit took 12-19 s, the time the
warm-up needed to finish. Here the load or the warm-up is held until something stops it (at most
HOLD_S, so a failing test ends), and quitting must be what stops it, not the hold running out."""

import threading

import pytest

from app import workers as workers_module
from app.controller import ChatController
from app.state.settings import Settings
from app.workers import EngineWorker
from runtime import controls as controls_module
from tests.paths import DEMO

HOLD_S = 20.0


class Hold:
    """Where the engine thread waits, and what let it go: "stop" (the quit) or "timeout"."""

    def __init__(self):
        self.waiting, self.ended_by = threading.Event(), []


def _hold_warm_up(monkeypatch, hold: Hold, nth: int) -> None:
    """The `nth` warm-up reply (one per submodel) waits at its first token."""
    made, warming = [], threading.Event()
    real = EngineWorker._warm_up

    def warm_up(self, submodels):
        warming.set()
        try:
            return real(self, submodels)
        finally:
            warming.clear()
    monkeypatch.setattr(EngineWorker, "_warm_up", warm_up)

    class Held(controls_module.Controls):
        def __init__(self):
            super().__init__()
            self.index = 0
            if warming.is_set() and threading.current_thread() is not threading.main_thread():
                made.append(self)
                self.index = len(made)

        def take_thinking_request(self):
            if self.index == nth and not hold.ended_by:
                hold.waiting.set()
                hold.ended_by.append("stop" if self._stop.wait(HOLD_S) else "timeout")
            return super().take_thinking_request()
    monkeypatch.setattr(controls_module, "Controls", Held)
    monkeypatch.setattr(workers_module, "Controls", Held)  # the warm-up's: app/ takes it through runtime.api


def _hold_load(monkeypatch, hold: Hold) -> None:
    """The load waits at its first progress report (between two tensors)."""
    real = EngineWorker._progress

    def progress(self, p):
        if not hold.ended_by:
            hold.waiting.set()
            hold.ended_by.append("stop" if self.cancel_requested.wait(HOLD_S) else "timeout")
        return real(self, p)
    monkeypatch.setattr(EngineWorker, "_progress", progress)


@pytest.mark.parametrize("where", ["loading", "warm-up, first submodel", "warm-up, last submodel"])
def test_quitting_stops_the_load_or_warm_up_in_flight(qtbot, tmp_path, monkeypatch, where):
    hold = Hold()
    if where == "loading":
        _hold_load(monkeypatch, hold)
    else:
        _hold_warm_up(monkeypatch, hold, 1 if "first" in where else 3)  # the demo has three submodels
    c = ChatController(tmp_path / "data", Settings(), tmp_path / "settings.json")
    closed = False
    try:
        c.load_model(str(DEMO), "", is_demo=True)
        qtbot.waitUntil(hold.waiting.is_set, timeout=180_000)
        c.shutdown()
        closed = True
    finally:
        if not closed:
            c.shutdown()
    assert hold.ended_by == ["stop"]
