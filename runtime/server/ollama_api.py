"""Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`, `/api/version`), for the
clients that speak it (Open WebUI, Continue, Home Assistant, Raycast, editor plugins, the `ollama`
Python client). No HTTP in it; http_app.py routes it, on the same engine line and behind the same
web-page rules as the /v1 routes.

A chat is the chat route's in Ollama's spelling: `messages` (with `thinking`, `tool_calls` whose
arguments are objects, `tool` results in their calls' order), `tools`, `format` ("json" or a JSON
schema: the answer is decoded under it, runtime/grammar.py), `think` (false: no thinking; true: the
depth table's default stop, or Balanced where that one does not think; "low", "medium", "high": those
efforts), `options` (temperature, top_p, top_k, min_p, seed, num_predict, stop; the tuning options that
change no reply are accepted, the sampling ones this engine does not have refused unless neutral),
`logprobs` and `top_logprobs`. `/api/generate` is one prompt: through the chat template (with its
`system`), or `raw` as /v1/completions continues it. Replies stream by default, as NDJSON lines;
errors are Ollama's `{"error": message}`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import show
from ..events import ANSWER, LENGTH, THINKING, Done, Prefill, Token, ToolCall
from ..generate import ChatRequest
from ..grammar import GrammarError, check_schema
from ..options import MAX_NEW_TOKENS
from .openai_api import chat_messages
from .openai_tools import ToolFields, checked_tool_fields
from .request_fields import (
    bool_field,
    elastic_fields,
    logprob_fields,
    option_field,
    plan_reply,
    refuse_unknown,
    sampling_fields,
    served_model,
    stop_strings,
)
from .serving import AnswerLogprobs, ApiError, ServedModel, bad, check_done

VERSION = "0.12.0"  # the Ollama API version whose shapes these routes follow (GET /api/version)
CHAT_KNOWN = {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think", "logprobs",
              "top_logprobs", "elastic"}
GENERATE_KNOWN = {"model", "prompt", "suffix", "system", "template", "context", "raw", "format", "options", "stream",
                  "keep_alive", "think", "images", "logprobs", "top_logprobs", "elastic"}
# options: read into the request; accepted as they change no reply (loading and threading, which this
# engine decides); refused unless at their neutral value (sampling this engine does not do)
READ = {"temperature", "top_p", "top_k", "min_p", "seed", "num_predict", "stop", "num_ctx"}
# (the repeat penalty's window and newline rule, and mirostat's settings, act only with the penalty or
# mirostat on, which are refused)
TUNING = {"num_keep", "num_batch", "num_gpu", "main_gpu", "use_mmap", "use_mlock", "num_thread", "numa",
          "low_vram", "f16_kv", "vocab_only", "logits_all", "embedding_only", "repeat_last_n", "penalize_newline",
          "mirostat_tau", "mirostat_eta"}
NEUTRAL = {"repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0, "tfs_z": 1, "typical_p": 1,
           "mirostat": 0}
THINK_EFFORTS = {"low": "low", "medium": "medium", "high": "high"}
DONE_REASONS = {LENGTH: "length"}  # everything else ends as Ollama's "stop" (tool calls included)


def error_body(error: ApiError) -> dict:
    """An error in Ollama's shape (its client raises ResponseError with the message and status)."""
    message = error.message if not error.param or error.message.startswith(error.param) else \
        f"{error.param}: {error.message}"
    return {"error": message}


@dataclass(frozen=True)
class ParsedOllama:
    request: ChatRequest
    model: str
    stream: bool
    chat: bool  # /api/chat (a message), else /api/generate (a response)


def parse_chat(body, served: ServedModel) -> ParsedOllama:
    model, pin = served_model(body, served)
    refuse_unknown(body, CHAT_KNOWN, "/api/chat")
    messages = chat_messages(_chat_messages(body.get("messages")))
    return _parsed(body, served, model, pin, messages, None, chat=True)


