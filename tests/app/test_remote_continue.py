"""Continue in the window with a model on a server (issue 38): a reply cut by Max reply tokens on a
llama.cpp server goes on, press after press, into the same message until it ends, and the message is the
whole reply, nothing lost or doubled. The stand-in (tests/remote_stub.py) honours max_tokens and goes on
from the final assistant turn only when asked in llama.cpp's fields; otherwise it starts over."""

import json

import pytest
from PySide6.QtCore import Qt

from app.state.settings import Sampling, Settings
from runtime.store.remote_sources import add_source
from tests.app_support import ask, make_window
from tests.remote_stub import RemoteStub, chunk, sse

WAIT_MS = 120000
ANSWER_TEXT = "The sum is 60: add 45 and 23, take 17 away, and add 9."
PIECE = 3  # characters a token carries
MAX_TOKENS = 4


def llama_cpp(holder):
    def script(body):
        path = holder[0].posts[-1]
        if path == "/apply-template":
            return [("status", 200, json.dumps({"prompt": "x"}).encode())]
        if path == "/tokenize":
            return [("status", 200, json.dumps({"tokens": [1]}).encode())]
        last = body["messages"][-1]
        said = ""
        if last["role"] == "assistant" and body.get("add_generation_prompt") is False \
                and body.get("continue_final_message") == "content":
            said = last["content"]
        assert ANSWER_TEXT.startswith(said)
        rest = ANSWER_TEXT[len(said):]
        pieces = [rest[i:i + PIECE] for i in range(0, len(rest), PIECE)]
        sent = pieces[:body["max_tokens"]]
        finish = "length" if len(pieces) > len(sent) else "stop"
        return [sse(chunk(content=p)) for p in sent] + [sse(chunk(finish=finish)), b"data: [DONE]\n\n"]
    return script


def continue_button(w):
    return next(x for x in reversed(w.chat.widgets) if x.role == "assistant").buttons["Continue"]


@pytest.mark.slow
def test_a_reply_cut_on_a_llama_cpp_server_continues_to_the_whole_reply(qtbot, home):
    holder = []
    listing = [{"id": "star", "owned_by": "llamacpp", "meta": {"n_ctx": 4096}}]
    with RemoteStub(listing, llama_cpp(holder)) as stub:
        holder.append(stub)
        w = make_window(qtbot, home, Settings(max_new_tokens=MAX_TOKENS, sampling=Sampling(temperature=0.0)))
        source = add_source(stub.url, "star", None)
        w.models.refresh()
        qtbot.waitUntil(lambda: w.models.row(source.spec) is not None, timeout=WAIT_MS)
        with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=WAIT_MS):
            w.models.use(source.spec)
        cut = ask(qtbot, w, "What is 45 + 23 - 17 + 9?", "Off")
        assert cut.meta["finish_reason"] == "length" and cut.content == ANSWER_TEXT[:MAX_TOKENS * PIECE]
        message, presses = cut, 0
        while message.meta["finish_reason"] == "length":
            assert presses < 20, "Continue never reached the end of the reply"  # bounded by the work
            qtbot.waitUntil(lambda: continue_button(w).isVisibleTo(w), timeout=WAIT_MS)
            with qtbot.waitSignal(w.controller.sig_reply_done, timeout=WAIT_MS) as done:
                qtbot.mouseClick(continue_button(w), Qt.MouseButton.LeftButton)
            message, presses = done.args[1], presses + 1
            assert message.id == cut.id and message.meta["finish_reason"] in ("length", "end_of_turn")
        assert message.content == ANSWER_TEXT and presses > 1
        assert message.meta["continued"] == presses
        chats = [b for p, b in zip(stub.posts, stub.bodies) if p == "/v1/chat/completions"]
        assert len(chats) == presses + 1 and chats[-1]["messages"][-1]["role"] == "assistant"
        w.close()
