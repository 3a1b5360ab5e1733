"""/v1/responses (stateless) through the official `openai` client's `responses.create`, on the demo."""

import base64
import json

import jsonschema
import openai
import pytest
import requests

from runtime.server.responses_api import parse_response
from runtime.server.serving import ServedModel
from runtime.tool_calls import format_tool_call
from tests.paths import DEMO_NVFP4

MODEL = DEMO_NVFP4.name
QUESTION = "What is 45 + 23?"


def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.address, api_key="unused", max_retries=0, timeout=60)


def respond(srv, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("input", QUESTION)
    return client(srv).responses.create(**kw)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def test_a_response_has_a_reasoning_item_and_a_message(demo_server):
    r = respond(demo_server, reasoning={"effort": "low"}, max_output_tokens=80, temperature=0)
    assert r.object == "response" and r.status == "completed" and r.model == MODEL and r.id.startswith("resp_")
    assert [item.type for item in r.output] == ["reasoning", "message"]
    thought, message = r.output
    assert thought.content[0].type == "reasoning_text" and thought.content[0].text and thought.summary == []
    assert message.role == "assistant" and message.content[0].type == "output_text"
    assert r.output_text == message.content[0].text and r.output_text
    assert r.usage.output_tokens_details.reasoning_tokens > 0 and r.usage.input_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert extra(r, "elastic")["think_submodel"] == "0.5M"  # low effort: the smallest thinks, as in chat
    assert r.store is False and r.previous_response_id is None


def test_no_effort_means_no_reasoning_item_only_when_thinking_is_off(demo_server, demo_engine):
    off = respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=20)
    assert [item.type for item in off.output] == ["message"] and off.usage.output_tokens_details.reasoning_tokens == 0
    default = respond(demo_server, max_output_tokens=120)
    assert extra(default, "elastic")["depth"] == demo_engine.default_depth()


