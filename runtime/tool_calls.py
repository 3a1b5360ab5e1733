"""Tool calls in the form Nemotron 3 writes them (Qwen3-Coder's XML), formatted and parsed.

A reply calls a tool with one block per call, after its thinking:

    <tool_call>
    <function=add_numbers>
    <parameter=expression>
    145+23
    </parameter>
    </function>
    </tool_call>

Parameter values are text; the tool's JSON schema says what each one is, so parsing converts
them ("3" -> 3 for an integer, "[1, 2]" -> a list for an array). Everything here is plain Python
(no torch, no Qt) so that the chat window, the local server and the training code share it.

The API:

- `format_tool_call(name, arguments)`: one call as a block, exactly as the chat template renders an
  assistant's `tool_calls` (a value that is a dict or a list is written as JSON, anything else as
  text), so a model trained on replies written with it matches the template byte for byte.
- `parse_tool_calls(text, tools=None) -> ParsedReply`: a whole reply's answer text (the part after
  `</think>`) -> `content` (the text outside the calls), `calls` (valid `ToolCall`s, in order) and
  `errors` (every malformed or invalid call as a `ToolCallError`, in order; none is dropped and
  nothing raises). With `tools` (OpenAI-style `{"type": "function", "function": {...}}` or the bare
  `{"name", "description", "parameters"}`), a call must name one of them, give every required
  parameter, no unknown one, and values that convert to the declared types.
- `ToolCallStream(tools=None)`: the same parse, fed pieces of text as they stream. `feed(piece)`
  returns the events ready so far, `close()` the rest: `Text` (content that is surely not part of
  a call: text that could still become `<tool_call>` is held back until it cannot), `ToolCall`
  (a complete, valid call) and `ToolCallError`. The concatenated `Text`s equal `ParsedReply.content`
  before stripping.
- `assistant_message(calls, content="", reasoning=None)` and `tool_message(content)`: the
  messages a tool loop appends to the conversation (arguments as an object, as the template needs).

Call ids are not part of the format (the template renders none; order is the only link between a
call and its result), so `ToolCall` carries none: a server numbers calls itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .errors import show

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
FUNCTION_CLOSE, PARAMETER_CLOSE = "</function>", "</parameter>"
_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>")
# A block written without the <tool_call> wrapper is still a call (malformed): report it, never show it.
_BARE = re.compile(r"<function=[^>\n]*>.*?</function>", re.DOTALL)
_OPENERS = (CALL_OPEN, "<function=")


@dataclass(frozen=True)
class ToolCall:
    """A valid call: the tool's name and its arguments, converted to the schema's JSON types."""
    name: str
    arguments: dict[str, Any]

    def as_message_call(self) -> dict:
        """The call as an assistant message's `tool_calls` entry (arguments as an object)."""
        return {"type": "function", "function": {"name": self.name, "arguments": dict(self.arguments)}}


@dataclass(frozen=True)
class ToolCallError:
    """A call that cannot be run: why (one line), the raw text of the block, and what could be read
    of it (`name` and the raw, unconverted `arguments`; None when not even that could be read)."""
    reason: str
    text: str
    name: str | None = None
    arguments: dict[str, str] | None = None


@dataclass(frozen=True)
class Text:
    """Content outside any call, safe to show as it streams."""
    text: str


@dataclass(frozen=True)
class ParsedReply:
    content: str  # the text outside the calls, stripped
    calls: tuple[ToolCall, ...] = ()
    errors: tuple[ToolCallError, ...] = ()


# ----------------------------------------------------------------------------- formatting

def format_value(value: Any) -> str:
    """A parameter value as the template writes it: JSON for a dict or a list, else as text
    (Jinja's `string` filter, Python's `str`: True, None)."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One call, ending in `</tool_call>\\n`, as the chat template renders it."""
    params = "".join(f"<parameter={k}>\n{format_value(v)}\n</parameter>\n" for k, v in arguments.items())
    return f"{CALL_OPEN}\n<function={name}>\n{params}{FUNCTION_CLOSE}\n{CALL_CLOSE}\n"


