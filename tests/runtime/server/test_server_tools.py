"""Tool calls and structured output through /v1/chat/completions, driven by the official `openai` client
on the bundled demo (its NVFP4 export, as the app serves it). Forced calls and json_schema answers are
checked by an outside validator (jsonschema), whatever the demo would have said; every refusal names
its field."""

import json

import jsonschema
import openai
import pytest

from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.server.openai_tools import tool_turns
from runtime.server.runner import ServerThread
from tests.paths import DEMO_NVFP4

MODEL = DEMO_NVFP4.name
QUESTION = [{"role": "user", "content": "What is 145 + 23?"}]
ADD = {"type": "function", "function": {"name": "add_numbers", "description": "Adds two whole numbers.",
                                        "parameters": {"type": "object", "properties": {
                                            "a": {"type": "integer", "minimum": -999, "maximum": 999},
                                            "b": {"type": "integer", "minimum": -999, "maximum": 999},
                                            "note": {"type": "string", "maxLength": 12}},
                                            "required": ["a", "b"]}}}
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo"]}, "metric": {"type": "boolean"}}, "required": ["city"]}}}
TOOLS = [ADD, LOOKUP]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ANSWER = {"type": "object", "properties": {"sum": {"type": "integer", "minimum": 0, "maximum": 9999},
                                           "sure": {"type": "boolean"}},
          "required": ["sum", "sure"], "additionalProperties": False}


@pytest.fixture(scope="module")
def server():
    queue = EngineQueue(max_waiting=1)
    queue.set_engine(Engine.load(DEMO_NVFP4, device="cpu", max_context=4096))  # an agent's tools fit
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    yield srv
    srv.stop()


def ask(srv, **kw):
    kw.setdefault("messages", QUESTION)
    kw.setdefault("model", MODEL)
    kw.setdefault("max_tokens", 400)
    kw.setdefault("temperature", 1.0)
    return openai.OpenAI(base_url=srv.address, api_key="x", max_retries=0, timeout=120).chat.completions.create(**kw)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def test_a_named_forced_call_validates(server):
    r = ask(server, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add_numbers"}},
            reasoning_effort="none", seed=1)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "add_numbers" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS["add_numbers"])
    assert "invalid_tool_calls" not in extra(r, "elastic")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3])
def test_required_calls_validate_after_thinking(server, seed):
    r = ask(server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, reasoning_effort="low", seed=seed)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert extra(choice.message, "reasoning_content")  # the thinking ran, unconstrained


def test_a_streamed_call_assembles_from_its_deltas(server):
    chunks = list(ask(server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                      reasoning_effort="none", seed=4, stream=True))
    items = [item for c in chunks if c.choices for item in (c.choices[0].delta.tool_calls or [])]
    assert items and items[0].id and items[0].function.name and items[0].function.arguments == ""
    assert all(i.index == 0 for i in items) and all(i.id is None and i.function.name is None for i in items[1:])
    arguments = json.loads("".join(i.function.arguments for i in items))
    jsonschema.validate(arguments, SCHEMAS[items[0].function.name])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_tool_result_fed_back_is_answered(server):
    r = ask(server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, reasoning_effort="none", seed=5)
    call = r.choices[0].message.tool_calls[0]
    history = QUESTION + [r.choices[0].message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": "168"}]
    again = ask(server, messages=history, tools=TOOLS, reasoning_effort="none", seed=5, max_tokens=40)
    assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert again.usage.prompt_tokens > r.usage.prompt_tokens  # the call and its result are in the prompt


def test_tool_results_follow_their_calls_order():
    raw = [{"role": "user"}, {"role": "assistant"}, {"role": "tool", "tool_call_id": "b"},
           {"role": "tool", "tool_call_id": "a"}]
    converted = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "_call_ids": ["a", "b"]},
                 {"role": "tool", "content": "for b"}, {"role": "tool", "content": "for a"}]
    assert [m["content"] for m in tool_turns(raw, converted)] == ["q", "", "for a", "for b"]


@pytest.mark.parametrize("seed,effort", [(6, "none"), pytest.param(7, "low", marks=pytest.mark.slow)])
def test_json_schema_answers_validate(server, seed, effort):
    r = ask(server, reasoning_effort=effort, seed=seed, response_format={
        "type": "json_schema", "json_schema": {"name": "sum", "schema": ANSWER, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), ANSWER)


def test_thinking_off_and_the_new_effort_names(server):
    for body in ({"chat_template_kwargs": {"enable_thinking": False}}, {"think": False}):
        r = ask(server, extra_body=body, max_tokens=8, seed=1)
        assert extra(r.choices[0].message, "reasoning_content") is None
        assert r.usage.completion_tokens_details.reasoning_tokens == 0
    for effort, depth in (("minimal", "Quick"), ("xhigh", "Max"), ("max", "Max")):
        assert extra(ask(server, reasoning_effort=effort, max_tokens=8, seed=1), "elastic")["depth"] == depth


def test_models_carry_the_context_length(server):
    models = openai.OpenAI(base_url=server.address, api_key="x").models.list()
    assert all(extra(m, "max_model_len") == 4096 for m in models.data)


def bad_schema(parameters):
    return [{"type": "function", "function": {"name": "t", "parameters": parameters}}]


ASSISTANT = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "add_numbers", "arguments": "{\"a\": 1, \"b\": 2}"}}]}


