"""Ollama's API (runtime/server/ollama_api.py) through the official `ollama` Python client, on the demo
behind a real server: /api/chat and /api/generate whole and as NDJSON, think, tools, format with a
schema, options, logprobs; /api/tags, /api/show, /api/version; the same engine line and the same
web-page and key rules as the /v1 routes."""

import json

import jsonschema
import ollama
import pytest
import requests

from runtime.engine_queue import EngineQueue
from runtime.server.runner import ServerThread
from tests.paths import DEMO_NVFP4
from tests.server_records import snapshot, wait_for_record

MODEL = DEMO_NVFP4.name
QUESTION = [{"role": "user", "content": "What is 45 + 23?"}]
ADD = {"type": "function", "function": {"name": "add_numbers", "description": "Adds two numbers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def host(srv) -> str:
    return srv.address.removesuffix("/v1")


def client(srv, **kw) -> ollama.Client:
    return ollama.Client(host=host(srv), timeout=120, **kw)


def test_tags_show_and_version(demo_server, demo_engine):
    models = client(demo_server).list().models
    assert [m.model for m in models] == [MODEL] + [f"{MODEL}:{s}" for s in demo_engine.submodels_by_size()]
    assert models[1].details.parent_model == MODEL and models[1].details.family == "nemotron_h"
    shown = client(demo_server).show(MODEL)
    assert shown.modelinfo["nemotron_h.context_length"] == demo_engine.max_context
    assert {"completion", "tools", "thinking"} <= set(shown.capabilities)
    assert requests.get(host(demo_server) + "/api/version", timeout=10).json()["version"]
    with pytest.raises(ollama.ResponseError) as err:
        client(demo_server).show("no-such-model")
    assert err.value.status_code == 404 and "no-such-model" in err.value.error


def test_a_chat_whole_and_streamed_thinks_as_asked(demo_server):
    """Greedy, so the streamed lines join to the whole reply: the thought in `thinking`, the answer in
    `content`; think false gives no thought, and the last line has the counts and durations."""
    kw = dict(model=MODEL, messages=QUESTION, options={"temperature": 0, "num_predict": 60})
    whole = client(demo_server).chat(think=True, **kw)
    assert whole.done and whole.message.thinking and whole.message.content
    assert whole.eval_count > 0 and whole.prompt_eval_count > 0 and whole.total_duration >= whole.eval_duration > 0
    parts = list(client(demo_server).chat(think=True, stream=True, **kw))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.message.thinking or "" for p in parts) == whole.message.thinking
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    off = client(demo_server).chat(think=False, **kw)
    assert not off.message.thinking and off.message.content
    low = client(demo_server).chat(think="low", **kw)
    assert low.message.thinking
    assert client(demo_server).chat(model=MODEL, messages=QUESTION, options={"num_predict": 5}).done_reason == "length"


def test_a_streamed_reply_is_ndjson_and_stops_its_reply_when_the_client_hangs_up(demo_server):
    with requests.post(host(demo_server) + "/api/chat", json={"model": MODEL, "messages": QUESTION,
                                                             "options": {"num_predict": 8}}, stream=True,
                       timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "length"
    assert all(line["model"] == MODEL and line["created_at"] for line in lines)


def test_a_tool_call_and_its_result(demo_server, spell_replies):
    spell_replies('<tool_call>\n<function=add_numbers>\n<parameter=a>\n45\n</parameter>\n<parameter=b>\n23\n'
                  '</parameter>\n</function>\n</tool_call>\n')
    r = client(demo_server).chat(model=MODEL, messages=QUESTION, tools=[ADD], think=False)
    call = r.message.tool_calls[0]
    assert call.function.name == "add_numbers" and call.function.arguments == {"a": 45, "b": 23}
    streamed = [c for p in client(demo_server).chat(model=MODEL, messages=QUESTION, tools=[ADD], think=False,
                                                     stream=True) for c in p.message.tool_calls or ()]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed] == [("add_numbers", {"a": 45, "b": 23})]
    spell_replies("It is 68.")
    follow = QUESTION + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "add_numbers", "arguments": {"a": 45, "b": 23}}}]},
        {"role": "tool", "content": "68", "tool_name": "add_numbers"}]
    assert client(demo_server).chat(model=MODEL, messages=follow, tools=[ADD], think=False).message.content == \
        "It is 68."


@pytest.mark.parametrize("seed", [1, 2])
def test_format_with_a_schema_gives_json_that_validates(demo_server, seed):
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 999}},
              "required": ["answer"]}
    r = client(demo_server).chat(model=MODEL, messages=QUESTION, format=schema, think=False,
                                 options={"temperature": 1.0, "seed": seed, "num_predict": 60})
    answer = json.loads(r.message.content)
    jsonschema.validate(answer, schema)
    assert set(answer) == {"answer"}
    r = client(demo_server).generate(model=MODEL, prompt="What is 45 + 23?", format=schema, think=False,
                                     options={"num_predict": 60, "temperature": 1.0, "seed": seed})
    jsonschema.validate(json.loads(r.response), schema)
    # "json": any object (its keys are not bounded, so it may run to num_predict: docs/server.md)
    r = client(demo_server).generate(model=MODEL, prompt="What is 45 + 23?", format="json", think=False,
                                     options={"num_predict": 8, "temperature": 0})
    assert r.response.startswith("{")


