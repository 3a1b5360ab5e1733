"""A reply's end reads in words in the window: the API's finish reasons ("length", "stop_string") are
words for programs; a user saw "1.5M length" in the strip and the reply's header."""

from types import SimpleNamespace

import pytest

from app.reply import finish_words
from app.widgets.chat_view import reply_info
from app.widgets.live_strip import LiveStrip
from runtime.api import ERROR, LENGTH, STOP_STRING, STOPPED

READS = {LENGTH: "cut at the token limit", STOP_STRING: "ended at a stop string", ERROR: "failed",
         STOPPED: "stopped", "interrupted": "interrupted"}


@pytest.mark.parametrize("reason", sorted(READS))
def test_every_way_a_reply_ends_reads_in_words_in_its_header(reason):
    info = reply_info({"answer_submodel": "1.5M", "finish_reason": reason, "tokens_per_s": 12.0})
    assert READS[reason] in info and (reason in READS[reason] or reason not in info)
    assert "_" not in info


def test_an_unknown_reason_is_still_shown_without_underscores():
    assert finish_words("some_new_reason") == "some new reason"


@pytest.mark.parametrize("reason", [LENGTH, STOP_STRING])
def test_the_strip_says_it_in_words_too(qtbot, reason):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.set_submodels(["0.5M", "1.5M"])
    strip.on_done(SimpleNamespace(thinking_tokens=3, answer_tokens=5, ttft_ms=40.0, tokens_per_s=9.0,
                                  answer_submodel="1.5M", finish_reason=reason))
    assert strip.badge.text() == f"1.5M {READS[reason]}"


@pytest.mark.parametrize("budget, tokens, says", [
    (96, 99, "budget hit"),  # the depth's budget ended it (with its line's end: a few tokens past)
    (96, 96, "budget hit"),
    (480, 40, "closed for the answer (Max reply tokens)"),  # a small Max reply tokens closed it first
    (None, 40, "closed for the answer (Max reply tokens)"),  # no budget at all: only the limit closes it
])
def test_a_thought_the_runtime_closed_says_which_limit_closed_it(budget, tokens, says):
    """A thought closed to leave the answer room under a small Max reply tokens read "budget hit", as if the
    depth's budget had ended it (found in a real-window session); the window and the export say the same."""
    from app.state.chat_files import reply_details
    from app.widgets.chat_view import thinking_summary

    meta = {"think_submodel": "1.0M", "thinking_tokens": tokens, "thinking_budget": budget, "budget_hit": True,
            "thinking_ms": 900, "finish_reason": "end_of_turn"}
    assert thinking_summary(meta).endswith(", " + says)
    assert f"· {says}" in reply_details(meta)
    old = {k: v for k, v in meta.items() if k != "thinking_budget"}  # saved before the budget was kept
    assert thinking_summary(old).endswith(", budget hit") and "budget hit" in reply_details(old)


@pytest.mark.parametrize("tokens", [0, 1, 2, 17])
def test_a_thoughts_summary_counts_its_tokens_in_their_number(tokens):
    """ "1 tokens on 1.0M" was seen in a real-window session: one token is "1 token", in a thought on one
    submodel and in the first stretch of a moved one."""
    from app.widgets.chat_view import thinking_summary

    word = "token" if tokens == 1 else "tokens"
    one = {"think_submodel": "1.0M", "thinking_tokens": tokens, "thinking_ms": 500, "finish_reason": "end_of_turn"}
    assert thinking_summary(one) == f"Thought for 0.5 s on 1.0M · {tokens} {word}"
    moved = {**one, "thinking_tokens": tokens + 3, "thinking_path": [["1.0M", tokens], ["0.5M", 3]]}
    assert thinking_summary(moved).startswith(f"Thought for 0.5 s · {tokens} {word} on 1.0M, then 3 on 0.5M")