def assistant_message(calls: Iterable[ToolCall], content: str = "", reasoning: str | None = None) -> dict:
    """The assistant turn that made `calls`, for the conversation the loop sends next."""
    message = {"role": "assistant", "content": content, "tool_calls": [c.as_message_call() for c in calls]}
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def tool_message(content: str) -> dict:
    """A tool's result (one per call, in the calls' order; the template merges them into one turn)."""
    return {"role": "tool", "content": content}


# ----------------------------------------------------------------------------- checking tools from outside

MAX_TOOLS = 128  # as OpenAI's API allows
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names
_BREAKS_FORMAT = re.compile(r"[<>\n\r]")  # a parameter name with these could not be parsed back


class ToolSpecError(ValueError):
    """A tool definition that cannot be offered; `param` says where (`tools[1].function.name`)."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param, self.message = param, message


def check_tools(value) -> tuple[dict, ...]:
    """OpenAI-style tools from outside (a request, a file) -> `{"type": "function", "function": {name,
    description, parameters}}` each (what the template renders: `strict` is read apart, by
    `strict_tools`), or ToolSpecError. Names follow OpenAI's rule and are unique;
    parameter names must not hold `<`, `>` or line breaks (they would break the call format).
    JSON-schema keywords are checked where a schema constrains decoding (runtime/grammar.py)."""
    if not isinstance(value, list) or not value:
        raise ToolSpecError("tools", "must be a non-empty list of {type: function, function: {...}} objects")
    if len(value) > MAX_TOOLS:
        raise ToolSpecError("tools", f"at most {MAX_TOOLS} tools can be offered, not {len(value)}")
    out, seen = [], set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise ToolSpecError(f"{where}.type", "only {type: function, function: {...}} tools are supported")
        f = tool.get("function")
        if not isinstance(f, dict):
            raise ToolSpecError(f"{where}.function", "must be an object with name, description and parameters")
        name = f.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ToolSpecError(f"{where}.function.name", "must be 1 to 64 letters, digits, _ or -")
        if name in seen:
            raise ToolSpecError(f"{where}.function.name", f"{name!r} is offered twice")
        seen.add(name)
        description = f.get("description")
        if description is not None and not isinstance(description, str):
            raise ToolSpecError(f"{where}.function.description", "must be a string")
        params = f.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ToolSpecError(f"{where}.function.parameters", "must be a JSON schema object")
        props = params.get("properties", {})
        if not isinstance(props, dict):
            raise ToolSpecError(f"{where}.function.parameters.properties", "must be an object")
        for key in props:
            if not key or len(key) > 128 or _BREAKS_FORMAT.search(key):
                raise ToolSpecError(f"{where}.function.parameters.properties",
                                    f"the parameter name {show(key, 40)} cannot be written in a call "
                                    "(1 to 128 characters, no <, > or line break)")
        strict = f.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ToolSpecError(f"{where}.function.strict", "must be true or false")
        entry = {"name": name, "parameters": params}
        if description:
            entry["description"] = description
        out.append({"type": "function", "function": entry})
    return tuple(out)


# ----------------------------------------------------------------------------- schemas

def strict_tools(value) -> bool:
    """Whether any tool of a request asks for OpenAI's `strict` (calls that match its schema)."""
    return isinstance(value, list) and any(isinstance(t, dict) and isinstance(t.get("function"), dict)
                                           and t["function"].get("strict") is True for t in value)


def tool_schemas(tools: Iterable[dict] | None) -> dict[str, dict] | None:
    """{name: parameters schema} from OpenAI-style or bare tool definitions; None for no tools."""
    if tools is None:
        return None
    out = {}
    for tool in tools:
        f = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            params = f.get("parameters")
            out[f["name"]] = params if isinstance(params, dict) else {}
    return out


def _types(schema: dict) -> list[str]:
    """The JSON types a schema declares: its `type`, else its anyOf / oneOf branches' (pydantic writes
    Optional[int] as anyOf integer, null)."""
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    out = []
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else []:
            out += [k for k in _types(branch) if k not in out]
    return out


