"""Issue 39: the requests real clients send, each with the client that sends it (the official `openai`
and `anthropic` SDKs, the Hugging Face client) or, where the client is not a Python package, the body
it was captured sending (Codex CLI 0.171's, in tests/data/clients) or writes by its documented shape
(the Vercel AI SDK's), against the demo behind a real server."""

import copy
import json

import anthropic
import jsonschema
import openai
import pytest
import requests

from runtime.depth import depth_levels
from runtime.server.responses_api import parse_response
from runtime.server.serving import ServedModel
from tests.paths import DEMO_NVFP4, ROOT

MODEL = DEMO_NVFP4.name
CODEX = json.loads((ROOT / "tests" / "data" / "clients" / "codex-0.171-responses.json").read_text())
# zod's z.number().int() as the Vercel AI SDK sends every integer parameter
ZOD_INT = {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991}
VERCEL_TOOL = {"type": "object", "properties": {"a": ZOD_INT, "b": ZOD_INT, "note": {"type": "string"}},
               "required": ["a", "b"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}


def oai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.address, api_key="unused", max_retries=0, timeout=120)


def claude(srv) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.address.removesuffix("/v1"), api_key="unused", max_retries=0,
                               timeout=120)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


# ---------------------------------------------------------------------- 1. Codex CLI's /v1/responses


def codex_body(text: str = "What is 2+2?", instructions: int = 600) -> dict:
    """The captured request, its long developer prompt cut to `instructions` characters so that it fits
    the demo's 4,096-token context (the shape is the capture's: every field, tool and item kept)."""
    body = copy.deepcopy(CODEX)
    for item in body["input"]:
        if item.get("role") == "developer":
            item["content"][0]["text"] = item["content"][0]["text"][:instructions]
    body["input"][-1]["content"][0]["text"] = text
    for tool in body["tools"]:
        if tool.get("description"):
            tool["description"] = tool["description"][:80]
    body["tools"] = [t for t in body["tools"] if t["type"] != "function" or t["name"] in ("exec_command", "view_image")
                     ] if instructions < 10_000 else body["tools"]
    return body


def test_codexs_whole_captured_request_is_taken():
    """Every field Codex 0.171 sends (client_metadata on every request, no setting to drop it) is taken;
    the tools it cannot run here (namespace, web_search) are left out and listed."""
    served = ServedModel(MODEL, ("small", "mid", "full"), tuple(depth_levels(["small", "mid", "full"], 100)), 65536)
    parsed = parse_response(CODEX, served)
    kinds = {t["type"] for t in CODEX["tools"]}
    assert kinds == {"function", "namespace", "web_search"}
    assert [t["type"] for t in parsed.tools_left_out] == ["namespace", "web_search"]
    assert parsed.tools_left_out[0]["name"] == "multi_agent_v1"
    offered = [t["function"]["name"] for t in parsed.request.tools]
    assert offered == [t["name"] for t in CODEX["tools"] if t["type"] == "function"]
    assert parsed.summary and parsed.encrypted and parsed.stream


