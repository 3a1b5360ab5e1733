"""The history's rows as the app's values (no Qt): a message, a conversation, a reply's details, one
chat's messages as a tree of versions. SQLite keeps any type in any column, so a hand-edited or damaged
row can hold a number where text belongs, bytes that are not UTF-8, or NULL; each is turned into what the
app expects, and a chat whose stored settings or a reply whose details hold wrong types falls back to
defaults for that chat or reply alone (`app.state.settings.check_sampling` checks sampling).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from runtime.api import RECORD_FIELDS, SWITCH_TEXT_FIELDS

from .attachments import as_context, valid_attachments
from .settings import check_sampling

# A reply's details (what produced it) and the type each must have to be shown: the fields its events
# write (runtime/events.py RECORD_FIELDS: counts, timings, how it ended), then what the app adds to them.
META_TYPES = {**RECORD_FIELDS,
              "think_submodel": (str, type(None)), "answer_submodel": str, "depth": str, "thinking_budget": "number",
              # the switch to the answering submodel, and every switch of the reply: Switch.to_dict()
              "switch": dict, "switches": list,
              # [["0.5M", 5], ["1.0M", 20], ["0.5M", 3]]: the thought's stretches in order (when it moved)
              "thinking_path": list,
              # ["Max", "Quick"]: the depth the reply began at, then each the slider moved its thought to
              "depth_path": list,
              # a user message the context refused (why): kept to take back or to send leaving turns out,
              # saved incomplete so no later reply reads it as a turn that happened
              "not_sent": str,
              # the prompt's tokens as the model read it, and the earliest messages left out to fit the context
              "prompt_tokens": "number", "context_dropped": "number",
              # how many times Continue went on with a reply cut by its token limit (app/reply.py)
              "continued": "number",
              # a user message's files as context (app/state/attachments.py): [{"name", "text", "kind"}]
              "attachments": list}
MAX_PATH = 1024  # a thought's stretches on one submodel, at most (a longer one is not a record this app wrote)
MAX_SHOWN_CHARS = 200_000  # of one message's text read to show; the rest stays in the file (export_text has all)


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str  # "user", "assistant" or "system"
    content: str
    thinking: str = ""
    meta: dict = field(default_factory=dict)  # what produced it: submodels, budget, counts, timings
    complete: bool = True
    parent_id: int = 0  # the message it follows (0: it starts the chat)
    versions: tuple[int, ...] = ()  # it and its siblings (edits, regenerations), oldest first; () when alone
    created: float = 0.0  # epoch seconds: when it was sent (a reply: when it began); 0 when not known
    finished: float | None = None  # a reply: when it ended; None while it streams, or when not known

    @property
    def time(self) -> float | None:
        """The time the chat shows beside it: a message's sending, a reply's end (None: none to show)."""
        when = self.finished if self.role == "assistant" else self.created
        return when or (self.created if self.role == "assistant" and self.complete else None) or None

    @property
    def said_nothing(self) -> bool:
        """A reply that ended (stopped, interrupted, failed) before its first token: no text, no thought, no
        tool round. Nothing was exchanged, so no later reply is asked with it (see Conversations.chat_messages)."""
        return (self.role == "assistant" and not self.content.strip() and not self.thinking.strip()
                and not self.meta.get("tool_rounds"))

    def as_chat(self) -> dict:
        """The message as the model is sent it (a user message's attached files included)."""
        out = {"role": self.role, "content": as_context(self.content, self.meta.get("attachments"))
               if self.role == "user" else self.content}
        if self.role == "assistant" and self.thinking:
            out["reasoning_content"] = self.thinking
        return out


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    updated: float
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)  # depth and sampling for this conversation
    title_by: str | None = None  # who named it: None (nobody yet), "auto", "user", "import", "kept" (schema 4)
    match: str = ""  # in a search's results: the words around the first place the chat matches


def cut_shown(text: str, length) -> str:
    """`text` (the first MAX_SHOWN_CHARS of a message) with a line saying what is not shown."""
    if not isinstance(length, int) or length <= MAX_SHOWN_CHARS:  # (a BLOB's length counts bytes, not characters)
        return text
    return (f"{text}\n\n[… {length - MAX_SHOWN_CHARS:,} more characters are not shown here. "
            "Copy conversation (in the Chat menu) copies the whole message.]")


