"""Enter while a reply streams (issue 38, item 2): the message waits for the reply and goes after it, in
order; the reply is never stopped by it. Esc stops the reply, and then what waits goes at once; what
cannot go (the chat no longer fits) is put back into the message box (pytest-qt, offscreen, the demo)."""

import pytest
from PySide6.QtCore import Qt

from app.state.settings import Settings
from tests.app_support import LONG, enter, hold, make_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    yield w
    w.close()


def roles_and_texts(c, cid):
    return [(m.role, m.content if m.role == "user" else m.meta.get("finish_reason")) for m in c.history.messages(cid)]


@pytest.mark.parametrize("queued", [1, 3])
def test_enter_while_a_reply_streams_queues_the_message_behind_it(qtbot, window, gate, queued):
    c = window.controller
    notices = []
    c.sig_notice.connect(notices.append)
    reply, controls = hold(qtbot, window, gate, "Quick", 3, question="What is 2 + 3?")
    cid = c.chats.current
    for i in range(queued):
        enter(qtbot, window, f"And {i}?")
        assert window.input.toPlainText() == ""  # taken, as a sent message is
    assert not reply.stopping and c.replies.reply_in(cid) is reply  # Enter did not stop it
    assert c.queue.count(cid) == queued and any(n.startswith("Queued") for n in notices)
    assert window.notes.error.isVisible() and window.notes.error.text().startswith("Queued")  # and it shows
    assert [m.role for m in c.history.messages(cid)] == ["user", "assistant"]  # nothing shown as sent yet
    gate.release_all()
    qtbot.waitUntil(lambda: c.queue.count(cid) == 0 and not c.replies.busy, timeout=LONG)
    got = roles_and_texts(c, cid)
    assert [r for r, _ in got] == ["user", "assistant"] * (queued + 1)
    assert [t for r, t in got if r == "user"] == ["What is 2 + 3?"] + [f"And {i}?" for i in range(queued)]
    assert "stopped" not in [t for r, t in got if r == "assistant"]  # every reply ran to its end


def test_esc_stops_the_reply_and_the_queued_message_goes_at_once(qtbot, window, gate):
    c = window.controller
    _, controls = hold(qtbot, window, gate, "Quick", 3, question="What is 2 + 3?")
    cid = c.chats.current
    enter(qtbot, window, "Never mind: what is 4 + 4?")
    gate.at = None  # the next reply runs freely
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    controls.released.set()
    qtbot.waitUntil(lambda: c.queue.count(cid) == 0 and not c.replies.busy, timeout=LONG)
    got = roles_and_texts(c, cid)
    assert got[:3] == [("user", "What is 2 + 3?"), ("assistant", "stopped"), ("user", "Never mind: what is 4 + 4?")]
    assert got[3][0] == "assistant" and got[3][1] != "stopped"


def test_a_queued_message_that_cannot_go_is_put_back_in_the_box(qtbot, window, gate):
    c = window.controller
    reply, controls = hold(qtbot, window, gate, "Quick", 3, question="What is 2 + 3?")
    cid = c.chats.current
    enter(qtbot, window, "And then?")
    c.unload_model()  # its turn comes with no model to answer it
    controls.released.set()
    qtbot.waitUntil(lambda: not c.replies.busy and c.loaded is None, timeout=LONG)
    qtbot.waitUntil(lambda: window.input.toPlainText() == "And then?", timeout=LONG)
    assert c.queue.count(cid) == 0 and [m.role for m in c.history.messages(cid)] == ["user", "assistant"]
