"""OpenAI's chat-completions protocol mapped onto the elastic engine, with no HTTP in it.

    served = ServedModel.from_engine(engine)
    parsed = parse_chat(body, served)          # ApiError (status, param) for anything it cannot honour
    ... stream_chat(engine, parsed.request) ...
    completion(events, ...) / ChunkStream(...).on_event(event) -> chunk dicts

Reasoning controls that other servers spell differently all land on the depth table: Ollama's
`reasoning_effort` / `reasoning.effort` (the table's `efforts`: none, low, medium, high; none turns
thinking off; auto is the Auto stop, whose thought climbs to larger submodels when the thinker
struggles; a level that cannot run falls back as depth.usable_level says; absent, the depth table's
default stop), vLLM's `thinking_token_budget`, and the `elastic` object for what only this
engine can do. Reasoning goes
out as both `reasoning_content` (LM Studio, llama.cpp) and `reasoning` (vLLM, Ollama).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..depth import DepthLevel, effort_levels, find_level, level_for_effort, table_default_level, usable_level
from ..errors import UsageError
from ..events import ANSWER, END_OF_TURN, ERROR, LENGTH, STOP_STRING, STOPPED, Done, Prefill, Switch, Token
from ..generate import ChatRequest
from ..options import (
    MAX_NEW_TOKENS,
    MIN_P,
    SEED,
    TEMPERATURE,
    THINKING_BUDGET,
    TOP_K,
    TOP_P,
    Option,
    OptionError,
    refusal,
)
from ..sampling import SamplingSettings

MAX_STOPS, MAX_STOP_CHARS = 4, 256
MIN_CACHE_KEY, MAX_CACHE_KEY = 16, 256  # a UUID is 36
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
ELASTIC_FIELDS = {"think_submodel", "answer_submodel", "thinking_budget", "depth", "keep_reasoning"}
FINISH = {END_OF_TURN: "stop", STOP_STRING: "stop", LENGTH: "length"}
SWITCH_KEYS = ("from", "to", "reprefill_tokens", "ms")  # the `elastic.switch` object's, as clients know it


class ApiError(Exception):
    """A request that gets an error response in OpenAI's shape."""

    TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
             413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param, self.code)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ApiError.TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def bad(param: str | None, message: str) -> ApiError:
    return ApiError(400, message, param, "invalid_value" if param else "invalid_request")


# ---------------------------------------------------------------------- the model being served


