"""Enter with no model ready says why the message did not go, and keeps it in the box (issue 38, a
real-window session: Enter during a model's reload did nothing and said nothing)."""

from app.conversations import NOT_LOADING
from app.state.settings import Settings
from tests.app_support import enter, make_window
from tests.paths import DEMO


def test_enter_while_loading_or_unloaded_keeps_the_message_and_says_why(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    c = w.controller
    try:
        c.unload_model()
        enter(qtbot, w, "What is 2 + 2?")
        assert w.input.toPlainText() == "What is 2 + 2?" and w.notes.error.text() == NOT_LOADING
        assert not c.history.messages(c.chats.current)  # nothing sent
        c.load_model(str(DEMO))
        enter(qtbot, w, "What is 2 + 2?")  # the load has not ended: its slot runs when the loop turns
        assert w.input.toPlainText() == "What is 2 + 2?"
        assert w.notes.error.text().startswith("The model is still loading: your message stays in the box")
        qtbot.waitUntil(lambda: c.loaded is not None, timeout=120000)
        with qtbot.waitSignal(c.sig_reply_done, timeout=120000):
            enter(qtbot, w, "What is 2 + 2?")
        assert w.input.toPlainText() == "" and [m.role for m in c.history.messages(c.chats.current)] == [
            "user", "assistant"]
        assert not c.loading
    finally:
        w.close()


def test_an_empty_box_says_nothing(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    try:
        w.controller.unload_model()
        enter(qtbot, w, "   ")
        assert not w.notes.error.isVisible()
    finally:
        w.close()