def convert_value(raw: str, schema: dict | None) -> Any:
    """`raw` as the JSON type `schema` declares; raises ValueError when it is not one. An absent or
    unknown type (or "string") keeps the text; a list of types takes the first that fits."""
    types = _types(schema or {})
    if not types:
        return raw
    for kind in types:
        try:
            return _convert(raw, kind)
        except ValueError:
            continue
    raise ValueError(f"{show(raw, 40)} is not {' or '.join(types)}")


def _convert(raw: str, kind: str) -> Any:
    text = raw.strip()
    if kind in ("integer", "int"):
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        raise ValueError
    if kind in ("number", "float"):
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        try:
            value = float(text)
        except ValueError:
            raise ValueError from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError  # JSON has no NaN or infinity
        return value
    if kind in ("boolean", "bool"):
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError
    if kind == "null":
        if text.lower() in ("null", "none"):
            return None
        raise ValueError
    if kind in ("object", "array"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError from None
        if isinstance(value, dict if kind == "object" else list):
            return value
        raise ValueError
    return raw  # string, or a type this module does not know: the text itself


# ----------------------------------------------------------------------------- parsing

def parse_block(block: str, schemas: dict[str, dict] | None) -> ToolCall | ToolCallError:
    """One `<tool_call>...</tool_call>` block (the tags included) -> a call or the reason it is not one."""
    inner = block[len(CALL_OPEN):]
    if inner.endswith(CALL_CLOSE):
        inner = inner[:-len(CALL_CLOSE)]
    m = _FUNCTION.match(inner)
    if not m:
        return ToolCallError("no <function=NAME> in the call", block)
    name, pos, args = m.group(1).strip(), m.end(), {}
    while True:
        p = _PARAMETER.match(inner, pos)
        if not p:
            break
        key = p.group(1).strip()
        end = inner.find(PARAMETER_CLOSE, p.end())
        if end < 0:
            return ToolCallError(f"parameter {key!r} has no </parameter>", block, name, args)
        value = inner[p.end():end]
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        if key in args:
            return ToolCallError(f"parameter {key!r} is given twice", block, name, args)
        args[key] = value
        pos = end + len(PARAMETER_CLOSE)
    rest = inner[pos:].lstrip()
    if not rest.startswith(FUNCTION_CLOSE):
        return ToolCallError("the call does not end with </function>" if not rest else
                             f"unexpected text in the call: {show(rest, 40)}", block, name, args)
    if rest[len(FUNCTION_CLOSE):].strip():
        return ToolCallError(f"unexpected text after </function>: {show(rest[len(FUNCTION_CLOSE):].strip(), 40)}",
                             block, name, args)
    if not name:
        return ToolCallError("the call names no function", block, None, args)
    if schemas is None:
        return ToolCall(name, dict(args))
    if name not in schemas:
        offered = ", ".join(sorted(schemas)) or "none"
        return ToolCallError(f"no tool is called {name!r} (offered: {offered})", block, name, args)
    schema = schemas[name]
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)] if isinstance(
        schema.get("required"), list) else []
    unknown = [k for k in args if k not in props]
    if unknown and (props or schema.get("additionalProperties") is False):  # no properties declared: any
        return ToolCallError(f"{name} has no parameter {unknown[0]!r}", block, name, args)
    missing = [r for r in required if r not in args]
    if missing:
        return ToolCallError(f"{name} needs the parameter {missing[0]!r}", block, name, args)
    converted = {}
    for key, raw in args.items():
        try:
            converted[key] = convert_value(raw, props.get(key))
        except ValueError as e:
            return ToolCallError(f"parameter {key!r} of {name}: {e}", block, name, args)
    return ToolCall(name, converted)


