"""The remote client against a stand-in server (tests/remote_stub.py) that misbehaves on purpose: slow,
dropped mid-stream, lying sizes, junk SSE, error statuses, a dead address; and the two modes a plain
server gets (one model; `ID:SUBMODEL` pairs). Each failure is one line in the reply's Done, with the
text that came before it kept; nothing hangs (every wait is bounded by the client's timeouts)."""

import json
import re
import socket
import threading

import pytest

from runtime.controls import Controls
from runtime.depth import find_level
from runtime.errors import UsageError
from runtime.events import END_OF_TURN, ERROR, STOPPED, Done, Switch, Token
from runtime.generate import ChatRequest
from runtime.remote.client import RemoteError, RemoteServer, Timeouts, parse_base_url
from runtime.remote.engine import RemoteEngine
from runtime.remote.models import PAIRS, SINGLE, choices, describe, parse_listing
from runtime.remote.sse import SseError, SseLimits, events
from runtime.sampling import SamplingSettings
from tests.remote_stub import RemoteStub, chunk, sse

QUESTION = ({"role": "user", "content": "hi"},)
FAST = Timeouts(connect=2.0, first_byte=0.3, between_chunks=0.3)
DONE = b"data: [DONE]\n\n"


def request(think=None, answer="star", budget=0, max_new=64) -> ChatRequest:
    return ChatRequest(QUESTION, think, answer, budget, max_new, SamplingSettings(0.0))


def reply(stub, req=None, model="star", controls=None, **server) -> list:
    engine = RemoteEngine.connect(RemoteServer(stub.url, server.pop("key", None), server.pop("timeouts", FAST),
                                               **server), model)
    return list(engine.stream(req or request(), controls))


def answer_script(*texts, finish="stop"):
    return lambda body: [sse(chunk(content=t)) for t in texts] + [sse(chunk(finish=finish)), DONE]


# ---------------------------------------------------------------------- addresses and listings


@pytest.mark.parametrize("url", ["ftp://h", "http://user:pw@h:8000", "http://h:99999", "http://h?x=1", "", "h:8000"])
def test_a_bad_address_is_one_line(url):
    with pytest.raises(RemoteError) as e:
        parse_base_url(url)
    assert "\n" not in str(e.value)


def test_an_address_gets_its_v1_once():
    assert parse_base_url("http://gpu-box:8000")[1:] == ("gpu-box", 8000, "/v1")
    assert parse_base_url("https://llm.example.com/v1/")[1:] == ("llm.example.com", 443, "/v1")


def test_one_model_is_single_with_its_context_and_auto_is_unavailable_with_the_reason():
    with RemoteStub([{"id": "star", "object": "model", "max_model_len": 4096}]) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url), "star")
    assert engine.model.mode == SINGLE and engine.max_context == 4096 and engine.status().context_known
    auto = next(s for s in engine.depth_levels() if s.name == "Auto")
    assert not auto.available and "does not stream" in auto.unavailable
    with pytest.raises(UsageError, match="cannot run here"):
        find_level(engine.depth_levels(), "Auto")
    assert engine.default_depth() == "Balanced"


def test_llama_cpp_context_and_pairs_are_grouped():
    """llama.cpp's context is the one it serves (meta.n_ctx), not n_ctx_train (its converter writes 2^20
    for every NemotronH, and budgets past the real context met a 400)."""
    models = [{"id": "star"}, {"id": "star:small", "owned_by": "llamacpp",
                               "meta": {"n_ctx": 2048, "n_ctx_train": 1 << 20}}, {"id": "star:big"}]
    with RemoteStub(models) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url), "star")
    assert engine.model.mode == PAIRS and engine.submodels_by_size() == ["small", "big"]
    assert engine.max_context == 2048 and engine.model.model_id("big") == "star:big"
    with RemoteStub([{"id": "star", "meta": {"n_ctx_train": 1 << 20}}]) as stub:
        assert RemoteEngine.connect(RemoteServer(stub.url), "star").status().context_known is False


BUDGET_FIELDS = ("thinking_token_budget", "thinking_budget_tokens")


