"""One reply in flight, as far as the runtime's events have come, and what a reply is asked with.

The record joins the events' texts and keeps the last event's totals (every event carries them); it
counts and times nothing itself. `Replies` (app/replies.py) keeps one per request id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from runtime.api import ERROR, LENGTH, STOP_STRING, counted

log = logging.getLogger(__name__)
INTERRUPTED = "interrupted"  # a reply the process died during (a crash, a kill, a power cut)
# How a reply's end reads in the window: the API's finish reasons are words for programs ("length").
FINISH_WORDS = {LENGTH: "cut at the token limit", STOP_STRING: "ended at a stop string", ERROR: "failed"}


def finish_words(reason: str) -> str:
    """ "cut at the token limit" for "length"; the other reasons as they read ("stopped", "interrupted")."""
    return FINISH_WORDS.get(reason, reason.replace("_", " "))


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
    # Continue: the reply cut off by its token limit that this one goes on from (its texts and its saved
    # meta); what is shown and saved is the two joined, as one reply
    before: dict = field(default_factory=dict)
    prior_answer: str = ""
    prior_thinking: str = ""

    def meta(self) -> dict:
        """What is known so far; saved with the partial reply, so an interrupted one still says what it was."""
        return self.joined(self.own_meta())

    def joined(self, meta: dict) -> dict:
        """`meta` of this run, joined to the cut reply's when this one continues it."""
        return joined_meta(self.before, meta) if self.before else meta

    def own_meta(self) -> dict:
        """What this run knows so far. Counts, timings and switches are the events' own serialisations
        (runtime/events.py)."""
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
        """(answer, thinking) so far (a continued reply's included)."""
        return self.prior_answer + "".join(self.answer), self.prior_thinking + "".join(self.thinking)


def continue_refusal(message, messages: list, engine, streaming: bool) -> str:
    """Why the reply `message` (in its chat's `messages`) cannot be continued now ("" when it can)."""
    from runtime.api import RemoteEngine

    if message is None or message.role != "assistant" or not message.complete:
        return "it is not a finished reply"
    if message.meta.get("finish_reason") != "length":
        return "only a reply cut off by its token limit goes on"
    if next((m.id for m in reversed(messages) if m.role == "assistant"), None) != message.id:
        return "only the chat's last reply goes on"
    if streaming:
        return "a reply is streaming in this chat; wait for it or stop it"
    if message.meta.get("tool_rounds"):
        return "it called tools; Regenerate it with a larger Max reply tokens (Settings → Defaults) instead"
    if engine is None:
        return "no model is loaded"
    if isinstance(engine, RemoteEngine):  # the server's engine decides (runtime/remote/continuation.py)
        return engine.continue_refusal(cut_part(message))
    return ""


def cut_part(message):
    """The runtime's Continuation of the cut reply `message`: its texts, whether its thought ended, and the
    thought's tokens as its reply counted them."""
    from runtime.api import Continuation

    meta = message.meta
    thought_ended = bool(message.content or meta.get("thinking_end") or not message.thinking)
    counted = meta.get("thinking_tokens")
    return Continuation(message.thinking, message.content, thinking_done=thought_ended,
                        thinking_tokens=counted if isinstance(counted, int) and counted >= 0 else None)


def continuation(level, message):
    """The depth level the cut reply ran at (its submodels and budget, from its meta, on the chosen
    level's other values) and the runtime's Continuation of its texts."""
    from dataclasses import replace

    meta = message.meta
    ran = replace(level, name=meta.get("depth") or level.name, think=meta.get("think_submodel"),
                  answer=meta.get("answer_submodel") or level.answer,
                  budget=level.budget if meta.get("thinking_budget") is None else meta["thinking_budget"],
                  escalation=None)
    return ran, cut_part(message)


SUMMED = ("thinking_tokens", "answer_tokens", "elapsed_ms", "thinking_ms")  # a continued reply's counts add up
SUMMED_BY = ("thinking_by_submodel", "answer_by_submodel")


def joined_meta(before: dict, now: dict) -> dict:
    """The meta of a reply cut off by its token limit (`before`) and of its continuation (`now`), as one
    reply's: counts and times add up, the thought's path and the switches go on, the depth, who thought
    and the first token's time stay the first part's, and how it ended is the continuation's."""
    out = {**before, **now}
    for key in SUMMED:
        out[key] = round((before.get(key) or 0) + (now.get(key) or 0), 3)
    for key in SUMMED_BY:
        by = dict(before.get(key) or {})
        for name, n in (now.get(key) or {}).items():
            by[name] = by.get(name, 0) + n
        out[key] = by
    path = [list(run) for run in before.get("thinking_path") or ([[before["think_submodel"],
                                                                  before.get("thinking_tokens", 0)]]
                                                                if before.get("thinking_tokens") else [])]
    for name, n in now.get("thinking_path") or ([[now.get("think_submodel"), now["thinking_tokens"]]]
                                                if now.get("thinking_tokens") else []):
        if path and path[-1][0] == name:
            path[-1][1] += n
        else:
            path.append([name, n])
    if len(path) > 1:
        out["thinking_path"] = path
    for key in ("depth", "depth_path", "think_submodel", "thinking_budget", "ttft_ms"):
        if key in before:
            out[key] = before[key]
    out["thinking_end"] = before.get("thinking_end") or now.get("thinking_end", "")
    out["budget_hit"] = bool(before.get("budget_hit") or now.get("budget_hit"))
    out["switches"] = [*(before.get("switches") or []), *(now.get("switches") or [])]
    out["switch"] = before.get("switch") or now.get("switch") or {}
    out["continued"] = before.get("continued", 0) + 1  # how many times Continue went on with it
    speed = joined_speed(before, now)
    if speed is not None:
        out["tokens_per_s"] = speed
    return out


def joined_speed(before: dict, now: dict) -> float | None:
    """The decode speed of both parts as one: their tokens after each part's first over their decode
    seconds (the speed of the continuation alone was shown for the whole reply). None when neither part
    decoded a second token."""
    tokens = seconds = 0.0
    for part in (before, now):
        speed = part.get("tokens_per_s") or 0
        decoded = max((part.get("thinking_tokens") or 0) + (part.get("answer_tokens") or 0) - 1, 0)
        if speed > 0 and decoded:
            tokens, seconds = tokens + decoded, seconds + decoded / speed
    return round(tokens / seconds, 3) if seconds else None


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
