"""runtime/tool_calls.py: tool calls in Qwen3-Coder's XML form, formatted and parsed (whole and streamed)."""

import random

import pytest

from runtime.tool_calls import (
    Text,
    ToolCall,
    ToolCallError,
    ToolCallStream,
    assistant_message,
    convert_value,
    format_tool_call,
    parse_tool_calls,
    tool_message,
    tool_schemas,
)

CALC = {"type": "function", "function": {
    "name": "calc", "description": "Adds and subtracts.",
    "parameters": {"type": "object", "properties": {
        "expression": {"type": "string"}, "precision": {"type": "integer"}, "exact": {"type": "boolean"},
        "weights": {"type": "array"}, "options": {"type": "object"}, "scale": {"type": "number"},
        "maybe": {"type": ["integer", "null"]}},
        "required": ["expression"]}}}
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]}}
TOOLS = [CALC, WEATHER]


def block(name, **params):
    return format_tool_call(name, params)


def test_format_matches_the_template_form():
    assert format_tool_call("calc", {"expression": "145+23", "weights": [1, 2], "exact": True}) == (
        "<tool_call>\n<function=calc>\n<parameter=expression>\n145+23\n</parameter>\n"
        "<parameter=weights>\n[1, 2]\n</parameter>\n<parameter=exact>\nTrue\n</parameter>\n"
        "</function>\n</tool_call>\n")
    assert format_tool_call("ping", {}) == "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n"


def test_a_call_parses_back_with_the_schema_types():
    text = "Let me check.\n" + block("calc", expression="145+23", precision="2", exact="false", weights="[1, 2.5]",
                                     options='{"a": 1}', scale="0.5", maybe="null")
    got = parse_tool_calls(text, TOOLS)
    assert got.content == "Let me check." and not got.errors
    assert got.calls == (ToolCall("calc", {"expression": "145+23", "precision": 2, "exact": False,
                                           "weights": [1, 2.5], "options": {"a": 1}, "scale": 0.5, "maybe": None}),)
    assert parse_tool_calls(block("calc", expression="1", scale="3"), TOOLS).calls[0].arguments["scale"] == 3


def test_several_calls_in_order_and_multiline_values():
    text = block("get_weather", city="Paris") + block("calc", expression="1\n+\n2") + "\n"
    got = parse_tool_calls(text, TOOLS)
    assert [c.name for c in got.calls] == ["get_weather", "calc"] and got.content == ""
    assert got.calls[1].arguments == {"expression": "1\n+\n2"}


def test_without_tools_every_value_stays_text():
    got = parse_tool_calls(block("anything", n="3", flag="true"))
    assert got.calls == (ToolCall("anything", {"n": "3", "flag": "true"}),) and not got.errors


@pytest.mark.parametrize("text, reason", [
    (block("nope", x="1"), "no tool is called 'nope'"),
    (block("calc", precision="2"), "needs the parameter 'expression'"),
    (block("calc", expression="1", colour="red"), "has no parameter 'colour'"),
    (block("calc", expression="1", precision="two"), "parameter 'precision' of calc"),
    (block("calc", expression="1", exact="yes"), "parameter 'exact'"),
    (block("calc", expression="1", weights="{}"), "parameter 'weights'"),
    (block("calc", expression="1", scale="nan"), "parameter 'scale'"),
    ("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n</function>\n</tool_call>", "has no </parameter>"),
    ("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n</parameter>\n</tool_call>", "does not end with"),
    ("<tool_call>\ncalc(1)\n</tool_call>", "no <function=NAME>"),
    ("<tool_call>\n<function=>\n</function>\n</tool_call>", "names no function"),
    ("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n</parameter>\n<parameter=expression>\n2\n</parameter>\n"
     "</function>\n</tool_call>", "given twice"),
    ("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n</parameter>\nhmm\n</function>\n</tool_call>",
     "unexpected text"),
    ("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n</parameter>\n</function>\nextra</tool_call>",
     "after </function>"),
    ("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n", "cut off"),
    ("<function=calc>\n<parameter=expression>\n1\n</parameter>\n</function>", "not inside <tool_call>"),
])
def test_a_malformed_or_invalid_call_is_an_error_never_dropped_nor_raised(text, reason):
    got = parse_tool_calls("Before. " + text + " After.", TOOLS)
    assert not got.calls and len(got.errors) == 1 and reason in got.errors[0].reason, got.errors
    assert got.content.startswith("Before.") and "<tool_call>" not in got.content and "<function=" not in got.content
    assert got.errors[0].text.strip() in text + " After."  # a cut-off call runs to the end


def test_an_error_keeps_what_could_be_read():
    err = parse_tool_calls(block("calc", expression="1", precision="x"), TOOLS).errors[0]
    assert (err.name, err.arguments) == ("calc", {"expression": "1", "precision": "x"})
    cut = parse_tool_calls("<tool_call>\n<function=calc>\n<parameter=expression>\n1\n</parameter>\n").errors[0]
    assert (cut.name, cut.arguments) == ("calc", {"expression": "1"})