def parse_generate(body, served: ServedModel) -> ParsedOllama:
    model, pin = served_model(body, served)
    refuse_unknown(body, GENERATE_KNOWN, "/api/generate")
    for key, why in (("suffix", "fill-in-the-middle: the model is not trained for it"),
                     ("template", "the checkpoint's own template is the one that runs"),
                     ("context", "send the conversation to /api/chat instead"),
                     ("images", "the model reads text only")):
        if body.get(key):
            raise bad(key, f"{key} is not supported ({why}); leave it out")
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise bad("prompt", "prompt must be a string")
    raw = bool_field(body, "raw", "raw") if body.get("raw") is not None else False
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise bad("system", "system must be a string")
    if raw:
        if system or body.get("think") or body.get("format") or not prompt:
            raise bad("raw", "a raw prompt is continued as it is: it needs a prompt, and no system, think or format")
        return _parsed({**body, "think": False}, served, model, pin, (), prompt, chat=False)
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return _parsed(body, served, model, pin, messages, None, chat=False)


def _parsed(body: dict, served: ServedModel, model: str, pin: str | None, messages, prompt: str | None,
            chat: bool) -> ParsedOllama:
    elastic, keep_reasoning = elastic_fields(body)
    options = _options(body.get("options"), served)
    plan = plan_reply({}, elastic, served, model, pin, effort=(_effort(body, served), "think"),
                      budget=(0, "think") if body.get("think") is False or prompt is not None else None)
    schema = _format(body.get("format"))
    tools = _checked_tools(body["tools"]) if chat and body.get("tools") else None
    fields = checked_tool_fields(ToolFields(tools, "auto" if tools else "none", None, True, schema))
    stream = bool_field(body, "stream", "stream") if body.get("stream") is not None else True  # Ollama's default
    try:
        sampling = sampling_fields(options)
    except ApiError as e:
        raise bad(f"options.{e.param}", e.message) from None
    request = ChatRequest(tuple(messages), plan.think, plan.answer, plan.budget, options["num_predict"],
                          sampling, tuple(options.get("stop", ())),
                          truncate_history_thinking=not keep_reasoning, escalation=plan.escalation,
                          tools=fields.tools, tool_choice=fields.tool_choice, response_format=fields.response_format,
                          prompt=prompt, logprobs=logprob_fields(body))
    return ParsedOllama(request, model, stream, chat)


def _effort(body: dict, served: ServedModel):
    """`think` as a depth level's effort: "low", "medium", "high"; true: the table's default stop when
    it thinks, else medium; absent: the table's default; false: none (thinking off)."""
    think = body.get("think")
    if think is None or think is False:
        return None
    if think is True:
        default = next((s for s in served.stops if s.name == served.default), None)
        return None if default is not None and default.think else "medium"
    if not isinstance(think, str) or think not in THINK_EFFORTS:
        raise bad("think", f"think must be true, false, low, medium or high, not {show(think, 20)}")
    return THINK_EFFORTS[think]


