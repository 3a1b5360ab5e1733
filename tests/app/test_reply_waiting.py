"""What the window says before a reply's first token and after a reply that made nothing (issue 38,
items 3 and 4): a reply that waits says what for, one with nothing ahead says it reads the chat, the
live strip says "idle" when nothing runs and "–" for a reply that produced no token (pytest-qt,
offscreen)."""

import pytest

from app.state.settings import Settings
from app.widgets.chat_view import READING
from app.widgets.live_strip import LiveStrip
from runtime.events import Done, Progress
from tests.app_support import LONG, hold, make_window


@pytest.mark.parametrize("phase", ["thinking", "answer", "waiting"])
def test_the_strip_says_idle_once_nothing_runs(qtbot, phase):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.reset("0.5M", phase)
    strip.set_badge("0.5M", phase)
    strip.clear()  # a refused send, a message taken back, a chat without a reply shown
    assert strip.badge.text() == "idle" and strip.ttft.text() == "TTFT –"


@pytest.mark.parametrize("reason", ["stopped", "error", "length"])
def test_a_reply_that_produced_nothing_shows_no_numbers(qtbot, reason):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.on_done(Done(reason, "", "", "0.5M", "1.5M", 0, progress=Progress(elapsed_ms=1200.0)))
    assert strip.ttft.text() == "TTFT –" and strip.speed.text() == "– tok/s"
    strip.on_done(Done(reason, "", "hi", None, "1.5M", 0,
                       progress=Progress(answer_tokens=3, ttft_ms=40.0, tokens_per_s=25.0)))
    assert strip.ttft.text() == "TTFT 40 ms" and strip.speed.text() == "25.0 tok/s"


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    yield w
    w.close()


def test_a_reply_with_nothing_ahead_reads_the_chat_and_does_not_say_it_waits(qtbot, window):
    c = window.controller
    notices = []
    c.sig_notice.connect(notices.append)
    c.set_depth("Quick")
    window.input.setPlainText("What is 2 + 3?")
    window.send()
    live = window.chat.widgets[-1]
    assert live.tail.text() == READING and not any("starts when" in n for n in notices)
    assert "waiting" not in window.strip.badge.text()
    qtbot.waitUntil(lambda: not c.replies.busy, timeout=LONG)


def test_a_reply_behind_another_chats_says_what_it_waits_for_until_its_turn(qtbot, window, gate):
    c = window.controller
    first, controls = hold(qtbot, window, gate, "Balanced", 3)
    title = c.history.conversation(first.conversation_id).title
    window.new_chat()
    gate.at = None
    window.input.setPlainText("What is 4 + 4?")
    window.send()
    second = c.replies.reply_in(c.chats.current)
    live = window.chat.widgets[-1]
    assert live.tail.text() == f"Waiting for the reply in “{title}” to end…"
    assert window.notes.error.isVisible() and "starts when the one in" in window.notes.error.text()
    assert window.strip.badge.text().endswith("waiting") and c.steering.live_phase == "waiting"
    assert not window.answer_now_button.isEnabled() and not window.think_longer_button.isEnabled()
    assert window.stop_button.isEnabled()  # a waiting reply can still be stopped
    controls.released.set()
    qtbot.waitUntil(lambda: second.begun, timeout=LONG)
    assert "waiting" not in window.strip.badge.text() and not live.tail.text().startswith("Waiting")
    qtbot.waitUntil(lambda: not c.replies.busy, timeout=LONG)