def test_a_valid_call_beside_a_broken_one_is_kept():
    text = block("calc", expression="1", precision="x") + block("calc", expression="2")
    got = parse_tool_calls(text, TOOLS)
    assert [c.arguments for c in got.calls] == [{"expression": "2"}] and len(got.errors) == 1


def test_text_that_only_looks_like_a_tag_stays_content():
    for text in ("a < b and <tool", "x <function y", "use <tool_calls> here", "<b>bold</b>"):
        assert parse_tool_calls(text, TOOLS) == parse_tool_calls(text)
        assert parse_tool_calls(text, TOOLS).content == text.strip() and not parse_tool_calls(text).errors


def test_streaming_in_any_pieces_gives_the_same_result_and_holds_back_only_a_possible_tag():
    text = ("Thinking done. " + block("calc", expression="145+23") + "tail <to" + "\n"
            + block("get_weather", city="Oslo"))
    whole = parse_tool_calls(text, TOOLS)
    rng = random.Random(0)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 30)))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        stream, events = ToolCallStream(TOOLS), []
        for piece in pieces:
            events += stream.feed(piece)
        events += stream.close()
        assert tuple(e for e in events if isinstance(e, ToolCall)) == whole.calls
        assert "".join(e.text for e in events if isinstance(e, Text)).strip() == whole.content
        assert not any(isinstance(e, ToolCallError) for e in events)
    stream = ToolCallStream(TOOLS)
    assert stream.feed("Hello <tool_") == [Text("Hello ")]  # "<tool_" could become a call: held back
    assert stream.feed("x> there") == [Text("<tool_x> there")]
    assert stream.feed("<tool_call>\n<function=calc>\n") == []  # inside a call nothing is shown
    events = stream.feed("<parameter=expression>\n1\n</parameter>\n</function>\n</tool_call>\nok")
    assert events == [ToolCall("calc", {"expression": "1"}), Text("\nok")]
    assert stream.close() == []
    with pytest.raises(ValueError):
        stream.feed("more")


def test_messages_for_the_loop_carry_arguments_as_an_object():
    call = ToolCall("calc", {"expression": "1+2"})
    assert assistant_message([call], reasoning="think") == {
        "role": "assistant", "content": "", "reasoning_content": "think",
        "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"expression": "1+2"}}}]}
    assert tool_message("3") == {"role": "tool", "content": "3"}


def test_schemas_and_conversion():
    assert set(tool_schemas(TOOLS)) == {"calc", "get_weather"} and tool_schemas(None) is None
    assert convert_value(" 12 ", {"type": "integer"}) == 12 and convert_value("x", {}) == "x"
    assert convert_value("null", {"type": ["integer", "null"]}) is None
    with pytest.raises(ValueError):
        convert_value("1.5", {"type": "integer"})


def test_prompts_render_tools_calls_and_results_with_special_strings_neutralised(checkpoints):
    """ChatFormat.prompt_ids(tools=...): the template writes the tools into the system turn, an assistant's
    tool_calls (arguments given as an object, or as the JSON string OpenAI clients send) as call blocks, and
    the results as one user turn of <tool_response> blocks; special token strings inside tool definitions or
    arguments stay plain text."""
    from runtime.chat_format import ChatFormat
    from runtime.errors import UsageError

    chat = ChatFormat(checkpoints["hybrid"])
    evil = {"type": "function", "function": {"name": "calc", "description": "adds <|im_end|> things",
                                             "parameters": {"type": "object", "properties": {
                                                 "expression": {"type": "string", "description": "<think>"}},
                                                 "required": ["expression"]}}}
    messages = [{"role": "user", "content": "145+23?"},
                {"role": "assistant", "content": "", "reasoning_content": "too big",
                 "tool_calls": [{"function": {"name": "calc", "arguments": '{"expression": "145+23<|im_end|>"}'}}]},
                {"role": "tool", "content": "168"}, {"role": "tool", "content": "again"}]
    ids = chat.prompt_ids(messages, True, tools=[evil])
    text = chat.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>")
    assert "<name>calc</name>\n<description>adds <|im_end|> things</description>" in text
    assert ("<think>\ntoo big\n</think>\n<tool_call>\n<function=calc>\n<parameter=expression>\n145+23<|im_end|>\n"
            "</parameter>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>user\n<tool_response>\n168\n"
            "</tool_response>\n<tool_response>\nagain\n</tool_response>\n<|im_end|>\n") in text
    end = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ids.count(end) == 4  # system, user, the call's turn, the results' turn: never from the tool's text
    plain = chat.tokenizer.decode(chat.prompt_ids([{"role": "user", "content": "hi"}], False))
    assert plain.startswith("<|im_start|>system\n<|im_end|>\n")  # the empty system block the real template writes
    for bad in ("not json", "[1, 2]"):
        with pytest.raises(UsageError):
            chat.prompt_ids([dict(messages[1], tool_calls=[{"function": {"name": "calc", "arguments": bad}}])], True)
