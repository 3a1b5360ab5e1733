"""An error line goes when what it said no longer holds (issue 38, a real-window session): "The reply failed:
nothing answers…" stayed above the good reply that Regenerate brought once the server was back, and "The
model could not be loaded" stayed after another model loaded, until the next send or the ✕. A line said
since (another error) stays."""

import pytest

from app.state.settings import Settings
from runtime.store.remote_sources import add_source
from tests.app.test_remote_model import use
from tests.app_support import ask, make_window
from tests.remote_stub import RemoteStub, chunk, sse

ANSWERED = [sse(chunk(content="4")), sse(chunk(finish="stop")), b"data: [DONE]\n\n"]


def failing_first(n_failures: int, how: str):
    calls = []

    def script(body):
        calls.append(body)
        if len(calls) > n_failures:
            return ANSWERED
        return [("status", 503, b'{"error": {"message": "busy"}}')] if how == "503" else \
            [sse(chunk(content="par")), ("drop",)]
    return script


@pytest.mark.parametrize("how", ["503", "drop"])
def test_a_reply_that_ends_well_withdraws_the_last_failure(qtbot, home, how):
    w = make_window(qtbot, home, Settings(max_new_tokens=12))
    try:
        with RemoteStub([{"id": "star", "max_model_len": 4096}], failing_first(1, how)) as stub:
            use(qtbot, w, add_source(stub.url, "star", None))
            failed = ask(qtbot, w, "What is 2 + 2?", "Off")
            assert failed.meta["finish_reason"] == "error" and w.notes.error.text().startswith("The reply failed")
            with qtbot.waitSignal(w.controller.sig_reply_done, timeout=60000) as done:
                w.controller.chats.regenerate()
            assert done.args[1].meta["finish_reason"] == "end_of_turn"
            qtbot.waitUntil(lambda: not w.notes.error.isVisible(), timeout=10000)
    finally:
        w.close()


def test_a_later_line_is_not_withdrawn_by_a_reply_that_ends_well(qtbot, home):
    w = make_window(qtbot, home, Settings(max_new_tokens=12))
    try:
        with RemoteStub([{"id": "star", "max_model_len": 4096}], failing_first(1, "503")) as stub:
            use(qtbot, w, add_source(stub.url, "star", None))
            ask(qtbot, w, "What is 2 + 2?", "Off")
            with qtbot.waitSignal(w.controller.sig_reply_done, timeout=60000):
                w.controller.chats.regenerate()
                w.notes.show_error("Something else went wrong.")  # said while the reply runs
            assert w.notes.error.isVisible() and w.notes.error.text() == "Something else went wrong."
    finally:
        w.close()


def test_a_load_that_works_withdraws_the_failed_loads_line(qtbot, tmp_path):
    from tests.paths import DEMO

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    try:
        with qtbot.waitSignal(w.controller.sig_model_failed, timeout=120000):
            w.controller.load_model(str(tmp_path / "gone"))
        assert w.notes.error.text().startswith("The model could not be loaded")
        with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=120000):
            w.controller.load_model(str(DEMO))
        qtbot.waitUntil(lambda: not w.notes.error.isVisible(), timeout=10000)
    finally:
        w.close()
