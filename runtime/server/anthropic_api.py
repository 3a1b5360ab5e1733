"""Anthropic's Messages (`POST /v1/messages`), for the clients that speak it (the anthropic SDK and
the agents built on it). No HTTP in it; http_app.py routes it and checks the key (`x-api-key` or
Bearer).

The request is the chat route's in Anthropic's spelling: `system` becomes the first system turn,
`messages` (text, thinking, tool_use and tool_result blocks) the conversation, and `thinking` the
depth: absent or "disabled", no thinking (Anthropic's default); "enabled" thinks under
`budget_tokens`; "adaptive" thinks as the depth level decides. The level is the one
`output_config.effort` names (chat's reasoning efforts: openai_api.py owns the mapping), else the
depth table's default. Client tools (`input_schema`) are offered in the chat form the runtime takes;
a valid call is a tool_use block after the text (stop_reason tool_use), one the model got wrong is
listed in `elastic.invalid_tool_calls`; tool_result blocks go back as the template's tool turns.
Errors leave in Anthropic's shape, `{"type": "error", "error": {type, message}}`, and every field
that cannot be honoured is refused by name.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass

from ..errors import show
from ..events import END_OF_TURN, LENGTH, STOP_STRING, TOOL_CALLS, Done, Prefill, ToolCall
from ..generate import ChatRequest
from ..grammar import GrammarError, check_schema
from ..options import MAX_NEW_TOKENS, THINKING_BUDGET
from ..tool_calls import ToolSpecError, check_tools
from .openai_tools import ToolFields, checked_tool_fields, in_call_order
from .request_fields import (
    MAX_STOP_CHARS,
    MAX_STOPS,
    bool_field,
    elastic_fields,
    joined_text,
    option_field,
    plan_reply,
    refuse_unknown,
    sampling_fields,
    served_model,
)
from .serving import ApiError, BlockStream, ServedModel, bad, check_done, elastic_info

KNOWN = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
         "seed", "thinking", "tools", "tool_choice", "metadata", "service_tier", "output_config", "elastic"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               503: "overloaded_error"}
STOP_REASONS = {END_OF_TURN: "end_turn", LENGTH: "max_tokens", STOP_STRING: "stop_sequence", TOOL_CALLS: "tool_use"}


def error_body(error: ApiError) -> dict:
    """An ApiError in Anthropic's shape; the message names the field it is about."""
    message = error.message
    if error.param and not message.startswith(error.param):
        message = f"{error.param}: {message}"
    return {"type": "error", "error": {"type": ERROR_TYPES.get(error.status, "api_error"), "message": message}}


@dataclass(frozen=True)
class ParsedMessages:
    request: ChatRequest
    model: str
    stream: bool
    depth: str | None
    show_thinking: bool  # False: thinking.display "omitted" (thinking blocks come empty)


def parse_messages(body, served: ServedModel) -> ParsedMessages:
    """Checks every field this server reads and maps the request onto a `ChatRequest`."""
    model, pin = served_model(body, served)
    refuse_unknown(body, KNOWN, "/v1/messages")
    _refuse_unsupported(body)
    if body.get("max_tokens") is None:
        raise bad("max_tokens", "max_tokens is required")
    max_tokens = option_field(MAX_NEW_TOKENS.within(high=served.max_context), body, "max_tokens", "max_tokens")
    messages = _system(body.get("system")) + _messages(body.get("messages"))
    elastic, keep_reasoning = elastic_fields(body)
    effort, budget, show = _thinking(body, elastic, served)
    plan = plan_reply({}, elastic, served, model, pin, effort=effort, budget=budget)
    stream = bool_field(body, "stream", "stream") if body.get("stream") is not None else False
    tools = _tool_fields(body.get("tools"), body.get("tool_choice"),
                         _format((body.get("output_config") or {}).get("format")))
    request = ChatRequest(tuple(messages), plan.think, plan.answer, plan.budget, max_tokens, sampling_fields(body),
                          _stop_sequences(body.get("stop_sequences")), truncate_history_thinking=not keep_reasoning,
                          escalation=plan.escalation, tools=tools.tools, tool_choice=tools.tool_choice,
                          tool_name=tools.tool_name, parallel_tool_calls=tools.parallel,
                          response_format=tools.response_format)
    return ParsedMessages(request, model, stream, plan.depth, show)


