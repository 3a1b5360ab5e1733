"""What a streaming reply yields: immutable events holding plain values only (no tensors),
safe to hand to another thread or serialise as JSON.

The events are the reply's one record. Each carries the reply's running totals (`Progress`, as
mlx-lm's GenerationResponse does), so no consumer counts tokens or times anything; the texts of
each phase's Token events, joined, are exactly the texts in `Done`. Each event's `to_dict` is its
one serialisation: the lines of `python -m runtime generate --json` (a contract), the switches a
chat saves, the server's switch object, the tool calls a history keeps.

When tools are offered, the answer's text goes through the tool-call parser: a call's text never
reaches a Token; each call comes as a ToolCall event (or an InvalidToolCall, with the reason) after
the Token of the token that closed it, and Done lists them all (finish_reason TOOL_CALLS when any
valid call was made).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

THINKING, ANSWER = "thinking", "answer"
END_OF_TURN, LENGTH, STOPPED, STOP_STRING, ERROR = "end_of_turn", "length", "stopped", "stop_string", "error"
TOOL_CALLS = "tool_calls"  # the reply ended having made valid tool calls (the caller runs them)
FINISH_REASONS = (END_OF_TURN, TOOL_CALLS, LENGTH, STOPPED, STOP_STRING, ERROR)
# Why a reply switched submodels: thinking ended, the user moved the depth, Auto climbed, a direct request
SWITCH_REASONS = ("answer", "depth", "escalate", "request")
# How a thought ended (Done.thinking_end): the model closed it, its budget did, the user did (Answer now),
# a tool call began inside it; "" when the reply did not think.
ENDED_BY_MODEL, ENDED_BY_BUDGET, ENDED_BY_USER, ENDED_BY_TOOL_CALL = "model", "budget", "user", "tool_call"
THINKING_ENDS = (ENDED_BY_MODEL, ENDED_BY_BUDGET, ENDED_BY_USER, ENDED_BY_TOOL_CALL, "")
MAX_COUNT = 1 << 30  # more tokens than any reply has: a count past it is not one this program wrote


@dataclass(frozen=True)
class Progress:
    """The reply's totals as of one event. Thinking tokens include the forced end-of-thinking ones."""
    thinking_tokens: int = 0
    answer_tokens: int = 0
    # Tokens per submodel, in the order they worked: (("0.5M", 40), ("1.5M", 12))
    thinking_by_submodel: tuple[tuple[str, int], ...] = ()
    answer_by_submodel: tuple[tuple[str, int], ...] = ()
    elapsed_ms: float = 0.0  # request start to this event
    thinking_ms: float = 0.0  # request start to the thought's last sampled token (0: it did not think)
    ttft_ms: float = 0.0  # request start to the first token (0 before it)
    tokens_per_s: float = 0.0  # decode speed after the first token, so far
    # The thought's budget as of this event (Think longer and a depth move change it; None: unbounded,
    # 0: no thinking). Not in to_dict: Done carries the final one as `thinking_budget`.
    thinking_budget: int | None = None
    # The thought's submodels in the order they worked, a submodel again where the thought came back to
    # it: (("0.5M", 5), ("1.0M", 20), ("0.5M", 3)). Not in to_dict (thinking_by_submodel has the totals).
    thinking_path: tuple[tuple[str, int], ...] = ()

    @property
    def tokens(self) -> int:
        return self.thinking_tokens + self.answer_tokens

    def to_dict(self) -> dict:
        return {"thinking_tokens": self.thinking_tokens, "answer_tokens": self.answer_tokens,
                "thinking_by_submodel": dict(self.thinking_by_submodel),
                "answer_by_submodel": dict(self.answer_by_submodel), "elapsed_ms": self.elapsed_ms,
                "thinking_ms": self.thinking_ms, "ttft_ms": self.ttft_ms, "tokens_per_s": self.tokens_per_s}