@pytest.mark.parametrize("entry, pages, kind, sent", [
    ({"owned_by": "llamacpp", "meta": {"n_ctx": 4096}}, {}, "llama.cpp", {"thinking_budget_tokens"}),
    ({"owned_by": "vllm", "max_model_len": 4096}, {}, "vLLM", {"thinking_token_budget"}),
    ({}, {"/props": {"default_generation_settings": {"n_ctx": 4096}, "build_info": "b1"}}, "llama.cpp",
     {"thinking_budget_tokens"}),
    ({}, {"/version": {"version": "0.32.0"}}, "vLLM", {"thinking_token_budget"}),
    ({}, {}, "an OpenAI-compatible server", set(BUDGET_FIELDS)),
    ({"owned_by": "someone"}, {"/props": {"other": 1}, "/version": {"version": 3}}, "an OpenAI-compatible server",
     set(BUDGET_FIELDS)),
])
def test_the_budget_goes_in_the_field_the_server_reads(entry, pages, kind, sent):
    """Issue 39: the client sent only vLLM's thinking_token_budget, which llama.cpp ignores (Quick and Max
    gave the same reply). The server is asked what it is (its listing, llama.cpp's /props, vLLM's
    /version), and a server that does not say gets both fields."""
    def script(body):
        return [sse(chunk(reasoning="w ")) for _ in range(12)] + [sse(chunk(content="ok")),
                                                                  sse(chunk(finish="stop")), DONE]
    with RemoteStub([{"id": "star", **entry}], script, pages=pages) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        done = list(engine.stream(request("star", "star", budget=12, max_new=100)))[-1]
    assert engine.kind.name == kind
    assert {f for f in BUDGET_FIELDS if f in stub.bodies[0]} == sent
    assert all(stub.bodies[0][f] == 12 for f in sent)
    assert done.budget_hit and done.thinking_end == "budget"  # the server's budget ended it: 12 tokens
    assert ("/props" in stub.gets) == (entry == {} or "owned_by" in entry and entry["owned_by"] == "someone")


def test_a_router_listing_only_sized_submodels_offers_their_group_smallest_first():
    listing = parse_listing({"data": [{"id": "star:30B"}, {"id": "star:12B"}, {"id": "other"}]})
    assert choices(listing) == ["star:30B", "star:12B", "other", "star"]
    model = describe(listing, "star")
    assert (model.mode, model.submodels, model.model_id("12B")) == (PAIRS, ("12B", "30B"), "star:12B")


@pytest.mark.parametrize("listing, words", [
    (b'{"data": [{"id": "bad\\u001bname"}]}', "not a short printable name"),
    (b'{"data": []}', "lists no models"),
    (b'{"models": []}', "no list of models"),
    (b"<html>not json</html>", "not the API's JSON"),
    (b" " * (5 * 1024 * 1024), "announced an answer"),
])
def test_a_listing_that_lies_is_refused_in_one_line(listing, words):
    with RemoteStub([], models_raw=listing) as stub:
        with pytest.raises(RemoteError, match=words):
            RemoteEngine.connect(RemoteServer(stub.url), "star")


def test_a_listing_that_never_comes_is_one_line_after_the_answer_timeout():
    with RemoteStub([{"id": "star"}], models_delay=2.0) as stub:
        with pytest.raises(RemoteError, match="did not answer within 0.3 s"):
            RemoteEngine.connect(RemoteServer(stub.url, timeouts=Timeouts(first_byte=60.0, answer=0.3)), "star")


def test_an_unknown_model_names_what_the_server_has():
    with RemoteStub([{"id": "star"}, {"id": "other"}]) as stub:
        with pytest.raises(RemoteError, match="has no model 'gpt'.*'star', 'other'"):
            RemoteEngine.connect(RemoteServer(stub.url), "gpt")


def test_a_dead_server_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the client connects: nothing listens there
    with pytest.raises(RemoteError, match="nothing answers at 127.0.0.1:.*start the server"):
        RemoteEngine.connect(RemoteServer(f"http://127.0.0.1:{port}", timeouts=FAST), "star")


# ---------------------------------------------------------------------- replies on one model


