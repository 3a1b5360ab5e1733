"""Continue (issue 38, item 9): a reply cut off by its token limit shows a Continue button (only that
reply), which goes on into the same message until the reply ends; its text is then exactly what one
longer reply gives (greedy, the bundled demo), its token counts add up, and a restart keeps it."""

import pytest
from PySide6.QtCore import Qt

from app.reply import continue_refusal, joined_meta
from app.state.history import Message
from app.state.settings import Sampling, Settings
from tests.app_support import ask, make_window

QUESTION = "What is 45 + 23 - 17 + 9?"
TIMEOUT_MS = 180000


def last_widget(w):
    return next(x for x in reversed(w.chat.widgets) if x.role == "assistant")


def continue_button(w):
    return last_widget(w).buttons["Continue"]


def press_continue_until_the_end(qtbot, w, cut: Message) -> tuple[Message, int]:
    """Presses the last reply's Continue until the reply ends; returns it and the presses it took."""
    message, presses = cut, 0
    while message.meta["finish_reason"] == "length":
        assert presses < 40, "Continue never reached the end of the reply"  # bounded by the work
        with qtbot.waitSignal(w.controller.sig_reply_done, timeout=TIMEOUT_MS) as done:
            qtbot.mouseClick(continue_button(w), Qt.MouseButton.LeftButton)
        message, presses = done.args[1], presses + 1
        assert message.id == cut.id  # the same reply, in the same message
    return message, presses


def assert_kept_after_a_restart(qtbot, w, data, whole: Message) -> None:
    cid = w.controller.chats.current
    w.close()
    again = make_window(qtbot, data)  # a restart keeps the joined reply, as one message
    again.controller.chats.select(cid)
    saved = [m for m in again.controller.history.messages(cid) if m.role == "assistant"]
    assert len(saved) == 1 and (saved[0].content, saved[0].thinking) == (whole.content, whole.thinking)
    assert saved[0].complete and saved[0].meta["finish_reason"] == "end_of_turn"
    assert last_widget(again).text == whole.content and not continue_button(again).isVisibleTo(again)
    again.close()


@pytest.mark.slow
def test_continue_goes_on_until_the_reply_is_what_one_longer_reply_gives(qtbot, tmp_path):
    data = tmp_path / "data"
    w = make_window(qtbot, data, Settings(max_new_tokens=400, sampling=Sampling(temperature=0.0)))
    whole = ask(qtbot, w, QUESTION, "Off")  # the reference: one reply with room to end
    assert whole.meta["finish_reason"] == "end_of_turn" and not continue_button(w).isVisibleTo(w)
    w.settings.max_new_tokens = 5
    w.new_chat()
    cut = ask(qtbot, w, QUESTION, "Off")
    assert cut.meta["finish_reason"] == "length" and cut.content and whole.content.startswith(cut.content)
    assert continue_button(w).isVisibleTo(w)
    message, presses = press_continue_until_the_end(qtbot, w, cut)
    assert presses > 1
    assert (message.content, message.thinking) == (whole.content, whole.thinking)
    assert message.meta["answer_tokens"] == whole.meta["answer_tokens"]
    assert message.meta["continued"] == presses and message.meta["depth"] == "Off"
    qtbot.waitUntil(lambda: not continue_button(w).isVisibleTo(w), timeout=TIMEOUT_MS)
    assert last_widget(w).text == whole.content
    assert_kept_after_a_restart(qtbot, w, data, whole)


@pytest.mark.slow
def test_a_reply_that_thought_continues_its_answer_without_thinking_again(qtbot, tmp_path):
    """A thought reply whose answer was cut: the demo's answers fit in what a reply keeps aside for its
    answer, so the cut reply is saved here as a smaller limit would have left it (its first answer tokens)."""
    data = tmp_path / "data"
    w = make_window(qtbot, data, Settings(max_new_tokens=400, sampling=Sampling(temperature=0.0)))
    whole = ask(qtbot, w, QUESTION, "Quick")
    assert whole.thinking and whole.meta["finish_reason"] == "end_of_turn"
    chat = w.controller.worker.engine.chat
    head = chat.decode(chat.encode_plain(whole.content)[:6])
    assert head and whole.content.startswith(head) and head != whole.content
    history, cid = w.controller.history, w.controller.history.new_conversation("cut").id
    history.add_message(cid, "user", QUESTION)
    # (7 answer tokens: the line break the model writes after </think> counts, though its text is dropped)
    cut_meta = {**whole.meta, "finish_reason": "length", "answer_tokens": 7,
                "answer_by_submodel": {whole.meta["answer_submodel"]: 7}}
    cut = history.add_message(cid, "assistant", head, whole.thinking, meta=cut_meta)
    w.controller.chats.select(cid)
    qtbot.waitUntil(lambda: continue_button(w).isVisibleTo(w), timeout=TIMEOUT_MS)
    w.settings.max_new_tokens = 5
    message, presses = press_continue_until_the_end(qtbot, w, cut)
    assert (message.content, message.thinking) == (whole.content, whole.thinking) and presses > 1
    assert message.meta["thinking_tokens"] == whole.meta["thinking_tokens"]  # it did not think again
    assert message.meta["answer_tokens"] == whole.meta["answer_tokens"]
    assert message.meta["think_submodel"] == whole.meta["think_submodel"]
    assert_kept_after_a_restart(qtbot, w, data, whole)


def message(mid: int, role: str, finish: str = "length", **meta) -> Message:
    return Message(mid, 1, role, "text", "", {"finish_reason": finish, **meta}, True)


