"""A reply's tool calls, shown in the reply above its answer: per round, what the model thought and
wrote before calling, then each call as one collapsible line (status, tool, server, duration; an error's
first line) that opens to its arguments and result.

Built from plain dicts, the runtime's own serialisations (runtime/tool_loop.py `ToolRound.to_dict`,
`ToolResult.to_dict`), exactly as the history saves them, so a restarted app shows what the live reply
showed. A call still in flight is a dict with "status" "asking" (waiting for the user's consent) or
"running". Everything here came from a model or a server: plain text only.
"""

from __future__ import annotations

import json

from PySide6.QtWidgets import QVBoxLayout, QWidget

from runtime.api import describe_arguments, for_approval, one_line, printable

from .foldable import Foldable
from .labels import plain_label

SHOWN_RESULT_CHARS = 4000
STATUS = {"ok": ("✓", ""), "error": ("✗", "failed"), "declined": ("⊘", "declined by you"),
          "stopped": ("■", "stopped"), "limit": ("⊘", "not run: call limit reached"),
          "invalid": ("✗", "malformed call"), "pending": ("…", "waiting for the reply's calls to end"),
          "asking": ("?", "waiting for your consent…"),
          "running": ("…", "running…")}


IN_FLIGHT = ("pending", "asking", "running")


def ended(rounds: list[dict]) -> list[dict]:
    """A finished reply's rounds: a call it left waiting or running (the reply was stopped, or the app was
    killed while a consent dialog was open) reads "stopped", not "waiting for your consent…" for ever."""
    return [{**r, "calls": [{**c, "status": "stopped"} if c.get("status") in IN_FLIGHT else c
                            for c in r.get("calls", [])]} for r in rounds]


def call_summary(call: dict) -> str:
    """ "✓ add_numbers · calc · 12 ms" or "✗ fetch · web · 30.0 s: the tool did not answer ..." """
    mark, word = STATUS.get(call.get("status", ""), ("?", str(call.get("status", ""))))
    parts = [for_approval(call.get("name") or "(no name)")]
    if call.get("server"):
        parts.append(for_approval(call["server"]))
    ms = call.get("ms") or 0
    if call.get("status") not in ("pending", "asking", "running", "declined", "limit", "invalid", "stopped") or ms:
        parts.append(f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s")
    text = f"{mark} " + " · ".join(parts)
    if word:
        text += f" · {word}"
    if call.get("is_error") and call.get("status") in ("error", "invalid"):
        text += f": {one_line(call.get('content', ''), 120)}"
    return text


class ToolCallView(Foldable):
    """One call: a line that opens to its arguments and its result."""

    def __init__(self, call: dict):
        super().__init__("toolCall", _call_body(call), (8, 2, 8, 2), opened=False)
        self.call = call
        self.toggle.setText(call_summary(call))


def _call_body(call: dict) -> QWidget:
    """A call's arguments and, once it ran, its result (or error)."""
    body = QWidget()
    column = QVBoxLayout(body)
    column.setContentsMargins(16, 0, 0, 4)
    column.addWidget(plain_label("Arguments", "toolCallHeading"))
    column.addWidget(plain_label(for_approval(describe_arguments(call.get("arguments") or {}), keep_newlines=True),
                                 "toolCallArguments", mono=True))
    if call.get("status") not in ("pending", "asking", "running"):
        content = str(call.get("content", ""))
        shown = content if len(content) <= SHOWN_RESULT_CHARS else (
            content[:SHOWN_RESULT_CHARS] + f"\n… ({len(content):,} characters; the model read them all)")
        column.addWidget(plain_label("Error" if call.get("is_error") else "Result", "toolCallHeading"))
        column.addWidget(plain_label(printable(shown, keep_newlines=True), "toolCallResult", mono=True))
    return body


class ToolRoundsView(QWidget):
    """Every round of a reply that called tools; rebuilt when its rounds change (they are few)."""

    def __init__(self):
        super().__init__()
        self.setObjectName("toolRounds")
        self.column = QVBoxLayout(self)
        self.column.setContentsMargins(0, 0, 0, 0)
        self.rounds: list[dict] = []
        self.calls: list[ToolCallView] = []
        self.setVisible(False)

    def set_rounds(self, rounds: list[dict]) -> None:
        key = json.dumps(rounds, sort_keys=True, default=str)
        if key == json.dumps(self.rounds, sort_keys=True, default=str):
            return
        while self.column.count():
            old = self.column.takeAt(0).widget()
            old.hide()
            old.deleteLater()
        self.rounds, self.calls = rounds, []
        for r in rounds:
            if r.get("thinking"):
                thought = plain_label(printable(r["thinking"].strip(), keep_newlines=True), "toolRoundThinking")
                thought.setToolTip("What the model thought before this call")
                self.column.addWidget(thought)
            if r.get("answer", "").strip():
                self.column.addWidget(plain_label(printable(r["answer"].strip(), keep_newlines=True), "toolRoundText"))
            for call in r.get("calls", []):
                view = ToolCallView(call)
                self.calls.append(view)
                self.column.addWidget(view)
        self.setVisible(bool(rounds))
