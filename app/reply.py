"""One reply in flight, as far as the runtime's events have come, and what a reply is asked with.

The record joins the events' texts and keeps the last event's totals (every event carries them); it
counts and times nothing itself. `Replies` (app/replies.py) keeps one per request id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from runtime.api import counted

log = logging.getLogger(__name__)
INTERRUPTED = "interrupted"  # a reply the process died during (a crash, a kill, a power cut)


@dataclass
class Reply:
    """A reply in flight, as far as the runtime's events have come: their texts joined, the last event's
    totals (every event carries them), the switches. It counts and times nothing itself."""
    request_id: int
    conversation_id: int
    message_id: int
    controls: object  # runtime.controls.Controls
    level: object  # the runtime's DepthLevel used
    submodel: str  # the submodel working now (the Prefill event's, then each Token's)
    phase: str
    progress: object  # runtime.events.Progress: the last event's
    thinking: list[str] = field(default_factory=list)  # the Token texts, joined when shown or saved
    answer: list[str] = field(default_factory=list)
    switches: list = field(default_factory=list)  # runtime.events.Switch, in order
    rounds: list = field(default_factory=list)  # runtime.tool_loop.ToolRound.to_dict() of the rounds that called tools
    calls: list = field(default_factory=list)  # this round's calls: ToolResult dicts, or {..., "status": "asking"}
    ending_thought: bool = False  # "Answer now" (or the depth Off) was asked: no more steering
    begun: bool = False  # the engine took it up (its Prefill event): until then it waits, nothing runs for it
    waits_for: str = ""  # what ran ahead of it when it was sent ("": nothing, it starts at once)
    depth_moves: list = field(default_factory=list)  # the depths the slider moved its thought to, in order
    dirty: bool = False
    stopping: bool = False
    removed: bool = False  # its message was deleted (the context refused it); SQLite may give its id to the next one
    prompt_tokens: int | None = None  # what the model read (the worker's fit, app/context_fit.py)
    dropped: int = 0  # earlier messages left out so the chat fits the context

    def meta(self) -> dict:
        """What is known so far; saved with the partial reply, so an interrupted one still says what it was.
        Counts, timings and switches are the events' own serialisations (runtime/events.py)."""
        answer_switch = next((s for s in self.switches if s.reason == "answer"), None)
        context = {"prompt_tokens": self.prompt_tokens} if self.prompt_tokens is not None else {}
        if self.dropped:
            context["context_dropped"] = self.dropped
        p = self.progress
        budget = p.thinking_budget if p.elapsed_ms else self.level.budget  # the runtime's, once it has said
        path = {"thinking_path": [list(run) for run in p.thinking_path]} if len(p.thinking_path) > 1 else {}
        moved = {"depth_path": [self.level.name, *self.depth_moves]} if self.depth_moves else {}
        return {**context, "depth": self.level.name, **moved, "think_submodel": self.level.think,
                "answer_submodel": self.level.answer,
                "thinking_budget": budget if self.level.think else 0, **p.to_dict(), **path,
                "switch": answer_switch.to_dict() if answer_switch else {},
                "switches": [s.to_dict() for s in self.switches],
                **({"tool_rounds": self.shown_rounds()} if self.rounds or self.calls else {})}

    def shown_rounds(self) -> list[dict]:
        """The rounds as shown: those done, then this one's calls so far (its texts are the live ones)."""
        live = [{"thinking": "", "answer": "", "calls": list(self.calls)}] if self.calls else []
        return [*self.rounds, *live]

    def texts(self) -> tuple[str, str]:
        """(answer, thinking) so far."""
        return "".join(self.answer), "".join(self.thinking)


@dataclass(frozen=True)
class TokenBatch:
    """The tokens of the reply shown that arrived in one frame, for the live strip: each one's latency and
    submodel in order, and the reply's totals as of the last (the runtime's Progress)."""
    points: tuple[tuple[float, str], ...]  # (latency ms, submodel) per token
    submodel: str  # the last token's
    phase: str
    ttft_ms: float
    tokens_per_s: float


def sampling_for(defaults, chat_settings: dict):
    """The one conversion: the settings' defaults, overridden by this chat's, as the runtime's dataclass."""
    from runtime.api import SamplingSettings

    values = {**vars(defaults), **(chat_settings.get("sampling") or {})}
    return SamplingSettings(float(values["temperature"]), float(values["top_p"]), int(values["top_k"]),
                            float(values["min_p"])).check()


def mark_interrupted(history) -> int:
    """Replies left incomplete by a process that died mid-reply: saved as interrupted, with what they had.
    Adding a reply's message makes its chat the most recently updated one, and at most two replies are
    ever open (one stopping, one streaming), so only the newest chats need looking at, not all history."""
    count = 0
    for conv in history.conversations()[:5]:
        for m in history.all_messages(conv.id, full=False):  # every branch: a version may have been streaming
            if m.role == "assistant" and not m.complete:
                history.finish_message(m.id, {**m.meta, "finish_reason": INTERRUPTED})
                count += 1
    if count:
        log.info("marked %s interrupted by the last session's end", counted(count, "reply", "replies"))
    return count
