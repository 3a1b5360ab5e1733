"""Continue on a remote engine (issue 38): a reply cut by its token limit goes on from where it stopped,
where the engine can say so (runtime/remote/continuation.py). The stand-in server is a model that knows
the whole reply: it goes on from the final assistant turn only when the request asks it to in the fields
its engine reads (llama.cpp's prefilled turn, vLLM's `continue_final_message`); asked otherwise, it starts
the reply over, as a real server would, and the joined text would say so twice. Every case checks that
the first part and the continued part join into the whole reply, nothing lost or doubled."""

import json

import pytest

from runtime.errors import ElasticError
from runtime.events import Done
from runtime.generate import ChatRequest
from runtime.remote.client import RemoteServer, Timeouts
from runtime.remote.engine import RemoteEngine
from runtime.reply_record import Continuation
from runtime.sampling import SamplingSettings
from tests.remote_stub import RemoteStub, chunk, sse

QUESTION = ({"role": "user", "content": "What is 45 + 23 - 17 + 9?"},)
THOUGHT = "45 + 23 = 68.\n68 - 17 = 51.\n51 + 9 = 60.\n"
ANSWER_TEXT = "The sum is 60: add 45 and 23, take 17 away, and add 9."
FAST = Timeouts(connect=5.0, first_byte=30.0, between_chunks=30.0)
LLAMA = [{"id": "star", "owned_by": "llamacpp"}]
VLLM = [{"id": "star", "owned_by": "vllm"}]
LLAMA_PAIRS = [{"id": "star", "owned_by": "llamacpp"}, {"id": "star:small", "owned_by": "llamacpp"},
               {"id": "star:big", "owned_by": "llamacpp"}]
PIECE = 3  # characters a streamed token carries


def pieces(text: str) -> list[str]:
    return [text[i:i + PIECE] for i in range(0, len(text), PIECE)]


def stream(thought: str, answer: str) -> list:
    events = [sse(chunk(reasoning=p)) for p in pieces(thought)] + [sse(chunk(content=p)) for p in pieces(answer)]
    return events + [sse(chunk(finish="stop")), b"data: [DONE]\n\n"]


def model_that_knows_the_reply(kind: str):
    """A script: the whole reply, or the rest of it when the request continues a final assistant turn in
    the way `kind` ("llama.cpp" or "vLLM") reads."""
    def script(body):
        last = body["messages"][-1]
        if last["role"] != "assistant":
            return stream(THOUGHT, ANSWER_TEXT)
        thought, answer = last.get("reasoning_content", ""), last["content"]
        goes_on = (body.get("continue_final_message") in (True, "content") if kind == "vLLM"
                   else body.get("add_generation_prompt") is False)
        if not goes_on:  # a new reply after a turn that ended
            return stream(THOUGHT, ANSWER_TEXT)
        if kind == "llama.cpp" and not answer and "continue_final_message" not in body:
            assert THOUGHT.startswith(thought)  # the open thought goes on
            return stream(THOUGHT[len(thought):], ANSWER_TEXT)
        assert ANSWER_TEXT.startswith(answer) and body["chat_template_kwargs"]["enable_thinking"] == bool(thought)
        return stream("", ANSWER_TEXT[len(answer):])
    return script


def continued(models, kind, cont: Continuation, think="star", answer="star", budget=None, max_new=400):
    with RemoteStub(models, model_that_knows_the_reply(kind)) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        request = ChatRequest(QUESTION, think, answer, budget, max_new, SamplingSettings(0.0), continued=cont)
        events = list(engine.stream(request))
    done = events[-1]
    assert isinstance(done, Done) and done.error is None, done.error
    return done, stub


