"""The chat controller's front (app/controller.py) at shutdown: what the engine's thread said last (a load
that ended, a reply's last events) is taken in while the history is still open, whichever of the front's
parts it is addressed to."""

import threading

import pytest

from app.controller import ChatController
from app.state.settings import Settings
from tests.paths import ROOT

DEMO = str(ROOT / "assets" / "demo-nvfp4")


def from_the_engine_thread(emit) -> None:
    """Emits as the worker does, from another thread: the signal waits in the GUI thread's queue."""
    thread = threading.Thread(target=emit)
    thread.start()
    thread.join()


@pytest.mark.slow
@pytest.mark.parametrize("last", ["loaded", "load failed", "load cancelled", "late reply event", "reply failed",
                                  "fitted", "overflow"])
def test_what_the_engine_said_last_is_taken_in_before_the_history_closes(qtbot, tmp_path, last):
    """A SIGTERM during a load left the load's end queued for the front after the history had closed:
    the crash dialog opened and the process never exited (test_single_instance, test_installer)."""
    data = tmp_path / "data"
    data.mkdir()
    c = ChatController(data, Settings(), data / "settings.json")
    c.chats.ensure()
    with qtbot.waitSignal(c.sig_model_loaded, timeout=180000) as done:
        c.load_model(DEMO, "", is_demo=True)
    loaded, w = done.args[0], c.worker
    taken = []
    c.sig_model_loaded.connect(lambda *_: taken.append("front"))
    emit = {"loaded": lambda: w.sig_loaded.emit(loaded), "load failed": lambda: w.sig_load_failed.emit("gone"),
            "load cancelled": lambda: w.sig_load_cancelled.emit(),
            "late reply event": lambda: w.outbox.put(99, object()) and w.sig_events.emit(),
            "reply failed": lambda: w.sig_reply_failed.emit(99, "out of memory"),
            "fitted": lambda: w.sig_fitted.emit(99, 10, 0),
            "overflow": lambda: w.sig_overflow.emit(99, 10, 5, 8, True)}[last]
    from_the_engine_thread(emit)
    c.shutdown()  # pytest-qt fails the test on an exception raised in a slot, now or below
    qtbot.wait(50)  # whatever was still queued is delivered now
    assert c.history.db is None and taken == (["front"] if last == "loaded" else [])
