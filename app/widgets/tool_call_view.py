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

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout, QWidget

from runtime.errors import for_approval, one_line, printable
from runtime.tool_loop import describe_arguments

SHOWN_RESULT_CHARS = 4000
STATUS = {"ok": ("✓", ""), "error": ("✗", "failed"), "declined": ("⊘", "declined by you"),
          "stopped": ("■", "stopped"), "limit": ("⊘", "not run: call limit reached"),
          "invalid": ("✗", "malformed call"), "pending": ("…", "waiting for the reply's calls to end"),
          "asking": ("?", "waiting for your consent…"),
          "running": ("…", "running…")}


def _plain(text: str, object_name: str = "", mono: bool = False) -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setObjectName(object_name)
    if mono:
        label.setFont(QFont("monospace"))
    label.setText(text)
    return label


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


class ToolCallView(QFrame):
    """One call: a line that opens to its arguments and its result."""

    def __init__(self, call: dict):
        super().__init__()
        self.setObjectName("toolCall")
        self.call = call
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 2, 8, 2)
        self.toggle = QToolButton()
        self.toggle.setObjectName("toolCallToggle")
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setCheckable(True)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setText(call_summary(call))
        self.toggle.toggled.connect(self._set_open)
        layout.addWidget(self.toggle)
        self.body = QWidget()
        column = QVBoxLayout(self.body)
        column.setContentsMargins(16, 0, 0, 4)
        column.addWidget(_plain("Arguments", "toolCallHeading"))
        column.addWidget(_plain(for_approval(describe_arguments(call.get("arguments") or {}), keep_newlines=True),
                                "toolCallArguments", mono=True))
        if call.get("status") not in ("pending", "asking", "running"):
            content = str(call.get("content", ""))
            shown = content if len(content) <= SHOWN_RESULT_CHARS else (
                content[:SHOWN_RESULT_CHARS] + f"\n… ({len(content):,} characters; the model read them all)")
            column.addWidget(_plain("Error" if call.get("is_error") else "Result", "toolCallHeading"))
            column.addWidget(_plain(printable(shown, keep_newlines=True), "toolCallResult", mono=True))
        layout.addWidget(self.body)
        self.body.setVisible(False)

    def _set_open(self, open_: bool) -> None:
        self.body.setVisible(open_)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)


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
                thought = _plain(printable(r["thinking"].strip(), keep_newlines=True), "toolRoundThinking")
                thought.setToolTip("What the model thought before this call")
                self.column.addWidget(thought)
            if r.get("answer", "").strip():
                self.column.addWidget(_plain(printable(r["answer"].strip(), keep_newlines=True), "toolRoundText"))
            for call in r.get("calls", []):
                view = ToolCallView(call)
                self.calls.append(view)
                self.column.addWidget(view)
        self.setVisible(bool(rounds))
