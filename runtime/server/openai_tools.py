"""OpenAI's tool-calling and structured-output fields of chat completions, mapped onto the runtime's
tool calls (runtime/tool_calls.py, events ToolCall) and grammars (runtime/grammar.py). No HTTP here.

    fields = parse_tool_fields(body)           # ApiError 400 naming the field it cannot honour
    messages = tool_turns(raw, converted)      # assistant tool_calls and tool results, checked and ordered
    message_tool_calls(done) / CallDeltas      # the response's tool_calls, whole or streamed

A request's `tools` are rendered by the checkpoint's chat template; `tool_choice` `auto` lets the
model call one, `none` offers none, `required` forces a call of any offered tool and
`{"type": "function", "function": {"name": ...}}` of that one (the grammar makes the call parse and
validate, whatever the model). `response_format` `json_object` / `json_schema` constrains the answer
the same way. The model's calls come back in OpenAI's shape with ids the runtime gave them; a tool
result is linked to its call by `tool_call_id` (the template links them by order, so results are put
in their calls' order).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import show
from ..events import Done, ToolCall
from ..grammar import GrammarError, answer_grammar, check_grammar, response_format_schema
from ..tool_calls import ToolSpecError, check_tools, strict_tools
from .serving import bad

ARGUMENT_PIECE = 64  # characters of a call's arguments per streamed delta


@dataclass(frozen=True)
class ToolFields:
    tools: tuple[dict, ...] | None
    tool_choice: str  # auto, none or required
    tool_name: str | None  # the forced function (tool_choice required)
    parallel: bool
    response_format: dict | None  # the JSON schema the answer follows (None: text)
    strict: bool = False  # a tool asked for `strict`: calls made with tool_choice auto are constrained too


def parse_tool_fields(body: dict) -> ToolFields:
    """`tools`, `tool_choice`, `parallel_tool_calls` and `response_format`, checked; the grammar they
    make is checked too, so a schema the engine cannot follow is a 400 before the reply begins."""
    for key in ("functions", "function_call"):
        if body.get(key) is not None:
            raise bad(key, f"{key} is OpenAI's deprecated form; send tools and tool_choice instead")
    tools = None
    if body.get("tools") is not None:
        try:
            tools = check_tools(body["tools"])
        except ToolSpecError as e:
            raise bad(e.param, e.message) from None
    names = [t["function"]["name"] for t in tools or ()]
    choice, name = _tool_choice(body.get("tool_choice"), names)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", "parallel_tool_calls must be true or false")
    strict = strict_tools(body.get("tools"))
    try:
        schema = response_format_schema(body.get("response_format"))
    except GrammarError as e:
        raise bad(e.param, e.message) from None
    return checked_tool_fields(ToolFields(tools, choice, name, parallel, schema, strict))


def checked_tool_fields(fields: ToolFields, rename=lambda param: param) -> ToolFields:
    """The fields, however a route spelled them: the grammar they make must compile, so a schema the
    engine cannot follow is a 400 before the reply begins (`rename` turns chat's param names into the
    route's)."""
    try:
        check_grammar(answer_grammar(None, fields.tools, fields.tool_choice, fields.tool_name, fields.parallel,
                                     fields.response_format, strict=fields.strict))
    except GrammarError as e:
        raise bad(rename(e.param), e.message) from None
    return fields


def _tool_choice(value, names: list[str]) -> tuple[str, str | None]:
    if value is None:
        return "auto", None
    if value in ("auto", "none"):
        return value, None
    if value == "required":
        if not names:
            raise bad("tool_choice", "tool_choice 'required' needs tools to choose from")
        return "required", None
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
        if not isinstance(name, str) or name not in names:
            offered = ", ".join(names) or "none"
            raise bad("tool_choice.function.name", f"{show(name, 64)} is not an offered tool (offered: {offered})")
        return "required", name
    raise bad("tool_choice", "tool_choice must be auto, none, required or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}")


# ---------------------------------------------------------------------- the conversation


def assistant_calls(calls, where: str) -> tuple[list[dict], list[str | None]]:
    """An assistant message's `tool_calls` -> the template's calls (arguments as objects) and their ids."""
    if not isinstance(calls, list):
        raise bad(f"{where}.tool_calls", "tool_calls must be a list")
    out, ids = [], []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        f = call.get("function") if isinstance(call, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
            raise bad(at, "each tool call needs {type: function, function: {name, arguments}}")
        arguments = f.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                raise bad(f"{at}.function.arguments", "arguments must be a JSON object (as a string or not)") from None
        if not isinstance(arguments, dict):
            raise bad(f"{at}.function.arguments", "arguments must be a JSON object")
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise bad(f"{at}.id", "id must be a string")
        out.append({"type": "function", "function": {"name": f["name"], "arguments": arguments}})
        ids.append(call_id)
    return out, ids


def tool_turns(raw: list, converted: list[dict]) -> list[dict]:
    """Checks that every `tool` message answers a call of the assistant message just before its run
    of results (by `tool_call_id`, each at most once), and puts each run in its calls' order."""
    out, i = [], 0
    while i < len(converted):
        if converted[i]["role"] != "tool":
            out.append(converted[i])
            i += 1
            continue
        start = i
        while i < len(converted) and converted[i]["role"] == "tool":
            i += 1
        before = converted[start - 1] if start else None
        ids = before.get("_call_ids") if before else None
        if not ids:
            raise bad(f"messages[{start}]", "a tool message must follow an assistant message with tool_calls")
        if i - start > len(ids):
            raise bad(f"messages[{start + len(ids)}]", f"more tool results than the {len(ids)} calls before them")
        order = []
        for k in range(start, i):
            call_id = raw[k].get("tool_call_id")
            if call_id is None:
                order.append(k - start)
                continue
            if not isinstance(call_id, str) or call_id not in ids:
                raise bad(f"messages[{k}].tool_call_id", f"{show(call_id, 64)} is not the id of a call in "
                                                          f"messages[{start - 1}].tool_calls")
            order.append(ids.index(call_id))
        if len(set(order)) != len(order):
            raise bad(f"messages[{start}]", "two tool results answer the same call")
        out += [converted[start + k] for k in sorted(range(i - start), key=lambda k: order[k])]
    for m in out:
        m.pop("_call_ids", None)
    return out


def in_call_order(results: list[tuple[str, str, dict]], call_ids: list[str]) -> list[dict]:
    """Tool results, as (param, call id, tool message), answering an assistant turn's calls `call_ids`:
    each answers one of them, at most once, and they are put in the calls' order (the template links a
    result to its call by order). For the routes that spell results their own way."""
    by_call: dict[str, dict] = {}
    for param, call_id, message in results:
        if call_id not in call_ids:
            raise bad(param, f"{show(call_id, 64)} is not the id of a call in the assistant turn before it")
        if call_id in by_call:
            raise bad(param, "two tool results answer the same call")
        by_call[call_id] = message
    return [by_call[c] for c in call_ids if c in by_call]


# ---------------------------------------------------------------------- the response


def _arguments(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False)


def message_tool_calls(done: Done) -> list[dict] | None:
    """The response message's `tool_calls` (arguments as a JSON string, as OpenAI sends them)."""
    if not done.tool_calls:
        return None
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
            for c in done.tool_calls]


def call_deltas(call: ToolCall) -> list[dict]:
    """A call as streamed `delta.tool_calls` items: the index, id, type and name first (with empty
    arguments), then the arguments in pieces; joined, the pieces are the arguments' JSON."""
    text = _arguments(call)
    first = {"index": call.index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    return [first] + [{"index": call.index, "function": {"arguments": text[k:k + ARGUMENT_PIECE]}}
                      for k in range(0, len(text), ARGUMENT_PIECE)]
