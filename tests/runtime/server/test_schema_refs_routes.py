"""A schema whose $refs never end, or name nothing, is the same 400 on every route that takes a schema,
before any work (issue 37, item 10): it was a 500 after the prompt had run on messages, and a 200 on chat
and responses. Completions takes no schema. The schemas themselves: tests/runtime/test_schema_refs.py."""

import pytest
import requests

import runtime.generate
from tests.paths import DEMO_NVFP4

MODEL = DEMO_NVFP4.name
HI = [{"role": "user", "content": "hi"}]

BAD = {  # (schema, the words of the refusal)
    "a self reference": ({"$ref": "#"}, "refers back to itself without end"),
    "a cycle of two": ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
                       "refers back to itself without end"),
    "an endless required chain": ({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
                                                   "required": ["next"]}}, "$ref": "#/$defs/n"},
                                  "refers back to itself without end"),
    "an array of at least one of itself": ({"type": "object", "properties": {"a": {"type": "array", "minItems": 1,
                                                                                  "items": {"$ref": "#/properties/a"}}},
                                            "required": ["a"]}, "refers back to itself without end"),
    "a ref to nothing": ({"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}, "points at nothing"),
}


def as_parameters(schema: dict) -> dict:
    """The schema as a tool's parameters (an object whose required parameter is the schema, or itself)."""
    if schema.get("type") == "object":
        return schema
    return {"type": "object", "properties": {"v": {"type": "object", "properties": {"x": schema}, "required": ["x"]}},
            "required": ["v"], **({"$defs": schema["$defs"]} if "$defs" in schema else {})}


def routes(schema: dict) -> dict:
    """(path, body, how to read the refusal's message) for every route and every place a schema goes."""
    params = as_parameters(schema)
    chat_tool = [{"type": "function", "function": {"name": "t", "parameters": params}}]
    return {
        "chat response_format": ("/v1/chat/completions", {"messages": HI, "max_tokens": 8, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
        "chat forced tool": ("/v1/chat/completions", {"messages": HI, "max_tokens": 8, "tools": chat_tool,
                                                       "tool_choice": "required"}),
        "chat strict tool": ("/v1/chat/completions", {"messages": HI, "max_tokens": 8, "tools": [
            {"type": "function", "function": {"name": "t", "strict": True, "parameters": params}}]}),
        "responses text.format": ("/v1/responses", {"input": "hi", "max_output_tokens": 16, "text": {"format": {
            "type": "json_schema", "name": "x", "schema": schema}}}),
        "responses forced tool": ("/v1/responses", {"input": "hi", "max_output_tokens": 16, "tools": [
            {"type": "function", "name": "t", "parameters": params}], "tool_choice": "required"}),
        "messages output_config": ("/v1/messages", {"messages": HI, "max_tokens": 8, "output_config": {
            "format": {"type": "json_schema", "schema": schema}}}),
        "messages forced tool": ("/v1/messages", {"messages": HI, "max_tokens": 8, "tools": [
            {"name": "t", "input_schema": params}], "tool_choice": {"type": "any"}}),
    }


def message(body: dict) -> str:
    error = body["error"]
    return error["message"]


@pytest.fixture
def no_reply_starts(monkeypatch):
    started = []
    real = runtime.generate.stream_chat

    def recorded(*args, **kwargs):
        started.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime.generate, "stream_chat", recorded)
    return started


@pytest.mark.parametrize("case", list(BAD))
def test_a_schema_that_never_ends_is_the_same_400_on_every_route_before_any_work(demo_server, no_reply_starts,
                                                                                 case):
    schema, words = BAD[case]
    base = demo_server.address.removesuffix("/v1")
    refusals = {}
    for where, (path, body) in routes(schema).items():
        r = requests.post(base + path, json={"model": MODEL, **body}, timeout=120)
        assert r.status_code == 400, (where, r.status_code, r.text[:300])
        refusals[where] = message(r.json())
        assert words in refusals[where], (where, refusals[where])
    # One refusal, whichever route: the same words (Anthropic's shape puts the field before them).
    assert len({m[m.index(words):] for m in refusals.values()}) == 1, refusals
    assert no_reply_starts == []