def sse_events(response) -> list[dict]:
    return [json.loads(line[5:]) for line in response.iter_lines(decode_unicode=True)
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


def test_codexs_request_loop_is_served(demo_server, spell_replies):
    """A request loop as Codex runs it, over raw HTTP with the captured shape: a turn that calls a tool
    (spelled deterministically), then the next request with the call and its output sent back as items
    (as Codex keeps its history), answered; each response says which tools were left out."""
    call = ('<tool_call>\n<function=exec_command>\n<parameter=cmd>\nls\n</parameter>\n</function>\n'
            '</tool_call>\n')
    spell_replies(call)
    body = codex_body("List the files.")
    body["reasoning"] = {"effort": "none", "summary": "auto"}
    with requests.post(demo_server.address + "/responses", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        events = sse_events(r)
    final = events[-1]
    assert final["type"] == "response.completed", final
    left_out = final["response"]["elastic"]["tools_left_out"]
    assert [t["type"] for t in left_out] == ["namespace", "web_search"]
    calls = [i for i in final["response"]["output"] if i["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["exec_command"] and json.loads(calls[0]["arguments"]) == {"cmd": "ls"}
    spell_replies("Two files.")
    follow = codex_body("List the files.")
    follow["reasoning"] = {"effort": "none", "summary": "auto"}
    follow["input"] += [{k: v for k, v in calls[0].items() if k != "status"},
                        {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "a.txt\nb.txt"}]
    with requests.post(demo_server.address + "/responses", json=follow, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        final = sse_events(r)[-1]
    assert final["type"] == "response.completed" and final["response"]["output"][-1]["type"] == "message"
    assert final["response"]["output"][-1]["content"][0]["text"] == "Two files."


def test_a_tool_choice_naming_a_hosted_tool_is_refused(demo_server):
    body = codex_body()
    body["tool_choice"] = {"type": "web_search"}
    r = requests.post(demo_server.address + "/responses", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    assert "web_search" in r.json()["error"]["message"]


# ---------------------------------------------------------------------- 2. the Vercel AI SDK's integers


def test_zods_integer_bounds_are_served_on_every_route(demo_server):
    """±9007199254740991 on every integer (zod): chat, responses and messages answer, and a forced call's
    integers validate against those bounds."""
    tool = {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": VERCEL_TOOL}}
    r = oai(demo_server).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}], tools=[tool], tool_choice="required",
        max_tokens=120, extra_body={"think": False})
    arguments = json.loads(r.choices[0].message.tool_calls[0].function.arguments)
    jsonschema.validate(arguments, VERCEL_TOOL)
    r = oai(demo_server).responses.create(model=MODEL, input="Add 2 and 3.", max_output_tokens=40,
                                          reasoning={"effort": "none"},
                                          tools=[{"type": "function", "name": "add", "parameters": VERCEL_TOOL}])
    assert r.status == "completed" or r.status == "incomplete"
    m = claude(demo_server).messages.create(model=MODEL, max_tokens=40, messages=[{"role": "user", "content": "Hi"}],
                                            tools=[{"name": "add", "input_schema": VERCEL_TOOL}])
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_the_vercel_sdks_raw_chat_request_is_served(demo_server):
    """The body @ai-sdk/openai-compatible sends for a streamed tool call, as its docs and source give it."""
    body = {"model": MODEL, "max_tokens": 60, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": "You add numbers."},
                         {"role": "user", "content": "Add 2 and 3."}],
            "tools": [{"type": "function", "function": {"name": "add", "description": "Adds.",
                                                        "parameters": VERCEL_TOOL}}],
            "tool_choice": "auto"}
    with requests.post(demo_server.address + "/chat/completions", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        chunks = sse_events(r)
    assert chunks[-1]["usage"]["completion_tokens"] > 0


# ---------------------------------------------------------------------- 3. schemas that leave keys open


@pytest.mark.parametrize("strict", [True, False])
def test_a_schema_without_additional_properties_gives_json_that_validates(demo_server, strict):
    """pydantic's schema shape (no additionalProperties): the answer is JSON that validates, and it names
    no key the schema does not, strict or not, on chat and on /v1/responses' text.format."""
    schema = {"properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 999},
                             "unit": {"type": "string", "maxLength": 8}},
              "required": ["answer", "unit"], "title": "Sum", "type": "object"}
    for seed in (1, 2, 3):
        r = oai(demo_server).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What is 45 + 23?"}], max_tokens=80, temperature=1.0,
            seed=seed, extra_body={"think": False},
            response_format={"type": "json_schema", "json_schema": {"name": "Sum", "schema": schema, "strict": strict}})
        answer = json.loads(r.choices[0].message.content)
        jsonschema.validate(answer, schema)
        assert set(answer) == {"answer", "unit"}
        r = oai(demo_server).responses.create(
            model=MODEL, input="What is 45 + 23?", max_output_tokens=80, temperature=1.0, reasoning={"effort": "none"},
            text={"format": {"type": "json_schema", "name": "Sum", "schema": schema, "strict": strict}},
            extra_body={"seed": seed})
        answer = json.loads(r.output_text)
        jsonschema.validate(answer, schema)
        assert set(answer) == {"answer", "unit"}


# ---------------------------------------------------------------------- 4. a forced call's text value


def test_a_forced_calls_text_ends_where_the_model_closes_it(demo_server, spell_replies):
    """smolagents forces final_answer: the model writes its value and closes it, and the call ends there
    (before, the value ran to its bound in closing-tag attempts)."""
    spell_replies('<tool_call>\n<function=final_answer>\n<parameter=answer>\n68\n</parameter>\n</function>\n'
                  '</tool_call>\n')
    tool = {"type": "function", "function": {"name": "final_answer", "description": "The final answer.",
                                             "parameters": {"type": "object", "properties": {
                                                 "answer": {"type": "string", "description": "The answer."}},
                                                 "required": ["answer"]}}}
    r = oai(demo_server).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is 45 + 23?"}], tools=[tool],
        tool_choice={"type": "function", "function": {"name": "final_answer"}}, max_tokens=400,
        extra_body={"think": False})
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"answer": "68"}
    assert r.usage.completion_tokens < 40


