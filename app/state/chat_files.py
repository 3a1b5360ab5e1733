"""Chats as files (no Qt): Markdown to read, JSON to move a chat between machines.

The JSON holds the whole chat: every version of every message (the tree, `parent` ids local to the file),
the branch shown, the system prompt, the chat's settings, and each reply's details (depth, submodels,
budget, tokens, timings, switches). An imported file is input from outside, so it is read bounded
(`MAX_FILE_BYTES`, runtime/json_file.py) and checked whole before anything is written: a file with one
bad part imports nothing (`ChatFileError`, one line), and the history is changed in one transaction.
Reply details this version cannot read are left out of that reply (the history's own rule), and said.
"""

from __future__ import annotations

import time
from pathlib import Path

from runtime.api import END_OF_TURN, ENDED_BY_USER, JsonFileError, read_json_file, show

from .history import History
from .history_rows import chat_settings, reply_meta

FORMAT, VERSION = "elastic-chat/chat", 1
MAX_FILE_BYTES = 64 * 2**20
MAX_MESSAGES = 100_000
MAX_TEXT = 4 * 2**20  # characters in one message's text or thinking
MAX_TITLE = 200
ROLES = ("user", "assistant")


class ChatFileError(ValueError):
    """A chat file that cannot be imported; str(e) is one line for the window."""


# ---------------------------------------------------------------------- export

def chat_json(history: History, cid: int) -> dict:
    conv = history.conversation(cid)
    shown = history.messages(cid)
    return {"format": FORMAT, "version": VERSION, "exported": time.time(), "title": conv.title,
            "system_prompt": conv.system_prompt, "settings": conv.settings,
            "shown": shown[-1].id if shown else 0,
            "messages": [{"id": m.id, "parent": m.parent_id, "role": m.role, "content": m.content,
                          "thinking": m.thinking, "meta": m.meta, "complete": m.complete,
                          **({"created": m.created} if m.created else {}),
                          **({"finished": m.finished} if m.finished else {})}
                         for m in history.all_messages(cid)]}


def chat_markdown(history: History, cid: int) -> str:
    """The branch shown, to read: each reply with what produced it, its thinking folded."""
    conv = history.conversation(cid)
    lines = [f"# {conv.title}", "", f"*Exported from Elastic Chat on {time.strftime('%Y-%m-%d %H:%M')}.*", ""]
    if conv.system_prompt:
        lines += ["**System prompt:**", ""] + [f"> {line}" for line in conv.system_prompt.splitlines()] + [""]
    for m in history.messages(cid):
        when = f" · {time.strftime('%Y-%m-%d %H:%M', time.localtime(m.time))}" if m.time else ""
        if m.role == "user":
            files = [a.get("name", "file") for a in m.meta.get("attachments") or []]
            lines += [f"## You{when}", ""] + ([f"*Attached: {', '.join(files)}*", ""] if files else [])
        else:
            details = reply_details(m.meta)
            lines += [f"## Assistant{f' ({details})' if details else ''}{when}", ""]
            if m.thinking:
                lines += ["<details><summary>Thinking</summary>", "", m.thinking, "", "</details>", ""]
        lines += [m.content, ""]
    return "\n".join(lines)


def budget_words(meta: dict) -> str:
    """How a thought the runtime closed ended: "budget hit" at the depth's thinking budget, or "closed for
    the answer (Max reply tokens)" when the reply's token limit closed it first to leave the answer room
    (a small Max reply tokens; it read "budget hit" as if the depth had chosen it). A reply saved before
    the budget was kept says "budget hit"."""
    if "thinking_budget" not in meta:
        return "budget hit"
    budget = meta["thinking_budget"]
    under = budget is None or (meta.get("thinking_tokens") or 0) < budget
    return "closed for the answer (Max reply tokens)" if under else "budget hit"


def continued_words(meta: dict) -> str:
    """ "continued once", "continued 3 times"; "" for a reply Continue never went on with."""
    n = meta.get("continued")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return ""
    return "continued once" if n == 1 else f"continued {n} times"