def _options(value, served: ServedModel) -> dict:
    """Ollama's `options`, checked; `num_predict` becomes the reply's token limit (-1 and -2, and
    absent: what the context leaves)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise bad("options", "options must be an object such as {\"temperature\": 0.7}")
    for key in sorted(value):
        param = f"options.{key}"
        if key in NEUTRAL:
            if value[key] is not None and (isinstance(value[key], bool) or value[key] != NEUTRAL[key]):
                raise bad(param, f"{key} is not supported by this server (leave it out, or {NEUTRAL[key]})")
        elif key not in READ and key not in TUNING:
            raise bad(param, f"{key} is not an option this server knows; leave it out")
    num_ctx = value.get("num_ctx")
    if num_ctx is not None and (type(num_ctx) is not int or not 1 <= num_ctx):
        raise bad("options.num_ctx", "num_ctx must be a whole number of tokens")
    if num_ctx is not None and num_ctx > served.max_context:
        raise bad("options.num_ctx", f"this server serves a context of {served.max_context:,} tokens; ask for at "
                                     "most that (the server's own context applies either way)")
    out = {k: value[k] for k in ("temperature", "top_p", "top_k", "min_p", "seed") if k in value}
    predict = value.get("num_predict")
    if predict in (None, -1, -2):
        out["num_predict"] = served.max_context  # the engine caps it at what the context leaves
    else:
        option = MAX_NEW_TOKENS.within(high=served.max_context)
        out["num_predict"] = option_field(option, value, "options.num_predict", "num_predict")
    if value.get("stop") is not None:
        try:
            out["stop"] = stop_strings(value["stop"])
        except ApiError as e:
            raise bad("options.stop", e.message) from None
    return out


def _format(value) -> dict | None:
    """`format`: "json" (a JSON object), a JSON schema, or "" / absent (text)."""
    if value in (None, ""):
        return None
    if value == "json":
        return {"type": "object"}
    try:
        return check_schema(value, "format")
    except GrammarError as e:
        raise bad(e.param, e.message) from None


def _checked_tools(value) -> tuple[dict, ...]:
    from ..tool_calls import ToolSpecError, check_tools

    if not isinstance(value, list):
        raise bad("tools", "tools must be a list of {type: function, function: {name, parameters}} objects")
    try:
        return check_tools(value)
    except ToolSpecError as e:
        raise bad(e.param, e.message) from None


def _chat_messages(value) -> list[dict]:
    """Ollama's messages in the chat route's shape: `thinking` as the past reasoning, tool calls with
    their arguments as objects, tool results as tool messages (in their calls' order)."""
    if not isinstance(value, list) or not value:
        raise bad("messages", "messages must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}]", "each message must be an object with role and content")
        for key in sorted(set(m) - {"role", "content", "thinking", "tool_calls", "tool_name", "images"}):
            raise bad(f"messages[{i}].{key}", f"{key} is not a field of a message")
        if m.get("images"):
            raise bad(f"messages[{i}].images", "the model reads text only; leave images out")
        message = {"role": m.get("role"), "content": m.get("content") if m.get("content") is not None else ""}
        if m.get("thinking") is not None:
            message["reasoning_content"] = m["thinking"]
        if m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                raise bad(f"messages[{i}].tool_calls", "tool_calls must be a list of {function: {name, arguments}}")
            message["tool_calls"] = [{"type": "function", "function": c.get("function")} for c in calls]
        out.append(message)
    return out


# ---------------------------------------------------------------------- the reply


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _ns(ms: float) -> int:
    return int(ms * 1e6)


class OllamaApi:
    """`/api/chat` and `/api/generate` for http_app's reply routes (NDJSON when streamed)."""
    ndjson = True
    error_body = staticmethod(error_body)

    def __init__(self, parsed: ParsedOllama):
        self.parsed = parsed
        self.prompt: Prefill | None = None
        self.logprobs = AnswerLogprobs()
        self.started = time.monotonic()

    def _line(self, done: bool, **fields) -> dict:
        return {"model": self.parsed.model, "created_at": _now(), **fields, "done": done}

    def _text(self, phase: str, text: str, calls: list | None = None) -> dict:
        """A piece of the reply: a message fragment (chat) or a response fragment (generate)."""
        if self.parsed.chat:
            message = {"role": "assistant", "content": text if phase == ANSWER else ""}
            if phase == THINKING:
                message["thinking"] = text
            if calls:
                message["tool_calls"] = calls
            return {"message": message}
        return {"response": text} if phase == ANSWER else {"response": "", "thinking": text}

    def _end(self, done: Done, queue_ms: float) -> dict:
        """The last line's fields: how it ended, the counts and the durations (nanoseconds)."""
        check_done(done)
        p = done.progress
        prompt = self.prompt.prompt_tokens if self.prompt else 0
        prefill = self.prompt.ms if self.prompt else 0.0
        return {"done_reason": DONE_REASONS.get(done.finish_reason, "stop"),
                "total_duration": _ns(queue_ms + p.elapsed_ms), "load_duration": 0,
                "prompt_eval_count": prompt, "prompt_eval_duration": _ns(prefill),
                "eval_count": done.thinking_tokens + done.answer_tokens,
                "eval_duration": _ns(max(0.0, p.elapsed_ms - prefill))}

    def _logprob_fields(self, entries: list) -> dict:
        if self.parsed.request.logprobs is None:
            return {}
        return {"logprobs": [{"token": e.token, "logprob": e.logprob, "bytes": list(e.bytes) if e.bytes else None,
                              "top_logprobs": [{"token": a.token, "logprob": a.logprob} for a in e.top]}
                             for e in entries]}

    def collect(self, event) -> None:
        if isinstance(event, Prefill) and self.prompt is None:
            self.prompt = event
        self.logprobs.add(event)

    def whole(self, prompt: Prefill | None, done: Done, queue_ms: float) -> dict:
        self.prompt = self.prompt or prompt
        end = self._end(done, queue_ms)
        if self.parsed.chat:
            body = self._text(ANSWER, done.answer_text, _calls(done.tool_calls))
            if done.think_submodel:
                body["message"]["thinking"] = done.thinking_text
        else:
            body = {"response": done.answer_text, **({"thinking": done.thinking_text} if done.think_submodel else {})}
        return self._line(True, **body, **end, **self._logprob_fields(self.logprobs.entries))

    def on_event(self, event, queue_ms: float) -> list:
        if isinstance(event, Prefill):
            self.prompt = self.prompt or event
            return []
        if isinstance(event, Token):
            entries = self.logprobs.add(event)
            if not event.text and not entries:
                return []
            return [(None, self._line(False, **self._text(event.phase, event.text), **self._logprob_fields(entries)))]
        if isinstance(event, ToolCall) and self.parsed.chat:
            return [(None, self._line(False, **self._text(ANSWER, "", _calls([event]))))]
        if isinstance(event, Done):
            return [(None, self._line(True, **self._text(ANSWER, ""), **self._end(event, queue_ms)))]
        return []

    def failed(self, error: ApiError) -> list:
        return [(None, error_body(error))]


class OllamaChat(OllamaApi):
    path = "/chat"
    parse = staticmethod(parse_chat)


class OllamaGenerate(OllamaApi):
    path = "/generate"
    parse = staticmethod(parse_generate)


def _calls(calls) -> list[dict] | None:
    """Calls as Ollama sends them: {id, function: {index, name, arguments (an object)}}."""
    if not calls:
        return None
    return [{"id": c.id, "function": {"index": c.index, "name": c.name, "arguments": dict(c.arguments)}}
            for c in calls]


# ---------------------------------------------------------------------- the model routes


def model_entry(served: ServedModel, model_id: str) -> dict:
    """A model as /api/tags lists it: its name and what the served checkpoint says of it."""
    return {"name": model_id, "model": model_id, "modified_at": _iso(served.created),
            "details": details(served, model_id)}


def details(served: ServedModel, model_id: str) -> dict:
    sub = served.pinned(model_id) or served.parent
    return {"format": "safetensors", "family": "nemotron_h", "families": ["nemotron_h"], "parameter_size": sub,
            "parent_model": served.id if model_id != served.id else ""}


def show_model(served: ServedModel, body) -> dict:
    """/api/show: the model's details, its context length (as `<architecture>.context_length`, where
    clients read it) and what it can do."""
    if not isinstance(body, dict) or not isinstance(body.get("model") or body.get("name"), str):
        raise bad("model", f"model is required: one of {', '.join(served.ids())}")
    refuse_unknown(body, {"model", "name", "verbose"}, "/api/show")
    model_id = body.get("model") or body["name"]
    served.pinned(model_id)  # 404 for a model this server does not have
    capabilities = ["completion", "tools"] + (["thinking"] if any(s.think for s in served.stops) else [])
    return {"modelfile": "", "parameters": "", "template": "", "details": details(served, model_id),
            "model_info": {"general.architecture": "nemotron_h", "nemotron_h.context_length": served.max_context},
            "capabilities": capabilities, "modified_at": _iso(served.created)}


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")

