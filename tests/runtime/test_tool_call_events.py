"""Tool calls in the decode loop: the answer's calls come as ToolCall / InvalidToolCall events, never
as text, on the tiny checkpoint (whose template renders tools) steered to spell the replies."""

import json
import subprocess
import sys

import pytest
import torch

from runtime.engine import Engine
from runtime.events import InvalidToolCall, Token, ToolCall
from runtime.generate import ChatRequest, stream_chat
from runtime.sampling import SamplingSettings
from runtime.tool_calls import format_tool_call
from tests.engine_support import HELLO

GREEDY = SamplingSettings(temperature=0)
CALC = {"type": "function", "function": {"name": "calc", "description": "Adds.", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}, "digits": {"type": "integer"}},
    "required": ["expression"]}}}
TOOLS = (CALC,)


@pytest.fixture(scope="module")
def engine(checkpoints):
    """The tiny checkpoint with room for the template's tool instructions (about 1,000 tokens here)."""
    return Engine.load(checkpoints["hybrid"], max_context=2048)


def speller(engine, text: str, prompt_len: int):
    """A processor that makes the reply exactly `text` (the model's own tokens), then ends the turn."""
    target = engine.chat.encode(text) + [min(engine.chat.special.end_of_turn)]

    def spell(context, logits):
        i = len(context) - prompt_len
        logits = torch.full_like(logits, float("-inf"))
        logits[..., target[min(i, len(target) - 1)]] = 0
        return logits
    return spell


def reply(engine, text, thinking=False, tools=TOOLS, **kw):
    offered = list(tools) if tools and kw.get("tool_choice") != "none" else None
    prompt = engine.chat.prompt_ids(list(HELLO), thinking, tools=offered)
    request = ChatRequest(HELLO, "full" if thinking else None, "full", sampling=GREEDY, tools=tools,
                          logits_processors=(speller(engine, text, len(prompt)),), **kw)
    return list(stream_chat(engine, request))


def test_a_call_is_an_event_not_text(engine):
    events = reply(engine, "Let me add.\n" + format_tool_call("calc", {"expression": "145+23", "digits": 3}))
    done = events[-1]
    calls = [e for e in events if isinstance(e, ToolCall)]
    shown = "".join(e.text for e in events if isinstance(e, Token))
    assert shown == done.answer_text and "<tool_call>" not in shown and "calc" not in shown
    assert shown.strip() == "Let me add."
    assert len(calls) == 1 and calls[0].name == "calc" and calls[0].arguments == {"expression": "145+23", "digits": 3}
    assert calls[0].id.startswith("call_") and calls[0].index == 0
    assert done.finish_reason == "tool_calls" and done.tool_calls == tuple(calls) and not done.invalid_tool_calls
    # the event comes right after the Token of the token that closed the block
    i = events.index(calls[0])
    assert isinstance(events[i - 1], Token) and events[i - 1].token_id == engine.chat.encode("</tool_call>")[-1]
    assert calls[0].to_dict() == {"type": "tool_call", "id": calls[0].id, "name": "calc",
                                  "arguments": {"expression": "145+23", "digits": 3}, "index": 0}
    assert done.to_dict()["tool_calls"] == [calls[0].to_dict()]


def test_parallel_calls_in_order_and_one_when_asked(engine):
    text = format_tool_call("calc", {"expression": "1+1"}) + format_tool_call("calc", {"expression": "2+2"})
    both = [e for e in reply(engine, text) if isinstance(e, ToolCall)]
    assert [c.arguments["expression"] for c in both] == ["1+1", "2+2"] and [c.index for c in both] == [0, 1]
    assert len({c.id for c in both}) == 2
    events = reply(engine, text, parallel_tool_calls=False)
    assert [c.arguments["expression"] for c in events[-1].tool_calls] == ["1+1"]
    assert events[-1].finish_reason == "tool_calls"


def test_a_call_inside_the_thinking_ends_it(engine):
    events = reply(engine, "I need the tool.\n" + format_tool_call("calc", {"expression": "7*6"}), thinking=True)
    done = events[-1]
    assert done.thinking_end == "tool_call" and done.thinking_text == "I need the tool.\n"
    assert [c.arguments for c in done.tool_calls] == [{"expression": "7*6"}]
    assert "<tool" not in "".join(e.text for e in events if isinstance(e, Token))
    assert done.finish_reason == "tool_calls"


def test_malformed_and_cut_off_calls_are_reported(engine):
    events = reply(engine, "<tool_call>\n<function=calc>\n<parameter=digits>\nmany\n</parameter>\n"
                           "</function>\n</tool_call>\nSorry.")
    done = events[-1]
    bad = [e for e in events if isinstance(e, InvalidToolCall)]
    assert len(bad) == 1 and bad[0].name == "calc" and "expression" in bad[0].error
    assert done.invalid_tool_calls == tuple(bad) and not done.tool_calls and done.finish_reason == "end_of_turn"
    assert done.answer_text.strip() == "Sorry." and done.to_dict()["invalid_tool_calls"][0]["name"] == "calc"
    cut = reply(engine, format_tool_call("calc", {"expression": "1+2"}), max_new_tokens=6)[-1]
    assert cut.finish_reason == "length" and not cut.tool_calls
    assert "cut off" in cut.invalid_tool_calls[0].error


def test_without_tools_the_text_is_the_text(engine):
    text = format_tool_call("calc", {"expression": "1+2"})
    for kw in ({"tools": None}, {"tool_choice": "none"}):
        done = reply(engine, text, **kw)[-1]
        assert done.answer_text == text
        assert not done.tool_calls and done.finish_reason == "end_of_turn"


def test_bad_tool_requests_are_clear(engine):
    from runtime.errors import UsageError

    with pytest.raises(UsageError, match="not offered"):
        reply(engine, "x", tool_choice="required", tool_name="nope")
    with pytest.raises(UsageError, match="no tool is offered"):
        reply(engine, "x", tools=None, tool_choice="required")
    with pytest.raises(UsageError, match="tool_choice must be one of"):
        reply(engine, "x", tool_choice="sometimes")


@pytest.mark.slow
def test_generate_cli_prints_tool_calls(checkpoints, tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([CALC]))
    out = subprocess.run(
        [sys.executable, "-m", "runtime", "generate", "--checkpoint", str(checkpoints["hybrid"]), "--prompt", "Hi",
         "--submodel", "full", "--thinking-budget", "0", "--max-new-tokens", "8", "--temperature", "0",
         "--tools", str(tools), "--json"], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[-1]["type"] == "done"
    assert all(line["type"] in ("token", "switch", "tool_call", "invalid_tool_call", "done") for line in lines)
    for bad, why in (("{", "not valid JSON"), ('[{"type": "function", "function": {"name": "a b"}}]',
                                                "function.name")):
        tools.write_text(bad)
        run = subprocess.run([sys.executable, "-m", "runtime", "generate", "--checkpoint", str(checkpoints["hybrid"]),
                              "--prompt", "Hi", "--tools", str(tools)], capture_output=True, text=True)
        assert run.returncode == 2 and why in run.stderr and len(run.stderr.strip().splitlines()) == 1