def test_one_model_thinks_by_the_servers_budget_and_answers():
    def script(body):
        return [sse(chunk(reasoning="so ")), sse(chunk(reasoning="45\n")), sse(chunk(content="\n77")),
                sse(chunk(content="!")), sse(chunk(finish="stop")), DONE]
    with RemoteStub([{"id": "star", "max_model_len": 4096}], script) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")
        level = find_level(engine.depth_levels(), "Balanced")
        events_ = list(engine.stream(request(level.think, level.answer, level.budget)))
        off = list(engine.stream(request()))
    body, off_body = stub.bodies
    assert body["chat_template_kwargs"] == {"enable_thinking": True} and body["reasoning_effort"] == "medium"
    assert body["thinking_token_budget"] == level.budget == 256 and body["stream"] is True
    assert off_body["chat_template_kwargs"] == {"enable_thinking": False} and "thinking_token_budget" not in off_body
    done = events_[-1]
    assert [(e.phase, e.text) for e in events_ if isinstance(e, Token)] == [
        ("thinking", "so "), ("thinking", "45\n"), ("answer", "77"), ("answer", "!")]
    assert (done.finish_reason, done.thinking_text, done.answer_text, done.thinking_end) == (
        END_OF_TURN, "so 45\n", "77!", "model")
    assert done.progress.thinking_tokens == 2 and done.progress.answer_tokens == 2 and done.ttft_ms > 0
    assert off[-1].think_submodel is None


# ---------------------------------------------------------------------- ID:SUBMODEL pairs


def pairs_script(answerer_thinks=False):
    def script(body):
        if body["model"] == "star:small":  # an endless thought, one word a chunk, a line end every fourth
            return [sse(chunk(reasoning="w\n" if i % 4 == 3 else "w ")) for i in range(40)] + [DONE]
        if answerer_thinks:
            return [sse(chunk(reasoning="again")), sse(chunk(finish="stop")), DONE]
        return [sse(chunk(content="\nfine")), sse(chunk(finish="stop")), DONE]
    return script


def test_pairs_think_under_the_budget_then_the_answerer_continues_the_same_thought():
    models = [{"id": "star"}, {"id": "star:small"}, {"id": "star:big"}]
    with RemoteStub(models, pairs_script()) as stub:
        events_ = reply(stub, request("small", "big", budget=6, max_new=200))
    think_body, answer_body = stub.bodies
    assert think_body["model"] == "star:small" and think_body["chat_template_kwargs"] == {"enable_thinking": True}
    thought = "w w w w\nw w w w\n"  # the first line end after 6 tokens ends it
    assert answer_body["model"] == "star:big" and answer_body["continue_final_message"] is True
    assert answer_body["add_generation_prompt"] is False
    assert answer_body["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": thought[:-1]}
    switch = next(e for e in events_ if isinstance(e, Switch))
    assert (switch.from_submodel, switch.to_submodel, switch.reason, switch.reprefill_tokens) == ("small", "big",
                                                                                                    "answer", 8)
    done = events_[-1]
    assert (done.thinking_text, done.answer_text, done.budget_hit, done.thinking_end) == (thought, "fine", True,
                                                                                          "budget")
    assert dict(done.thinking_by_submodel) == {"small": 8} and done.switch_to == "big"


def test_pairs_on_llama_cpp_continue_the_content_and_drop_the_echoed_close():
    """llama.cpp continues a final turn with a thought and no text as more thought unless told
    continue_final_message "content"; then it echoes the thought's </think> before the answer."""
    def script(body):
        if body["model"] == "star:small":
            return [sse(chunk(reasoning="w\n" if i % 4 == 3 else "w ")) for i in range(40)] + [DONE]
        return [sse(chunk(content="</think>")), sse(chunk(content="\nfine")), sse(chunk(finish="stop")), DONE]
    models = [{"id": "star"}, {"id": "star:small", "owned_by": "llamacpp"}, {"id": "star:big", "owned_by": "llamacpp"}]
    with RemoteStub(models, script) as stub:
        done = reply(stub, request("small", "big", budget=6, max_new=200))[-1]
    answer_body = stub.bodies[-1]
    assert answer_body["continue_final_message"] == "content" and answer_body["add_generation_prompt"] is False
    assert (done.finish_reason, done.answer_text, done.budget_hit) == (END_OF_TURN, "fine", True)


