"""OpenAI's legacy completions (`POST /v1/completions`): a raw prompt continued, for editors'
autocomplete. No HTTP in it; http_app.py routes it.

The prompt is encoded as plain text (a special token's string in it stays characters, so a prompt
cannot open a turn or a thought) and continued by the answering submodel with no chat template and
no thinking: the depth table's default answerer (the parent), or the submodel a model id pins.
Replies come in OpenAI's `text_completion` shape, whole or as chunks of the same object.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from ..events import Done, Prefill, Token
from ..generate import ChatRequest
from ..options import MAX_NEW_TOKENS
from .request_fields import (
    bool_field,
    elastic_fields,
    option_field,
    plan_reply,
    refuse_penalties,
    refuse_unknown,
    sampling_fields,
    served_model,
    stop_strings,
    stream_fields,
)
from .serving import FINISH, ApiError, ServedModel, bad, check_done, elastic_info

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this route (autocomplete wants a few tokens, fast)
KNOWN = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stream",
         "stream_options", "echo", "suffix", "n", "best_of", "logprobs", "presence_penalty", "frequency_penalty",
         "logit_bias", "user", "elastic"}


@dataclass(frozen=True)
class ParsedCompletion:
    request: ChatRequest
    model: str
    stream: bool
    include_usage: bool
    echo: bool
    depth: str | None = None  # never a depth: nothing thinks


def parse_completion(body, served: ServedModel) -> ParsedCompletion:
    """Checks every field and maps the request onto a `ChatRequest` with a raw prompt."""
    model, pin = served_model(body, served)
    refuse_unknown(body, KNOWN, "/v1/completions")
    _refuse_unsupported(body)
    prompt = _prompt(body.get("prompt"))
    elastic, _ = elastic_fields(body)
    for key in sorted(set(elastic) - {"answer_submodel"}):
        raise bad(f"elastic.{key}", "a completion does not think; only elastic.answer_submodel applies here")
    plan = plan_reply({}, elastic, served, model, pin, budget=(0, "prompt"))
    option = MAX_NEW_TOKENS.within(high=served.max_context, default=DEFAULT_MAX_TOKENS)
    max_tokens = option_field(option, body, "max_tokens", "max_tokens")
    stream, include_usage = stream_fields(body)
    echo = bool_field(body, "echo", "echo") if body.get("echo") is not None else False
    request = ChatRequest((), None, plan.answer, 0, max_tokens, sampling_fields(body), stop_strings(body.get("stop")),
                          prompt=prompt)
    return ParsedCompletion(request, model, stream, include_usage, echo)


def _prompt(value) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, list):
        raise bad("prompt", "prompt must be one string (or a list of one); this server returns one choice per "
                            "request, and token-id prompts are not supported")
    if not isinstance(value, str) or not value:
        raise bad("prompt", "prompt must be a non-empty string")
    return value


def _refuse_unsupported(body: dict) -> None:
    """Fields that would change the reply in a way this engine cannot: refused, never ignored."""
    if body.get("suffix"):
        raise bad("suffix", "suffix (fill-in-the-middle) is not supported: the model is not trained for it; "
                            "send the text before the cursor as the prompt")
    for key in ("n", "best_of"):
        value = body.get(key)
        if value is not None and (type(value) is not int or value != 1):  # true and 1.0 equal 1 in Python
            raise bad(key, f"this server returns one choice per request ({key} must be 1)")
    if body.get("logprobs") not in (None, 0) or isinstance(body.get("logprobs"), bool):
        raise bad("logprobs", "log-probabilities are not returned by this server")
    refuse_penalties(body)


def _usage(prompt: Prefill | None, done: Done) -> dict:
    prompt_tokens = prompt.prompt_tokens if prompt else 0
    return {"prompt_tokens": prompt_tokens, "completion_tokens": done.answer_tokens,
            "total_tokens": prompt_tokens + done.answer_tokens}


class CompletionsApi:
    """`/v1/completions` for http_app's reply routes: one object per reply."""
    path = "/completions"
    parse = staticmethod(parse_completion)
    error_body = staticmethod(ApiError.body)

    def __init__(self, parsed: ParsedCompletion):
        self.parsed, self.id, self.created = parsed, "cmpl-" + uuid.uuid4().hex[:24], int(time.time())
        self.prompt: Prefill | None = None
        self.echoed = False

    def _object(self, text: str, finish: str | None, **extra) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.parsed.model,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}], **extra}

    def _echo(self) -> str:
        """The prompt, once, before the first text, when the client asked for it back."""
        if self.parsed.echo and not self.echoed:
            self.echoed = True
            return self.parsed.request.prompt
        return ""

    def whole(self, prompt: Prefill | None, done: Done, queue_ms: float) -> dict:
        check_done(done)
        return self._object(self._echo() + done.answer_text, FINISH.get(done.finish_reason, "stop"),
                            usage=_usage(prompt, done), elastic=elastic_info(done, None, queue_ms))

    def on_event(self, event, queue_ms: float) -> list:
        if isinstance(event, Prefill):
            self.prompt = self.prompt or event
        elif isinstance(event, Token):
            return [(None, self._object(self._echo() + event.text, None))]
        elif isinstance(event, Done):
            check_done(event)
            out = [(None, self._object(self._echo(), FINISH.get(event.finish_reason, "stop"),
                                       elastic=elastic_info(event, None, queue_ms)))]
            if self.parsed.include_usage:
                out.append((None, {**self._object("", None), "choices": [], "usage": _usage(self.prompt, event)}))
            return out + [(None, "[DONE]")]
        return []

    def failed(self, error: ApiError) -> list:
        return [(None, error.body()), (None, "[DONE]")]
