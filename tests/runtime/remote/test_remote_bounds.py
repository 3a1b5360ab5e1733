"""The remote client keeps its own bounds whatever the server does (issue 37, item 9): a reply stops at
the tokens the user asked for (a server that ignored `max_tokens` sent 234,639 tokens for 32), a stream
of events without text is cut, and every answer has a total deadline (a model list dripping a byte a
second held the CLI 203 s). The stand-in server is tests/remote_stub.py."""

import json
import re

import pytest

from runtime.events import ERROR, LENGTH, THINKING, Done, Token
from runtime.generate import ChatRequest
from runtime.remote.client import EXTRA_EVENTS, RemoteError, RemoteServer, Timeouts
from runtime.remote.engine import RemoteEngine
from runtime.remote.sse import SseLimits
from runtime.sampling import SamplingSettings
from tests.remote_stub import RemoteStub, chunk, sse

QUESTION = ({"role": "user", "content": "hi"},)
FAST = Timeouts(connect=2.0, first_byte=5.0, between_chunks=5.0)
SINGLE_MODELS = [{"id": "star"}]
ELASTIC_MODELS = [{"id": "star", "elastic": {"submodels": ["a", "b"], "depths": ["Off", "Max"], "max_context": 4096}}]
PAIRS_MODELS = [{"id": "star"}, {"id": "star:small"}, {"id": "star:big"}]
HANGUP_WAIT_S = 30  # how long a test waits for the stand-in to notice the hangup (it notices at once)


def tool_call_delta() -> dict:
    return {"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {
        "arguments": "a"}}]}, "finish_reason": None}]}


def forever(event) -> list:
    """A script that sends `event` until the client hangs up, ignoring max_tokens."""
    return lambda body: [("forever", sse(event), 0.0)]


# (listing, think, answer, budget, script, the phases the reply's tokens are in)
ENDLESS = {
    "one model, answer without end": (SINGLE_MODELS, None, "star", 0, forever(chunk(content="x")), "answer"),
    "one model, thought without end": (SINGLE_MODELS, "star", "star", None, forever(chunk(reasoning="x")),
                                       "thinking"),
    "one model, a thought then an endless answer": (
        SINGLE_MODELS, "star", "star", None,
        lambda body: [sse(chunk(reasoning="t")), ("forever", sse(chunk(content="x")), 0.0)], "both"),
    "one model, endless tool-call pieces": (SINGLE_MODELS, None, "star", 0, forever(tool_call_delta()), "none"),
    "elastic server, answer without end": (ELASTIC_MODELS, None, "b", 0, forever(chunk(content="x")), "answer"),
    "elastic server, thought without end": (ELASTIC_MODELS, "a", "b", 10**6, forever(chunk(reasoning="x")),
                                            "thinking"),
    "pairs, answerer without end": (
        PAIRS_MODELS, None, "big", 0, forever(chunk(content="x")), "answer"),
}


def request(think, answer, budget, max_new) -> ChatRequest:
    return ChatRequest(QUESTION, think, answer, budget, max_new, SamplingSettings(0.0))


@pytest.mark.parametrize("max_new", [1, 7, 40])
@pytest.mark.parametrize("case", list(ENDLESS))
def test_a_reply_stops_at_the_users_max_tokens_whatever_the_server_sends(case, max_new):
    models, think, answer, budget, script, phases = ENDLESS[case]
    with RemoteStub(models, script) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        events = list(engine.stream(request(think, answer, budget, max_new)))
        assert stub.hangups.wait(HANGUP_WAIT_S), "the client never hung up: the server went on generating"
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == LENGTH and done.error is None
    tokens = [e for e in events if isinstance(e, Token) and not e.forced]
    assert [b["max_tokens"] for b in stub.bodies] == [max_new]
    if phases == "none":  # tool-call pieces carry no text this reply shows, but each is a token all the same
        assert tokens == []
    elif phases == "both":
        assert len(tokens) <= 2 * max_new and {t.phase for t in tokens} <= {"thinking", "answer"}
    else:
        assert len(tokens) == max_new and {t.phase for t in tokens} == {phases}


def test_a_thinker_that_never_stops_is_cut_then_the_answerer_too():
    """Two models (ID:SUBMODEL): each request is held to its own max_tokens."""
    def script(body):
        return [("forever", sse(chunk(reasoning="w ") if body["model"] == "star:small" else chunk(content="x")),
                 0.0)]
    with RemoteStub(PAIRS_MODELS, script) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        events = list(engine.stream(request("small", "big", None, 12)))
    think_body, answer_body = stub.bodies
    thought = [e for e in events if isinstance(e, Token) and e.phase == THINKING and not e.forced]
    answered = [e for e in events if isinstance(e, Token) and e.phase == "answer"]
    assert len(thought) <= think_body["max_tokens"] == 12 and len(answered) <= answer_body["max_tokens"]
    assert events[-1].finish_reason == LENGTH


EMPTY = {
    "empty deltas": chunk(),
    "a role again and again": {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                       "finish_reason": None}]},
    "empty texts": chunk(content="", reasoning=""),
    "usage chunks": {"id": "x", "choices": [], "usage": {"completion_tokens": 1}},
}


@pytest.mark.parametrize("event", list(EMPTY.values()), ids=list(EMPTY))
@pytest.mark.parametrize("max_new", [1, 30])
def test_a_stream_of_events_without_text_is_cut_in_one_line(event, max_new):
    with RemoteStub(SINGLE_MODELS, lambda body: [sse(chunk(content="par")), ("forever", sse(event), 0.0)]) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        done = list(engine.stream(request(None, "star", 0, max_new)))[-1]
        assert stub.hangups.wait(HANGUP_WAIT_S)
    assert done.finish_reason == ERROR and "\n" not in done.error
    assert f"more than {max_new + EXTRA_EVENTS} events for a reply of at most {max_new} tokens" in done.error
    assert done.answer_text == "par"  # what came is kept