def _refuse_unsupported(body: dict) -> None:
    if body.get("service_tier") not in (None, "auto", "standard_only"):
        raise bad("service_tier", "service_tier must be auto or standard_only (this server has one tier)")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or set(metadata) - {"user_id"}
                                 or not isinstance(metadata.get("user_id", ""), (str, type(None)))):
        raise bad("metadata", "metadata takes only user_id, a string")


def _thinking(body: dict, elastic: dict, served: ServedModel) -> tuple[tuple, tuple | None, bool]:
    """(effort, budget, show) for plan_reply: the effort as (value, param), the budget as (value, param)
    or None for the level's own, and whether the thought is shown."""
    config = body.get("output_config")
    effort = (None, "output_config.effort")
    if config is not None:
        if not isinstance(config, dict):
            raise bad("output_config", "output_config must be an object such as {\"effort\": \"low\"}")
        for key in sorted(set(config) - {"effort", "format"}):
            raise bad(f"output_config.{key}", f"output_config.{key} is not supported")
        effort = (config.get("effort"), "output_config.effort")
    thinking = body.get("thinking")
    if thinking is None:  # Anthropic's default is no thinking; a depth or an effort asked for one
        chosen = effort[0] is not None or any(k in elastic for k in ("depth", "think_submodel", "thinking_budget"))
        return effort, None if chosen else (0, "thinking"), True
    if not isinstance(thinking, dict):
        raise bad("thinking", "thinking must be an object such as {\"type\": \"enabled\", \"budget_tokens\": 2048}")
    kind = thinking.get("type")
    for key in sorted(set(thinking) - {"type", "budget_tokens", "display"}):
        raise bad(f"thinking.{key}", f"thinking.{key} is not supported")
    display = thinking.get("display")
    if display not in (None, "summarized", "omitted"):
        raise bad("thinking.display", "thinking.display must be summarized or omitted")
    show = display != "omitted"
    if kind == "disabled":
        return effort, (0, "thinking"), show
    if kind == "adaptive":
        return effort, None, show
    if kind == "enabled":
        if thinking.get("budget_tokens") is None:
            raise bad("thinking.budget_tokens", "thinking.budget_tokens is required when thinking is enabled")
        option = THINKING_BUDGET.within(low=1, high=served.max_context)
        return effort, (option_field(option, thinking, "thinking.budget_tokens", "budget_tokens"),
                        "thinking.budget_tokens"), show
    raise bad("thinking.type", "thinking.type must be enabled, adaptive or disabled")


def _tools(value) -> tuple[dict, ...] | None:
    """Anthropic's client tools ({name, description, input_schema}) in the chat form the runtime takes,
    checked there (runtime/tool_calls.py check_tools). Anthropic's server tools (web search, bash...)
    are refused: this server runs no tool itself."""
    if not value:
        return None
    if not isinstance(value, list):
        raise bad("tools", "tools must be a list of {name, description, input_schema} objects")
    chat = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(f"tools[{i}].type", f"only client tools (name, input_schema) are supported, not "
                                          f"{show(kind, 40)}: this server runs no tool itself")
        for key in sorted(set(tool) - {"type", "name", "description", "input_schema", "cache_control"}):
            raise bad(f"tools[{i}].{key}", f"tools[{i}].{key} is not supported")
        if tool.get("input_schema") is None:
            raise bad(f"tools[{i}].input_schema", "a tool needs its input_schema")
        chat.append({"type": "function", "function": {"name": tool.get("name"), "parameters": tool["input_schema"],
                                                      **({"description": tool["description"]}
                                                         if tool.get("description") is not None else {})}})
    try:
        return check_tools(chat)
    except ToolSpecError as e:
        param = e.param.replace(".function.parameters", ".input_schema").replace(".function.", ".")
        raise bad(param, e.message) from None


