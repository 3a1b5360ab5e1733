"""The conversation: one widget per message; replies render block by block as they stream."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPushButton, QScrollArea, QSizePolicy, QToolButton,
                               QVBoxLayout, QWidget)

from ..markdown_blocks import Block, finish_blocks, split_blocks, with_readable_math


def _label(text: str = "", markdown: bool = False, object_name: str = "") -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.MarkdownText if markdown else Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse)
    label.setOpenExternalLinks(True)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
    if object_name:
        label.setObjectName(object_name)
    label.setText(text)
    return label


class CodeBlock(QFrame):
    def __init__(self, block: Block):
        super().__init__()
        self.setObjectName("codeBlock")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 8)
        top = QHBoxLayout()
        top.addWidget(QLabel(block.language or "code"))
        top.addStretch()
        copy = QPushButton("Copy")
        copy.setObjectName("smallButton")
        copy.setToolTip("Copy this code")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(block.text))
        top.addWidget(copy)
        layout.addLayout(top)
        code = _label(block.text, object_name="code")
        code.setFont(QFont("monospace"))
        layout.addWidget(code)
        self.code = code


class ThinkingBlock(QFrame):
    """Live while thinking streams; afterwards a collapsed "Thought for 4.2 s on 0.5M" line."""

    def __init__(self):
        super().__init__()
        self.setObjectName("thinking")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        self.toggle = QToolButton()
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setCheckable(True)
        self.toggle.setChecked(True)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow)
        self.toggle.toggled.connect(self._set_open)
        self.body = _label(object_name="thinkingText")
        layout.addWidget(self.toggle)
        layout.addWidget(self.body)
        self.set_live("")

    def _set_open(self, open_: bool) -> None:
        self.body.setVisible(open_)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)

    def set_live(self, text: str, submodel: str = "") -> None:
        self.toggle.setText(f"Thinking on {submodel}…" if submodel else "Thinking…")
        self.body.setText(text)

    def finish(self, text: str, summary: str) -> None:
        self.body.setText(text)
        self.toggle.setText(summary)
        self.toggle.setChecked(False)


class MessageWidget(QFrame):
    sig_edit = Signal(int)
    sig_regenerate = Signal()

    def __init__(self, message_id: int, role: str, text: str = "", thinking: str = "", meta: dict | None = None,
                 streaming: bool = False):
        super().__init__()
        self.message_id, self.role = message_id, role
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        header = QHBoxLayout()
        who = QLabel("You" if role == "user" else "Assistant")
        who.setObjectName("role")
        header.addWidget(who)
        self.info = QLabel("")
        self.info.setObjectName("messageInfo")
        header.addWidget(self.info)
        header.addStretch()
        self.buttons = {}
        for name, tip in (("Copy", "Copy this message"), ("Edit", "Edit and resend"), ("Regenerate", "Answer again")):
            if (name == "Edit" and role != "user") or (name == "Regenerate" and role != "assistant"):
                continue
            b = QPushButton(name)
            b.setObjectName("smallButton")
            b.setToolTip(tip)
            header.addWidget(b)
            self.buttons[name] = b
        self.buttons["Copy"].clicked.connect(lambda: QGuiApplication.clipboard().setText(self.text))
        if "Edit" in self.buttons:
            self.buttons["Edit"].clicked.connect(lambda: self.sig_edit.emit(self.message_id))
        if "Regenerate" in self.buttons:
            self.buttons["Regenerate"].clicked.connect(self.sig_regenerate.emit)
        layout.addLayout(header)
        self.thinking = ThinkingBlock() if role == "assistant" else None
        if self.thinking:
            layout.addWidget(self.thinking)
            self.thinking.setVisible(bool(thinking) or streaming)
        self.content = QVBoxLayout()
        layout.addLayout(self.content)
        self.tail = _label(object_name="streamTail")
        layout.addWidget(self.tail)
        self.rendered: list[Block] = []
        self.text = ""
        if streaming:
            self.tail.setText("…")
        else:
            self.finish(text, thinking, meta or {})

    # ------------------------------------------------------------------ rendering

    def _render(self, blocks: list[Block]) -> None:
        """Adds widgets for blocks not rendered yet (each block is rendered once)."""
        if blocks[:len(self.rendered)] != self.rendered:  # text changed under us (edit): start over
            while self.content.count():
                old = self.content.takeAt(0).widget()
                old.hide()
                old.deleteLater()
            self.rendered = []
        for block in blocks[len(self.rendered):]:
            w = CodeBlock(block) if block.kind == "code" else _label(with_readable_math(block.text), markdown=True)
            self.content.addWidget(w)
            self.rendered.append(block)

    def update_stream(self, answer: str, thinking: str, submodel: str, thinking_live: bool) -> None:
        if self.thinking and (thinking or thinking_live):
            self.thinking.setVisible(True)
            if thinking_live:
                self.thinking.set_live(thinking, submodel)
        blocks, tail = split_blocks(answer)
        self._render(blocks)
        self.tail.setText(tail if (tail or answer) else ("" if thinking_live else "…"))
        self.tail.setVisible(bool(self.tail.text()))
        self.text = answer

    def finish(self, answer: str, thinking: str, meta: dict) -> None:
        self._render(finish_blocks(answer))
        self.tail.setText("")
        self.tail.setVisible(False)
        self.text = answer
        if self.thinking:
            self.thinking.setVisible(bool(thinking))
            if thinking:
                self.thinking.finish(thinking, thinking_summary(meta))
        self.info.setText(reply_info(meta) if self.role == "assistant" else "")


def thinking_summary(meta: dict) -> str:
    seconds = meta.get("thinking_ms", 0) / 1000
    who = meta.get("think_submodel") or "?"
    tokens = meta.get("thinking_tokens", 0)
    budget = ", budget hit" if meta.get("budget_hit") else ""
    return f"Thought for {seconds:.1f} s on {who} · {tokens} tokens{budget}"


def reply_info(meta: dict) -> str:
    if not meta:
        return ""
    parts = [meta.get("answer_submodel", "")]
    if meta.get("finish_reason") not in (None, "end_of_turn"):
        parts.append(meta["finish_reason"].replace("_", " "))
    if meta.get("tokens_per_s"):
        parts.append(f"{meta['tokens_per_s']:.0f} tok/s")
    return " · ".join(p for p in parts if p)


class ChatView(QScrollArea):
    """Long chats show their last PAGE messages; earlier ones are built only when asked for, so
    opening a chat of hundreds of messages does not stall the window."""

    sig_edit = Signal(int)
    sig_regenerate = Signal()
    PAGE = 40

    def __init__(self):
        super().__init__()
        self.setWidgetResizable(True)
        self.setObjectName("chatView")
        inner = QWidget()
        inner.setObjectName("chatInner")
        self.column = QVBoxLayout(inner)
        self.column.setContentsMargins(16, 16, 16, 16)
        self.column.setSpacing(10)
        self.column.addStretch()
        self.earlier = QPushButton("")
        self.earlier.setVisible(False)
        self.earlier.clicked.connect(self.show_earlier)
        self.column.insertWidget(0, self.earlier)
        self.setWidget(inner)
        self.widgets: list[MessageWidget] = []
        self.hidden: list = []  # messages not built yet (the oldest)
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self._stick = True

    def _follow(self, _min, maximum) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(maximum)

    def clear(self) -> None:
        for w in self.widgets:
            w.deleteLater()
        self.widgets = []

    def set_messages(self, messages) -> None:
        self.clear()
        shown = [m for m in messages if m.role != "system"]
        self.hidden = shown[:-self.PAGE] if len(shown) > self.PAGE else []
        for m in shown[len(self.hidden):]:
            self.add(MessageWidget(m.id, m.role, m.content, m.thinking, m.meta))
        self._update_earlier()
        self._update_regenerate()

    def show_earlier(self) -> None:
        """Builds the next PAGE older messages above the ones shown."""
        page, self.hidden = self.hidden[-self.PAGE:], self.hidden[:-self.PAGE]
        self._stick = False
        for i, m in enumerate(page):
            w = MessageWidget(m.id, m.role, m.content, m.thinking, m.meta)
            w.sig_edit.connect(self.sig_edit.emit)
            w.sig_regenerate.connect(self.sig_regenerate.emit)
            self.column.insertWidget(1 + i, w)
            self.widgets.insert(i, w)
        self._update_earlier()
        self._update_regenerate()

    def _update_earlier(self) -> None:
        self.earlier.setVisible(bool(self.hidden))
        self.earlier.setText(f"Show {min(self.PAGE, len(self.hidden))} earlier messages ({len(self.hidden)} hidden)")

    def add(self, widget: MessageWidget) -> MessageWidget:
        widget.sig_edit.connect(self.sig_edit.emit)
        widget.sig_regenerate.connect(self.sig_regenerate.emit)
        self.column.insertWidget(self.column.count() - 1, widget)
        self.widgets.append(widget)
        self._stick = True
        self._update_regenerate()
        return widget

    def _update_regenerate(self) -> None:
        last_assistant = next((w for w in reversed(self.widgets) if w.role == "assistant"), None)
        for w in self.widgets:
            if "Regenerate" in w.buttons:
                w.buttons["Regenerate"].setVisible(w is last_assistant)

    def set_busy(self, busy: bool) -> None:
        for w in self.widgets:
            for name in ("Edit", "Regenerate"):
                if name in w.buttons:
                    w.buttons[name].setEnabled(not busy)