def test_an_honest_stream_with_its_extra_events_is_read_whole():
    """What vLLM sends for max_tokens 3: a role chunk, three tokens, the finish, the usage: nothing is cut."""
    steps = [sse({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "finish_reason": None}]}),
             *(sse(chunk(content=t)) for t in ("a", "b", "c")), sse(chunk(finish="length")),
             sse({"id": "x", "choices": [], "usage": {"completion_tokens": 3}}), b"data: [DONE]\n\n"]
    with RemoteStub(SINGLE_MODELS, lambda body: steps) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        done = list(engine.stream(request(None, "star", 0, 3)))[-1]
    assert (done.finish_reason, done.answer_text, done.error) == (LENGTH, "abc", None)


# ---------------------------------------------------------------------- the total deadline


# Each wait between reads is far above the drip (a busy PC does not trip it); only the total can end it.
DRIP = Timeouts(connect=0.5, first_byte=5.0, between_chunks=5.0, answer=1.5)


@pytest.mark.parametrize("headers", [False, True], ids=["the body drips", "the headers drip too"])
@pytest.mark.parametrize("drip", [0.02, 0.2])
def test_a_model_list_that_drips_is_cut_at_its_total_deadline(headers, drip):
    models = [{"id": f"model-{i}"} for i in range(200)]  # a listing of several kB: minutes at a byte a drip
    with RemoteStub(models, models_drip=drip, drip_headers=headers) as stub:
        with pytest.raises(RemoteError) as e:
            RemoteEngine.connect(RemoteServer(stub.url, timeouts=DRIP), "model-1")
        assert stub.hangups.wait(HANGUP_WAIT_S)
    assert re.search(r"did not finish its answer to /models within 2 s \(it sends too slowly", str(e.value))
    assert "\n" not in str(e.value)


def test_a_model_list_that_drips_fast_enough_is_read():
    with RemoteStub([{"id": "star"}], models_drip=0.001) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=Timeouts(answer=60.0)), "star")
    assert engine.model.id == "star"


STREAM_DRIP = Timeouts(connect=0.5, first_byte=2.0, between_chunks=2.0, per_token=0.05)


@pytest.mark.parametrize("steps", [
    [("forever", b":", 0.05)],  # a comment that never ends: no event, no stall
    [("forever", b": keep-alive\n", 0.05)],  # keep-alive comments forever
    [sse(chunk(content="par")), ("forever", b" ", 0.05)],  # a token, then an event that never completes
    [("forever", b"data: {\"id\": \"x\",", 0.05)],  # one event that grows without end (within its bound)
], ids=["a comment that never ends", "keep-alives forever", "after a token", "an event without end"])
def test_a_stream_that_drips_is_cut_at_its_total_deadline(steps):
    with RemoteStub(SINGLE_MODELS, lambda body: steps) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=STREAM_DRIP), "star")
        done = list(engine.stream(request(None, "star", 0, 4)))[-1]
        assert stub.hangups.wait(HANGUP_WAIT_S)
    total = STREAM_DRIP.total(4)
    assert done.finish_reason == ERROR and f"within {total:g} s (it sends too slowly" in done.error, done.error
    assert done.answer_text == ("par" if len(steps) > 1 else "")


def test_generate_remote_prints_no_more_tokens_than_asked(capsys):
    from runtime import cli

    with RemoteStub(SINGLE_MODELS, forever(chunk(content="x"))) as stub:
        assert cli.main(["generate", "--remote", stub.url, "--model", "star", "--prompt", "hi", "--json",
                         "--max-new-tokens", "32"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["type"] for line in lines] == ["token"] * 32 + ["done"]
    assert lines[-1]["finish_reason"] == LENGTH


# ---------------------------------------------------------------------- answers without end, within their size bounds


SMALL_SSE = SseLimits(line_bytes=4096, event_bytes=16 * 1024, events=10_000, total_bytes=1024 * 1024)


@pytest.mark.parametrize("steps, words", [
    ([("forever", b"x" * 1024, 0.0)], "a line is longer than 4096 bytes"),  # one line without end
    ([("forever", b"data: " + b"x" * 1024, 0.0)], "a line is longer than 4096 bytes"),  # one data line
    ([("forever", b"data: " + b"x" * 1000 + b"\n", 0.0)], "an event is larger than 16384 bytes"),  # no blank line
    ([sse(chunk(content="par")), ("forever", b":" + b"k" * 1000 + b"\n", 0.0)],
     "the stream is longer than 1048576 bytes"),  # comments only, fast: no deadline trips
], ids=["a huge single line", "a huge data line", "an event without end", "endless comments"])
def test_a_stream_without_end_is_cut_at_its_size_bounds(steps, words):
    with RemoteStub(SINGLE_MODELS, lambda body: steps) as stub:
        server = RemoteServer(stub.url, timeouts=FAST, sse_limits=SMALL_SSE)
        engine = RemoteEngine.connect(server, "star")
        done = list(engine.stream(request(None, "star", 0, 4)))[-1]
        assert stub.hangups.wait(HANGUP_WAIT_S)
    assert done.finish_reason == ERROR and words in done.error and "\n" not in done.error


def test_every_answer_has_a_finite_deadline_by_default():
    t = Timeouts()
    assert t.total() == t.connect + t.answer
    assert t.total(1) < t.total(4096) < float("inf")
