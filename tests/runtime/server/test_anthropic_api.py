"""/v1/messages in Anthropic's shape through the official `anthropic` client, on the demo."""

import json

import anthropic
import jsonschema
import pytest
import requests

from runtime.tool_calls import format_tool_call
from tests.paths import DEMO_NVFP4

MODEL = DEMO_NVFP4.name
QUESTION = [{"role": "user", "content": "What is 45 + 23?"}]
THINK = {"type": "enabled", "budget_tokens": 24}


def root(srv) -> str:
    return srv.address.removesuffix("/v1")


def client(srv, key="unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=root(srv), api_key=key, max_retries=0, timeout=60)


def create(srv, key="unused", **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("messages", QUESTION)
    kw.setdefault("max_tokens", 80)
    return client(srv, key).messages.create(**kw)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def test_a_message_with_thinking_enabled_has_a_thinking_block_then_text(demo_server):
    m = create(demo_server, thinking=THINK, extra_body={"temperature": 0})
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["thinking", "text"]
    thought, text = m.content
    assert thought.thinking and thought.signature and text.text
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 0 and m.usage.output_tokens > 0
    e = extra(m, "elastic")
    assert e["thinking_budget"] == 24 and e["think_submodel"] and e["answer_submodel"] == "1.5M"


@pytest.mark.parametrize("thinking", [None, {"type": "disabled"}])
def test_no_thinking_unless_asked_as_in_anthropics_api(demo_server, thinking):
    m = create(demo_server, max_tokens=20, **({"thinking": thinking} if thinking else {}))
    assert [b.type for b in m.content] == ["text"] and extra(m, "elastic")["think_submodel"] is None


def test_adaptive_thinking_and_effort_pick_a_depth_level(demo_server):
    m = create(demo_server, thinking={"type": "adaptive"}, output_config={"effort": "low"})
    assert extra(m, "elastic")["depth"] == "Quick" and m.content[0].type == "thinking"
    omitted = create(demo_server, thinking={**THINK, "display": "omitted"})
    assert omitted.content[0].type == "thinking" and omitted.content[0].thinking == ""


def test_streamed_events_follow_anthropics_sequence_and_equal_the_whole_message(demo_server):
    whole = create(demo_server, thinking=THINK, extra_body={"temperature": 0})
    with client(demo_server).messages.stream(model=MODEL, messages=QUESTION, max_tokens=80, thinking=THINK,
                                             extra_body={"temperature": 0}) as stream:
        events = [e for e in stream if not e.type.startswith(("text", "thinking", "signature"))]  # the raw ones
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    first_text = deltas.index("text_delta")
    assert set(deltas[:first_text]) == {"thinking_delta", "signature_delta"} and deltas[first_text - 1] == \
        "signature_delta"
    assert set(deltas[first_text:]) == {"text_delta"}
    assert kinds.count("content_block_stop") == 2
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens


def test_max_tokens_and_stop_sequences_end_the_message(demo_server):
    short = create(demo_server, max_tokens=3)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3
    full = create(demo_server, max_tokens=20, extra_body={"temperature": 0}).content[0].text
    cut = full[2:4]
    m = create(demo_server, max_tokens=20, stop_sequences=[cut], extra_body={"temperature": 0})
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == cut and m.content[0].text == full[:full.index(cut)]


def test_system_and_a_past_thought_make_the_conversation(demo_server):
    def input_tokens(**kw):
        m = create(demo_server, max_tokens=1, **kw)
        return m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)

    plain = input_tokens()
    assert input_tokens(system="Answer with one number.") == input_tokens(
        system=[{"type": "text", "text": "Answer with one"}, {"type": "text", "text": " number."}]) > plain
    history = QUESTION + [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "45 + 23 = 68.", "signature": "x"}, {"type": "text", "text": "68."}]},
        {"role": "user", "content": [{"type": "text", "text": "And 2 + 2?"}]}]
    assert input_tokens(messages=history, extra_body={"elastic": {"keep_reasoning": True}}) > \
        input_tokens(messages=history)


def bad_request(srv, body: dict):
    """The raw answer to a body the SDK might refuse to send (Anthropic's shape is checked here)."""
    r = requests.post(root(srv) + "/v1/messages", json={"model": MODEL, "messages": QUESTION, "max_tokens": 8,
                                                        **body})
    return r.status_code, r.json()


@pytest.mark.parametrize("fields, names", [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "sometimes"}}, "thinking.type"),
    ({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"output_config": {"format": {"type": "xml"}}}, "output_config.format"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "if": {}}}}},
     "output_config.format.schema.if"),
    ({"temperature": 9}, "temperature"),
    ({"stop_sequences": "x"}, "stop_sequences"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0].type"),
    ({"messages": QUESTION + [{"role": "assistant", "content": "The answer is"}]}, "messages[1]"),
    ({"system": [{"type": "image"}]}, "system[0]"),
    ({"metadata": {"tenant": "x"}}, "metadata"),
    ({"container": "c"}, "container"),
    ({"elastic": {"depth": "Deepest"}}, "elastic.depth"),
])
def test_fields_it_cannot_honour_get_400_in_anthropics_shape_naming_them(demo_server, fields, names):
    status, body = bad_request(demo_server, fields)
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(names)