# ---------------------------------------------------------------------- 5. a system message later on


@pytest.mark.parametrize("role", ["system", "developer"])
def test_a_system_message_after_the_first_turn_is_passed_through(demo_server, role):
    """pydantic-ai's retries send one: chat and /v1/responses take it, and it adds a system turn."""
    turns = [{"role": "user", "content": "What is 45 + 23?"}, {"role": "assistant", "content": "sixty"},
             {"role": role, "content": "Answer with digits only."}, {"role": "user", "content": "Again?"}]
    r = oai(demo_server).chat.completions.create(model=MODEL, messages=turns, max_tokens=8,
                                                 extra_body={"think": False})
    without = oai(demo_server).chat.completions.create(model=MODEL, messages=turns[:2] + turns[3:], max_tokens=8,
                                                       extra_body={"think": False})
    assert r.usage.prompt_tokens > without.usage.prompt_tokens
    r = oai(demo_server).responses.create(model=MODEL, input=turns, max_output_tokens=8, reasoning={"effort": "none"})
    assert r.status in ("completed", "incomplete")


# ---------------------------------------------------------------------- 6. TGI's response_format.value


def test_tgis_response_format_value_is_honoured_by_the_hugging_face_client(demo_server, monkeypatch):
    import huggingface_hub.constants
    from huggingface_hub import InferenceClient

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # (the server is on 127.0.0.1)

    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 999}},
              "required": ["answer"]}
    client = InferenceClient(base_url=demo_server.address.removesuffix("/v1"), api_key="unused")
    r = client.chat_completion(messages=[{"role": "user", "content": "What is 45 + 23?"}], model=MODEL,
                               max_tokens=40, response_format={"type": "json_object", "value": schema},
                               extra_body={"think": False})
    answer = json.loads(r.choices[0].message.content)
    jsonschema.validate(answer, schema)
    assert set(answer) == {"answer"}


@pytest.mark.parametrize("fields, param", [
    ({"response_format": {"type": "regex", "value": "[0-9]+"}}, "response_format.type"),
    ({"response_format": {"type": "json_object", "value": {"type": "object"}, "whitespace": "x"}},
     "response_format.whitespace"),
    ({"response_format": {"type": "json_object", "schema": {"type": "object"}}}, "response_format.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}}},
     "response_format.json_schema.extra"),
    ({"repetition_penalty": 1.1}, "repetition_penalty"),
    ({"guided_json": {"type": "object"}}, "guided_json"),
    ({"store": True}, "store"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"metadata": {"k": 1}}, "metadata"),
])
def test_a_field_the_chat_route_does_not_honour_is_refused_by_name(demo_server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        oai(demo_server).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=4, extra_body=fields)
    assert err.value.param == param, err.value.message


def test_fields_that_change_nothing_are_accepted(demo_server):
    r = oai(demo_server).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, user="u1", metadata={"k": "v"},
        store=False, service_tier="auto", safety_identifier="s1", modalities=["text"],
        prediction={"type": "content", "content": "Hello"}, extra_body={"think": False})
    assert r.choices[0].finish_reason in ("stop", "length")


# ---------------------------------------------------------------------- 7. Anthropic's tool fields and count_tokens