def as_text(value, default: str = "") -> str:
    if value is None:
        return default
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _number(value, default: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _flag(value) -> bool:
    return bool(_number(value, 1.0))


def _json_object(value) -> dict | None:
    try:
        data = json.loads(as_text(value, "{}") or "{}")
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def chat_settings(value) -> tuple[dict, bool]:
    """A chat's settings with only valid values kept (the app's defaults fill the rest); ok=False when
    something had to be dropped."""
    data = _json_object(value)
    if data is None:
        return {}, False
    sampling = data.get("sampling")
    if sampling is None:
        return data, True
    if not isinstance(sampling, dict):
        return {k: v for k, v in data.items() if k != "sampling"}, False
    clean, problems = check_sampling(sampling)
    return {**data, "sampling": clean}, not problems and len(clean) == len(sampling)


def reply_meta(value) -> tuple[dict, bool]:
    data = _json_object(value)
    if data is None:
        return {}, False
    _migrate_meta(data)
    clean = {}
    for key, kind in META_TYPES.items():
        if key not in data:
            continue
        v = data[key]
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)) if kind == "number" \
            else isinstance(v, kind)
        if ok and key == "switch":
            ok = _is_switch(v)
        elif ok and key == "switches":
            ok = all(isinstance(x, dict) and _is_switch(x) for x in v)
        elif ok and key == "attachments":
            ok = valid_attachments(v)
        elif ok and key == "depth_path":
            ok = len(v) <= MAX_PATH and all(isinstance(x, str) and len(x) <= 100 for x in v)
        elif ok and key == "thinking_path":
            ok = len(v) <= MAX_PATH and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
                                            and _is_count(x[1]) for x in v)
        elif ok and key in ("thinking_by_submodel", "answer_by_submodel"):
            ok = all(isinstance(name, str) and _is_count(n) for name, n in v.items())
        if ok:
            clean[key] = v
    clean.update({k: v for k, v in data.items() if k not in META_TYPES})
    return clean, len(clean) == len(data)


def _migrate_meta(data: dict) -> None:
    """Reads what earlier versions wrote as this one writes it: `total_ms` is `elapsed_ms`, a switch's
    `tokens` its `reprefill_tokens`, and tokens per submodel a list of [name, count] pairs."""
    if "total_ms" in data and "elapsed_ms" not in data:
        data["elapsed_ms"] = data.pop("total_ms")
    switches = data.get("switches") if isinstance(data.get("switches"), list) else []
    for switch in [data.get("switch"), *switches]:
        if isinstance(switch, dict) and "tokens" in switch and "reprefill_tokens" not in switch:
            switch["reprefill_tokens"] = switch.pop("tokens")
    pairs = data.get("thinking_by_submodel")
    if isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        by = dict(pairs)
        if len(by) == len(pairs):  # (names repeated: not a record this app wrote; dropped as damaged)
            data["thinking_by_submodel"] = by


def _is_switch(v: dict) -> bool:
    return all(isinstance(v.get(k, ""), str) for k in SWITCH_TEXT_FIELDS)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class MessageTree:
    """One chat's messages as a tree, read whatever the rows hold: a parent that is NULL (a chat from
    before versions), not a number, or not in the chat (lost with a damaged page, salvaged without it)
    is the message before it, so a chat keeps its line; a cycle is cut where it closes."""

    def __init__(self, rows, leaf):
        self.rows = {r[0]: r for r in rows}
        self.ids = [r[0] for r in rows]
        before = {mid: (self.ids[i - 1] if i else 0) for i, mid in enumerate(self.ids)}
        self.parents = {}
        for mid, r in self.rows.items():
            p = r[7]
            known = isinstance(p, int) and (p == 0 or p in self.rows)
            self.parents[mid] = p if known else before[mid]
        self.children: dict[int, list[int]] = {}
        for mid in self.ids:
            self.children.setdefault(self.parents[mid], []).append(mid)
        valid = isinstance(leaf, int) and (leaf == 0 or leaf in self.rows)
        self.leaf = leaf if valid else (self.ids[-1] if self.ids else 0)

    def parent(self, mid: int) -> int:
        return self.parents.get(mid, 0)

    def path(self, leaf: int) -> list[int]:
        out, seen = [], set()
        while leaf in self.rows and leaf not in seen:
            seen.add(leaf)
            out.append(leaf)
            leaf = self.parents[leaf]
        return out[::-1]

    def versions(self, mid: int) -> tuple[int, ...]:
        role = as_text(self.rows[mid][2], "user")
        same = tuple(i for i in self.children.get(self.parents[mid], []) if as_text(self.rows[i][2], "user") == role)
        return same if len(same) > 1 else ()

    def newest_leaf_under(self, mid: int) -> int:
        seen = set()
        while self.children.get(mid) and mid not in seen:
            seen.add(mid)
            mid = max(self.children[mid])
        return mid

    def message(self, mid: int) -> Message:
        r = self.rows[mid]
        return Message(r[0], r[1], as_text(r[2], "user"), as_text(r[3]), as_text(r[4]), reply_meta(r[5])[0],
                       _flag(r[6]), self.parents[mid], self.versions(mid), _number(r[8]) if len(r) > 8 else 0.0,
                       _time(r[9]) if len(r) > 9 else None)

    def branch(self) -> list[Message]:
        return [self.message(i) for i in self.path(self.leaf)]


def _time(value) -> float | None:
    when = _number(value, 0.0)
    return when if when > 0 else None


def conversation_from_row(row, match: str = "") -> Conversation:
    """`row`: (id, title, updated, system_prompt, settings[, title_by])."""
    title_by = as_text(row[5]) or None if len(row) > 5 else None
    return Conversation(row[0], as_text(row[1], "Untitled chat"), _number(row[2]), as_text(row[3]),
                        chat_settings(row[4])[0], title_by, match)