def test_generate_through_the_template_and_raw(demo_server):
    r = client(demo_server).generate(model=MODEL, prompt="What is 45 + 23?", system="Be brief.", think=True,
                                     options={"num_predict": 40, "temperature": 0})
    assert r.thinking and r.done
    raw = client(demo_server).generate(model=MODEL, prompt="45 + 23 =", raw=True, options={"num_predict": 4})
    assert raw.response and raw.thinking is None and raw.prompt_eval_count < 10


def test_options_seed_repeats_and_logprobs(demo_server):
    kw = dict(model=MODEL, messages=QUESTION, think=False, options={"temperature": 1.0, "seed": 7, "num_predict": 12})
    a, b = client(demo_server).chat(**kw), client(demo_server).chat(**kw)
    assert a.message.content == b.message.content
    r = client(demo_server).chat(logprobs=True, top_logprobs=2, **kw)
    assert r.logprobs and all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in r.logprobs)
    assert "".join(e.token for e in r.logprobs).lstrip("\n") == r.message.content


@pytest.mark.parametrize("fields, says", [
    ({"options": {"repeat_penalty": 1.3}}, "options.repeat_penalty"),
    ({"options": {"mirostat": 2}}, "options.mirostat"),
    ({"options": {"made_up": 1}}, "options.made_up"),
    ({"options": {"num_ctx": 1 << 20}}, "options.num_ctx"),
    ({"options": {"temperature": 9}}, "options.temperature"),
    ({"options": {"num_predict": 0}}, "options.num_predict"),
    ({"think": "max"}, "think"),
    ({"think": ["low"]}, "think"),  # (an unhashable value was a TypeError, a 500)
    ({"think": {"effort": "low"}}, "think"),
    ({"think": 1}, "think"),
    ({"format": {"type": "object", "uniqueItems": True}}, "format.uniqueItems"),
    ({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"suffix": "x"}, "suffix"),
])
def test_what_it_cannot_honour_is_refused_by_name(demo_server, fields, says):
    body = {"model": MODEL, "messages": QUESTION, "stream": False, **fields}
    r = requests.post(host(demo_server) + "/api/chat", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"].startswith(says), r.text


def test_options_that_change_no_reply_are_accepted(demo_server, demo_engine):
    r = client(demo_server).chat(model=MODEL, messages=QUESTION, think=False, keep_alive="5m", options={
        "num_ctx": demo_engine.max_context, "num_thread": 2, "num_gpu": 1, "use_mmap": True, "repeat_penalty": 1.0,
        "num_predict": 4, "stop": ["\n\n"]})
    assert r.done


@pytest.fixture(scope="module")
def guarded(demo_engine):
    """The demo behind a server with a key, which allows one web page."""
    queue = EngineQueue()
    queue.set_engine(demo_engine)
    srv = ServerThread(queue, "127.0.0.1", 0, api_key="s3cret-key", allow_origins=["http://localhost:3000"]).start()
    yield srv
    srv.stop()


def test_the_same_key_and_web_page_rules_as_every_route(guarded):
    url = host(guarded)
    body = {"model": MODEL, "messages": QUESTION, "stream": False, "options": {"num_predict": 2}}
    assert requests.post(url + "/api/chat", json=body, timeout=30).status_code == 401
    assert requests.get(url + "/api/tags", timeout=30).status_code == 401
    assert requests.get(url + "/api/version", timeout=30).status_code == 200  # tells nothing, as /health
    keyed = ollama.Client(host=url, headers={"Authorization": "Bearer s3cret-key"}, timeout=60)
    assert keyed.chat(**{k: v for k, v in body.items() if k != "stream"}).done
    page = {"Authorization": "Bearer s3cret-key", "Origin": "http://evil.example"}
    r = requests.post(url + "/api/chat", json=body, headers=page, timeout=30)
    assert r.status_code == 403
    r = requests.post(url + "/api/generate", data="{}", timeout=30,
                      headers={"Authorization": "Bearer s3cret-key", "Content-Type": "text/plain"})
    assert r.status_code == 415
    r = requests.post(url + "/api/chat", json=body, timeout=30,
                      headers={"Authorization": "Bearer s3cret-key", "Origin": "http://localhost:3000"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_ollama_requests_take_their_turn_in_the_one_line(demo_server):
    before = snapshot(demo_server)
    client(demo_server).chat(model=MODEL, messages=QUESTION, think=False, options={"num_predict": 2})
    record = wait_for_record(demo_server, before, lambda r: r.tokens == 2)
    assert record.who.startswith("server 127.0.0.1") and record.finish_reason == "length"
