"""What a streaming reply yields: immutable events holding plain values only (no tensors),
safe to hand to another thread or serialise as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass

THINKING, ANSWER = "thinking", "answer"
END_OF_TURN, LENGTH, STOPPED, STOP_STRING, ERROR = "end_of_turn", "length", "stopped", "stop_string", "error"


@dataclass(frozen=True)
class Prefill:
    """A submodel brought its cache up to date with the context before decoding."""
    submodel: str
    prompt_tokens: int  # tokens in the context
    reused_tokens: int  # of those, already in the cache (prefix reuse)
    prefilled_tokens: int
    ms: float
    type: str = "prefill"


@dataclass(frozen=True)
class Token:
    text: str  # new text, never half a UTF-8 character ("" for special tokens)
    token_id: int
    phase: str  # THINKING or ANSWER
    submodel: str
    latency_ms: float  # since the previous token (the first includes the prefill)
    forced: bool = False  # inserted by budget control, not sampled
    type: str = "token"


@dataclass(frozen=True)
class Switch:
    """The active submodel changed: the new one re-prefilled the context it had not seen."""
    from_submodel: str
    to_submodel: str
    reprefill_tokens: int
    ms: float
    exact: bool = True  # False for the approximate cache transplant
    reason: str = "answer"  # answer (thinking ended), depth (the user moved it), escalate (Auto), request
    type: str = "switch"


@dataclass(frozen=True)
class Done:
    finish_reason: str  # END_OF_TURN, LENGTH, STOPPED, STOP_STRING or ERROR
    thinking_tokens: int  # tokens of the thinking phase, forced end-of-thinking tokens included
    answer_tokens: int
    budget_hit: bool  # thinking was ended by the budget, not by the model
    ttft_ms: float  # request start to first token
    tokens_per_s: float  # decode speed after the first token
    thinking_text: str
    answer_text: str  # without the line break the model puts after </think>
    think_submodel: str | None
    answer_submodel: str
    thinking_budget: int | None
    switch_from: str | None = None
    switch_to: str | None = None
    switch_reprefill_tokens: int = 0
    switch_ms: float = 0.0
    error: str | None = None
    # How thinking ended: "model" (it closed its thought), "budget", "user" (Answer now), "" (it did not think)
    thinking_end: str = ""
    # Thinking tokens per submodel, in the order they thought: (("0.5M", 40), ("1.5M", 12))
    thinking_by_submodel: tuple[tuple[str, int], ...] = ()
    type: str = "done"


Event = Prefill | Token | Switch | Done


def to_dict(event: Event) -> dict:
    return asdict(event)
