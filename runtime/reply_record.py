"""A reply's one record and its thinking budget, kept the same way by both producers of a reply's
events: `runtime/generate.py` on this PC and `runtime/remote/reply.py` for a server's model.

The record holds what every event reports (the running totals, `ReplyTally`) and what `Done` says
(the texts, the switches, how thinking ended, the tool calls), so `Done` is built in one place,
`ReplyRecord.done`, and the texts in it are exactly the texts of the Token events it made.

The budget rule follows Nemotron's: once the thinking budget is spent, thinking goes on to the end
of a line (at most `GRACE_TOKENS` more, forced tokens included), then `</think>` is forced; a reply
always keeps `reserve_for_answer` tokens for its answer, and one too short to think and still answer
does not think.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from .events import (
    ANSWER,
    END_OF_TURN,
    ERROR,
    THINKING,
    TOOL_CALLS,
    Done,
    InvalidToolCall,
    Progress,
    Switch,
    Token,
    ToolCall,
)

GRACE_TOKENS = 16  # after the budget, how long to wait for a line to end before forcing </think>
END_TOKENS = 2  # the forced end of thinking: a line break and </think>


def reserve_for_answer(max_new_tokens: int) -> int:
    """Tokens thinking may never use, so an answer always has room."""
    return max(1, min(256, max_new_tokens // 4))


@dataclass(frozen=True)
class ThinkingBudget:
    """When a thought must end. `tokens` is the budget as asked (None: unbounded, 0: no thinking);
    `cap` the most thinking a reply of its length may take, its forced end included."""
    tokens: int | None
    cap: int

    @classmethod
    def for_reply(cls, tokens: int | None, max_new_tokens: int) -> ThinkingBudget:
        return cls(tokens, max_new_tokens - reserve_for_answer(max_new_tokens) - END_TOKENS)

    @property
    def fits(self) -> bool:
        """Whether the reply has room to think at all and still answer."""
        return self.cap >= 1

    @property
    def soft(self) -> int:
        """Thinking ends at the first line end after this many tokens (all thinking so far counts)..."""
        return min(self.tokens if self.tokens is not None else self.cap, self.cap)

    @property
    def hard(self) -> int:
        """...and never runs past this many, budget plus grace, nor into the answer's reserve."""
        return max(self.soft, min(self.soft + GRACE_TOKENS - END_TOKENS, self.cap))

    def ends(self, thought: int, text: str) -> bool:
        """Whether the thought of `thought` tokens, whose last token's text is `text`, ends here."""
        return thought >= self.soft and ("\n" in text or thought >= self.hard)

    def to(self, tokens: int | None) -> ThinkingBudget:
        """The budget the user moved the thought to (a depth stop's)."""
        return replace(self, tokens=tokens)

    def longer(self, more: int, thought: int) -> ThinkingBudget:
        """Think longer: `more` tokens past the budget, or past what was thought when that is beyond it."""
        return self if self.tokens is None else self.to(max(self.tokens, thought) + more)

    @classmethod
    def for_continued_thought(cls, tokens: int | None, thought: int, max_new_tokens: int) -> tuple[ThinkingBudget, int]:
        """(the budget, the reply's token limit) of a reply that thinks on from a thought of `thought` tokens
        cut by its token limit. The thought may use what is left of its budget (`tokens`; None: as much as
        a fresh reply of `max_new_tokens` may think), then the answer has `max_new_tokens` of its own: a
        small limit, which cut the thought, must not force it closed again a few tokens on."""
        if tokens is None:
            left = None
            cap = max(1, cls.for_reply(None, max_new_tokens).cap)
        else:
            left = max(0, tokens - thought)
            cap = left + GRACE_TOKENS
        return cls(left, cap), cap + END_TOKENS + max_new_tokens


@dataclass(frozen=True)
class Continuation:
    """The part of a reply already made, which a request continues (a reply cut off by its token limit):
    its texts as the Done event gave them, and whether its thinking had ended. The new reply's events
    and Done carry what it adds, never these texts again; the caller joins the two."""
    thinking_text: str = ""
    answer_text: str = ""
    thinking_done: bool = True  # False: cut mid-thought, so the new reply thinks on, then answers
    # The thought's tokens so far, as its reply counted them (a remote one: no tokenizer here); None: the
    # engine counts them from the text
    thinking_tokens: int | None = None

    @property
    def thinks_on(self) -> bool:
        return bool(self.thinking_text) and not self.thinking_done