@pytest.mark.parametrize("summary", [None, "auto"])
def test_streamed_events_follow_openais_sequence_and_end_with_the_whole_response(demo_server, summary):
    kw = dict(reasoning={"effort": "low", **({"summary": summary} if summary else {})}, max_output_tokens=80,
              temperature=0)
    whole = respond(demo_server, **kw)
    events = list(respond(demo_server, stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    delta = "response.reasoning_summary_text.delta" if summary else "response.reasoning_text.delta"
    part = "response.reasoning_summary_part" if summary else "response.content_part"
    first_text = kinds.index("response.output_text.delta")
    assert kinds[2:5] == ["response.output_item.added", f"{part}.added", delta]
    assert kinds[first_text - 5:first_text] == [delta.replace("delta", "done"), f"{part}.done",
                                                "response.output_item.done", "response.output_item.added",
                                                "response.content_part.added"]
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    final = events[-1].response
    thought = "".join(e.delta for e in events if e.type == delta)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == whole.output_text
    item = final.output[0]
    assert thought == (item.summary[0].text if summary else item.content[0].text)
    assert thought == (whole.output[0].summary[0].text if summary else whole.output[0].content[0].text)
    assert [i.type for i in final.output] == ["reasoning", "message"] and final.usage == whole.usage
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert added == [i.id for i in final.output]


def test_running_out_of_output_tokens_is_incomplete(demo_server):
    r = respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 2
    events = list(respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"


def test_input_items_instructions_and_a_past_thought_make_the_conversation(demo_server):
    def prompt_tokens(**kw):
        return respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=1, **kw).usage.input_tokens

    plain = prompt_tokens(input=QUESTION)
    assert prompt_tokens(input=[{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]) == plain
    assert prompt_tokens(input=QUESTION, instructions="Answer with one number.") > plain
    past = respond(demo_server, reasoning={"effort": "low"}, max_output_tokens=60,
                   include=["reasoning.encrypted_content"])
    thought = past.output[0]
    assert base64.b64decode(thought.encrypted_content).decode() == thought.content[0].text
    history = [{"role": "user", "content": QUESTION}, thought.model_dump(exclude_none=True),
               past.output[1].model_dump(exclude_none=True), {"role": "user", "content": "And 2 + 2?"}]
    kept = prompt_tokens(input=history, extra_body={"elastic": {"keep_reasoning": True}})
    assert kept > prompt_tokens(input=history)  # the thought came back (the template drops it by default)
    with pytest.raises(openai.BadRequestError) as err:
        prompt_tokens(input=[{**history[1], "encrypted_content": "not base64!"}] + history[2:])
    assert err.value.param == "input[0].encrypted_content"


@pytest.mark.parametrize("fields, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"include": ["file_search_call.results"]}, "include"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "if": {}}}}},
     "text.format.schema.if"),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"truncation": "auto"}, "truncation"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"reasoning": {"summary": "everything"}}, "reasoning.summary"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "assistant", "content": "hi"}]}, "input"),
    ({"instructions": 3}, "instructions"),
    ({"extra_body": {"frequency_penalty": 1}}, "frequency_penalty"),
    ({"extra_body": {"elastic": {"depth": "Deepest"}}}, "elastic.depth"),
])
def test_fields_it_cannot_honour_get_400_naming_them(demo_server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        respond(demo_server, **fields)
    assert err.value.status_code == 400 and err.value.param == param and err.value.message


def test_errors_are_in_openais_shape(demo_server, loading_server):
    r = requests.post(demo_server.address + "/responses", json={"model": "gpt-5", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    with pytest.raises(openai.InternalServerError) as err:
        respond(loading_server)
    assert err.value.status_code == 503 and err.value.code == "model_loading"


# ---------------------------------------------------------------------- tools

ADD = {"type": "function", "name": "add_numbers", "description": "Adds the numbers in an expression.",
       "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                      "required": ["expression"]}}


def test_a_function_call_whole_and_streamed_and_its_output_fed_back(demo_server, spell_replies):
    spell_replies("I will add them.\n" + format_tool_call("add_numbers", {"expression": "45+23"}))
    kw = dict(tools=[ADD], reasoning={"effort": "none"}, max_output_tokens=200)
    r = respond(demo_server, **kw)
    assert r.status == "completed" and [i.type for i in r.output] == ["message", "function_call"]
    call = r.output[1]
    assert call.name == "add_numbers" and json.loads(call.arguments) == {"expression": "45+23"}
    assert call.call_id.startswith("call_") and r.output_text.strip() == "I will add them."
    events = list(respond(demo_server, stream=True, **kw))
    kinds = [e.type for e in events]
    i = kinds.index("response.function_call_arguments.delta")
    assert kinds[i - 1:i + 3] == ["response.output_item.added", "response.function_call_arguments.delta",
                                  "response.function_call_arguments.done", "response.output_item.done"]
    assert events[i - 1].item.type == "function_call" and events[i - 1].item.arguments == ""
    assert json.loads(events[i].delta) == {"expression": "45+23"} and events[i + 1].name == "add_numbers"
    final = events[-1].response
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output[1].arguments == call.arguments and final.output_text == r.output_text
    # the client runs the call and sends it back with its output: the conversation grows by both
    spell_replies("45 + 23 = 68.")
    history = [{"role": "user", "content": QUESTION}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "68"}]
    answer = respond(demo_server, input=history, tools=[ADD], reasoning={"effort": "none"}, max_output_tokens=50)
    assert answer.output_text == "45 + 23 = 68." and [i.type for i in answer.output] == ["message"]
    assert answer.usage.input_tokens > r.usage.input_tokens


def test_a_malformed_call_is_reported_not_dropped(demo_server, spell_replies):
    spell_replies(format_tool_call("add_numbers", {"wrong": "1"}))
    r = respond(demo_server, tools=[ADD], reasoning={"effort": "none"}, max_output_tokens=200)
    assert not [i for i in r.output if i.type == "function_call"]
    bad_calls = extra(r, "elastic")["invalid_tool_calls"]
    assert len(bad_calls) == 1 and bad_calls[0]["name"] == "add_numbers" and bad_calls[0]["error"]


def test_outputs_go_back_in_their_calls_order(demo_engine):
    """The template links a result to its call by order, so results sent in another order are put in
    their calls' order."""
    calls = [{"type": "function_call", "call_id": f"call_{n}", "name": "add_numbers",
              "arguments": json.dumps({"expression": f"{n}+{n}"})} for n in (1, 2)]
    outputs = [{"type": "function_call_output", "call_id": f"call_{n}", "output": str(2 * n)} for n in (1, 2)]
    body = {"model": MODEL, "tools": [ADD], "input": [{"role": "user", "content": QUESTION}] + calls + outputs[::-1]}
    messages = parse_response(body, ServedModel.from_engine(demo_engine)).request.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [c["function"]["arguments"] for c in messages[1]["tool_calls"]] == [{"expression": "1+1"},
                                                                                {"expression": "2+2"}]
    assert [m["content"] for m in messages[2:]] == ["2", "4"]


@pytest.mark.parametrize("fields, param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "call_id": "c1", "name": "f",
                                                   "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c2", "output": "1"}]}, "input[2].call_id"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "call_id": "c1", "name": "f",
                                                   "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "1"},
                {"type": "function_call_output", "call_id": "c1", "output": "2"}]}, "input[3].call_id"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c1", "output": "1"}]},
     "input[1]"),
    ({"tools": [{**ADD, "name": "no spaces allowed"}]}, "tools[0].name"),
    ({"tools": [ADD, ADD]}, "tools[1].name"),
    ({"tools": [{**ADD, "parameters": "x"}]}, "tools[0].parameters"),
    ({"tools": [ADD], "tool_choice": {"type": "allowed_tools"}}, "tool_choice"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "call_id": "c", "name": "f",
                                                   "arguments": "not json"}]}, "input[1].arguments"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call_output", "output": "1"}]},
     "input[1].call_id"),
    ({"max_tool_calls": 2}, "max_tool_calls"),
])
def test_tool_fields_it_cannot_honour_get_400_naming_them(demo_server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        respond(demo_server, **fields)
    assert err.value.param == param


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "add_numbers"}])
def test_a_forced_call_always_validates(demo_server, choice):
    for seed in (1, 2):
        r = respond(demo_server, tools=[ADD], tool_choice=choice, reasoning={"effort": "none"}, max_output_tokens=120,
                    temperature=1.0, extra_body={"seed": seed})
        calls = [i for i in r.output if i.type == "function_call"]
        assert calls and calls[0].name == "add_numbers"
        jsonschema.validate(json.loads(calls[0].arguments), ADD["parameters"])


