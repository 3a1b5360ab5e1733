"""The lines under a message use characters every desktop font has: 📎 (outside Unicode's basic plane, as
emoji are) showed as an empty box on sent messages in a real-window session (issue 38)."""

import pytest

from app.widgets.chat_view import reply_info, thinking_summary, user_info

USER = [{"attachments": [{"name": "notes.txt"}, {"name": "report.pdf"}]},
        {"not_sent": "too long for the context", "attachments": [{"name": "a.md"}]}, {}]
REPLY = [{"answer_submodel": "1.5M", "finish_reason": r, "tokens_per_s": 7.5, "context_dropped": 2,
          "thinking_tokens": 12, "thinking_ms": 900, "budget_hit": True, "think_submodel": "0.5M",
          "thinking_path": [["0.5M", 5], ["1.5M", 7]]} for r in ("stopped", "interrupted", "error", "length", None)]


def basic_plane(text: str) -> bool:
    return all(ord(ch) < 0x10000 for ch in text)


@pytest.mark.parametrize("meta", USER)
def test_a_sent_messages_line_has_no_emoji(meta):
    line = user_info(meta)
    assert basic_plane(line) and all(a["name"] in line for a in meta.get("attachments", []))


@pytest.mark.parametrize("meta", REPLY)
@pytest.mark.parametrize("said_nothing", [False, True])
def test_a_replys_lines_have_no_emoji(meta, said_nothing):
    assert basic_plane(reply_info(meta, said_nothing)) and basic_plane(thinking_summary(meta))