@dataclass(frozen=True)
class ServedModel:
    """What the protocol needs to know about the loaded engine (computed once per engine; no I/O)."""
    id: str  # the checkpoint's id: its folder's name, as the app shows it
    submodels: tuple[str, ...]  # in memory, fewest active parameters first
    stops: tuple[DepthLevel, ...]
    max_context: int
    default: str = field(default_factory=table_default_level)  # a request without an effort (depth.default_level)
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def from_engine(cls, engine) -> "ServedModel":
        return cls(Path(engine.model.folder).name, tuple(engine.submodels_by_size()), tuple(engine.depth_levels()),
                   engine.max_context, engine.default_depth())

    @property
    def parent(self) -> str:
        return self.submodels[-1]

    def ids(self) -> list[str]:
        """The checkpoint's id, then one id per submodel in memory that pins it."""
        return [self.id] + [f"{self.id}:{s}" for s in self.submodels]

    def pinned(self, model_id: str) -> str | None:
        """The submodel a model id pins (None for the checkpoint's own id); ApiError 404 if unknown."""
        if model_id == self.id:
            return None
        for s in self.submodels:
            if model_id == f"{self.id}:{s}":
                return s
        raise ApiError(404, f"the model {model_id!r} does not exist here; this server has {', '.join(self.ids())}",
                       "model", "model_not_found")

    def model_object(self, model_id: str) -> dict:
        sub = self.pinned(model_id)
        extra = ({"submodel": sub} if sub else
                 {"submodels": list(self.submodels), "depths": [s.name for s in self.stops if s.available]})
        return {"id": model_id, "object": "model", "created": self.created, "owned_by": "elastic-chat",
                "elastic": {**extra, "max_context": self.max_context}}


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
    if not isinstance(body, dict):
        raise bad(None, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", f"model is required: one of {', '.join(served.ids())}")
    pin = served.pinned(model)
    _refuse_unsupported(body)
    messages, keep_reasoning = _messages(body.get("messages")), False
    elastic = body.get("elastic")
    if elastic is None:
        elastic = {}
    if not isinstance(elastic, dict):
        raise bad("elastic", "elastic must be an object")
    unknown = set(elastic) - ELASTIC_FIELDS
    if unknown:
        raise bad(f"elastic.{sorted(unknown)[0]}", f"unknown field; elastic takes {', '.join(sorted(ELASTIC_FIELDS))}")
    if "keep_reasoning" in elastic:
        keep_reasoning = _bool(elastic, "keep_reasoning", "elastic.keep_reasoning")

    stop, depth = _depth(body, elastic, served)
    think, answer, budget = stop.think, stop.answer, stop.budget
    escalation = stop.escalation  # Auto climbs unless the client chose the submodels itself
    if pin is not None:
        think, answer, escalation = (pin if think else None), pin, None
    for key in ("think_submodel", "answer_submodel"):
        name = elastic.get(key)
        if name is None:
            continue
        param = f"elastic.{key}"
        if not isinstance(name, str) or name not in served.submodels:
            raise bad(param, f"{name!r} is not a submodel in memory; choose one of {', '.join(served.submodels)}")
        if pin is not None and name != pin:
            raise bad(param, f"model {model!r} pins submodel {pin}; use the checkpoint's id {served.id!r} to choose")
        if key == "think_submodel":
            if think is None:
                raise bad(param, f"depth {stop.name} turns thinking off; drop {param} or choose a depth that thinks")
            think = name
        else:
            answer = name
        depth, escalation = None, None
    chosen, budget_param = _budget(body, elastic, served)
    if chosen is not None:
        if chosen > 0 and think is None:
            raise bad(budget_param, f"depth {stop.name} turns thinking off, so a thinking budget cannot apply; "
                                    "drop one of them")
        budget, depth = chosen, None
    if budget == 0:
        think = None

    max_tokens = _max_tokens(body, served)
    sampling = SamplingSettings(*(_field(option, body) for option in (TEMPERATURE, TOP_P, TOP_K, MIN_P, SEED)))
    stream = _bool(body, "stream", "stream") if body.get("stream") is not None else False
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise bad("stream_options", "stream_options is only allowed when stream is true")
        if not isinstance(options, dict):
            raise bad("stream_options", "stream_options must be an object")
        if options.get("include_usage") is not None:
            include_usage = _bool(options, "include_usage", "stream_options.include_usage")
    request = ChatRequest(tuple(messages), think, answer, budget if think else 0, max_tokens, sampling,
                          _stops(body.get("stop")), truncate_history_thinking=not keep_reasoning,
                          escalation=escalation if think else None)
    return ParsedChat(request, model, stream, include_usage, depth, _cache_key(body.get("prompt_cache_key")))


def _refuse_unsupported(body: dict) -> None:
    """Fields that would change the reply in a way this engine cannot: refused, never silently ignored."""
    if body.get("n") not in (None, 1):
        raise bad("n", "this server returns one choice per request (n must be 1)")
    for key in ("tools", "functions"):
        if body.get(key):
            raise bad(key, "tool calling is not supported by this server")
    if body.get("tool_choice") not in (None, "none", "auto"):  # "auto" with no tools means no tool calls
        raise bad("tool_choice", "tool calling is not supported by this server")
    if body.get("function_call") not in (None, "none"):
        raise bad("function_call", "tool calling is not supported by this server")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise bad("logprobs", "log-probabilities are not returned by this server")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad("response_format", "only plain text replies are supported (response_format type 'text')")
    if body.get("logit_bias"):
        raise bad("logit_bias", "logit_bias is not supported by this server")
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise bad(key, f"{key} is not supported by this server (leave it out or 0)")


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
            hint = " (tool calling is not supported)" if role in ("tool", "function") else ""
            raise bad(f"{where}.role", f"role {role!r} is not one of system, developer, user, assistant{hint}")
        if role == "assistant" and m.get("tool_calls"):
            raise bad(f"{where}.tool_calls", "tool calling is not supported by this server")
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        msg = {"role": ROLES[role], "content": _text(content, f"{where}.content")}
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
    return out


def _text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text only
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{j}]", "only text content parts ({type: text, text: ...}) are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(where, "content must be a string or a list of text parts")