def _tool_fields(tools, choice, schema: dict | None) -> ToolFields:
    """`tools` and `tool_choice` ({type: auto | any | tool | none}, disable_parallel_tool_use) as the
    runtime takes them, with a forced tool among those offered and a grammar that compiles."""
    tools = _tools(tools)
    names = [t["function"]["name"] for t in tools or ()]
    kinds = {"auto": "auto", "any": "required", "tool": "required", "none": "none"}
    if choice is None:
        choice = {"type": "auto"}
    if not isinstance(choice, dict) or choice.get("type") not in kinds:
        raise bad("tool_choice", "tool_choice must be {type: auto}, {type: any}, {type: tool, name} or {type: none}")
    for key in sorted(set(choice) - {"type", "name", "disable_parallel_tool_use"}):
        raise bad(f"tool_choice.{key}", f"tool_choice.{key} is not supported")
    name = choice.get("name") if choice["type"] == "tool" else None
    if choice["type"] == "tool" and name not in names:
        offered = ", ".join(names) or "none"
        raise bad("tool_choice.name", f"{show(name, 64)} is not an offered tool (offered: {offered})")
    if choice["type"] == "any" and not names:
        raise bad("tool_choice", "tool_choice {type: any} needs tools to choose from")
    single = choice.get("disable_parallel_tool_use")
    if single is not None and not isinstance(single, bool):
        raise bad("tool_choice.disable_parallel_tool_use", "disable_parallel_tool_use must be true or false")
    fields = ToolFields(tools, kinds[choice["type"]] if tools else "none", name, not single, schema)
    return checked_tool_fields(fields, lambda param: param.replace(".function.parameters", ".input_schema")
                               .replace(".function.", "."))


def _format(value) -> dict | None:
    """`output_config.format` ({"type": "json_schema", "schema"}) -> the JSON schema the answer must
    follow (runtime/grammar.py bounds it), or None."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "json_schema":
        raise bad("output_config.format", "output_config.format must be {\"type\": \"json_schema\", \"schema\": ...}")
    for key in sorted(set(value) - {"type", "schema"}):
        raise bad(f"output_config.format.{key}", f"output_config.format.{key} is not supported")
    try:
        return check_schema(value.get("schema"), "output_config.format.schema")
    except GrammarError as e:
        raise bad(e.param, e.message) from None


def _stop_sequences(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if (not isinstance(value, list) or len(value) > MAX_STOPS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in value)):
        raise bad("stop_sequences", f"stop_sequences must be a list of up to {MAX_STOPS} non-empty strings "
                                    f"(at most {MAX_STOP_CHARS} characters each)")
    return tuple(value)


# ---------------------------------------------------------------------- system and messages -> the conversation


def _system(value) -> list[dict]:
    if value is None:
        return []
    text = joined_text(value, "system", "blocks")
    return [{"role": "system", "content": text}] if text else []


def _messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise bad("messages", "messages must be a non-empty list of {role, content} objects")
    out, call_ids = [], []  # the ids of the calls the assistant turn before made
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "each message must be an object with role and content")
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise bad(f"{where}.role", f"role {show(role, 20)} is not user or assistant (send a system prompt "
                                       "as the top-level system field)")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            call_ids = []
            continue
        if not isinstance(content, list):
            raise bad(f"{where}.content", "content must be a string or a list of content blocks")
        out += _blocks(role, content, f"{where}.content", call_ids)
        call_ids = [c["id"] for c in out[-1].get("tool_calls", ())] if role == "assistant" else []
    if value[-1].get("role") != "user":
        raise bad(f"messages[{len(value) - 1}]", "the last message must be the user's: this server cannot "
                                                 "continue a partial assistant reply (prefill)")
    return out


def _blocks(role: str, blocks: list, where: str, call_ids: list[str]) -> list[dict]:
    """One message's blocks as chat messages: an assistant's text, thought and tool_use calls make one
    turn; a user's tool_result blocks become tool messages answering `call_ids` (the turn before's
    calls), in their order, before the user's text (as Anthropic orders them)."""
    texts, thought, calls, results = [], None, [], []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise bad(f"{at}.text", "a text block's text must be a string")
            texts.append(block["text"])
        elif kind == "thinking" and role == "assistant":
            if not isinstance(block.get("thinking"), str):
                raise bad(f"{at}.thinking", "a thinking block's thinking must be a string")
            thought = (thought or "") + block["thinking"]
        elif kind == "tool_use" and role == "assistant":
            calls.append(_call(block, at))
        elif kind == "tool_result" and role == "user":
            results.append(_result(block, at))
        else:
            allowed = "text, thinking and tool_use" if role == "assistant" else "text and tool_result"
            raise bad(f"{at}.type", f"{show(kind, 40)} blocks are not supported in a {role} message; "
                                    f"send {allowed} blocks")
    if role == "user":
        turns = in_call_order(results, call_ids) if results else []
        return turns + ([{"role": "user", "content": "".join(texts)}] if texts or not results else [])
    message = {"role": role, "content": "".join(texts)}
    if thought:
        message["reasoning_content"] = thought
    if calls:
        message["tool_calls"] = calls
    return [message]


