"""The conversation: one widget per message; replies render block by block as they stream."""

from __future__ import annotations

import time

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from runtime.api import END_OF_TURN, ENDED_BY_USER, ERROR, STOPPED, counted

from ..highlight import highlighted_html
from ..markdown_blocks import Block, breakable, finish_blocks, shown_markdown, split_blocks
from ..reply import INTERRUPTED, finish_words
from ..state.chat_files import budget_words, continued_words
from .block_label import BlockLabel
from .elided_label import ElidedLabel
from .foldable import Foldable
from .streamed_text import StreamedText
from .tool_call_view import ToolRoundsView, ended


def _label(text: str = "", markdown: bool = False, object_name: str = "") -> QLabel:
    label = BlockLabel()
    label.setTextFormat(Qt.TextFormat.MarkdownText if markdown else Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                  | Qt.TextInteractionFlag.LinksAccessibleByMouse)
    label.setOpenExternalLinks(True)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
    if object_name:
        label.setObjectName(object_name)
    label.setText(breakable(text, markdown))
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
        self.copy = copy_button("Copy this code", lambda: block.text)
        top.addWidget(self.copy)
        layout.addLayout(top)
        code = _label(object_name="code")
        code.setTextFormat(Qt.TextFormat.RichText)
        code.setText(highlighted_html(block.text if block.language else breakable(block.text), block.language,
                                      is_dark()))
        code.setFont(QFont("monospace"))
        # a long line of code is clipped, never widens the chat (its Copy button has all of it)
        code.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        layout.addWidget(code)
        self.code = code


def is_dark() -> bool:
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


COPIED_MS = 1500
READING = "Reading the chat…"  # a reply before its first token, with nothing ahead of it (the prefill)


def waiting_text(ahead: str) -> str:
    """What a reply says before its first token: what it waits for, or that it reads the chat."""
    return f"Waiting for {ahead} to end…" if ahead else READING


def copy_button(tip: str, text) -> QPushButton:
    """A small Copy button that puts `text()` on the clipboard and says "Copied" for a moment."""
    b = QPushButton("Copy")
    b.setObjectName("smallButton")
    b.setToolTip(tip)

    def copy() -> None:
        QGuiApplication.clipboard().setText(text())
        b.setText("Copied ✓")
        QTimer.singleShot(COPIED_MS, b, lambda: b.setText("Copy"))  # b: the timer dies with the button
    b.clicked.connect(copy)
    return b


class ThinkingBlock(Foldable):
    """Live while thinking streams; afterwards a collapsed "Thought for 4.2 s on 0.5M" line. Its text is a
    StreamedText: a frame of a growing thought costs what it adds, not the whole thought laid out again."""

    def __init__(self):
        super().__init__("thinking", StreamedText("thinkingText"), (8, 4, 8, 4), opened=True)
        self.set_live("")

    def set_live(self, text: str, submodel: str = "", progress=None) -> None:
        """`progress`: the reply's last runtime.events.Progress, for "Thinking on 1.0M… 34 of 120 tokens"
        (the budget as it is now: Think longer and a depth move change it)."""
        count = ""
        if progress is not None and progress.thinking_tokens:
            n, budget = progress.thinking_tokens, progress.thinking_budget
            count = f" {n} of {budget} tokens" if budget else f" {n} tokens"
        self.toggle.setText((f"Thinking on {submodel}…" if submodel else "Thinking…") + count)
        self.body.setText(text)

    def finish(self, text: str, summary: str) -> None:
        self.body.setText(text)
        self.toggle.setText(summary)
        self.toggle.setChecked(False)