def _depth(body: dict, elastic: dict, served: ServedModel) -> tuple[DepthLevel, str | None]:
    effort, param = body.get("reasoning_effort"), "reasoning_effort"
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise bad("reasoning", "reasoning must be an object such as {\"effort\": \"low\"}")
        if reasoning.get("effort") is not None:
            if effort is not None and effort != reasoning["effort"]:
                raise bad("reasoning.effort", "reasoning.effort and reasoning_effort disagree; send one of them")
            effort, param = reasoning["effort"], "reasoning.effort"
    depth = elastic.get("depth")
    if depth is not None:
        if effort is not None:
            raise bad("elastic.depth", f"send {param} or elastic.depth, not both")
        if not isinstance(depth, str):
            raise bad("elastic.depth", "elastic.depth must be the name of a depth stop")
        try:
            stop = find_level(list(served.stops), depth)
        except UsageError as e:
            raise bad("elastic.depth", str(e)) from None
        return stop, stop.name
    stops = list(served.stops)
    if effort is None:  # the stop a new chat starts on in the app
        stop = usable_level(stops, served.default)
        if stop is not None:
            return stop, stop.name
        effort = "medium"
    efforts = effort_levels()
    if not isinstance(effort, str) or effort not in efforts:
        raise bad(param, refusal(param, effort, f"one of {', '.join(efforts)}"))
    stop = level_for_effort(stops, effort)
    if stop is not None:
        return stop, stop.name
    names = {s.name for s in stops}
    if efforts[effort] not in names:
        raise bad(param, f"this model's depth table has no {efforts[effort]} stop; use "
                         f"{', '.join(e for e, name in efforts.items() if name in names)}")
    raise bad(param, f"no depth for {param} {effort!r} fits in memory here; choose a lower effort")


def _budget(body: dict, elastic: dict, served: ServedModel) -> tuple[int | None, str | None]:
    """The thinking budget asked for, if any, and the parameter that asked."""
    values = {}
    for param, source, key in (("thinking_token_budget", body, "thinking_token_budget"),  # vLLM
                               ("thinking_budget_tokens", body, "thinking_budget_tokens"),  # llama.cpp
                               ("elastic.thinking_budget", elastic, "thinking_budget")):
        if source.get(key) is not None:
            values[param] = _field(THINKING_BUDGET.within(high=served.max_context), source, param, key)
    if len(set(values.values())) > 1:
        raise bad(list(values)[-1], f"{' and '.join(values)} disagree; send one of them")
    return next(iter(values.values()), None), next(iter(values), None)


def _max_tokens(body: dict, served: ServedModel) -> int:
    option = MAX_NEW_TOKENS.within(high=served.max_context)
    values = {k: _field(option, body, k, k) for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None}
    if len(set(values.values())) > 1:
        raise bad("max_tokens", "max_tokens and max_completion_tokens disagree; send one of them")
    return next(iter(values.values()), served.max_context)  # the engine caps it at what the context leaves


def _stops(value) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or not 1 <= len(stops) <= MAX_STOPS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops)):
        raise bad("stop", f"stop must be a string or a list of up to {MAX_STOPS} non-empty strings "
                          f"(at most {MAX_STOP_CHARS} characters each)")
    return tuple(stops)


