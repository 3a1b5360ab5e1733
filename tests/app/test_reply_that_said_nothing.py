"""A reply stopped, interrupted or failed before its first token said nothing (issue 38, a real-window
session): it went to the model as an empty assistant turn, and the demo then answered the old question
instead of the new one (4 times in 7). No later reply is asked with it, nor with the question it left
unanswered; a reply that said anything (a word, a thought, a tool round) stays a turn."""

import pytest

from app.conversations import Conversations
from app.state.history import History


class _Front:
    """What Conversations reads of the chat controller to list a chat's turns (app/controller.py)."""

    def __init__(self, history):
        self.history = history
        self.sig_reply_done = self

    def connect(self, slot):
        pass


@pytest.fixture
def chats(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    yield Conversations(_Front(h))
    h.close()


def _chat(chats, turns) -> int:
    """A chat of (role, content, thinking, meta) turns after one exchange that happened."""
    h = chats.history
    cid = h.new_conversation().id
    h.add_message(cid, "user", "What is 1 + 1?")
    h.add_message(cid, "assistant", "1 + 1 = 2.", "1+1=2", {"finish_reason": "end_of_turn"})
    for role, content, thinking, meta in turns:
        h.add_message(cid, role, content, thinking, meta)
    return cid


EMPTY = [("stopped", ""), ("interrupted", ""), ("error", ""), ("stopped", "  \n"), ("length", "")]


@pytest.mark.parametrize("reason,content", EMPTY)
def test_a_reply_that_said_nothing_and_its_question_are_not_sent(chats, reason, content):
    cid = _chat(chats, [("user", "What is 22 + 35?", "", {}),
                        ("assistant", content, "", {"finish_reason": reason}),
                        ("user", "What is 40 + 41?", "", {})])
    sent = chats.chat_messages(cid)
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "What is 1 + 1?"), ("assistant", "1 + 1 = 2."), ("user", "What is 40 + 41?")]


def test_several_in_a_row_all_go_and_the_system_prompt_stays(chats):
    h = chats.history
    cid = h.new_conversation(system_prompt="Be brief.").id
    for q in ("a?", "b?", "c?"):
        h.add_message(cid, "user", q)
        h.add_message(cid, "assistant", "", "", {"finish_reason": "stopped"})
    h.add_message(cid, "user", "d?")
    assert [(m["role"], m["content"]) for m in chats.chat_messages(cid)] == [("system", "Be brief."), ("user", "d?")]


@pytest.mark.parametrize("content,thinking,meta", [
    ("4", "", {"finish_reason": "stopped"}),  # a word of answer
    ("", "22+35: 2+5=7", {"finish_reason": "stopped"}),  # a thought cut before the answer
    ("", "", {"finish_reason": "interrupted",
              "tool_rounds": [{"thinking": "", "answer": "", "calls": [
                  {"name": "calculate", "arguments": {"expression": "22+35"}, "content": "57", "ok": True}]}]}),
])
def test_a_reply_that_said_anything_stays_a_turn(chats, content, thinking, meta):
    cid = _chat(chats, [("user", "What is 22 + 35?", "", {}), ("assistant", content, thinking, meta),
                        ("user", "And 40 + 41?", "", {})])
    sent = chats.chat_messages(cid)
    assert [m["content"] for m in sent if m["role"] == "user"] == ["What is 1 + 1?", "What is 22 + 35?", "And 40 + 41?"]
    said = [m for m in sent if m["role"] == "assistant"][-1]
    assert said["content"] == content and said.get("reasoning_content", "") == thinking


def test_regenerating_the_reply_that_said_nothing_asks_its_question_again(chats):
    cid = _chat(chats, [("user", "What is 22 + 35?", "", {})])
    empty = chats.history.add_message(cid, "assistant", "", "", {"finish_reason": "stopped"})
    sent = chats.chat_messages(cid, before=empty.id)  # Regenerate asks with what came before the reply
    assert sent[-1] == {"role": "user", "content": "What is 22 + 35?"}


@pytest.mark.parametrize("content,thinking,says", [("", "", True), ("  ", "", True), ("4", "", False),
                                                   ("", "22+35", False)])
def test_the_reply_says_so_in_the_window(qtbot, chats, content, thinking, says):
    from app.widgets.chat_view import ChatView

    cid = _chat(chats, [("user", "What is 22 + 35?", "", {}),
                        ("assistant", content, thinking, {"finish_reason": "stopped", "answer_submodel": "1.5M"})])
    view = ChatView()
    qtbot.addWidget(view)
    view.show_chat(cid, chats.history.messages(cid), None)
    info = view.widgets[-1].info.text()
    assert info.startswith("1.5M · stopped") and ("nothing written: left out with its question" in info) == says


@pytest.mark.parametrize("status", ["asking", "running", "pending"])
def test_a_finished_replys_call_left_in_flight_reads_stopped(qtbot, chats, status):
    """Killed while a consent dialog was open, the call read "waiting for your consent…" after the restart,
    though nothing waited any more (a real-window session)."""
    from app.widgets.chat_view import ChatView

    call = {"id": "c1", "name": "calculate", "server": "calculator", "arguments": {"expression": "456+789"},
            "content": "", "is_error": False, "status": status}
    meta = {"finish_reason": "interrupted", "answer_submodel": "1.5M",
            "tool_rounds": [{"thinking": "456+789", "answer": "", "calls": [call]}]}
    cid = _chat(chats, [("user", "What is 456 + 789?", "", {}), ("assistant", "", "456+789", meta)])
    view = ChatView()
    qtbot.addWidget(view)
    view.show_chat(cid, chats.history.messages(cid), None)
    shown = [c.toggle.text() for c in view.widgets[-1].tools.calls]
    assert len(shown) == 1 and shown[0].endswith("· stopped") and "consent" not in shown[0], shown