class MessageWidget(QFrame):
    sig_edit = Signal(int)
    sig_regenerate = Signal()
    sig_continue = Signal(int)  # message id: go on with this reply, cut off by its token limit
    sig_version = Signal(int, int)  # message id, -1 (the previous version) or +1 (the next)

    def __init__(self, message_id: int, role: str, text: str = "", thinking: str = "", meta: dict | None = None,
                 streaming: bool = False, versions: tuple[int, ...] = (), when: float | None = None):
        """`versions`: this message and its siblings (edits, regenerations), oldest first; () when alone.
        `when`: its time (epoch seconds: a message's sending, a reply's end), None when it has none yet."""
        super().__init__()
        self.message_id, self.role, self.versions = message_id, role, tuple(versions)
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        header = QHBoxLayout()
        who = QLabel("You" if role == "user" else "Assistant")
        who.setObjectName("role")
        header.addWidget(who)
        # the date shortens before the row widens (the hour, then the day go; the tooltip keeps it all)
        self.when_label = ElidedLabel("", shorter=shorter_times)
        self.when_label.setParent(self)  # (its parent before it is shown: never a window of its own)
        self.when_label.setObjectName("messageInfo")
        header.addWidget(self.when_label)
        self.set_time(when)
        self.info = ElidedLabel("")  # long details shorten with "…" rather than widen the chat
        self.info.setObjectName("messageInfo")
        header.addWidget(self.info)
        header.addStretch()
        self.buttons = {}
        self.version_label = None
        if len(self.versions) > 1:
            self._version_switch(header)
        self.buttons["Copy"] = copy_button("Copy this message", lambda: self.text)
        header.addWidget(self.buttons["Copy"])
        for name, tip in (("Edit", "Edit and resend (the sent version is kept)"),
                          ("Regenerate", "Answer again (this reply is kept as a version)"),
                          ("Continue", "Go on from where this reply stopped: it reached the Max reply tokens")):
            if (name == "Edit" and role != "user") or (name != "Edit" and role != "assistant"):
                continue
            b = QPushButton(name)
            b.setObjectName("smallButton")
            b.setToolTip(tip)
            header.addWidget(b)
            self.buttons[name] = b
        if "Edit" in self.buttons:
            self.buttons["Edit"].clicked.connect(lambda: self.sig_edit.emit(self.message_id))
        if "Regenerate" in self.buttons:
            self.buttons["Regenerate"].clicked.connect(self.sig_regenerate.emit)
        self.cut = False  # a finished reply cut off by its token limit (Continue goes on with it)
        if "Continue" in self.buttons:
            self.buttons["Continue"].setVisible(False)
            self.buttons["Continue"].clicked.connect(lambda: self.sig_continue.emit(self.message_id))
        layout.addLayout(header)
        self.thinking = ThinkingBlock() if role == "assistant" else None
        if self.thinking:
            layout.addWidget(self.thinking)
            self.thinking.setVisible(bool(thinking) or streaming)
        self.tools = ToolRoundsView()  # the reply's tool calls, above its answer (hidden when it made none)
        layout.addWidget(self.tools)
        self.content = QVBoxLayout()
        layout.addLayout(self.content)
        self.tail = StreamedText("streamTail")  # the block being written: a frame costs what it adds
        layout.addWidget(self.tail)
        self.rendered: list[Block] = []
        self.rendered_source = ""  # the answer's lines the rendered blocks cover
        self.text = ""
        if streaming:  # until its first token (set_waiting says when something runs ahead of it)
            self.set_waiting("")
        else:
            self.finish(text, thinking, meta or {})

    def _version_switch(self, header: QHBoxLayout) -> None:
        """`< 2/3 >`: the versions of this message; the other branches stay saved."""
        at = self.versions.index(self.message_id) if self.message_id in self.versions else 0
        kind = "reply" if self.role == "assistant" else "message"
        for step, arrow in ((-1, "‹"), (1, "›")):
            b = QPushButton(arrow)
            b.setObjectName("smallButton")
            b.setToolTip(f"The {'previous' if step < 0 else 'next'} version of this {kind}")
            b.setEnabled(0 <= at + step < len(self.versions))
            b.clicked.connect(lambda _=False, step=step: self.sig_version.emit(self.message_id, step))
            header.addWidget(b)
            self.buttons["Previous" if step < 0 else "Next"] = b
            if step < 0:
                self.version_label = QLabel(f"{at + 1}/{len(self.versions)}")
                self.version_label.setObjectName("messageInfo")
                self.version_label.setToolTip(f"Version {at + 1} of {len(self.versions)} of this {kind}")
                header.addWidget(self.version_label)

    def set_time(self, when: float | None) -> None:
        """Shows `when` small beside the role, in local time ("14:05"; with the date when not today); the
        tooltip has the full date."""
        self.when_label.setText(shown_time(when) if when else "")
        self.when_label.setToolTip(time.strftime("%A %d %B %Y, %H:%M:%S", time.localtime(when)) if when else "")
        self.when_label.setVisible(bool(when))

    # ------------------------------------------------------------------ rendering

    def _resume_at(self, answer: str) -> int:
        """The line where the blocks not rendered yet begin; 0, with the view emptied, when the text no
        longer starts with what was rendered (it was replaced)."""
        if self.rendered and answer.startswith(self.rendered_source):
            return self.rendered[-1].end
        self._clear()
        return 0

    def _clear(self) -> None:
        while self.content.count():
            old = self.content.takeAt(0).widget()
            old.hide()
            old.deleteLater()
        self.rendered, self.rendered_source = [], ""

    def _show_as_typed(self, text: str) -> None:
        """The user's message, exactly as typed: one plain label (its files are named in the header)."""
        if self.rendered_source == text and self.content.count():
            return
        self._clear()
        self.content.addWidget(_label(text))
        self.rendered_source = text

    def _render(self, answer: str, blocks: list[Block]) -> None:
        """Adds a widget for each new final block (each block is rendered once)."""
        for block in blocks:
            w = CodeBlock(block) if block.kind == "code" else _label(shown_markdown(block.text), markdown=True)
            self.content.addWidget(w)
            self.rendered.append(block)
        if blocks:
            self.rendered_source = "\n".join(answer.split("\n")[:self.rendered[-1].end])

    def set_waiting(self, ahead: str) -> None:
        """Before the first token: waiting for `ahead` (another chat's reply, the server's request) to
        end, or ("") its turn came and the model reads the chat."""
        self.tail.setText(waiting_text(ahead))
        self.tail.setVisible(True)
        if self.thinking:
            self.thinking.toggle.setText(waiting_text(ahead))

    def update_stream(self, answer: str, thinking: str, submodel: str, thinking_live: bool, progress=None) -> None:
        if self.thinking:  # shown while it thinks or has thought (an answer-only reply has none)
            self.thinking.setVisible(bool(thinking) or thinking_live)
            if thinking_live:
                self.thinking.set_live(thinking, submodel, progress)
        blocks, tail = split_blocks(answer, self._resume_at(answer))
        self._render(answer, blocks)
        self.tail.setText(tail if (tail or answer) else ("" if thinking_live else "…"))
        self.tail.setVisible(bool(self.tail.text()))
        self.text = answer

    def finish(self, answer: str, thinking: str, meta: dict) -> None:
        if self.role == "user":  # as typed: markdown read "$5 … $10" as math, "3*4*5" as italics, "\\_" as "_"
            self._show_as_typed(answer)
        else:
            self._render(answer, finish_blocks(answer, self._resume_at(answer)))
        self.tail.setText("")
        self.tail.setVisible(False)
        self.text = answer
        from runtime.api import saved_rounds

        self.tools.set_rounds(ended(saved_rounds(meta)))
        if self.thinking:
            self.thinking.setVisible(bool(thinking))
            if thinking:
                self.thinking.finish(thinking, thinking_summary(meta))
        said_nothing = not (answer.strip() or thinking.strip() or meta.get("tool_rounds"))  # as Message.said_nothing
        self.info.setText(reply_info(meta, said_nothing) if self.role == "assistant" else user_info(meta))
        self.cut = self.role == "assistant" and meta.get("finish_reason") == "length"


