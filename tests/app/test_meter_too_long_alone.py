"""The context meter says "too long" when the message is too long even alone, whatever the overflow policy:
in a new chat a 27,218-token file read "earliest turns left out", in the meter's quiet colour, though there
was no earlier turn to leave out and the send was then refused (found in a real-window session). A long
chat with a short message still reads "earliest turns left out"."""

import pytest

from app.context_fit import DROP_OLDEST, KEEP_SYSTEM, REFUSE, never_left_out
from app.state.settings import Settings
from app.widgets.context_meter import ContextMeter
from tests.app_support import make_window

SYSTEM = {"role": "system", "content": "Be brief."}
CHAT = [SYSTEM, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "q3"}]


@pytest.mark.parametrize("policy, kept", [(KEEP_SYSTEM, [SYSTEM, CHAT[-1]]), (DROP_OLDEST, [CHAT[-1]]),
                                          (REFUSE, CHAT)])
def test_what_a_policy_never_leaves_out(policy, kept):
    assert list(never_left_out(CHAT, policy)) == kept
    assert list(never_left_out(CHAT[-1:], policy)) == CHAT[-1:]  # a new chat: its one message


@pytest.mark.parametrize("policy", ["keep_system", "drop_oldest", "refuse"])
@pytest.mark.parametrize("tokens", [1537, 27731])
def test_a_message_too_long_alone_is_too_long_whatever_the_policy(qtbot, policy, tokens):
    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.set_policy(policy)
    meter.show_count(tokens, 1536, 2048, "", False)
    assert meter.label.text() == f"Context {tokens:,} / 2,048 tokens: too long"
    assert meter.label.property("over") == "refuse" and meter.bar.property("over") == "refuse"
    assert "too long even alone" in meter.toolTip()
    meter.set_policy("keep_system")  # a policy changed in Settings keeps the count's verdict
    assert meter.label.text().endswith(": too long")


@pytest.fixture
def short_window(qtbot, tmp_path):
    """The demo with a 192-token context: a few turns fill it."""
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16, context=192))
    yield w
    w.close()


def says(qtbot, w, text: str, words: str) -> None:
    """With `text` as the draft, the meter comes to end in `words` (a count in flight may say another thing
    first: the chat's own draft, before this one)."""
    w.input.setPlainText(text)
    qtbot.waitUntil(lambda: w.meter.label.text().endswith(words), timeout=30000)


@pytest.mark.parametrize("policy", [KEEP_SYSTEM, DROP_OLDEST])
def test_the_window_says_too_long_for_a_message_that_cannot_fit(qtbot, short_window, policy):
    w, c = short_window, short_window.controller
    w.settings.context_overflow = policy
    w.meter.set_policy(policy)
    says(qtbot, w, "word " * 300, ": too long")  # a new chat: nothing to leave out
    for i in range(4):  # earlier turns of about 40 tokens each
        c.history.add_message(c.chats.current, "user", f"question {i} " + "x " * 30)
        c.history.add_message(c.chats.current, "assistant", f"answer {i}")
    c.chats.select(c.chats.current)
    says(qtbot, w, "What is 2 + 3?", "left out")  # leaving turns out makes it fit
    assert w.meter.tokens > w.meter.limit
    says(qtbot, w, "word " * 301, ": too long")  # even with all of them left out it does not


@pytest.mark.parametrize("policy", [KEEP_SYSTEM, DROP_OLDEST])
@pytest.mark.parametrize("big", ["user", "assistant"])
def test_an_empty_box_after_a_big_turn_reads_left_out_not_too_long(qtbot, short_window, policy, big):
    """After a turn too big to fit with anything (a large file and its question, or a long answer), the
    empty box read "too long" in orange, though the next message goes with that turn left out (found in a
    real-window session; the first keystroke corrected it)."""
    w, c = short_window, short_window.controller
    w.settings.context_overflow = policy
    w.meter.set_policy(policy)
    cid = c.chats.current
    c.history.add_message(cid, "user", "question " + ("x " * 200 if big == "user" else ""))
    c.history.add_message(cid, "assistant", "answer " + ("y " * 200 if big == "assistant" else ""))
    c.chats.select(cid)
    says(qtbot, w, "", "left out")
    assert w.meter.tokens > w.meter.limit and w.meter.label.property("over") == "trim"
    says(qtbot, w, "What is 2 + 3?", "left out")  # and as the message is written
    says(qtbot, w, "word " * 301, ": too long")  # a message too long alone is still said