@dataclass(frozen=True)
class Prefill:
    """A submodel brought its cache up to date with the context before decoding."""
    submodel: str
    prompt_tokens: int  # tokens in the context
    reused_tokens: int  # of those, already in the cache (prefix reuse)
    prefilled_tokens: int
    ms: float
    progress: Progress = field(default_factory=Progress)
    type: str = "prefill"

    def to_dict(self) -> dict:
        return {"type": self.type, "submodel": self.submodel, "prompt_tokens": self.prompt_tokens,
                "reused_tokens": self.reused_tokens, "prefilled_tokens": self.prefilled_tokens, "ms": round(self.ms, 3)}


@dataclass(frozen=True)
class Token:
    text: str  # new text, never half a UTF-8 character ("" for special tokens)
    # None: no new token, only text held back until the reply ended (the decoder's last bytes, or the
    # start of a stop string that never completed); such a Token is not counted and comes only when
    # its text is not empty
    token_id: int | None
    phase: str  # THINKING or ANSWER
    submodel: str
    latency_ms: float  # since the previous token (the first includes the prefill)
    forced: bool = False  # inserted by budget control, not sampled
    progress: Progress = field(default_factory=Progress)
    type: str = "token"

    def to_dict(self) -> dict:
        return {"type": self.type, "phase": self.phase, "submodel": self.submodel, "token_id": self.token_id,
                "text": self.text, "latency_ms": round(self.latency_ms, 3)}


@dataclass(frozen=True)
class Switch:
    """The active submodel changed: the new one re-prefilled the context it had not seen."""
    from_submodel: str
    to_submodel: str
    reprefill_tokens: int
    ms: float
    exact: bool = True  # False for the approximate cache transplant
    reason: str = "answer"  # answer (thinking ended), depth (the user moved it), escalate (Auto), request
    progress: Progress = field(default_factory=Progress)
    type: str = "switch"

    def to_dict(self) -> dict:
        return {"type": self.type, "from": self.from_submodel, "to": self.to_submodel,
                "reprefill_tokens": self.reprefill_tokens, "ms": round(self.ms, 3), "reason": self.reason}

    @classmethod
    def from_dict(cls, data) -> Switch | None:
        """A switch as `to_dict` wrote it, read back from outside (a server's stream, a saved chat) and
        checked; None when it is not one (a missing reason is "answer", as early versions wrote none)."""
        if not isinstance(data, dict):
            return None
        reason = data.get("reason", "answer")
        ok = (isinstance(data.get("from"), str) and isinstance(data.get("to"), str) and reason in SWITCH_REASONS
              and is_count(data.get("reprefill_tokens")) and is_number(data.get("ms")))
        return cls(data["from"], data["to"], data["reprefill_tokens"], data["ms"], reason=reason) if ok else None


