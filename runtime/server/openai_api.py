"""OpenAI's chat completions (`/v1/chat/completions`) mapped onto the elastic engine, with no HTTP in it.

    served = ServedModel.from_engine(engine)  # serving.py
    parsed = parse_chat(body, served)          # ApiError (status, param) for anything it cannot honour
    ... engine.stream(parsed.request) ...
    completion(events, ...) / ChunkStream(...).on_event(event) -> chunk dicts

The fields every route shares (the reasoning controls, sampling, stop strings) are checked by
request_fields.py; the tool-calling and structured-output fields by openai_tools.py. Reasoning goes
out as both `reasoning_content` (LM Studio, llama.cpp) and `reasoning` (vLLM, Ollama).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..events import ANSWER, Done, Prefill, Switch, Token, ToolCall
from ..generate import ChatRequest
from ..options import MAX_NEW_TOKENS, refusal
from .openai_tools import assistant_calls, call_deltas, message_tool_calls, parse_tool_fields, tool_turns
from .request_fields import (
    cache_key,
    elastic_fields,
    joined_text,
    option_field,
    plan_reply,
    refuse_penalties,
    sampling_fields,
    served_model,
    stop_strings,
    stream_fields,
)
from .serving import FINISH, ServedModel, bad, check_done, elastic_info

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


# ---------------------------------------------------------------------- the request


@dataclass(frozen=True)
class ParsedChat:
    request: ChatRequest
    model: str  # as the client named it (echoed back)
    stream: bool
    include_usage: bool
    depth: str | None  # the depth stop used, None when the submodels were given directly
    cache_key: str | None = None  # `prompt_cache_key`: requests that send the same one share cached prompts


def parse_chat(body, served: ServedModel) -> ParsedChat:
    """Checks every field this server reads and maps the request onto a `ChatRequest`."""
    model, pin = served_model(body, served)
    _refuse_unsupported(body)
    tools = parse_tool_fields(body)
    messages = _messages(body.get("messages"))
    elastic, keep_reasoning = elastic_fields(body)
    plan = plan_reply(body, elastic, served, model, pin)
    max_tokens = _max_tokens(body, served)
    sampling = sampling_fields(body)
    stream, include_usage = stream_fields(body)
    request = ChatRequest(tuple(messages), plan.think, plan.answer, plan.budget, max_tokens, sampling,
                          stop_strings(body.get("stop")), truncate_history_thinking=not keep_reasoning,
                          escalation=plan.escalation, tools=tools.tools, tool_choice=tools.tool_choice,
                          tool_name=tools.tool_name, parallel_tool_calls=tools.parallel,
                          strict_tools=tools.strict, response_format=tools.response_format)
    return ParsedChat(request, model, stream, include_usage, plan.depth, cache_key(body.get("prompt_cache_key")))


def _refuse_unsupported(body: dict) -> None:
    """Fields that would change the reply in a way this engine cannot: refused, never silently ignored."""
    n = body.get("n")
    if n is not None and (type(n) is not int or n != 1):  # true and 1.0 equal 1 in Python, not in JSON's types
        raise bad("n", refusal("n", n, "1: this server returns one choice per request"))
    for key in ("logprobs", "top_logprobs"):
        if body.get(key) not in (None, False, 0):  # the decode loop reads one token per step from the device
            raise bad(key, f"{key} is not returned by this server: its decode loop reads only the token back "
                           "from the device each step; leave it out")
    refuse_penalties(body)


def _messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise bad("messages", "messages must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "each message must be an object with role and content")
        role = m.get("role")
        if role not in ROLES:
            hint = " (send tool results with role tool)" if role == "function" else ""
            raise bad(f"{where}.role", f"role {role!r} is not one of system, developer, user, assistant, tool{hint}")
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        msg = {"role": ROLES[role], "content": joined_text(content, f"{where}.content", "content parts")}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"], msg["_call_ids"] = assistant_calls(m["tool_calls"], where)
        if role == "assistant":
            # LM Studio/llama.cpp spell it one way, vLLM/Ollama the other
            for key in ("reasoning_content", "reasoning"):
                r = m.get(key)
                if r is not None and not isinstance(r, str):
                    raise bad(f"{where}.{key}", f"{key} must be a string")
                if r:
                    msg["reasoning_content"] = r
                    break
        out.append(msg)
    return tool_turns(value, out)


def _max_tokens(body: dict, served: ServedModel) -> int:
    option = MAX_NEW_TOKENS.within(high=served.max_context)
    values = {k: option_field(option, body, k, k) for k in ("max_completion_tokens", "max_tokens")
              if body.get(k) is not None}
    if len(set(values.values())) > 1:
        raise bad("max_tokens", "max_tokens and max_completion_tokens disagree; send one of them")
    return next(iter(values.values()), served.max_context)  # the engine caps it at what the context leaves


def new_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def usage(prompt: Prefill | None, done: Done) -> dict:
    completion = done.thinking_tokens + done.answer_tokens
    prompt_tokens = prompt.prompt_tokens if prompt else 0
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": prompt.reused_tokens if prompt else 0},
            "completion_tokens_details": {"reasoning_tokens": done.thinking_tokens}}


def completion(parsed: ParsedChat, prompt: Prefill | None, done: Done, completion_id: str, created: int,
               queue_ms: float) -> dict:
    """The non-streamed response."""
    check_done(done)
    reasoning = done.thinking_text if done.think_submodel else None
    calls = message_tool_calls(done)
    message = {"role": "assistant", "content": done.answer_text if done.answer_text or not calls else None,
               "reasoning_content": reasoning, "reasoning": reasoning}
    if calls:
        message["tool_calls"] = calls
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": parsed.model,
            "choices": [{"index": 0, "message": message, "finish_reason": FINISH.get(done.finish_reason, "stop"),
                         "logprobs": None}],
            "usage": usage(prompt, done), "elastic": elastic_info(done, parsed.depth, queue_ms)}


class ChunkStream:
    """Maps the engine's events onto `chat.completion.chunk` objects: one chunk per Token (its text may
    be empty: a special token, or half a character still to come), then one with the finish reason
    and the `elastic` object, then, when asked for, one with the usage and no choices. A switch gets no
    chunk of its own: the next token's chunk carries it as `elastic.switch` (Switch.to_dict), which a
    remote client (runtime/remote/reply.py) turns back into the same event. The runtime's
    Token texts, joined, are the reply's texts, so the chunks carry them as they come."""

    def __init__(self, parsed: ParsedChat, completion_id: str, created: int):
        self.parsed, self.id, self.created = parsed, completion_id, created
        self.prompt: Prefill | None = None
        self.first = True
        self.switch: Switch | None = None  # told on the next token's chunk (a remote client shows it there)

    def _chunk(self, delta: dict, finish: str | None = None, **extra) -> dict:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.parsed.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        if self.parsed.include_usage:
            chunk.setdefault("usage", None)
        return chunk

    def _delta(self, phase: str, text: str) -> dict:
        delta = {"role": "assistant"} if self.first else {}
        self.first = False
        if phase == ANSWER:
            delta["content"] = text
        else:
            delta["reasoning_content"] = delta["reasoning"] = text
        return delta

    def on_event(self, event, queue_ms: float = 0.0) -> list[dict]:
        if isinstance(event, Prefill):
            self.prompt = self.prompt or event
            return []
        if isinstance(event, Token):
            extra = {"elastic": {"switch": self.switch.to_dict()}} if self.switch else {}
            self.switch = None
            return [self._chunk(self._delta(event.phase, event.text), **extra)]
        if isinstance(event, ToolCall):
            chunks = []
            for item in call_deltas(event):
                delta = {"role": "assistant"} if self.first else {}
                self.first = False
                chunks.append(self._chunk({**delta, "tool_calls": [item]}))
            return chunks
        if isinstance(event, Switch):  # each switch rides on the chunk of the next token (no chunk of its own)
            self.switch = event
            return []
        if isinstance(event, Done):
            check_done(event)
            chunks = [self._chunk({}, FINISH.get(event.finish_reason, "stop"),
                                  elastic=elastic_info(event, self.parsed.depth, queue_ms))]
            if self.parsed.include_usage:
                chunks.append({**self._chunk({}), "choices": [], "usage": usage(self.prompt, event)})
            return chunks
        return []