def test_only_the_last_reply_cut_by_its_limit_can_continue():
    cut, ended, asked = message(2, "assistant"), message(4, "assistant", "end_of_turn"), message(3, "user")
    engine = object()
    assert continue_refusal(cut, [message(1, "user"), cut], engine, False) == ""
    assert "token limit" in continue_refusal(ended, [cut, asked, ended], engine, False)
    assert "last reply" in continue_refusal(cut, [cut, asked, message(5, "assistant")], engine, False)
    assert "streaming" in continue_refusal(cut, [cut], engine, True)
    assert "no model" in continue_refusal(cut, [cut], None, False)
    assert "tools" in continue_refusal(message(2, "assistant", tool_rounds=[{}]), [cut], engine, False)


def test_a_model_on_another_server_continues_where_its_engine_can_and_says_why_not_elsewhere():
    """The engine decides (runtime/remote/continuation.py): vLLM goes on with an answer, not a thought."""
    from runtime.api import RemoteEngine, RemoteServer
    from runtime.remote.models import SINGLE, RemoteModel
    from runtime.remote.server_kind import OTHER, VLLM

    model = RemoteModel("star", SINGLE, ("star",), (("star", "star"),), 4096)
    server = RemoteServer("http://127.0.0.1:9/v1")
    cut = message(2, "assistant")
    mid_thought = Message(2, 1, "assistant", "", "a thought cut", {"finish_reason": "length"}, True)
    assert continue_refusal(cut, [cut], RemoteEngine(server, model, VLLM), False) == ""
    assert "thought cut mid-way" in continue_refusal(mid_thought, [mid_thought], RemoteEngine(server, model, VLLM),
                                                     False)
    assert "not known to go on" in continue_refusal(cut, [cut], RemoteEngine(server, model, OTHER), False)


def test_a_continued_replys_counts_add_up():
    before = {"depth": "Quick", "think_submodel": "0.5M", "thinking_tokens": 10, "answer_tokens": 6,
              "thinking_by_submodel": {"0.5M": 10}, "answer_by_submodel": {"1.5M": 6}, "elapsed_ms": 100.0,
              "ttft_ms": 5.0, "finish_reason": "length", "thinking_end": "model", "switches": [{"to": "1.5M"}]}
    now = {"depth": "Quick", "think_submodel": None, "thinking_tokens": 0, "answer_tokens": 4,
           "thinking_by_submodel": {}, "answer_by_submodel": {"1.5M": 4}, "elapsed_ms": 50.0, "ttft_ms": 1.0,
           "finish_reason": "end_of_turn", "thinking_end": "", "switches": []}
    joined = joined_meta(before, now)
    assert (joined["thinking_tokens"], joined["answer_tokens"], joined["elapsed_ms"]) == (10, 10, 150.0)
    assert joined["answer_by_submodel"] == {"1.5M": 10} and joined["thinking_by_submodel"] == {"0.5M": 10}
    assert (joined["think_submodel"], joined["ttft_ms"], joined["thinking_end"]) == ("0.5M", 5.0, "model")
    assert joined["finish_reason"] == "end_of_turn" and joined["continued"] == 1
    assert joined["switches"] == [{"to": "1.5M"}] and "thinking_path" not in joined
    assert joined_meta(joined, now)["continued"] == 2


@pytest.mark.parametrize("first, second, expected", [
    ((101, 50.0), (51, 10.0), 150 / 7.0),  # 100 tokens in 2 s, then 50 in 5 s: 150 in 7 s, not 10 tok/s
    ((11, 20.0), (1, 0.0), 20.0),  # the continuation wrote one token: no decode speed of its own
    ((1, 0.0), (41, 8.0), 8.0),  # the cut part wrote one token
])
def test_a_continued_replys_speed_is_the_whole_replys(first, second, expected):
    """The header's tok/s of a continued reply: both parts' decoded tokens over both parts' decode time
    (it showed the continuation's speed alone, found in a real-window session)."""
    part = lambda tokens, speed: {"answer_tokens": tokens, "thinking_tokens": 0, "tokens_per_s": speed}  # noqa: E731
    assert joined_meta(part(*first), part(*second))["tokens_per_s"] == pytest.approx(expected, abs=1e-3)
    assert not joined_meta(part(1, 0.0), {"answer_tokens": 1}).get("tokens_per_s")  # no speed to show


@pytest.mark.slow
def test_a_continue_with_no_room_left_keeps_the_cut_reply_to_try_again(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=20, sampling=Sampling(temperature=0.0)))
    history, cid = w.controller.history, w.controller.history.new_conversation("long").id
    history.add_message(cid, "user", QUESTION)
    long_answer = "1 + 2 = 3. " * w.controller.worker.engine.max_context  # far past the context
    cut = history.add_message(cid, "assistant", long_answer, meta={"finish_reason": "length", "depth": "Off",
                                                                   "answer_submodel": "1.5M", "answer_tokens": 9})
    w.controller.chats.select(cid)
    errors = []
    w.controller.sig_error.connect(lambda text, _lower: errors.append(text))
    with qtbot.waitSignal(w.controller.sig_reply_done, timeout=TIMEOUT_MS) as done:
        qtbot.mouseClick(continue_button(w), Qt.MouseButton.LeftButton)
    message = done.args[1]
    assert message.id == cut.id and message.content == long_answer and message.meta["finish_reason"] == "length"
    assert any("context" in e for e in errors), errors
    saved = next(m for m in history.messages(cid) if m.id == cut.id)
    assert saved.complete and saved.content == long_answer
    qtbot.waitUntil(lambda: continue_button(w).isVisibleTo(w), timeout=TIMEOUT_MS)  # it can be tried again
    w.close()