def test_the_sdk_raises_anthropics_errors(demo_server, loading_server):
    with pytest.raises(anthropic.NotFoundError) as err:
        create(demo_server, model="claude-sonnet-4-5")
    assert err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as err:
        create(demo_server, thinking={"type": "enabled", "budget_tokens": 10 ** 7})
    assert err.value.body["error"]["message"].startswith("thinking.budget_tokens")
    with pytest.raises(anthropic.InternalServerError) as err:
        create(loading_server)
    assert err.value.status_code == 503 and err.value.body["error"]["type"] == "overloaded_error"


def test_the_key_is_read_from_x_api_key_as_well_as_bearer(keyed_server):
    assert create(keyed_server, key="s3cret-key", max_tokens=2).usage.output_tokens == 2  # x-api-key
    with pytest.raises(anthropic.AuthenticationError) as err:
        create(keyed_server, key="wrong-key", max_tokens=2)
    assert err.value.body["error"]["type"] == "authentication_error"
    bearer = anthropic.Anthropic(base_url=root(keyed_server), auth_token="s3cret-key", max_retries=0)
    assert bearer.messages.create(model=MODEL, messages=QUESTION, max_tokens=2).usage.output_tokens == 2
    r = requests.post(keyed_server.address + "/chat/completions", headers={"x-api-key": "s3cret-key"},
                      json={"model": MODEL, "messages": QUESTION, "max_tokens": 1, "reasoning_effort": "none"})
    assert r.status_code == 200  # one key check for every route


# ---------------------------------------------------------------------- tools

ADD = {"name": "add_numbers", "description": "Adds the numbers in an expression.",
       "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}},
                        "required": ["expression"]}}


def test_a_tool_use_whole_and_streamed_and_its_result_fed_back(demo_server, spell_replies):
    spell_replies("I will add them.\n" + format_tool_call("add_numbers", {"expression": "45+23"}))
    m = create(demo_server, tools=[ADD], max_tokens=200)
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["text", "tool_use"]
    use = m.content[1]
    assert use.name == "add_numbers" and use.input == {"expression": "45+23"} and use.id
    with client(demo_server).messages.stream(model=MODEL, messages=QUESTION, max_tokens=200, tools=[ADD]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(deltas) == 1 and json.loads(deltas[0].partial_json) == {"expression": "45+23"}
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.type for b in starts] == ["text", "tool_use"] and starts[1].input == {}
    assert [b.model_dump() for b in final.content][1]["input"] == use.input and final.stop_reason == "tool_use"
    # the client runs the tool and sends the result back: the conversation grows by both
    spell_replies("45 + 23 = 68.")
    history = QUESTION + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                        "content": "68"}]}]
    answer = create(demo_server, messages=history, tools=[ADD], max_tokens=50)
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text == "45 + 23 = 68."
    assert answer.usage.input_tokens + answer.usage.cache_read_input_tokens > \
        m.usage.input_tokens + m.usage.cache_read_input_tokens


@pytest.mark.parametrize("choice", [{"type": "any", "disable_parallel_tool_use": True},
                                    {"type": "tool", "name": "add_numbers", "disable_parallel_tool_use": True}])
def test_a_forced_tool_use_always_validates(demo_server, choice):
    for seed in (1, 2):
        m = create(demo_server, tools=[ADD], tool_choice=choice, max_tokens=120, extra_body={"seed": seed,
                                                                                             "temperature": 1.0})
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and uses and uses[0].name == "add_numbers"
        jsonschema.validate(uses[0].input, ADD["input_schema"])


def test_a_json_schema_format_gives_text_that_validates(demo_server):
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 1000}},
              "required": ["answer"],
              "additionalProperties": False}
    m = create(demo_server, max_tokens=400, thinking=THINK, output_config={"format": {"type": "json_schema",
                                                                                      "schema": schema}})
    assert m.content[0].type == "thinking"  # the thought is free; the answer follows the schema
    jsonschema.validate(json.loads(m.content[1].text), schema)


def test_a_malformed_call_is_reported_not_dropped(demo_server, spell_replies):
    spell_replies(format_tool_call("add_numbers", {"wrong": "1"}))
    m = create(demo_server, tools=[ADD], max_tokens=200)
    assert m.stop_reason == "end_turn" and not [b for b in m.content if b.type == "tool_use"]
    assert extra(m, "elastic")["invalid_tool_calls"][0]["name"] == "add_numbers"


@pytest.mark.parametrize("fields, names", [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"name": "add"}]}, "tools[0].input_schema"),
    ({"tools": [{**ADD, "name": "two words"}]}, "tools[0].name"),
    ({"tools": [ADD], "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"tools": [ADD], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"tools": [ADD], "tool_choice": {"type": "tool", "name": "multiply"}}, "tool_choice.name"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"tools": [{**ADD, "input_schema": {"type": "object", "properties": {"x": {"type": "string", "format": "date"}}}}],
      "tool_choice": {"type": "any"}}, "tools[0].input_schema.properties.x.format"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "1"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "add", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "1"}]}]},
     "messages[2].content[0].tool_use_id"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "add", "input": "1+1"}]}, {"role": "user", "content": "y"}]},
     "messages[1].content[0].input"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "a", "input": {}}]}]},
     "messages[0].content[0].type"),
])
def test_tool_fields_it_cannot_honour_get_400_naming_them(demo_server, fields, names):
    status, body = bad_request(demo_server, fields)
    assert status == 400 and body["error"]["message"].startswith(names)


def test_a_body_too_large_is_refused_in_anthropics_shape(demo_server):
    r = requests.post(root(demo_server) + "/v1/messages", data=b'{"x": "' + b"a" * (5 * 1024 * 1024) + b'"}',
                      headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