def shown_time(when: float, now: float | None = None) -> str:
    """`when` as the chat shows it, in local time: "14:05" today, "3 Dec 14:05" earlier this year,
    "3 Dec 2025, 14:05" before."""
    at, today = time.localtime(when), time.localtime(time.time() if now is None else now)
    if at[:3] == today[:3]:
        return time.strftime("%H:%M", at)
    return f"{at.tm_mday} " + time.strftime("%b %H:%M" if at.tm_year == today.tm_year else "%b %Y, %H:%M", at)


def shorter_times(shown: str) -> list[str]:
    """Shorter forms of a shown time, longest first: "3 Dec 14:05" -> "3 Dec"; "3 Dec 2025, 14:05" ->
    "3 Dec 2025", "2025". Today's "14:05" has none. A narrow chat (a 700 px window with the chat list)
    shows them rather than let the header push its buttons past the edge."""
    if ", " in shown:
        day = shown.split(", ")[0]
        return [day, day.rsplit(" ", 1)[-1]]
    parts = shown.split(" ")
    return [" ".join(parts[:2])] if len(parts) == 3 else []


def thinking_summary(meta: dict) -> str:
    """ "Thought for 2.1 s on 1.0M · 25 tokens, budget hit"; where the thought moved between submodels (the
    depth was changed during it), each stretch in order: "Thought for 2.1 s · 5 tokens on 0.5M, then 20 on
    1.0M, then 3 on 0.5M".
    An unfinished reply says so instead of inventing numbers."""
    by = list((meta.get("thinking_by_submodel") or {}).items())  # as the history reads it: {name: tokens}
    path = meta.get("thinking_path") or []  # in order, a submodel again where the thought came back to it
    if len(path) > 1:
        by = [tuple(run) for run in path]
    who = meta.get("think_submodel") or "?"
    if len(by) == 1:
        who = by[0][0]
    tokens = meta.get("thinking_tokens", 0)
    ms = meta.get("thinking_ms")
    took = f"Thought for {ms / 1000:.1f} s" if ms else "Thought"
    ending = {INTERRUPTED: ", interrupted", STOPPED: ", stopped", ERROR: ", failed"}.get(
        meta.get("finish_reason"), ", " + budget_words(meta) if meta.get("budget_hit") else
        ", ended by you" if meta.get("thinking_end") == ENDED_BY_USER else "")
    if len(by) > 1:
        shares = ", then ".join(f"{n} on {name}" for name, n in by[1:])
        return f"{took} · {counted(by[0][1], 'token')} on {by[0][0]}, then {shares}{ending}"
    return f"{took} on {who} · {counted(tokens, 'token')}{ending}"


