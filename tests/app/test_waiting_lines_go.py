"""A line that says something waits goes once nothing waits: "Queued: your message is sent when the reply
streaming here ends" and "This reply starts when the one in “…” ends" stayed above the chat after the
message had gone and its reply had ended, as if it still waited (found in a real-window session). A
line shown after it is not touched (pytest-qt, offscreen, the demo)."""

import pytest
from PySide6.QtCore import Qt

from app.state.settings import Settings
from tests.app_support import LONG, enter, hold, make_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    yield w
    w.close()


def line(w) -> str:
    """The line above the chat ("" when none shows)."""
    return w.notes.error.text() if w.notes.error.isVisible() else ""


def idle(qtbot, w) -> None:
    c = w.controller
    qtbot.waitUntil(lambda: not c.replies.busy and not any(c.queue.waiting.values()), timeout=LONG)


@pytest.mark.parametrize("queued", [1, 3])
def test_the_queued_line_goes_once_the_queued_messages_have_gone(qtbot, window, gate, queued):
    c = window.controller
    _, controls = hold(qtbot, window, gate, "Quick", 3)
    cid = c.chats.current
    for i in range(queued):
        enter(qtbot, window, f"And {i}?")
    assert line(window).startswith("Queued")
    gate.release_all()
    idle(qtbot, window)
    assert len(c.history.messages(cid)) == 2 * (queued + 1)  # every one went and was answered
    assert line(window) == ""


def wait_behind_another_chat(qtbot, window, gate):
    """A reply held mid-thought in one chat, and a new chat's reply waiting behind it; the first's controls."""
    _, controls = hold(qtbot, window, gate, "Balanced", 3)
    window.new_chat()
    gate.at = None
    window.input.setPlainText("What is 4 + 4?")
    window.send()
    assert "starts when the one in" in line(window)
    return controls


def test_a_reply_behind_another_chats_loses_its_line_when_its_turn_comes(qtbot, window, gate):
    c = window.controller
    controls = wait_behind_another_chat(qtbot, window, gate)
    second = c.replies.reply_in(c.chats.current)
    controls.released.set()
    qtbot.waitUntil(lambda: second.begun, timeout=LONG)
    assert line(window) == ""
    idle(qtbot, window)


def test_a_waiting_reply_stopped_before_its_turn_loses_its_line(qtbot, window, gate):
    c = window.controller
    controls = wait_behind_another_chat(qtbot, window, gate)
    with qtbot.waitSignal(c.sig_reply_done, timeout=LONG):
        qtbot.keyClick(window.input, Qt.Key.Key_Escape)  # stops the reply of the chat shown: the waiting one
        controls.released.set()
    idle(qtbot, window)
    assert line(window) == ""


@pytest.mark.parametrize("case", ["queued", "behind another chat"])
def test_a_line_shown_after_the_waiting_line_stays(qtbot, window, gate, case):
    c = window.controller
    first, controls = hold(qtbot, window, gate, "Balanced", 3)
    if case == "queued":
        enter(qtbot, window, "And then?")
    else:
        window.new_chat()
        window.input.setPlainText("What is 4 + 4?")
        window.send()
    c.sig_notice.emit("Something else happened meanwhile.")
    gate.release_all()
    idle(qtbot, window)
    assert line(window) == "Something else happened meanwhile."
