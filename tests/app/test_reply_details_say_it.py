"""A reply's details say what the window saw, in the window and in the Markdown export (issue 38, a
real-window session): a thought ended by Answer now read only "thought on 1.5M" in the export, and a reply
Continue went on with said nowhere that it was continued (its count was saved, but not read back)."""

import pytest

from app.state.chat_files import chat_markdown, reply_details
from app.state.history import History
from app.widgets.chat_view import reply_info

BASE = {"depth": "Max", "think_submodel": "1.5M", "answer_submodel": "1.5M", "thinking_tokens": 22,
        "answer_tokens": 21, "finish_reason": "end_of_turn"}


@pytest.mark.parametrize("extra,says", [
    ({"thinking_end": "user"}, "thought ended by you"),
    ({"continued": 1}, "continued once"),
    ({"continued": 3, "finish_reason": "length"}, "continued 3 times"),
])
def test_the_export_and_the_window_say_it(tmp_path, extra, says):
    meta = {**BASE, **extra}
    assert says in reply_details(meta)
    if "continued" in extra:
        assert says in reply_info(meta)
    h = History(tmp_path / "h.sqlite3")
    try:
        cid = h.new_conversation().id
        h.add_message(cid, "user", "What is 22 + 21?")
        h.add_message(cid, "assistant", "43", "22+21=43", meta)
        assert h.messages(cid)[-1].meta.get("continued") == extra.get("continued")  # read back as saved
        assert says in chat_markdown(h, cid)
    finally:
        h.close()


@pytest.mark.parametrize("bad", [0, -1, True, "2", 1.5])
def test_a_count_that_is_not_one_says_nothing_or_is_dropped(bad):
    assert "continued" not in reply_details({**BASE, "continued": bad})


def test_a_thought_the_budget_ended_says_budget_not_you():
    details = reply_details({**BASE, "budget_hit": True, "thinking_end": "budget", "thinking_budget": 22})
    assert "budget hit" in details and "ended by you" not in details
