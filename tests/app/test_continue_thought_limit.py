"""Continue of a reply cut mid-thought under a small Max reply tokens (issue 38): the thought goes on to
where its depth's budget ends it, then the answer, press after press, and the reply is then exactly what
one longer reply gives (greedy, the bundled demo). Before, each press forced the thought closed after
two tokens (a 5-token reply keeps its last 3 for the answer and the forced `</think>`)."""

import pytest
from PySide6.QtCore import Qt

from app.state.settings import Sampling, Settings
from tests.app_support import ask, make_window

QUESTION = "What is 45 + 23 - 17 + 9?"
TIMEOUT_MS = 180000
HEAD = 8  # the thought's tokens before the cut


def continue_button(w):
    return next(x for x in reversed(w.chat.widgets) if x.role == "assistant").buttons["Continue"]


@pytest.mark.slow
def test_a_thought_cut_midway_thinks_on_to_its_budget_under_a_small_limit(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=400, sampling=Sampling(temperature=0.0)))
    whole = ask(qtbot, w, QUESTION, "Quick")
    assert whole.thinking and whole.meta["finish_reason"] == "end_of_turn"
    assert whole.meta["thinking_tokens"] > HEAD + 8
    chat = w.controller.worker.engine.chat
    head = chat.decode(chat.encode_plain(whole.thinking)[:HEAD])
    assert whole.thinking.startswith(head) and head != whole.thinking
    history, cid = w.controller.history, w.controller.history.new_conversation("cut").id
    history.add_message(cid, "user", QUESTION)
    think = whole.meta["think_submodel"]
    cut_meta = {**whole.meta, "finish_reason": "length", "thinking_tokens": HEAD, "answer_tokens": 0,
                "thinking_end": "", "budget_hit": False, "thinking_by_submodel": {think: HEAD},
                "answer_by_submodel": {}, "switches": [], "switch": {}}
    cut = history.add_message(cid, "assistant", "", head, meta=cut_meta)
    w.controller.chats.select(cid)
    w.settings.max_new_tokens = 5
    message, presses = cut, 0
    while message.meta["finish_reason"] == "length":
        assert presses < 40, "Continue never reached the end of the reply"  # bounded by the work
        qtbot.waitUntil(lambda: continue_button(w).isVisibleTo(w), timeout=TIMEOUT_MS)
        with qtbot.waitSignal(w.controller.sig_reply_done, timeout=TIMEOUT_MS) as done:
            qtbot.mouseClick(continue_button(w), Qt.MouseButton.LeftButton)
        message, presses = done.args[1], presses + 1
        assert message.id == cut.id
        if presses == 1:  # the first press ends the thought where its budget does, not 2 tokens on
            assert message.thinking == whole.thinking
    assert (message.thinking, message.content) == (whole.thinking, whole.content)
    assert message.meta["thinking_tokens"] == whole.meta["thinking_tokens"]
    w.close()