class ReplyTally:
    """A reply's running totals: tokens per phase, per submodel in the order they worked, and the times
    Progress reports (perf_counter() seconds, None before they happen)."""

    def __init__(self):
        self.counts = {THINKING: 0, ANSWER: 0}
        self.by_submodel: dict[str, dict[str, int]] = {THINKING: {}, ANSWER: {}}  # phase -> submodel -> tokens
        self.started = self.first_at = self.last_at = self.thought_at = None
        self.thinking_path: list[list] = []  # [submodel, tokens] runs, in order

    @property
    def tokens(self) -> int:
        return self.counts[THINKING] + self.counts[ANSWER]

    def count(self, phase: str, submodel: str) -> None:
        """One more token of `phase`, produced by `submodel`."""
        self.counts[phase] += 1
        by = self.by_submodel[phase]
        by[submodel] = by.get(submodel, 0) + 1
        if phase == THINKING:
            if self.thinking_path and self.thinking_path[-1][0] == submodel:
                self.thinking_path[-1][1] += 1
            else:
                self.thinking_path.append([submodel, 1])

    def progress(self, thinking_budget: int | None = None) -> Progress:
        if self.started is None:  # the reply never began (stopped while it waited its turn)
            return Progress(thinking_budget=thinking_budget)
        now, started, first = time.perf_counter(), self.started, self.first_at
        decode_s = self.last_at - first if first is not None else 0.0
        return Progress(
            self.counts[THINKING], self.counts[ANSWER], tuple(self.by_submodel[THINKING].items()),
            tuple(self.by_submodel[ANSWER].items()), elapsed_ms=_ms(now - started),
            thinking_ms=_ms(self.thought_at - started) if self.thought_at else 0.0,
            ttft_ms=_ms(first - started) if first else 0.0,
            tokens_per_s=round((self.tokens - 1) / decode_s, 3) if decode_s > 0 else 0.0,
            thinking_budget=thinking_budget, thinking_path=tuple((name, n) for name, n in self.thinking_path))


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class ReplyRecord:
    """What a reply's events say, kept while it streams: the phase and the submodel at work, the totals,
    each phase's text, the switches, the calls. A producer makes every Token and Switch through it
    (`token`, `switch`) and yields the result at once, so Done's texts are the texts yielded."""

    def __init__(self, think_submodel: str | None, answer_submodel: str, budget: ThinkingBudget,
                 answering: bool = False):
        """`answering`: the answer's leading line breaks are its own (a raw prompt's continuation)."""
        self.think_sub, self.answer_sub, self.budget = think_submodel, answer_submodel, budget
        self.phase = THINKING if think_submodel else ANSWER
        self.current = think_submodel or answer_submodel
        self.tally = ReplyTally()
        self.texts: dict[str, list[str]] = {THINKING: [], ANSWER: []}  # exactly the texts of the Tokens made
        self.switches: list[Switch] = []
        self.calls: list[ToolCall] = []
        self.invalid_calls: list[InvalidToolCall] = []
        self.answering = answering  # the answer's first text came (the line breaks before it are dropped)
        self.budget_hit = False
        # How thinking ended: "model", "budget", "user", "tool_call", or "" (it did not think)
        self.thinking_end = ""

    @classmethod
    def of(cls, request) -> ReplyRecord:
        """The record of a ChatRequest's reply as asked (for one that never began)."""
        budget = ThinkingBudget.for_reply(request.thinking_budget, request.max_new_tokens)
        return cls(request.think_submodel, request.answer_submodel, budget)

    # ------------------------------------------------------------------ as the reply goes

    def start(self) -> None:
        self.tally.started = time.perf_counter()

    def arrived(self) -> float:
        """A token the model made arrived now; returns its latency since the one before (the first's
        since the start, prefill included). While thinking, it is the thought's latest so far."""
        t = self.tally
        now = time.perf_counter()
        latency = (now - (t.last_at or t.started)) * 1000
        t.first_at, t.last_at = t.first_at or now, now
        if self.phase == THINKING:
            t.thought_at = now
        return latency

    def count(self) -> None:
        """One more token of the current phase, made by the current submodel."""
        self.tally.count(self.phase, self.current)

    def token(self, text: str, token_id: int | None, latency: float = 0.0, forced: bool = False,
              logprob=None) -> Token:
        """The Token event for `text`, recorded as part of its phase's text: call it only to yield its
        result at once, so the texts in Done are always exactly the texts yielded. `logprob`: the
        sampled token's (logprobs.TokenLogprob), when the request asked for them."""
        if self.phase == ANSWER and not self.answering:  # the line break after </think>: dropped once, here
            text = text.lstrip("\n")
            self.answering = bool(text)
        self.texts[self.phase].append(text)
        return Token(text, token_id, self.phase, self.current, latency, forced, self.progress(), logprob)

    def switch(self, target: str, reprefill_tokens: int, ms: float, exact: bool = True,
               reason: str = "answer") -> Switch:
        """`target` takes over, having caught up on `reprefill_tokens` of context in `ms`."""
        event = Switch(self.current, target, reprefill_tokens, ms, exact, reason, self.progress())
        self.switches.append(event)
        self.current = target
        return event

    def call(self, event: ToolCall | InvalidToolCall) -> ToolCall | InvalidToolCall:
        (self.calls if isinstance(event, ToolCall) else self.invalid_calls).append(event)
        return event

    def answer(self) -> None:
        """Thinking is over: what comes next is the answer."""
        self.phase = ANSWER

    def think_no_more(self) -> None:
        """The reply will not think after all (too short to think and still answer)."""
        self.think_sub, self.phase, self.current = None, ANSWER, self.answer_sub

    @property
    def thought(self) -> str:
        return "".join(self.texts[THINKING])

    def progress(self) -> Progress:
        return self.tally.progress(self.budget.tokens if self.think_sub else 0)

    # ------------------------------------------------------------------ the end

    def done(self, finish: str | None, error: str | None = None) -> Done:
        """The reply's last event: a reply that made valid calls and ended its turn ended for them."""
        finish = finish or ERROR
        if finish == END_OF_TURN and self.calls:
            finish = TOOL_CALLS
        return Done(
            finish_reason=finish, thinking_text=self.thought, answer_text="".join(self.texts[ANSWER]),
            think_submodel=self.think_sub, answer_submodel=self.answer_sub,
            thinking_budget=self.budget.tokens if self.think_sub else 0, budget_hit=self.budget_hit,
            thinking_end=self.thinking_end, switches=tuple(self.switches), error=error, progress=self.progress(),
            tool_calls=tuple(self.calls), invalid_tool_calls=tuple(self.invalid_calls))