def reply_details(meta: dict) -> str:
    """"depth Deep · thought on 0.5M · answered by 1.5M · 40 + 12 tokens · 8.1 tok/s · 2.3 s"; a thought
    the slider moved says so, stretch by stretch: "depth Max → Quick · thought 23 tokens on 1.5M, then 49
    on 0.5M · budget hit · ..."."""
    parts = []
    moves = [str(d) for d in meta.get("depth_path") or []]
    if len(moves) > 1:
        parts.append("depth " + " → ".join(moves))
    elif meta.get("depth"):
        parts.append(f"depth {meta['depth']}")
    if meta.get("thinking_tokens"):
        path = [tuple(run) for run in meta.get("thinking_path") or []]
        by = list((meta.get("thinking_by_submodel") or {}).items())
        if len(path) > 1:
            parts.append(f"thought {path[0][1]:g} tokens on {path[0][0]}, then "
                         + ", then ".join(f"{n:g} on {name}" for name, n in path[1:]))
        elif by or meta.get("think_submodel"):
            parts.append(f"thought on {by[0][0] if len(by) == 1 else meta.get('think_submodel')}")
        if meta.get("budget_hit"):
            parts.append(budget_words(meta))
        elif meta.get("thinking_end") == ENDED_BY_USER:  # Answer now (the window says so too)
            parts.append("thought ended by you")
    if meta.get("answer_submodel"):
        parts.append(f"answered by {meta['answer_submodel']}")
    if "answer_tokens" in meta:
        parts.append(f"{meta.get('thinking_tokens', 0):g} + {meta['answer_tokens']:g} tokens")
    if meta.get("tokens_per_s"):
        parts.append(f"{meta['tokens_per_s']:.1f} tok/s")
    if meta.get("elapsed_ms"):
        parts.append(f"{meta['elapsed_ms'] / 1000:.1f} s")
    if meta.get("finish_reason") not in (None, END_OF_TURN):
        parts.append(str(meta["finish_reason"]).replace("_", " "))
    return " · ".join(filter(None, [*parts, continued_words(meta)]))


# ---------------------------------------------------------------------- import

NOT_JSON = ("not valid JSON", "not a UTF-8 text file", "expected a JSON")  # read_json_file's words for the bytes


def _what_imports(e: Exception) -> str:
    """What to do next when the file is not a chat in JSON at all (a Markdown export, a picture), "" when
    the problem is reaching it."""
    if isinstance(e, JsonFileError) and str(e).startswith(NOT_JSON):
        return " Import takes a chat exported as JSON (Chat → Export chat…, file type JSON)."
    return ""