def test_a_server_that_does_not_continue_the_thought_is_one_line():
    models = [{"id": "star"}, {"id": "star:small"}, {"id": "star:big"}]
    with RemoteStub(models, pairs_script(answerer_thinks=True)) as stub:
        done = reply(stub, request("small", "big", budget=6, max_new=200))[-1]
    assert done.finish_reason == ERROR and "continue_final_message" in done.error and "thought again" in done.error
    assert done.thinking_text == "w w w w\nw w w w\n"  # kept


# ---------------------------------------------------------------------- faults: each one line, partial text kept


@pytest.mark.parametrize("status, extra, words", [
    (401, {}, "refused the API key \\(401\\): it said 'bad key'; enter the key"),
    (403, {}, "refused the API key \\(403\\)"),
    (404, {}, "has no 127.0.0.1:\\d+/v1/chat/completions \\(404\\)"),
    (429, {"Retry-After": "7"}, "busy \\(429\\).*try again in 7 s"),
    (429, {"Retry-After": "soon"}, "try again in a moment"),
    (500, {}, "failed \\(500\\).*look at its log"),
    (503, {}, "failed \\(503\\)"),
])
def test_error_statuses_are_one_line_each(status, extra, words):
    body = b'{"error": {"message": "bad key"}}' if status == 401 else b'{"detail": "x\\ny"}'
    with RemoteStub([{"id": "star"}], lambda b: [("status", status, body, extra)]) as stub:
        done = reply(stub)[-1]
    assert isinstance(done, Done) and done.finish_reason == ERROR
    assert "\n" not in done.error
    assert re.search(words, done.error), done.error


@pytest.mark.parametrize("steps, words", [
    ([("sleep", 1.0)], "sent nothing for 0.3 s"),  # slow to start
    ([sse(chunk(content="par")), ("sleep", 1.0), sse(chunk(content="t"))], "sent nothing for 0.3 s"),  # stalls
    ([sse(chunk(content="par")), ("drop",)], "dropped the connection|ended the stream"),
    ([("length", 100000), sse(chunk(content="par")), ("drop",)], "dropped the connection"),  # lies about its size
    ([sse(chunk(content="par"))], "ended the stream before the reply ended"),  # no finish, no [DONE]
    ([("close",), sse(chunk(content="par")), ("sleep", 1.0)], "sent nothing for 0.3 s"),  # Connection: close
    ([sse(chunk(content="par")), b"junk line\n\n"], "broken stream \\(a line is not an SSE field"),
    ([sse(chunk(content="par")), b"data: {not json\n\n"], "broken stream \\(an event is not JSON"),
    ([sse(chunk(content="par")), sse([1, 2])], "not a JSON object"),
    ([sse(chunk(content="par")), sse({"choices": "many"})], "without one choice"),
    ([sse(chunk(content="par")), sse(chunk(content=7))], "not a string"),
    ([sse(chunk(content="par")), sse({"error": {"message": "out of memory\x1b[2J"}})],
     "failed mid-reply: 'out of memory\\\\x1b\\[2J'"),
    ([sse(chunk(content="par")), b"data: " + b"x" * 5000 + b"\n\n"], "a line is longer than 4096 bytes"),
])
def test_a_misbehaving_stream_ends_the_reply_in_one_line_keeping_what_came(steps, words):
    with RemoteStub([{"id": "star"}], lambda b: steps) as stub:
        done = reply(stub, sse_limits=SseLimits(line_bytes=4096))[-1]
    assert done.finish_reason == ERROR and "\n" not in done.error
    assert re.search(words, done.error), done.error
    if steps and steps[0] != ("sleep", 1.0) and steps[0][0] != "length":
        assert done.answer_text == "par"


@pytest.mark.parametrize("framing", [[], [("close",)]])  # chunked, or a body that ends with the connection
def test_stop_mid_stream_shuts_the_connection_and_keeps_the_partial_reply(framing):
    steps = framing + [sse(chunk(content="par")), ("sleep", 30.0), sse(chunk(content="t"))]
    controls = Controls()
    slow = Timeouts(connect=2.0, first_byte=60.0, between_chunks=60.0)
    with RemoteStub([{"id": "star"}], lambda b: steps) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=slow), "star")
        out = []
        for event in engine.stream(request(), controls):
            out.append(event)
            if isinstance(event, Token):
                threading.Timer(0.1, controls.stop).start()  # from another thread, as the window does
    done = out[-1]
    assert (done.finish_reason, done.answer_text, done.error) == (STOPPED, "par", None)