@dataclass
class ToolCallStream:
    """Incremental parsing of an answer as it streams; see the module's docstring."""
    tools: list[dict] | None = None
    _schemas: dict | None = field(init=False, default=None)
    _buffer: str = field(init=False, default="")
    _in_call: bool = field(init=False, default=False)
    _closed: bool = field(init=False, default=False)

    def __post_init__(self):
        self._schemas = tool_schemas(self.tools)

    def feed(self, piece: str) -> list:
        """Events for `piece` (and what earlier pieces held back), in order."""
        if self._closed:
            raise ValueError("this stream was closed")
        self._buffer += piece
        return self._drain(final=False)

    def close(self) -> list:
        """The events still held: the rest of the text, or an unterminated call as an error."""
        events = self._drain(final=True)
        if self._in_call and self._buffer:
            events.append(ToolCallError("the call was cut off before </tool_call>", self._buffer,
                                        *_partial(self._buffer)))
        elif self._buffer:
            events.append(Text(self._buffer))
        self._buffer, self._in_call, self._closed = "", False, True
        return events

    def _drain(self, final: bool) -> list:
        events = []
        while self._buffer:
            if self._in_call:
                end = self._buffer.find(CALL_CLOSE)
                if end < 0:
                    break
                block, self._buffer = self._buffer[:end + len(CALL_CLOSE)], self._buffer[end + len(CALL_CLOSE):]
                self._in_call = False
                events.append(parse_block(block, self._schemas))
                continue
            start = self._buffer.find(CALL_OPEN)
            bare = _BARE.search(self._buffer)
            if bare and (start < 0 or bare.start() < start):  # a call without its <tool_call> wrapper
                if bare.start():
                    events.append(Text(self._buffer[:bare.start()]))
                events.append(ToolCallError("the call is not inside <tool_call> ... </tool_call>", bare.group(),
                                            *_partial(bare.group())))
                self._buffer = self._buffer[bare.end():]
                continue
            bare_open = self._buffer.find("<function=")
            if start < 0 and bare_open >= 0 and not final:
                if bare_open:  # a bare block may still be coming: hold it back
                    events.append(Text(self._buffer[:bare_open]))
                    self._buffer = self._buffer[bare_open:]
                break
            if start < 0:
                keep = 0 if final else _held(self._buffer)
                if len(self._buffer) > keep:
                    events.append(Text(self._buffer[:len(self._buffer) - keep]))
                    self._buffer = self._buffer[len(self._buffer) - keep:]
                break
            if start:
                events.append(Text(self._buffer[:start]))
            self._buffer, self._in_call = self._buffer[start:], True
        return events


def opening_held(text: str) -> int:
    """How many trailing characters of `text` could be the start of `<tool_call>` (the decode loop
    holds them back from the thinking, where a call's opening ends the thought)."""
    for n in range(min(len(text), len(CALL_OPEN) - 1), 0, -1):
        if CALL_OPEN.startswith(text[-n:]):
            return n
    return 0


def _held(text: str) -> int:
    """How many trailing characters could be the start of a call's opening tag."""
    for n in range(min(len(text), max(map(len, _OPENERS))), 0, -1):
        if any(o.startswith(text[-n:]) for o in _OPENERS):
            return n
    return 0


def _partial(text: str) -> tuple[str | None, dict[str, str] | None]:
    """The name and raw arguments readable in a broken block."""
    m = re.search(r"<function=([^>\n]*)>", text)
    if not m:
        return None, None
    args = {}
    for p in re.finditer(r"<parameter=([^>\n]*)>\n?(.*?)\n?</parameter>", text, re.DOTALL):
        args.setdefault(p.group(1).strip(), p.group(2))
    return m.group(1).strip() or None, args


def parse_tool_calls(text: str, tools: list[dict] | None = None) -> ParsedReply:
    """A whole answer -> its content, its valid calls and its invalid ones (see the module's docstring)."""
    stream = ToolCallStream(tools)
    events = stream.feed(text) + stream.close()
    return ParsedReply("".join(e.text for e in events if isinstance(e, Text)).strip(),
                       tuple(e for e in events if isinstance(e, ToolCall)),
                       tuple(e for e in events if isinstance(e, ToolCallError)))