def test_a_json_schema_format_gives_output_that_validates(demo_server):
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 1000},
                                               "why": {"type": "string", "maxLength": 40}},
              "required": ["answer", "why"], "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "sum", "schema": schema, "strict": True}
    r = respond(demo_server, text={"format": fmt}, reasoning={"effort": "low"}, max_output_tokens=200, temperature=1.0)
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.output[0].type == "reasoning" and r.text.format.type == "json_schema"
    events = list(respond(demo_server, text={"format": fmt}, reasoning={"effort": "none"}, max_output_tokens=200,
                          stream=True))
    jsonschema.validate(json.loads("".join(e.delta for e in events if e.type == "response.output_text.delta")),
                        schema)


def test_a_coding_agents_request_is_served(demo_server):
    """As Codex CLI sends it: a long system prompt, several tools, tool_choice auto, store false, the
    thought kept by the client as encrypted_content, streamed."""
    tools = [{"type": "function", "name": name, "description": f"{what} in the workspace. " * 3, "strict": False,
              "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                              "timeout_ms": {"type": "integer"}},
                             "required": ["path"], "additionalProperties": False}}
             for name, what in (("shell", "Runs a command"), ("read_file", "Reads a file"),
                                ("apply_patch", "Applies a patch"))]
    stream = client(demo_server).responses.create(
        model=MODEL, instructions="You are a coding agent running in a terminal. " * 40, tools=tools,
        tool_choice="auto", parallel_tool_calls=False, store=False, stream=True,
        include=["reasoning.encrypted_content"], reasoning={"effort": "medium", "summary": "auto"},
        prompt_cache_key="0b6f3c2e-5a4d-4c1e-9a7b-2f1d8e6c4a90", max_output_tokens=60,
        input=[{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]}])
    events = list(stream)
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete") and final.response.error is None
    assert final.response.usage.input_tokens > 1000
    assert {i.type for i in final.response.output} <= {"reasoning", "message", "function_call"}
    assert final.response.output[0].type == "reasoning" and final.response.output[0].encrypted_content


@pytest.mark.parametrize("fields, param", [
    ({"tools": [ADD], "tool_choice": {"type": "function", "name": "multiply"}}, "tool_choice.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{**ADD, "parameters": {"type": "object", "properties": {"x": {"type": "string", "format": "date"}}}}],
      "tool_choice": "required"}, "tools[0].parameters.properties.x.format"),
])
def test_a_forced_call_that_cannot_be_made_is_refused_before_the_reply(demo_server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        respond(demo_server, **fields)
    assert err.value.param == param