def _cache_key(value) -> str | None:
    """OpenAI's `prompt_cache_key`: the requests that send the same key may reuse each other's cached
    prompt (http_app.py gives every other request a cache of its own). Whoever knows a key can test
    guesses of the prompts sent with it, so it must be hard to guess: a random value such as a UUID."""
    if value is None:
        return None
    if not isinstance(value, str) or not MIN_CACHE_KEY <= len(value) <= MAX_CACHE_KEY or not value.isprintable():
        raise bad("prompt_cache_key", f"prompt_cache_key must be {MIN_CACHE_KEY} to {MAX_CACHE_KEY} printable "
                                      "characters, hard to guess (such as a UUID): requests that send the same key "
                                      "share cached prompts")
    return value


def _field(option: Option, source: dict, param: str | None = None, key: str | None = None):
    """A numeric field checked by its option (runtime/options.py), as the CLI and the app check it;
    the option's default when absent or null."""
    try:
        return option.read(source, param, key)
    except OptionError as e:
        raise bad(param or option.name, str(e)) from None


def _bool(source: dict, key: str, param: str) -> bool:
    v = source.get(key)
    if not isinstance(v, bool):
        raise bad(param, f"{param} must be true or false")
    return v


# ---------------------------------------------------------------------- the response


def new_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def usage(prompt: Prefill | None, done: Done) -> dict:
    completion = done.thinking_tokens + done.answer_tokens
    prompt_tokens = prompt.prompt_tokens if prompt else 0
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": prompt.reused_tokens if prompt else 0},
            "completion_tokens_details": {"reasoning_tokens": done.thinking_tokens}}


def elastic_info(done: Done, depth: str | None, queue_ms: float) -> dict:
    """What only this server can say: who thought and answered, the switch's cost, the timings."""
    switch = None
    if done.answer_switch:  # the event's one serialisation, less the keys this object never had
        switch = {k: v for k, v in done.answer_switch.to_dict().items() if k in SWITCH_KEYS}
    return {"depth": depth, "think_submodel": done.think_submodel, "answer_submodel": done.answer_submodel,
            "thinking_budget": done.thinking_budget, "budget_hit": done.budget_hit, "switch": switch,
            "ttft_ms": done.ttft_ms, "tokens_per_s": done.tokens_per_s, "queue_ms": round(queue_ms, 3)}


def check_done(done: Done) -> None:
    if done.finish_reason == ERROR:
        raise ApiError(500, f"the reply failed: {done.error}", None, "generation_failed")
    if done.finish_reason == STOPPED:  # not by its client (a client that hung up reads nothing more)
        raise ApiError(503, "the reply was stopped before it finished: the model is being replaced or "
                            "unloaded; try again shortly", None, "reply_stopped")


def completion(parsed: ParsedChat, prompt: Prefill | None, done: Done, completion_id: str, created: int,
               queue_ms: float) -> dict:
    """The non-streamed response."""
    check_done(done)
    reasoning = done.thinking_text if done.think_submodel else None
    message = {"role": "assistant", "content": done.answer_text, "reasoning_content": reasoning,
               "reasoning": reasoning}
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": parsed.model,
            "choices": [{"index": 0, "message": message, "finish_reason": FINISH.get(done.finish_reason, "stop"),
                         "logprobs": None}],
            "usage": usage(prompt, done), "elastic": elastic_info(done, parsed.depth, queue_ms)}


class ChunkStream:
    """Maps the engine's events onto `chat.completion.chunk` objects: one chunk per Token (its text may
    be empty: a special token, or half a character still to come), then one with the finish reason
    and the `elastic` object, then, when asked for, one with the usage and no choices. The runtime's
    Token texts, joined, are the reply's texts, so the chunks carry them as they come."""

    def __init__(self, parsed: ParsedChat, completion_id: str, created: int):
        self.parsed, self.id, self.created = parsed, completion_id, created
        self.prompt: Prefill | None = None
        self.first = True

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
            return [self._chunk(self._delta(event.phase, event.text))]
        if isinstance(event, Switch):
            return []
        if isinstance(event, Done):
            check_done(event)
            chunks = [self._chunk({}, FINISH.get(event.finish_reason, "stop"),
                                  elastic=elastic_info(event, self.parsed.depth, queue_ms))]
            if self.parsed.include_usage:
                chunks.append({**self._chunk({}), "choices": [], "usage": usage(self.prompt, event)})
            return chunks
        return []