def user_info(meta: dict) -> str:
    """ "not sent: too long for the context · attached: notes.txt": a refused message says so first."""
    return " · ".join(p for p in (f"not sent: {meta['not_sent']}" if meta.get("not_sent") else "",
                                  attachments_line(meta)) if p)


def attachments_line(meta: dict) -> str:
    """ "attached: notes.txt · report.pdf": the files a message was sent with. In words, not 📎: the fonts a
    PC has often lack it, and it showed as an empty box (as the chips' marks did, app/widgets/attachment_row.py)."""
    names = [a.get("name", "file") for a in meta.get("attachments") or []]
    return "attached: " + " · ".join(names) if names else ""


def reply_info(meta: dict, said_nothing: bool = False) -> str:
    """ "1.5M · stopped · 12 tok/s"; a reply that ended with nothing written says that later replies are
    asked without it and its question (app/conversations.py chat_messages)."""
    if not meta:
        return ""
    parts = [meta.get("answer_submodel", "")]
    if meta.get("finish_reason") not in (None, END_OF_TURN):
        parts.append(finish_words(meta["finish_reason"]))
    if said_nothing:
        parts.append("nothing written: left out with its question")
    parts.append(continued_words(meta))
    dropped = meta.get("context_dropped")
    if dropped:
        parts.append(f"{dropped:g} earliest message{'s' if dropped != 1 else ''} left out to fit the context")
    speed = meta.get("tokens_per_s")
    if speed:
        parts.append(f"{speed:.1f} tok/s" if speed < 10 else f"{speed:.0f} tok/s")  # never "0 tok/s" on a slow PC
    return " · ".join(p for p in parts if p)


class _Column(QWidget):
    """The chat's column inside the scroll area. Its height is the one its messages take at the width
    it has (heightForWidth), never its layout's minimum: that adds up each wrapped text's height at its
    narrowest, which left a blank that grew with the chat below the last message."""

    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(), 0)