def test_an_elastic_server_that_lies_about_a_switch_is_refused():
    models = [{"id": "star", "elastic": {"submodels": ["a", "b"], "depths": ["Off", "Max"], "max_context": 512}}]
    steps = [sse(chunk(reasoning="x")), sse({**chunk(content="y"), "elastic": {"switch": {
        "from": "a", "to": "9B", "reprefill_tokens": 3, "ms": 1.0}}}), sse(chunk(finish="stop")), DONE]
    with RemoteStub(models, lambda b: steps) as stub:
        done = reply(stub, request("a", "b", budget=5))[-1]
    assert done.finish_reason == ERROR and "told a switch" in done.error and done.thinking_text == "x"


def test_the_key_is_sent_as_a_bearer_token_and_never_in_a_message():
    seen = []

    def script(body):
        return [("status", 401, b"{}")]
    with RemoteStub([{"id": "star"}], script) as stub:
        stub.on_headers = seen.append
        done = reply(stub, key="sk-secret")[-1]
    assert "sk-secret" not in done.error
    assert seen and all(h.get("Authorization") == "Bearer sk-secret" for h in seen)
    with pytest.raises(RemoteError, match="one line of printable"):
        RemoteServer("http://h", "two words")


# ---------------------------------------------------------------------- the SSE reader alone


def test_sse_framing_crlf_split_cr_comments_and_done():
    raw = [b": keep-alive\r\n\r\ndata: {\"a\"", b": 1}\r", b"\n\r\nevent: x\rdata: {\"b\": 2}\r\r", DONE, sse({"c": 3})]
    assert list(events(raw)) == [{"a": 1}, {"b": 2}]


def test_sse_bounds():
    with pytest.raises(SseError, match="more than 2 events"):
        list(events([sse({})] * 3, SseLimits(events=2)))
    with pytest.raises(SseError, match="longer than 100 bytes"):
        list(events([sse({"a": "x" * 200})], SseLimits(total_bytes=100)))
    with pytest.raises(SseError, match="larger than 10 bytes"):
        list(events([b"data: 1234\ndata: 5678\ndata: 9\n\n"], SseLimits(event_bytes=10)))
    with pytest.raises(SseError, match="not UTF-8"):
        list(events([b"data: \xff\n\n"]))


# ---------------------------------------------------------------------- the command line


def test_generate_remote_names_the_models_it_needs_one_of_in_one_line(capsys):
    from runtime import cli

    with RemoteStub([{"id": "star"}, {"id": "other"}], answer_script("hi")) as stub:
        assert cli.main(["generate", "--remote", stub.url, "--prompt", "hi"]) == 2
        assert "--remote needs --model: the server at 127.0.0.1:" in capsys.readouterr().err
        assert cli.main(["generate", "--remote", stub.url, "--model", "star", "--prompt", "hi", "--json"]) == 0
        lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["token", "done"]
    assert cli.main(["generate", "--checkpoint", "x", "--model", "star", "--prompt", "hi"]) == 2
    assert "go with --remote" in capsys.readouterr().err


@pytest.mark.parametrize("delta, req, part", [
    ({"reasoning": "first, the tens"}, request(think="star", budget=32), "thought"),
    ({"content": "par"}, request(), "answer"),
])
def test_a_drop_is_said_of_the_part_of_the_reply_it_cut(delta, req, part):
    """A server that dies while the model thinks cut the thought, not the answer (issue 38, item 8)."""
    steps = [("length", 100000), sse(chunk(**delta)), ("drop",)]  # the length makes the drop certain
    with RemoteStub([{"id": "star"}], lambda b: steps) as stub:
        done = reply(stub, req)[-1]
    other = "answer" if part == "thought" else "thought"
    assert done.finish_reason == ERROR and f"dropped the connection mid-{part} " in done.error, done.error
    assert f"mid-{other}" not in done.error and "\n" not in done.error
    assert (done.thinking_text if part == "thought" else done.answer_text) == next(iter(delta.values()))