@dataclass(frozen=True)
class ToolCall:
    """A tool call the answer made, complete and valid: its block closed, it names an offered tool and
    its arguments have the JSON types the tool's schema declares. Its text is never part of a Token."""
    id: str  # "call_..." (the format carries none: order is the only link to the result)
    name: str
    arguments: dict
    index: int  # its place among this reply's valid calls, from 0
    progress: Progress = field(default_factory=Progress)
    type: str = "tool_call"

    def to_dict(self) -> dict:
        return {"type": self.type, "id": self.id, "name": self.name, "arguments": self.arguments,
                "index": self.index}

    def as_message_call(self) -> dict:
        """The call as an assistant message's `tool_calls` entry (arguments as an object, which the
        template needs; chat_format also accepts OpenAI's JSON string)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": dict(self.arguments)}}


@dataclass(frozen=True)
class InvalidToolCall:
    """A tool call the answer tried that cannot run (malformed, cut off, an unknown tool, arguments of
    the wrong type): reported, never dropped and never shown as text."""
    error: str  # one line: why
    text: str  # the call's raw text
    name: str | None  # what could be read of it (None when not even that)
    arguments: dict | None  # raw text values
    index: int  # its place among this reply's invalid calls, from 0
    progress: Progress = field(default_factory=Progress)
    type: str = "invalid_tool_call"

    def to_dict(self) -> dict:
        return {"type": self.type, "error": self.error, "name": self.name, "arguments": self.arguments,
                "text": self.text, "index": self.index}


@dataclass(frozen=True)
class Done:
    """The reply's end (always its last event): the texts, how it ended, and its final totals."""
    finish_reason: str  # END_OF_TURN, TOOL_CALLS, LENGTH, STOPPED, STOP_STRING or ERROR
    thinking_text: str
    answer_text: str  # without the line breaks the model puts after </think>
    think_submodel: str | None
    answer_submodel: str
    thinking_budget: int | None
    budget_hit: bool = False  # thinking was ended by the budget, not by the model
    # How thinking ended: "model" (it closed its thought), "budget", "user" (Answer now), "tool_call" (a call
    # began inside it), "" (it did not think)
    thinking_end: str = ""
    switches: tuple[Switch, ...] = ()  # every switch of the reply, in order
    error: str | None = None
    progress: Progress = field(default_factory=Progress)
    tool_calls: tuple[ToolCall, ...] = ()  # every ToolCall event of the reply, in order
    invalid_tool_calls: tuple[InvalidToolCall, ...] = ()  # every InvalidToolCall event, in order
    type: str = "done"

    # The totals are the final Progress's, named as they always were.
    thinking_tokens = property(lambda self: self.progress.thinking_tokens)
    answer_tokens = property(lambda self: self.progress.answer_tokens)
    thinking_by_submodel = property(lambda self: self.progress.thinking_by_submodel)
    ttft_ms = property(lambda self: self.progress.ttft_ms)
    tokens_per_s = property(lambda self: self.progress.tokens_per_s)

    @property
    def answer_switch(self) -> Switch | None:
        """The switch to the answering submodel (None when the thinker answered, or nobody thought)."""
        return next((s for s in self.switches if s.reason == "answer"), None)

    @property
    def switch_from(self) -> str | None:
        return self.answer_switch.from_submodel if self.answer_switch else None

    @property
    def switch_to(self) -> str | None:
        return self.answer_switch.to_submodel if self.answer_switch else None

    @property
    def switch_reprefill_tokens(self) -> int:
        return self.answer_switch.reprefill_tokens if self.answer_switch else 0

    def to_dict(self) -> dict:
        out = {"type": self.type, "finish_reason": self.finish_reason, "thinking_tokens": self.thinking_tokens,
               "answer_tokens": self.answer_tokens, "budget_hit": self.budget_hit, "ttft_ms": self.ttft_ms,
               "tokens_per_s": self.tokens_per_s, "thinking_end": self.thinking_end,
               "thinking_by_submodel": dict(self.thinking_by_submodel)}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.invalid_tool_calls:
            out["invalid_tool_calls"] = [c.to_dict() for c in self.invalid_tool_calls]
        if self.error:
            out["error"] = self.error
        return out


Event = Prefill | Token | Switch | ToolCall | InvalidToolCall | Done


def is_count(value) -> bool:
    """A token count as an event writes it: a whole number from 0 to MAX_COUNT (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def is_number(value) -> bool:
    """A time or a rate as an event writes it: a finite number from 0 to a billion (not a bool)."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= 1e9)


def to_dict(event: Event) -> dict:
    return event.to_dict()


# ---------------------------------------------------------------------- the saved record's schema


def _json_type(value) -> type | str:
    """What a field of this value must be when read back from JSON: "number" for counts and times."""
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value)


# The fields a reply's saved record (a chat's history, an exported chat) takes from its events, and the JSON
# type each must have to be read back: the totals (Progress.to_dict) and how it ended (Done.to_dict). Derived
# from the events' own serialisations, so a reader checks the fields the events write, never a list of its own.
RECORD_FIELDS: dict[str, type | str] = {
    key: _json_type(value)
    for key, value in {**Progress().to_dict(), **Done(END_OF_TURN, "", "", None, "", None).to_dict()}.items()
    if key != "type"}
# The text fields of a saved switch (Switch.to_dict): "from", "to", "reason".
SWITCH_TEXT_FIELDS = tuple(key for key, value in Switch("", "", 0, 0.0).to_dict().items()
                           if isinstance(value, str) and key != "type")