@pytest.mark.parametrize("models,kind", [(LLAMA, "llama.cpp"), (VLLM, "vLLM")])
def test_an_answer_cut_after_its_thought_goes_on_without_thinking_again(models, kind):
    head = ANSWER_TEXT[:17]
    done, stub = continued(models, kind, Continuation(THOUGHT, head))
    assert head + done.answer_text == ANSWER_TEXT and not done.thinking_text and done.finish_reason == "end_of_turn"
    body = stub.bodies[-1]
    assert body["messages"][:-1] == list(QUESTION)
    assert body["messages"][-1] == {"role": "assistant", "content": head, "reasoning_content": THOUGHT}
    assert body["add_generation_prompt"] is False and stub.posts == ["/v1/chat/completions"]


def test_an_answer_cut_without_a_thought_goes_on():
    head = ANSWER_TEXT[:5]
    done, stub = continued(VLLM, "vLLM", Continuation("", head), think=None, budget=0)
    assert head + done.answer_text == ANSWER_TEXT and not done.thinking_text
    assert stub.bodies[-1]["messages"][-1] == {"role": "assistant", "content": head}
    assert stub.bodies[-1]["continue_final_message"] is True


def test_a_thought_cut_mid_way_thinks_on_with_its_budget_left_then_answers():
    """llama.cpp: the open thought goes on, with what is left of its budget, not the reply's small limit."""
    head = THOUGHT[:10]
    cont = Continuation(head, "", thinking_done=False, thinking_tokens=30)
    done, stub = continued(LLAMA, "llama.cpp", cont, budget=100, max_new=8)
    assert head + done.thinking_text == THOUGHT  # 19 tokens of thought, past the reply's 8
    assert ANSWER_TEXT.startswith(done.answer_text) and len(done.answer_text) >= 8 * PIECE
    body = stub.bodies[-1]
    assert body["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": head}
    assert body["thinking_budget_tokens"] == 70 and body["max_tokens"] >= 70 + 8
    assert "continue_final_message" not in body and body["chat_template_kwargs"]["enable_thinking"] is True


def test_two_models_think_on_then_the_answerer_answers_after_the_whole_thought():
    head = THOUGHT[:10]
    done, stub = continued(LLAMA_PAIRS, "llama.cpp", Continuation(head, "", thinking_done=False), think="small",
                           answer="big", budget=1000)
    assert head + done.thinking_text == THOUGHT and done.answer_text == ANSWER_TEXT
    thinker, answerer = stub.bodies
    assert thinker["model"] == "star:small" and thinker["messages"][-1]["reasoning_content"] == head
    assert answerer["model"] == "star:big" and answerer["continue_final_message"] == "content"
    assert answerer["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": THOUGHT.rstrip("\n")}


@pytest.mark.parametrize("models,cont,said", [
    (VLLM, Continuation(THOUGHT[:10], "", thinking_done=False), "not with a thought cut mid-way"),
    ([{"id": "star"}], Continuation("", "The"), "not known to go on"),
    ([{"id": "star", "elastic": {"submodels": ["a", "b"], "depths": ["Off"], "max_context": 4096}}],
     Continuation("", "The"), "Elastic Chat server"),
])
def test_an_engine_that_cannot_go_on_is_refused_in_one_line_before_any_request(models, cont, said):
    with RemoteStub(models, model_that_knows_the_reply("vLLM")) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        answer = engine.model.submodels[-1]
        assert said in engine.continue_refusal(cont)
        request = ChatRequest(QUESTION, answer if cont.thinks_on else None, answer, None, 40,
                              SamplingSettings(0.0), continued=cont)
        with pytest.raises(ElasticError, match=said):
            list(engine.stream(request))
    assert stub.bodies == [] and "\n" not in engine.continue_refusal(cont)


def test_the_stand_in_starts_over_when_not_asked_to_go_on():
    """The joins above can fail: asked without the fields, the stand-in says the whole reply again."""
    script = model_that_knows_the_reply("vLLM")
    body = {"messages": [*QUESTION, {"role": "assistant", "content": "The sum"}], "chat_template_kwargs": {}}
    said = [json.loads(e.removeprefix(b"data: ")) for e in script(body) if e.startswith(b"data: {")]
    text = "".join(d["choices"][0]["delta"].get("content", "") for d in said)
    assert text == ANSWER_TEXT  # "The sum" + this would say "The sum" twice