def test_eager_input_streaming_is_accepted(demo_server):
    m = claude(demo_server).messages.create(
        model=MODEL, max_tokens=30, messages=[{"role": "user", "content": "Add 2 and 3."}],
        tools=[{"name": "add", "description": "Adds.", "input_schema": VERCEL_TOOL, "eager_input_streaming": True}])
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_count_tokens_is_the_prompt_a_message_request_takes(demo_server):
    client = claude(demo_server)
    common = dict(model=MODEL, system="Be brief.", messages=[{"role": "user", "content": "What is 45 + 23?"}])
    tools = [{"name": "add", "description": "Adds.", "input_schema": VERCEL_TOOL}]
    for extra_fields in ({}, {"tools": tools}, {"thinking": {"type": "enabled", "budget_tokens": 64}}):
        counted = client.messages.count_tokens(**common, **extra_fields).input_tokens
        m = client.messages.create(max_tokens=1, **common, **extra_fields)
        assert counted == m.usage.input_tokens + m.usage.cache_read_input_tokens
    assert client.messages.count_tokens(**common, tools=tools).input_tokens > \
        client.messages.count_tokens(**common).input_tokens
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                     extra_body={"max_tokens": 4})
    assert "max_tokens" in err.value.message
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "x"}])


def test_count_tokens_on_a_relayed_remote_model_says_who_can_count():
    """A server whose engine is a remote model (the app serving a model it reaches over the network)
    has no tokenizer for it: count_tokens says so in a 400 (it was a TypeError, a 500)."""
    from runtime.engine_queue import EngineQueue
    from runtime.remote.client import RemoteServer
    from runtime.remote.engine import RemoteEngine
    from runtime.server.runner import ServerThread
    from tests.remote_stub import RemoteStub

    with RemoteStub([{"id": "star", "max_model_len": 4096}]) as stub:
        queue = EngineQueue()
        queue.set_engine(RemoteEngine.connect(RemoteServer(stub.url), "star"))
        srv = ServerThread(queue, "127.0.0.1", 0).start()
        try:
            with pytest.raises(anthropic.BadRequestError) as err:
                claude(srv).messages.count_tokens(model="star", messages=[{"role": "user", "content": "x"}])
        finally:
            srv.stop()
    assert "cannot count its tokens" in err.value.message


# ---------------------------------------------------------------------- 8. log-probabilities


def test_logprobs_on_chat_completions_whole_and_streamed(demo_server):
    """Greedy, so the sampled token is each position's likeliest: its log-probability is the first
    alternative's, and the streamed entries are the whole reply's."""
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "What is 45 + 23?"}], max_tokens=12, temperature=0,
              logprobs=True, top_logprobs=3, extra_body={"think": False})
    r = oai(demo_server).chat.completions.create(**kw)
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens - (r.choices[0].finish_reason == "stop")  # (end of turn: none)
    assert "".join(e.token for e in entries).lstrip("\n") == r.choices[0].message.content
    for e in entries:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == pytest.approx(e.logprob)
        assert [a.logprob for a in e.top_logprobs] == sorted((a.logprob for a in e.top_logprobs), reverse=True)
        assert e.bytes == list(e.token.encode())
    streamed = [e for c in oai(demo_server).chat.completions.create(stream=True, **kw)
                if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in entries]
    plain = oai(demo_server).chat.completions.create(**{**kw, "logprobs": None, "top_logprobs": None})
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == r.choices[0].message.content


def test_logprobs_on_completions_and_responses(demo_server):
    c = oai(demo_server).completions.create(model=MODEL, prompt="45 + 23 =", max_tokens=6, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == \
        c.usage.completion_tokens
    assert "".join(lp.tokens) == c.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(len(alts) <= 2 and max(alts.values()) == pytest.approx(v) for alts, v in zip(lp.top_logprobs,
                                                                                            lp.token_logprobs))
    r = oai(demo_server).responses.create(model=MODEL, input="What is 45 + 23?", max_output_tokens=10, temperature=0,
                                          reasoning={"effort": "none"}, include=["message.output_text.logprobs"],
                                          top_logprobs=2)
    part = r.output[-1].content[0]
    assert part.logprobs and all(len(e.top_logprobs) == 2 for e in part.logprobs)
    assert "".join(e.token for e in part.logprobs).lstrip("\n") == part.text
