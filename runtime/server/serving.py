"""What the four reply routes share, as vLLM's entrypoints/openai/serving_engine.py holds it for its
routes: the model being served, the errors every route answers with, and the end of a reply (a
failed one as an error; the `elastic` object that says what only this engine can). Each route's own
protocol is its module (openai_api.py chat completions, completions_api.py, responses_api.py,
anthropic_api.py); the request fields they share are request_fields.py's. No HTTP here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..depth import DepthLevel, table_default_level
from ..events import (
    ANSWER,
    END_OF_TURN,
    ERROR,
    LENGTH,
    STOP_STRING,
    STOPPED,
    THINKING,
    TOOL_CALLS,
    Done,
    Prefill,
    Token,
)

FINISH = {END_OF_TURN: "stop", STOP_STRING: "stop", LENGTH: "length", TOOL_CALLS: "tool_calls"}  # OpenAI's names
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


def served_model_id(engine) -> str:
    """The id clients name the engine's model by: a local checkpoint's folder name, as the app shows it,
    or the id a remote engine's server gives."""
    folder = getattr(engine.model, "folder", None)
    return Path(folder).name if folder else engine.model.id


@dataclass(frozen=True)
class ServedModel:
    """What the protocol needs to know about the loaded engine (computed once per engine; no I/O)."""
    id: str  # the checkpoint's id: its folder's name, as the app shows it
    submodels: tuple[str, ...]  # in memory, fewest active parameters first
    stops: tuple[DepthLevel, ...]
    max_context: int
    default: str = field(default_factory=table_default_level)  # a request without an effort (depth.default_level)
    created: int = field(default_factory=lambda: int(time.time()))
    thinking_ceiling: int = 0  # the depth levels' budget unit, so a remote client builds the same levels

    @classmethod
    def from_engine(cls, engine) -> "ServedModel":
        """A local engine's checkpoint by its folder's name; a remote one (the app serving a model it
        reaches over the network: the routes relay it) by the id its server gives."""
        return cls(served_model_id(engine), tuple(engine.submodels_by_size()),
                   tuple(engine.depth_levels()), engine.max_context, engine.default_depth(),
                   thinking_ceiling=engine.thinking_ceiling)

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
                 {"submodels": list(self.submodels), "depths": [s.name for s in self.stops if s.available],
                  "thinking_ceiling": self.thinking_ceiling})
        return {"id": model_id, "object": "model", "created": self.created, "owned_by": "elastic-chat",
                "max_model_len": self.max_context,  # vLLM's name for the context length
                "elastic": {**extra, "max_context": self.max_context}}


def check_done(done: Done) -> None:
    if done.finish_reason == ERROR:
        raise ApiError(500, f"the reply failed: {done.error}", None, "generation_failed")
    if done.finish_reason == STOPPED:  # not by its client (a client that hung up reads nothing more)
        raise ApiError(503, "the reply was stopped before it finished: the model is being replaced or "
                            "unloaded; try again shortly", None, "reply_stopped")


def elastic_info(done: Done, depth: str | None, queue_ms: float) -> dict:
    """What only this server can say: who thought and answered, the switch's cost, the timings."""
    switch = None
    if done.answer_switch:  # the event's one serialisation, less the keys this object never had
        switch = {k: v for k, v in done.answer_switch.to_dict().items() if k in SWITCH_KEYS}
    out = {"depth": depth, "think_submodel": done.think_submodel, "answer_submodel": done.answer_submodel,
           "thinking_budget": done.thinking_budget, "budget_hit": done.budget_hit, "switch": switch,
           "finish_reason": done.finish_reason, "thinking_end": done.thinking_end,  # the engine's own words
           "ttft_ms": done.ttft_ms, "tokens_per_s": done.tokens_per_s, "queue_ms": round(queue_ms, 3)}
    if done.invalid_tool_calls:  # calls the model tried that could not run: reported, never dropped
        out["invalid_tool_calls"] = invalid_calls(done)
    return out


def invalid_calls(done: Done) -> list[dict]:
    """The calls the model tried that could not run (the `elastic` object's `invalid_tool_calls`)."""
    return [{"error": c.error, "name": c.name, "text": c.text} for c in done.invalid_tool_calls]


class AnswerLogprobs:
    """The log-probabilities of a reply's answer tokens, as its Token events bring them
    (runtime/logprobs.py), for the routes that return them whole."""

    def __init__(self):
        self.entries = []

    def add(self, event) -> list:
        """`event`'s log-probability, kept and returned as a list ([] for any other event)."""
        if isinstance(event, Token) and event.phase == ANSWER and event.logprob is not None:
            self.entries.append(event.logprob)
            return [event.logprob]
        return []


class BlockStream:
    """A reply streamed as blocks, as Anthropic's Messages and OpenAI's Responses stream it: the thought
    in a block of its own, then the answer's text in one that opens with its first text that is not
    blank (a blank answer still gets one), then the tool calls. A route names its two kinds of block and
    writes its own events (`_started`, `_begin`, `_delta`, `_end`, `_call`, `_finished`)."""
    THOUGHT, TEXT = "thinking", "text"  # the route's names for the two kinds of block

    def __init__(self):
        self.prompt: Prefill | None = None
        self.blank = ""  # answer text before the text block opens: blank so far (line breaks around calls)

    def _open_kind(self) -> str | None:
        """The kind of block being streamed (None: none is open)."""
        raise NotImplementedError

    def on_event(self, event, queue_ms: float) -> list:
        out = []
        if isinstance(event, Prefill):
            if self.prompt is None:
                self.prompt = event
                out += self._started()
        elif isinstance(event, Token) and event.phase == THINKING:
            if self._open_kind() is None:
                out += self._begin(self.THOUGHT)
            out += self._delta(event.text)
        elif isinstance(event, Token):
            if self._open_kind() == self.TEXT:
                out += self._delta(event.text)
            else:  # the text block opens with its first text that is not blank (whole(): the same rule)
                self.blank += event.text
                if self.blank.strip():
                    out += self._end() + self._begin(self.TEXT) + self._delta(self.blank)
                    self.blank = ""
        elif isinstance(event, Done):
            check_done(event)
            if not event.tool_calls and self._open_kind() != self.TEXT:  # a blank answer still has its block
                out += self._end() + self._begin(self.TEXT) + self._delta(self.blank)
            out += self._end()
            for call in event.tool_calls:  # after the text, as whole() orders them
                out += self._call(call)
            out += self._finished(event, queue_ms)
        return out
