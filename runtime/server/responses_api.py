"""OpenAI's Responses (`POST /v1/responses`), stateless: what Codex CLI and the OpenAI Agents SDK call.
No HTTP in it; http_app.py routes it.

    parsed = parse_response(body, served)      # ApiError (status, param) for anything it cannot honour
    api = ResponsesApi(parsed); api.whole(prompt, done, queue_ms) / api.on_event(event, queue_ms)

The request is the chat route's in another spelling: `input` (a string, or message, reasoning,
function_call and function_call_output items) becomes the conversation, `instructions` its first
system turn, `reasoning.effort` a depth level as chat's `reasoning_effort` does (openai_api.py owns
the mapping). Nothing is stored, so `previous_response_id` and `store: true` are refused; a client
that keeps its own history (Codex does) sends it back as items. Function tools
(`{"type": "function", "name", "parameters"}`) are offered in the chat form the runtime takes.

The reply's output items are a reasoning item (the thought, as `summary_text` parts when
`reasoning.summary` asks for a summary, else as `reasoning_text` content), a message (left out when
the reply is calls with blank text around them), then one function_call item per valid call;
streamed, each item is opened, filled by deltas and closed, between `response.created` and
`response.completed` (`response.incomplete` when the output ran out of tokens). Calls go out after
the message, when the reply ends (the runtime parses a call whole), so the streamed items are the
whole response's in the same order. A call the model got wrong is listed in `elastic.invalid_tool_calls`.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from dataclasses import dataclass

from ..errors import show
from ..events import LENGTH, Done, Prefill, ToolCall
from ..generate import ChatRequest
from ..grammar import GrammarError, check_schema
from ..options import MAX_NEW_TOKENS
from ..tool_calls import ToolSpecError, check_tools
from .openai_tools import ToolFields, checked_tool_fields, in_call_order
from .request_fields import (
    bool_field,
    cache_key,
    elastic_fields,
    option_field,
    plan_reply,
    refuse_unknown,
    sampling_fields,
    served_model,
)
from .serving import ApiError, BlockStream, ServedModel, bad, check_done, elastic_info

KNOWN = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
         "stream", "reasoning", "tools", "tool_choice", "parallel_tool_calls", "store", "previous_response_id",
         "include", "text", "metadata", "user", "safety_identifier", "prompt_cache_key", "service_tier",
         "truncation", "background", "conversation", "prompt", "max_tool_calls", "top_logprobs", "stream_options",
         "elastic"}
ENCRYPTED = "reasoning.encrypted_content"  # the one `include` this server can give (see _encode)
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}
MAX_METADATA = 16


@dataclass(frozen=True)
class ParsedResponse:
    request: ChatRequest
    model: str
    stream: bool
    depth: str | None
    echo: dict  # the request's settings as the response object repeats them
    summary: bool  # the thought goes out as a summary (reasoning.summary was asked for)
    encrypted: bool  # reasoning items carry encrypted_content (include asked for it)
    cache_key: str | None = None  # `prompt_cache_key`, as on chat completions (http_app's cache scopes)


def parse_response(body, served: ServedModel) -> ParsedResponse:
    """Checks every field this server reads and maps the request onto a `ChatRequest`."""
    model, pin = served_model(body, served)
    refuse_unknown(body, KNOWN, "/v1/responses")
    _refuse_unsupported(body)
    encrypted = _include(body.get("include"))
    messages = _leading_system_joined(_instructions(body.get("instructions")) + _input(body.get("input")))
    elastic, keep_reasoning = elastic_fields(body)
    reasoning = body.get("reasoning") or {}
    if not isinstance(reasoning, dict):
        raise bad("reasoning", "reasoning must be an object such as {\"effort\": \"low\"}")
    for key in sorted(set(reasoning) - {"effort", "summary", "generate_summary"}):
        raise bad(f"reasoning.{key}", f"reasoning.{key} is not supported; reasoning takes effort and summary")
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    if summary not in (None, "none", "auto", "concise", "detailed"):
        raise bad("reasoning.summary", "reasoning.summary must be auto, concise, detailed or none")
    summary = None if summary == "none" else summary  # Codex's spelling of no summary
    plan = plan_reply({"reasoning": {"effort": reasoning["effort"]}} if reasoning.get("effort") is not None else {},
                      elastic, served, model, pin)
    max_tokens = option_field(MAX_NEW_TOKENS.within(high=served.max_context), body, "max_output_tokens",
                              "max_output_tokens")
    stream = bool_field(body, "stream", "stream") if body.get("stream") is not None else False
    parallel = bool_field(body, "parallel_tool_calls", "parallel_tool_calls") \
        if body.get("parallel_tool_calls") is not None else True
    sampling = sampling_fields(body)
    fmt = (body.get("text") or {}).get("format")
    tools = _tool_fields(body.get("tools"), body.get("tool_choice"), parallel, _format(fmt))
    request = ChatRequest(tuple(messages), plan.think, plan.answer, plan.budget, max_tokens, sampling,
                          truncate_history_thinking=not keep_reasoning, escalation=plan.escalation,
                          tools=tools.tools, tool_choice=tools.tool_choice, tool_name=tools.tool_name,
                          parallel_tool_calls=tools.parallel, response_format=tools.response_format)
    echo = {"instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "metadata": _metadata(body.get("metadata")), "parallel_tool_calls": parallel,
            "temperature": sampling.temperature, "top_p": sampling.top_p,
            "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
            "reasoning": {"effort": reasoning.get("effort"), "summary": summary}, "store": False,
            "text": {"format": fmt or {"type": "text"}}, "truncation": "disabled", "previous_response_id": None,
            "user": body.get("user") if isinstance(body.get("user"), str) else None}
    return ParsedResponse(request, model, stream, plan.depth, echo, summary is not None, encrypted,
                          cache_key(body.get("prompt_cache_key")))


def _refuse_unsupported(body: dict) -> None:
    """Fields that would change the reply (or promise something) this server cannot: refused by name."""
    if body.get("previous_response_id") is not None:
        raise bad("previous_response_id", "this server does not store responses, so it cannot continue one; "
                                          "send the whole conversation as input items (and store: false)")
    if body.get("store") not in (None, False):
        raise bad("store", "this server does not store responses; send store: false (or leave it out)")
    if body.get("conversation") is not None:
        raise bad("conversation", "this server keeps no conversations; send the whole conversation as input")
    if body.get("background") not in (None, False):
        raise bad("background", "background responses need storage, which this server does not have")
    if body.get("prompt") is not None:
        raise bad("prompt", "stored prompt templates are not supported; send instructions and input")
    if body.get("top_logprobs") not in (None, 0):
        raise bad("top_logprobs", "log-probabilities are not returned by this server")
    if body.get("max_tool_calls") is not None:
        raise bad("max_tool_calls", "max_tool_calls is not supported (parallel_tool_calls: false allows one)")
    if body.get("truncation") not in (None, "disabled"):
        raise bad("truncation", "this server never drops part of the input; send truncation: disabled")
    if body.get("service_tier") not in (None, "auto", "default"):
        raise bad("service_tier", "this server has one service tier (auto)")
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise bad("text", "text must be an object such as {\"format\": {\"type\": \"text\"}}")
        for key in sorted(set(text) - {"format", "verbosity"}):
            raise bad(f"text.{key}", f"text.{key} is not supported")
        if text.get("verbosity") not in (None, "medium"):
            raise bad("text.verbosity", "the model has one verbosity; leave text.verbosity out (or medium)")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_obfuscation"}):
        raise bad("stream_options", "stream_options takes only include_obfuscation (which changes nothing here)")


def _include(value) -> bool:
    if value is None:
        return False
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad("include", "include must be a list of strings")
    for v in value:
        if v != ENCRYPTED:
            raise bad("include", f"include {show(v, 60)} is not something this server can add; it can add {ENCRYPTED}")
    return bool(value)


def _metadata(value) -> dict:
    if value is None:
        return {}
    if (not isinstance(value, dict) or len(value) > MAX_METADATA
            or not all(isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
                       for k, v in value.items())):
        raise bad("metadata", f"metadata must be an object of up to {MAX_METADATA} strings (keys up to 64 characters, "
                              "values up to 512)")
    return value


def _tools(value) -> tuple[dict, ...] | None:
    """Responses' function tools ({type: function, name, description, parameters, strict}) in the
    chat form the runtime takes, checked there (runtime/tool_calls.py check_tools)."""
    if not value:
        return None
    if not isinstance(value, list):
        raise bad("tools", "tools must be a list of {type: function, name, parameters} objects")
    chat = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(f"tools[{i}].type", f"only function tools are supported here, not {show(kind, 40)}")
        for key in sorted(set(tool) - {"type", "name", "description", "parameters", "strict"}):
            raise bad(f"tools[{i}].{key}", f"tools[{i}].{key} is not a field of a function tool")
        if tool.get("strict") not in (None, True, False):
            raise bad(f"tools[{i}].strict", "strict must be true or false")
        chat.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")
                                                      if tool.get(k) is not None}})
    try:
        return check_tools(chat)
    except ToolSpecError as e:
        raise bad(e.param.replace(".function.", "."), e.message) from None


def _format(value) -> dict | None:
    """`text.format` -> the JSON schema the answer must follow (runtime/grammar.py bounds it), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("text.format", "text.format must be an object such as {\"type\": \"json_schema\", ...}")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise bad("text.format.type", f"text.format type must be text, json_object or json_schema, not "
                                      f"{show(kind, 40)}")
    for key in ("name", "description"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise bad(f"text.format.{key}", f"text.format.{key} must be a string")
    if value.get("strict") not in (None, True, False):
        raise bad("text.format.strict", "text.format.strict must be true or false")
    try:
        return check_schema(value.get("schema"), "text.format.schema")
    except GrammarError as e:
        raise bad(e.param, e.message) from None


def _tool_fields(tools, choice, parallel: bool, schema: dict | None) -> ToolFields:
    """`tools` and `tool_choice` (auto, none, required or {type: function, name}) as the runtime takes
    them, with a forced tool among those offered and a grammar that compiles."""
    tools = _tools(tools)
    names = [t["function"]["name"] for t in tools or ()]
    name = None
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        choice, name = "required", choice["name"]
        if name not in names:
            offered = ", ".join(names) or "none"
            raise bad("tool_choice.name", f"{show(name, 64)} is not an offered tool (offered: {offered})")
    elif choice not in (None, "auto", "none", "required"):
        raise bad("tool_choice", "tool_choice must be auto, none, required or {type: function, name: ...}")
    if choice == "required" and not names:
        raise bad("tool_choice", "tool_choice 'required' needs tools to choose from")
    fields = ToolFields(tools, (choice or "auto") if tools else "none", name, parallel, schema)
    return checked_tool_fields(fields, lambda param: param.replace(".function.", "."))


# ---------------------------------------------------------------------- input items -> the conversation


def _instructions(value) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise bad("instructions", "instructions must be a string")
    return [{"role": "system", "content": value}] if value else []


def _leading_system_joined(messages: list[dict]) -> list[dict]:
    """`instructions` and the developer/system items that open the input (as Codex sends them) become
    one system message, the only place chat templates accept one; a system item later in the input is
    left where it is (the template refuses it, naming the rule)."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system" and isinstance(messages[lead]["content"], str):
        lead += 1
    if lead < 2:
        return messages
    joined = "\n\n".join(m["content"] for m in messages[:lead] if m["content"])
    return [{"role": "system", "content": joined}] + messages[lead:]


def _input(value) -> list[dict]:
    if isinstance(value, str):
        if not value:
            raise bad("input", "input must be a non-empty string or a non-empty list of items")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("input", "input must be a non-empty string or a non-empty list of items")
    messages: list[dict] = []
    reasoning: str | None = None  # a reasoning item's text, for the assistant turn it precedes
    turn: dict | None = None  # the assistant turn that function_call items join
    results: list = []  # function_call_output items answering `turn`'s calls, put in order when the run ends
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, "each input item must be an object (a message, reasoning, function_call or "
                             "function_call_output)")
        kind = item.get("type", "message")
        if kind != "function_call_output" and results:
            messages += in_call_order(results, [c["id"] for c in turn["tool_calls"]])
            results, turn = [], None
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise bad(f"{where}.role", f"role {show(role, 20)} is not one of {', '.join(ROLES)}")
            message = {"role": ROLES[role], "content": _content(item.get("content"), f"{where}.content")}
            if role == "assistant" and reasoning is not None:
                message["reasoning_content"], reasoning = reasoning, None
            messages.append(message)
            turn = message if role == "assistant" else None
        elif kind == "reasoning":
            reasoning = _reasoning_text(item, where)
        elif kind == "function_call":
            if turn is None:  # calls with no assistant text before them make a turn of their own
                turn = {"role": "assistant", "content": ""}
                if reasoning is not None:
                    turn["reasoning_content"], reasoning = reasoning, None
                messages.append(turn)
            turn.setdefault("tool_calls", []).append(_call(item, where))
        elif kind == "function_call_output":
            output = item.get("output")
            output = _content(output, f"{where}.output") if not isinstance(output, str) else output
            if not isinstance(item.get("call_id"), str):
                raise bad(f"{where}.call_id", "a function_call_output needs the call_id of its call")
            if turn is None or not turn.get("tool_calls"):
                raise bad(where, "a function_call_output must follow the function_call items it answers")
            results.append((f"{where}.call_id", item["call_id"], {"role": "tool", "content": output}))
        else:
            raise bad(f"{where}.type", f"input items of type {show(kind, 40)} are not supported; send message, "
                                       "reasoning, function_call or function_call_output items")
    if results:
        messages += in_call_order(results, [c["id"] for c in turn["tool_calls"]])
    if not any(m["role"] == "user" for m in messages):
        raise bad("input", "input must hold at least one user message")
    return messages


def _call(item: dict, where: str) -> dict:
    """A past function_call item as an assistant message's tool call (arguments as an object)."""
    name, call_id, arguments = item.get("name"), item.get("call_id"), item.get("arguments", "{}")
    if not isinstance(name, str) or not name:
        raise bad(f"{where}.name", "a function_call needs the function's name")
    if not isinstance(call_id, str):
        raise bad(f"{where}.call_id", "a function_call needs its call_id")
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise bad(f"{where}.arguments", "arguments must be a JSON object, as a string")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _content(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if (not isinstance(part, dict) or part.get("type") not in TEXT_PARTS
                    or not isinstance(part.get("text"), str)):
                raise bad(f"{where}[{j}]", "only text content parts ({type: input_text, text: ...}) are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(where, "content must be a string or a list of input_text parts")


def _reasoning_text(item: dict, where: str) -> str:
    """A past thought, from the encrypted_content this server wrote, else from its text parts."""
    if item.get("encrypted_content") is not None:
        return _decode(item["encrypted_content"], f"{where}.encrypted_content")
    texts = []
    for key in ("content", "summary"):
        parts = item.get(key)
        if parts is not None:
            texts.append(_content(parts, f"{where}.{key}"))
    return "".join(texts)


def _encode(text: str) -> str:
    """The thought as `encrypted_content`: this server keeps nothing, so the item carries the thought
    itself, base64-encoded (not encrypted: it is only opaque to the client), and reads it back."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _decode(value, where: str) -> str:
    try:
        if not isinstance(value, str):
            raise ValueError
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad(where, "encrypted_content is not one this server wrote; send the reasoning item back "
                         "unchanged, or leave it out") from None


# ---------------------------------------------------------------------- the response


def _new(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _usage(prompt: Prefill | None, done: Done) -> dict:
    prompt_tokens = prompt.prompt_tokens if prompt else 0
    output = done.thinking_tokens + done.answer_tokens
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": prompt.reused_tokens if prompt
                                                                    else 0},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": done.thinking_tokens},
            "total_tokens": prompt_tokens + output}


class ResponsesApi(BlockStream):
    """`/v1/responses` for http_app's reply routes: one object per reply, its stream in items (a
    reasoning item, a message). The streamed events and the whole response are built by the same item
    methods, so a streamed reply ends with the response the whole one returns."""
    THOUGHT, TEXT = "reasoning", "message"
    path = "/responses"
    parse = staticmethod(parse_response)
    error_body = staticmethod(ApiError.body)

    def __init__(self, parsed: ParsedResponse):
        super().__init__()
        self.parsed, self.id, self.created = parsed, _new("resp"), int(time.time())
        self.sequence = 0
        self.output: list[dict] = []  # finished items
        self.open: dict | None = None  # the item being streamed
        self.text = ""  # the open item's text so far

    # ------------------------------------------------------------------ the response object

    def _response(self, status: str, done: Done | None = None, queue_ms: float = 0.0, error: dict | None = None):
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        out = {"id": self.id, "object": "response", "created_at": self.created, "status": status,
               "model": self.parsed.model, "output": list(self.output), "error": error,
               "incomplete_details": incomplete, **self.parsed.echo, "usage": None}
        if done is not None:
            out["usage"] = _usage(self.prompt, done)
            out["elastic"] = elastic_info(done, self.parsed.depth, queue_ms)
        return out

    def _reasoning_item(self, text: str, status: str) -> dict:
        part = {"type": "summary_text" if self.parsed.summary else "reasoning_text", "text": text}
        item = {"type": "reasoning", "id": self.open["id"] if self.open else _new("rs"),
                "summary": [part] if self.parsed.summary else [], "status": status}
        if not self.parsed.summary:
            item["content"] = [part]
        if self.parsed.encrypted:
            item["encrypted_content"] = _encode(text)
        return item

    def _message_item(self, text: str, status: str) -> dict:
        return {"type": "message", "id": self.open["id"] if self.open else _new("msg"), "status": status,
                "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": [],
                                                  "logprobs": []}]}

    def _call_item(self, call: ToolCall) -> dict:
        return {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"), "call_id": call.id,
                "name": call.name, "arguments": _json(call.arguments), "status": "completed"}

    def whole(self, prompt: Prefill | None, done: Done, queue_ms: float) -> dict:
        check_done(done)
        self.prompt = prompt
        if done.think_submodel:
            self.output.append(self._reasoning_item(done.thinking_text, "completed"))
        if done.answer_text.strip() or not done.tool_calls:  # calls with blank text around them: no message
            self.output.append(self._message_item(done.answer_text, "completed"))
        self.output += [self._call_item(c) for c in done.tool_calls]
        return self._response(_status(done), done, queue_ms)

    # ------------------------------------------------------------------ the stream

    def _event(self, kind: str, **fields) -> tuple[str, dict]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return kind, event

    def _where(self) -> dict:
        return {"item_id": self.open["id"], "output_index": len(self.output)}

    def _begin(self, kind: str) -> list:
        """Opens the next output item (a reasoning item or a message) and its one text part."""
        self.text = ""
        self.open = self._reasoning_item("", "in_progress") if kind == "reasoning" else \
            self._message_item("", "in_progress")
        out = [self._event("response.output_item.added", output_index=len(self.output), item=self._empty())]
        if kind == "reasoning" and self.parsed.summary:
            out.append(self._event("response.reasoning_summary_part.added", **self._where(), summary_index=0,
                                   part={"type": "summary_text", "text": ""}))
        else:
            part = {"type": "reasoning_text", "text": ""} if kind == "reasoning" else \
                {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self._event("response.content_part.added", **self._where(), content_index=0, part=part))
        return out

    def _empty(self) -> dict:
        """The open item as `output_item.added` shows it: no text yet."""
        item = {k: v for k, v in self.open.items() if k != "encrypted_content"}
        for key in ("content", "summary"):
            if key in item:
                item[key] = []
        return item

    def _delta(self, text: str) -> list:
        if not text:
            return []
        self.text += text
        if self.open["type"] == "message":
            return [self._event("response.output_text.delta", **self._where(), content_index=0, delta=text,
                                logprobs=[])]
        if self.parsed.summary:
            return [self._event("response.reasoning_summary_text.delta", **self._where(), summary_index=0,
                                delta=text)]
        return [self._event("response.reasoning_text.delta", **self._where(), content_index=0, delta=text)]

    def _end(self) -> list:
        """Closes the open item: its text done, its part done, the item done."""
        if self.open is None:
            return []
        where, text = self._where(), self.text
        if self.open["type"] == "message":
            item = self._message_item(text, "completed")
            out = [self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                   self._event("response.content_part.done", **where, content_index=0, part=item["content"][0])]
        else:
            item = self._reasoning_item(text, "completed")
            if self.parsed.summary:
                part = item["summary"][0]
                out = [self._event("response.reasoning_summary_text.done", **where, summary_index=0, text=text),
                       self._event("response.reasoning_summary_part.done", **where, summary_index=0, part=part)]
            else:
                out = [self._event("response.reasoning_text.done", **where, content_index=0, text=text),
                       self._event("response.content_part.done", **where, content_index=0, part=item["content"][0])]
        out.append(self._event("response.output_item.done", output_index=len(self.output), item=item))
        self.output.append(item)
        self.open = None
        return out

    def _open_kind(self) -> str | None:
        return self.open["type"] if self.open is not None else None

    def _started(self) -> list:
        started = self._response("in_progress")
        return [self._event("response.created", response=started),
                self._event("response.in_progress", response=started)]

    def _finished(self, done: Done, queue_ms: float) -> list:
        status = _status(done)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [self._event(kind, response=self._response(status, done, queue_ms))]

    def _call(self, call: ToolCall) -> list:
        """A function_call item: added with no arguments, its arguments in one delta, done."""
        item = self._call_item(call)
        where = {"item_id": item["id"], "output_index": len(self.output)}
        out = [self._event("response.output_item.added", output_index=len(self.output),
                           item={**item, "arguments": "", "status": "in_progress"}),
               self._event("response.function_call_arguments.delta", **where, delta=item["arguments"]),
               self._event("response.function_call_arguments.done", **where, name=item["name"],
                           arguments=item["arguments"]),
               self._event("response.output_item.done", output_index=len(self.output), item=item)]
        self.output.append(item)
        return out

    def failed(self, error: ApiError) -> list:
        if self.prompt is None:  # failed before it began: the error event alone
            return [self._event("error", code=error.code, message=error.message, param=error.param)]
        body = {"code": error.code or "server_error", "message": error.message}
        return [self._event("response.failed", response=self._response("failed", error=body))]


def _status(done: Done) -> str:
    return "incomplete" if done.finish_reason == LENGTH else "completed"


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