def import_chat(history: History, path: Path | str) -> tuple[int, str]:
    """Adds the chat in the JSON file `path` to `history`; returns its id and a line for the window.
    Raises ChatFileError (nothing imported) when any part of the file is wrong."""
    name = Path(path).name
    try:
        data = read_json_file(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise ChatFileError(f"{name} could not be imported: there is no such file.") from None
    except (OSError, JsonFileError) as e:
        why = f"it is {e}" if str(e).startswith("not") else str(e)
        raise ChatFileError(f"{name} could not be imported: {why}.{_what_imports(e)}") from None
    try:
        title, prompt, settings, messages, shown, dropped = _checked(data)
    except ValueError as e:
        raise ChatFileError(f"{name} could not be imported: {e}; nothing was imported.") from None
    title = free_title(title, {c.title for c in history.conversations()})
    cid = history.import_chat(title, prompt, settings, messages, shown)
    note = f"Imported “{title}” ({len(messages)} message{'s' if len(messages) != 1 else ''})."
    if dropped:
        note += f" Details of {dropped} repl{'ies' if dropped > 1 else 'y'} could not be read and were left out."
    return cid, note


def free_title(title: str, taken: set[str]) -> str:
    """`title`, or "title (imported)", "title (imported 2)"... when a chat has it: the chat beside its
    original (a round trip, a chat imported twice) is told apart in the list (the model manager marks an
    imported folder the same way)."""
    if title not in taken:
        return title
    for n in range(1, len(taken) + 2):  # one more candidate than there are chats: one is free
        mark = " (imported)" if n == 1 else f" (imported {n})"
        candidate = title[:MAX_TITLE - len(mark)] + mark
        if candidate not in taken:
            return candidate
    return title  # not reached


def _text(value, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not text")
    if len(value) > limit:
        raise ValueError(f"{what} is longer than {limit:,} characters")
    _unicode(value, what)
    return value


def _unicode(value: str, what: str) -> None:
    """JSON may write half a character (a lone surrogate, "\\ud800"), which is no text: the history
    cannot store it (SQLite's UTF-8 refuses it) nor the window show it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        half = value[e.start]
        raise ValueError(f"{what} holds half a character (the lone surrogate \\u{ord(half):04x}), which is not "
                         "text; the file was damaged or not written by Elastic Chat") from None


def _checked(data: dict):
    if data.get("format") != FORMAT:
        raise ValueError("it is not a chat exported by Elastic Chat (no \"format\": \"elastic-chat/chat\")")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError("its version is not a whole number")
    if version > VERSION:
        raise ValueError(f"it was written by a newer Elastic Chat (chat file version {version}); update to import it")
    title = _text(data.get("title", "Imported chat"), "its title", 10 * MAX_TITLE).strip()[:MAX_TITLE]
    prompt = _text(data.get("system_prompt", ""), "its system prompt", MAX_TEXT)
    settings, ok = chat_settings(_json_dumps(data.get("settings", {})))
    if not isinstance(data.get("settings", {}), dict) or not ok:
        raise ValueError("its settings are not the settings of a chat")
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ValueError("it holds no messages")
    if len(raw) > MAX_MESSAGES:
        raise ValueError(f"it holds more than {MAX_MESSAGES:,} messages")
    messages, seen, dropped = [], set(), 0
    for i, m in enumerate(raw, 1):
        where = f"message {i}"
        if not isinstance(m, dict):
            raise ValueError(f"{where} is not an object")
        mid, parent = m.get("id"), m.get("parent", 0)
        if not _is_id(mid) or mid in seen:
            raise ValueError(f"{where} has no id of its own (a whole number above 0)")
        if not _is_id(parent, zero=True) or (parent and parent not in seen):
            raise ValueError(f"{where} follows a message that is not before it in the file")
        if m.get("role") not in ROLES:
            raise ValueError(f"{where} has the role {show(m.get('role'), 20)}, not user or assistant")
        complete = m.get("complete", True)
        if not isinstance(complete, bool):
            raise ValueError(f"{where}'s \"complete\" is not true or false")
        meta_in = m.get("meta", {})
        if not isinstance(meta_in, dict):
            raise ValueError(f"{where}'s details are not an object")
        meta, meta_ok = reply_meta(_json_dumps(meta_in))
        dropped += not meta_ok
        messages.append((mid, parent, m["role"], _text(m.get("content", ""), f"{where}'s text", MAX_TEXT),
                         _text(m.get("thinking", ""), f"{where}'s thinking", MAX_TEXT), meta, complete,
                         _when(m.get("created")), _when(m.get("finished"))))
        seen.add(mid)
    shown = data.get("shown", messages[-1][0])
    if not _is_id(shown, zero=True) or (shown and shown not in seen):
        raise ValueError("the message it shows is not in it")
    _unicode(_json_dumps(data, ascii=False), "a name or value in it")  # settings, details, keys: the rest
    return title or "Imported chat", prompt, settings, messages, shown, dropped


def _when(value) -> float | None:
    """A message's time in the file (epoch seconds), None where it has none or not a plausible one (a file
    written before times were exported, or edited): the import's own time stands in for it."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 2**40
    return float(value) if ok else None


def _is_id(value, zero: bool = False) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or (zero and value == 0)) \
        and value < 2**63


def _json_dumps(value, ascii: bool = True) -> str:
    import json

    return json.dumps(value, ensure_ascii=ascii)