@pytest.mark.parametrize("fields, param", [
    ({"tools": {"add": ADD}}, "tools"),
    ({"tools": [ADD, ADD]}, "tools[1].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": bad_schema({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}),
      "tool_choice": "required"}, "tools[0].function.parameters.properties.x.uniqueItems"),
    ({"tools": bad_schema({"type": "object", "properties": {"x<y": {"type": "string"}}})},
     "tools[0].function.parameters.properties"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"extra_body": {"functions": [{"name": "f"}]}}, "functions"),
    ({"messages": [{"role": "tool", "content": "5"}]}, "messages[0]"),
    ({"messages": QUESTION + [ASSISTANT, {"role": "tool", "tool_call_id": "call_9", "content": "3"}]},
     "messages[2].tool_call_id"),
    ({"messages": QUESTION + [ASSISTANT, {"role": "tool", "content": "3"}, {"role": "tool", "content": "4"}]},
     "messages[3]"),
    ({"messages": QUESTION + [{**ASSISTANT, "tool_calls": [{"type": "function", "function": {
        "name": "add_numbers", "arguments": "{not json"}}]}]}, "messages[1].tool_calls[0].function.arguments"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "patternProperties": {"a": {}}}}}}, "response_format.json_schema.schema.patternProperties"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100}
                                         for i in range(800)}}}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "grammar"}}, "response_format.type"),
    ({"tools": [{"type": "function", "function": {"name": "t", "strict": True, "parameters": {
        "type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}}}]},
     "tools[0].function.parameters.properties.x.uniqueItems"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),  # without logprobs: true
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"extra_body": {"chat_template_kwargs": {"reasoning_mode": "x"}}}, "chat_template_kwargs.reasoning_mode"),
    ({"extra_body": {"chat_template_kwargs": {"enable_thinking": "no"}}}, "chat_template_kwargs.enable_thinking"),
    ({"extra_body": {"think": False, "thinking_token_budget": 30}}, "think"),
])
def test_refusals_name_their_field(server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        ask(server, **fields)
    assert err.value.status_code == 400 and err.value.param == param and err.value.message


def test_the_response_shapes_of_calls_whole_and_streamed():
    from runtime.events import Done, InvalidToolCall, ToolCall
    from runtime.generate import ChatRequest
    from runtime.server.openai_api import ChunkStream, ParsedChat, completion

    call = ToolCall("call_1", "add_numbers", {"a": 1, "b": 2, "note": "x" * 100}, 0)
    bad = InvalidToolCall("no tool is called 'sub'", "<tool_call>...", "sub", {}, 0)
    done = Done("tool_calls", "", "", None, "1.5M", 0, tool_calls=(call,), invalid_tool_calls=(bad,))
    parsed = ParsedChat(ChatRequest(tuple(QUESTION), None, "1.5M"), MODEL, False, False, None)
    r = completion(parsed, None, done, "chatcmpl-1", 0, 0.0)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "add_numbers", "arguments": json.dumps(call.arguments)}}]
    assert r["elastic"]["invalid_tool_calls"] == [{"error": bad.error, "name": "sub", "text": bad.text}]
    chunks = ChunkStream(parsed, "chatcmpl-1", 0).on_event(call)
    items = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks]
    assert len(items) > 2 and items[0]["id"] == "call_1" and items[0]["function"] == {"name": "add_numbers",
                                                                                      "arguments": ""}
    assert "".join(i["function"]["arguments"] for i in items) == json.dumps(call.arguments)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"


def agent_tools(strict: bool) -> list[dict]:
    """Tools as coding agents send them (Codex's shell, an editor's patch and reads, a pydantic model's
    schema with titles, $defs and Optional fields), with OpenAI's `strict` on or off."""
    def tool(name, description, properties, required):
        return {"type": "function", "function": {"name": name, "description": description, "strict": strict,
                                                 "parameters": {"type": "object", "properties": properties,
                                                                "required": required,
                                                                "additionalProperties": False}}}
    return [
        tool("shell", "Runs a command.", {"command": {"type": "array", "items": {"type": "string"}},
                                          "workdir": {"type": "string"}, "timeout_ms": {"type": "number"}},
             ["command"]),
        tool("apply_patch", "Applies a patch.", {"input": {"type": "string", "description": "the patch"}}, ["input"]),
        tool("read_file", "Reads a file.", {"path": {"title": "Path", "type": "string"},
                                            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}],
                                                      "title": "Limit", "default": None}}, ["path", "limit"]),
        tool("search", "Searches the code.", {"query": {"type": "string"}, "filters": {
            "type": "array", "items": {"$ref": "#/$defs/Filter"}}}, ["query"]),
        tool("update_plan", "Updates the plan.", {"steps": {"type": "array", "items": {"type": "object", "properties": {
            "step": {"type": "string"}, "status": {"enum": ["pending", "in_progress", "completed"]}},
            "required": ["step", "status"], "additionalProperties": False}}}, ["steps"]),
    ]


@pytest.mark.parametrize("strict", [False, True])
def test_a_coding_agents_request_is_served(server, strict):
    tools = agent_tools(strict)
    tools[3]["function"]["parameters"]["$defs"] = {"Filter": {"type": "object", "properties": {
        "field": {"type": "string"}, "value": {"type": "string"}}, "required": ["field", "value"]}}
    system = ("You are a coding agent working in a repository. Read before you write, keep changes small, "
              "run the tests, and explain what you did. ") * 12
    chunks = list(ask(server, messages=[{"role": "system", "content": system}] + QUESTION, tools=tools,
                      tool_choice="auto", reasoning_effort="low", max_tokens=48, seed=8, stream=True))
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish and finish[-1] in ("stop", "length", "tool_calls")