class ChatView(QScrollArea):
    """One chat's messages, built from what the controller sends (never the other way round). Updates for
    another chat, or for a message not shown, are ignored, so nothing outside holds a widget that can die.

    Long chats show their last PAGE messages; earlier ones are built only when asked for, so
    opening a chat of hundreds of messages does not stall the window."""

    sig_edit = Signal(int)
    sig_regenerate = Signal()
    sig_continue = Signal(int)
    sig_version = Signal(int, int)
    PAGE = 40

    def __init__(self):
        super().__init__()
        self.setWidgetResizable(True)
        # messages wrap and their details shorten; only buttons that cannot fit a very narrow view (a
        # cut reply's ‹ 2/2 › Copy Regenerate Continue) scroll sideways rather than hide at the edge
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setObjectName("chatView")
        inner = _Column()
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
        self.cid: int | None = None
        self.widgets: list[MessageWidget] = []
        self.hidden: list = []  # messages not built yet (the oldest)
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self.verticalScrollBar().valueChanged.connect(self._scrolled)
        self._stick = True  # the view follows the end of the chat (the user has not scrolled up from it)

    def _follow(self, _min, maximum) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(maximum)

    def _scrolled(self, value: int) -> None:
        self._stick = value >= self.verticalScrollBar().maximum() - 4  # a few pixels short still counts
    def _drop(self, widgets) -> None:
        for w in widgets:
            self.column.removeWidget(w)
            w.hide()
            w.deleteLater()

    def message_widget(self, message_id: int) -> "MessageWidget | None":
        return next((w for w in self.widgets if w.message_id == message_id), None)

    def show_chat(self, cid: int, messages, streaming_id: int | None) -> None:
        """Rebuilds the view for chat `cid` (a reply in flight there is shown as far as it has got, live)."""
        self._drop(self.widgets)
        self.widgets, self.cid = [], cid
        self._stick = True  # a chat opens on its latest message, whatever was read in the one before
        shown = [m for m in messages if m.role != "system"]
        self.hidden = shown[:-self.PAGE] if len(shown) > self.PAGE else []
        for m in shown[len(self.hidden):]:
            self._append(m, m.id == streaming_id)
        self._update_earlier()
        self._update_regenerate()

    def append(self, cid: int, messages, streaming_id: int | None) -> None:
        """A send: only the new messages are built."""
        if cid != self.cid:
            return
        for m in messages:
            self._append(m, m.id == streaming_id)
        self._stick = True
        self._update_regenerate()

    def stream(self, cid: int, message_id: int, answer: str, thinking: str, submodel: str, live: bool,
               progress=None) -> None:
        w = self.message_widget(message_id) if cid == self.cid else None
        if w is not None:
            w.update_stream(answer, thinking, submodel, live, progress)

    def waiting(self, cid: int, message_id: int, ahead: str) -> None:
        w = self.message_widget(message_id) if cid == self.cid else None
        if w is not None and not w.text:
            w.set_waiting(ahead)

    def tool_rounds(self, cid: int, message_id: int, rounds: list) -> None:
        w = self.message_widget(message_id) if cid == self.cid else None
        if w is not None:
            w.tools.set_rounds(rounds)

    def finish(self, cid: int, message) -> None:
        w = self.message_widget(message.id) if cid == self.cid else None
        if w is not None:
            w.finish(message.content, message.thinking, message.meta)
            self._update_regenerate()
            w.set_time(message.time)

    def _append(self, m, streaming: bool) -> None:
        versions = getattr(m, "versions", ())
        if streaming:
            w = MessageWidget(m.id, m.role, streaming=True, versions=versions, when=getattr(m, "time", None))
            if m.content or m.thinking:
                w.update_stream(m.content, m.thinking, m.meta.get("think_submodel") or "", not m.content)
            from runtime.api import saved_rounds

            w.tools.set_rounds(saved_rounds(m.meta))
        else:
            w = MessageWidget(m.id, m.role, m.content, m.thinking, m.meta, versions=versions,
                              when=getattr(m, "time", None))
        self._connect(w)
        self.column.insertWidget(self.column.count() - 1, w)
        self.widgets.append(w)

    def _connect(self, w: "MessageWidget") -> None:
        w.sig_edit.connect(self.sig_edit.emit)
        w.sig_regenerate.connect(self.sig_regenerate.emit)
        w.sig_continue.connect(self.sig_continue.emit)
        w.sig_version.connect(self.sig_version.emit)

    def show_earlier(self) -> None:
        """Builds the next PAGE older messages above the ones shown."""
        page, self.hidden = self.hidden[-self.PAGE:], self.hidden[:-self.PAGE]
        self._stick = False
        for i, m in enumerate(page):
            w = MessageWidget(m.id, m.role, m.content, m.thinking, m.meta, versions=getattr(m, "versions", ()),
                              when=getattr(m, "time", None))
            self._connect(w)
            self.column.insertWidget(1 + i, w)
            self.widgets.insert(i, w)
        self._update_earlier()
        self._update_regenerate()

    def show_message(self, message_id: int | None) -> None:
        """Scrolls to message `message_id` (a search's match), building the earlier pages that hide it; the
        view then stays there rather than following the chat's end."""
        while message_id is not None and self.message_widget(message_id) is None and \
                any(m.id == message_id for m in self.hidden):
            self.show_earlier()
        w = self.message_widget(message_id) if message_id is not None else None
        if w is None:
            return
        self._stick = False
        self.widget().layout().activate()  # (its place is known once the new widgets are laid out)
        self.ensureWidgetVisible(w, 0, 16)
        QTimer.singleShot(0, lambda: self.message_widget(message_id) is w and self.ensureWidgetVisible(w, 0, 16))

    def _update_earlier(self) -> None:
        self.earlier.setVisible(bool(self.hidden))
        self.earlier.setText(f"Show {min(self.PAGE, len(self.hidden))} earlier messages ({len(self.hidden)} hidden)")

    def _update_regenerate(self) -> None:
        last_assistant = next((w for w in reversed(self.widgets) if w.role == "assistant"), None)
        for w in self.widgets:
            if "Regenerate" in w.buttons:
                w.buttons["Regenerate"].setVisible(w is last_assistant)
                w.buttons["Continue"].setVisible(w is last_assistant and w.cut)
