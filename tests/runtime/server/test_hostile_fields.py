"""Every route's parser answers any value of any field it reads with a parsed request or a 400 naming
the field (ApiError), never another exception (a 500): each field of each route, one at a time, takes
every value of a set of JSON shapes (wrong types, unhashable values, huge and odd numbers, hosted
tool types, half-formed tool calls). Found an Ollama `think` given a list or an object (a TypeError)."""

import pytest

from runtime.depth import depth_levels
from runtime.server import anthropic_api, completions_api, ollama_api, openai_api, responses_api
from runtime.server.serving import ApiError, ServedModel

SERVED = ServedModel("demo", ("s", "m", "f"), tuple(depth_levels(["s", "m", "f"], 100)), 4096)
VALUES = [None, True, False, 0, -1, 1.5, 2**70, float("nan"), "", "x", "low", "json", [], [1], [None], {}, {"a": 1},
          {"a": "b"}, [{}], [{"role": "user"}], [{"role": "user", "content": "hi"}], {"type": "function"},
          [{"function": None}], [{"function": {"name": 1}}], [{"function": {"name": "f", "arguments": "x"}}],
          [{"type": "web_search"}], [{"type": "function", "name": "f"}], {"type": "web_search"},
          ["message.output_text.logprobs"], {"type": "object", "properties": {"a": {"type": "string"}}}]
ROUTES = {
    "/api/chat": (ollama_api.parse_chat, {"messages": [{"role": "user", "content": "hi"}]},
                  ["messages", "tools", "format", "options", "think", "logprobs", "top_logprobs", "stream",
                   "keep_alive", "elastic"]),
    "/api/generate": (ollama_api.parse_generate, {"prompt": "hi"},
                      ["prompt", "system", "raw", "format", "options", "think", "suffix", "images", "logprobs"]),
    "/v1/responses": (responses_api.parse_response, {"input": "hi"},
                      ["tools", "tool_choice", "include", "top_logprobs", "client_metadata", "metadata", "text",
                       "reasoning"]),
    "/v1/messages/count_tokens": (anthropic_api.parse_count, {"messages": [{"role": "user", "content": "hi"}]},
                                  ["tools", "system", "thinking", "tool_choice", "output_config"]),
    "/v1/chat/completions": (openai_api.parse_chat, {"messages": [{"role": "user", "content": "hi"}]},
                             ["logprobs", "top_logprobs", "store", "service_tier", "verbosity", "modalities", "user",
                              "metadata", "prediction", "safety_identifier", "prompt_cache_retention",
                              "response_format"]),
    "/v1/completions": (completions_api.parse_completion, {"prompt": "hi"}, ["logprobs", "echo", "stream"]),
}


@pytest.mark.parametrize("route, field", [(r, f) for r, (_, _, fields) in ROUTES.items() for f in fields])
def test_any_value_of_a_field_is_parsed_or_a_400(route, field):
    parse, base, _ = ROUTES[route]
    for value in VALUES:
        try:
            parse({"model": "demo", **base, field: value}, SERVED)
        except ApiError as e:
            assert e.status == 400, (value, e.message)