def _call(block: dict, where: str) -> dict:
    name, call_id, arguments = block.get("name"), block.get("id"), block.get("input", {})
    if not isinstance(name, str) or not name:
        raise bad(f"{where}.name", "a tool_use block needs the tool's name")
    if not isinstance(call_id, str):
        raise bad(f"{where}.id", "a tool_use block needs its id")
    if not isinstance(arguments, dict):
        raise bad(f"{where}.input", "a tool_use block's input must be an object")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(block: dict, where: str) -> tuple[str, str, dict]:
    """A tool_result block as a tool message; a result marked is_error says so in its text."""
    if not isinstance(block.get("tool_use_id"), str):
        raise bad(f"{where}.tool_use_id", "a tool_result block needs the tool_use_id of its call")
    content = block.get("content", "")
    text = joined_text(content, f"{where}.content", "blocks")
    error = block.get("is_error")
    if error is not None and not isinstance(error, bool):
        raise bad(f"{where}.is_error", "is_error must be true or false")
    message = {"role": "tool", "content": f"Error: {text}" if error else text}
    return f"{where}.tool_use_id", block["tool_use_id"], message


# ---------------------------------------------------------------------- the response


def _signature(text: str) -> str:
    """A thinking block's signature. Nothing is signed here (the server keeps no secret and no state);
    it is the thought's digest, so a client that keeps signatures has one."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _usage(prompt: Prefill | None, done: Done | None) -> dict:
    return {"input_tokens": prompt.prompt_tokens - prompt.reused_tokens if prompt else 0,
            "cache_read_input_tokens": prompt.reused_tokens if prompt else 0, "cache_creation_input_tokens": 0,
            "output_tokens": (done.thinking_tokens + done.answer_tokens) if done else 0}


class MessagesApi(BlockStream):
    """`/v1/messages` for http_app's reply routes: one object per reply, its stream in blocks."""
    path = "/messages"
    parse = staticmethod(parse_messages)
    error_body = staticmethod(error_body)

    def __init__(self, parsed: ParsedMessages):
        super().__init__()
        self.parsed, self.id = parsed, "msg_" + uuid.uuid4().hex[:24]
        self.blocks = 0  # content blocks finished
        self.open: str | None = None  # "thinking" or "text": the block being streamed
        self.text = ""

    def _message(self, content: list, done: Done | None) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.parsed.model,
                "content": content, "stop_reason": _stop_reason(done) if done else None,
                "stop_sequence": self._stop_sequence(done), "usage": _usage(self.prompt, done)}

    def _stop_sequence(self, done: Done | None) -> str | None:
        """The stop sequence that ended the reply; the engine does not say which one matched, so it is
        named only when there was one to match (docs/server.md)."""
        stops = self.parsed.request.stop_strings
        return stops[0] if done and done.finish_reason == STOP_STRING and len(stops) == 1 else None

    def _thinking_text(self, text: str) -> str:
        return text if self.parsed.show_thinking else ""

    def whole(self, prompt: Prefill | None, done: Done, queue_ms: float) -> dict:
        check_done(done)
        self.prompt = prompt
        content = []
        if done.think_submodel:
            thought = self._thinking_text(done.thinking_text)
            content.append({"type": "thinking", "thinking": thought, "signature": _signature(thought)})
        if done.answer_text.strip() or not done.tool_calls:  # calls with blank text around them: no text block
            content.append({"type": "text", "text": done.answer_text})
        content += [_tool_use(c) for c in done.tool_calls]
        return {**self._message(content, done), "elastic": elastic_info(done, self.parsed.depth, queue_ms)}

    # ------------------------------------------------------------------ the stream

    def _begin(self, kind: str) -> list:
        self.open, self.text = kind, ""
        block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
            {"type": "text", "text": ""}
        return [("content_block_start", {"type": "content_block_start", "index": self.blocks,
                                         "content_block": block})]

    def _delta(self, text: str) -> list:
        if self.open == "thinking":
            text = self._thinking_text(text)
        if not text:
            return []
        self.text += text
        delta = {"type": "thinking_delta", "thinking": text} if self.open == "thinking" else \
            {"type": "text_delta", "text": text}
        return [("content_block_delta", {"type": "content_block_delta", "index": self.blocks, "delta": delta})]

    def _end(self) -> list:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            out.append(("content_block_delta", {"type": "content_block_delta", "index": self.blocks,
                                                "delta": {"type": "signature_delta",
                                                          "signature": _signature(self.text)}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": self.blocks}))
        self.blocks, self.open = self.blocks + 1, None
        return out

    def _open_kind(self) -> str | None:
        return self.open

    def _started(self) -> list:
        return [("message_start", {"type": "message_start", "message": self._message([], None)})]

    def _finished(self, done: Done, queue_ms: float) -> list:
        delta = {"stop_reason": _stop_reason(done), "stop_sequence": self._stop_sequence(done)}
        return [("message_delta", {"type": "message_delta", "delta": delta,
                                   "usage": {"output_tokens": done.thinking_tokens + done.answer_tokens},
                                   "elastic": elastic_info(done, self.parsed.depth, queue_ms)}),
                ("message_stop", {"type": "message_stop"})]

    def _call(self, call: ToolCall) -> list:
        """A tool_use block: started with an empty input, the input's JSON in one delta, stopped."""
        block = _tool_use(call)
        start = {**block, "input": {}}
        out = [("content_block_start", {"type": "content_block_start", "index": self.blocks, "content_block": start}),
               ("content_block_delta", {"type": "content_block_delta", "index": self.blocks,
                                        "delta": {"type": "input_json_delta",
                                                  "partial_json": json.dumps(call.arguments, ensure_ascii=False)}}),
               ("content_block_stop", {"type": "content_block_stop", "index": self.blocks})]
        self.blocks += 1
        return out

    def failed(self, error: ApiError) -> list:
        return [("error", error_body(error))]


def _stop_reason(done: Done) -> str:
    return STOP_REASONS.get(done.finish_reason, "end_turn")


def _tool_use(call: ToolCall) -> dict:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
