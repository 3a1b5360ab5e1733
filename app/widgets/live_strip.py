"""The live strip: which submodel is producing tokens, a per-token latency sparkline coloured
by submodel (a mark where the submodel switched), time to first token, tokens/s, memory in use,
the compute path, and (while the local server is on) its address, the server request in flight and
how many wait. Each switch of the reply is noted with why it happened and what it cost.

No text in it widens the window: squeezed, each shows a shorter form of itself in words (its
last " · " or ": " parts dropped, the badge its submodel alone), and a text with no room even for
that is left out, least important first (app/widgets/priority_row.py); the whole text is always in
its tooltip. Never "R… S… C…"."""

from __future__ import annotations

import time
from collections import deque

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from ..reply import finish_words
from .elided_label import ElidedLabel
from .priority_row import PriorityRow

PALETTE = ["#3b82f6", "#f59e0b", "#a855f7", "#ec4899"]  # smaller submodels, smallest first
PARENT_COLOR = "#76b900"  # the largest submodel
SPARKLINE_TIP = ("Latency of each token in ms, newest on the right, coloured by the submodel that produced it. "
                 "The bars are scaled to the slowest token shown (the \"max\" label); the first token, which "
                 "waits for the prompt's prefill (TTFT, on the right), is drawn but not used for the scale. "
                 "A line marks each switch of submodel: solid where the answer started, dashed where the "
                 "thought moved to another submodel (the depth was moved during it).")
SWITCH_TIP = "The last switch of submodel: why, and what its re-prefill cost"
# The running speed's text changes at most this often: at every frame it is unreadable, and each change of
# a label's text lays the strip out again, GUI-thread work a fast reply pays for in tokens.
SPEED_EVERY_S = 0.25
SWITCH_WHY = {"answer": "", "depth": " (depth)", "escalate": " (escalated)", "request": " (requested)"}


def shorter_forms(text: str) -> list[str]:
    """Shorter forms of a strip text, longest first: without its last " · " part, and so on, then
    without its last ": " part ("CPU demo · NVFP4 … · decode: eager" → … → "CPU demo")."""
    forms = []
    for separator in (" · ", ": "):
        while separator in text:
            text = text.rsplit(separator, 1)[0].rstrip()
            if text:
                forms.append(text)
    return forms


NO_LOCAL_MODEL = " · no local model"  # (ServerStatus.summary's words)


def server_forms(text: str) -> list[str]:
    """The server's shorter forms: a failure keeps its state and its gist, an aside in brackets going first
    ("Server off: port 8000 is taken (used by another program on 127.0.0.1)" → "Server off: port 8000 is
    taken" → "Server off"); cut at ": " alone it read "Server", which says nothing. With nothing to serve
    it keeps that, not the address, which read as serving ("Serving … · no local model" → "Server: no
    local model" → "Server: no model")."""
    if NO_LOCAL_MODEL in text:
        return [text.split(": requests", 1)[0], "Server: no local model", "Server: no model"]
    if not text.startswith("Server off: ") or " (" not in text:
        return shorter_forms(text)
    gist = text.split(" (", 1)[0]
    return [gist, *shorter_forms(gist)]


def first_word(text: str) -> list[str]:
    """The badge's shorter form: the submodel alone ("0.5M thinking" → "0.5M")."""
    word = text.split(" ", 1)[0]
    return [word] if word != text else []


class Sparkline(QWidget):
    """Milliseconds per token, newest on the right, one colour per submodel."""

    def __init__(self, capacity: int = 160):
        super().__init__()
        self.points: deque[tuple[float, str]] = deque(maxlen=capacity)
        self.added = 0  # points ever added since the last clear (a mark's position counts from here)
        self.marks: list[tuple[int, str]] = []  # (points added before it, the switch's reason)
        self.colors: dict[str, str] = {}
        self._first_shown = False  # the leftmost point is a reply's first token
        self._hint_for, self._hint = "", QSize()  # the minimum size hint, and the font it was measured in
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip(SPARKLINE_TIP)

    def _label_font(self) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        return font

    def sizeHint(self) -> QSize:
        return QSize(max(220, self.minimumSizeHint().width() + 60), max(30, self.fontMetrics().height() * 2 + 4))

    def minimumSizeHint(self) -> QSize:  # room for the scale's label (measured once per font: the row
        key = self.font().key()           # lays itself out at every frame of a streaming reply)
        if self._hint_for != key:
            self._hint_for, self._hint = key, QSize(
                QFontMetrics(self._label_font()).horizontalAdvance("max 88888 ms") + 8,
                max(30, self.fontMetrics().height() * 2 + 4))
        return self._hint

    def add(self, ms: float, submodel: str) -> None:
        self.add_many([(ms, submodel)])

    def add_many(self, points) -> None:
        """Adds (ms, submodel) points in order; one repaint for all of them."""
        for point in points:
            if len(self.points) == self.points.maxlen:
                self._first_shown = False  # the oldest point, perhaps the first token, drops off
            elif not self.points:
                self._first_shown = True
            self.points.append(point)
            self.added += 1
        self.update()

    def mark(self, reason: str) -> None:
        """A switch of submodel, between the last point and the next."""
        self.marks.append((self.added, reason))
        self.update()

    def clear(self) -> None:
        self.points.clear()
        self.marks.clear()
        self.added = 0
        self.update()

    def scale_label(self) -> str:
        """The scale's top: the slowest token shown."""
        return f"max {self._top():.0f} ms" if self.points else ""

    def _top(self) -> float:
        """The slowest token, not counting the reply's first: its wait for the prefill (the TTFT,
        shown on its own) would flatten every other bar."""
        values = [ms for ms, _ in self.points]
        if self._first_shown and len(values) > 1:
            values = values[1:]
        return max(values) or 1.0

    def paintEvent(self, _event) -> None:
        # One filled path per submodel rather than one drawLine per token: a handful of painter
        # calls per frame whatever the token count.
        p = QPainter(self)
        w, h = self.width(), self.height()
        frame = QPainterPath()
        frame.addRoundedRect(QRectF(0.5, 0.5, w - 1, h - 1), 3, 3)
        p.setPen(self.palette().mid().color())
        p.drawPath(frame)
        if self.points:
            top = self._top()
            step = (w - 4) / max(1, self.points.maxlen - 1)
            bar = max(1.5, step - 0.5)
            x0 = w - 2 - step * (len(self.points) - 1) - bar / 2
            bars: dict[str, QPainterPath] = {}
            for i, (ms, sub) in enumerate(self.points):
                height = max(1.0, (h - 6) * min(ms / top, 1.0))
                bars.setdefault(sub, QPainterPath()).addRect(QRectF(x0 + i * step, h - 3 - height, bar, height))
            for sub, path in bars.items():
                p.fillPath(path, QColor(self.colors.get(sub, "#888888")))
            first = self.added - len(self.points)  # the index, among all added, of the leftmost point
            for at, reason in self.marks:
                if at > first:  # between point at-1 and point at (or after the newest)
                    x = x0 + (at - first) * step - (step - bar) / 2
                    pen = QPen(self.palette().text().color(), 1,
                               Qt.PenStyle.SolidLine if reason == "answer" else Qt.PenStyle.DashLine)
                    p.setPen(pen)
                    p.drawLine(QPointF(x, 2), QPointF(x, h - 2))
            p.setPen(self.palette().text().color())
            p.setFont(self._label_font())
            p.drawText(QRectF(4, 1, w - 8, h - 2), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                       self.scale_label())
        p.end()


class LiveStrip(QWidget):
    def __init__(self):
        super().__init__()
        self.setObjectName("liveStrip")
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        row = PriorityRow(self)
        row.setContentsMargins(8, 4, 8, 4)
        self.badge = ElidedLabel("idle", "The submodel producing the current token", shorter=first_word)
        self.badge.setObjectName("badge")
        self.badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.switch_note = ElidedLabel("", SWITCH_TIP, shorter=shorter_forms)
        self.sparkline = Sparkline()
        self.ttft = ElidedLabel("TTFT –", "Time to first token", shorter=shorter_forms)
        self.speed = ElidedLabel("– tok/s", "Tokens per second after the first token", shorter=shorter_forms)
        self.memory = ElidedLabel("", "Memory this app holds", shorter=shorter_forms)
        self.path = ElidedLabel("", "The compute path running the model's matmuls", shorter=shorter_forms)
        self.server = ElidedLabel("", "The local server (Settings → Server): its address, the request it is "
                                  "answering and how many wait for the model", shorter=server_forms)
        self.server.setVisible(False)  # only while the server is on (or could not start)
        for w in (self.switch_note, self.ttft, self.speed, self.memory, self.path, self.server):
            w.setObjectName("stat")
        # Who is producing tokens and how fast come first; the long texts shorten, then go, first.
        row.add(self.badge, priority=0)
        # a switch's cost before the sparkline's full width (it keeps its minimum) and the memory
        row.add(self.switch_note, priority=3, stretch=1)
        row.add(self.sparkline, priority=4, stretch=2)
        row.add(self.ttft, priority=1)
        row.add(self.speed, priority=2)
        row.add(self.memory, priority=5)
        row.add(self.server, priority=6, stretch=1)  # while serving, its address matters more than the path
        row.add(self.path, priority=7, stretch=1)
        self.colors: dict[str, str] = {}
        self.switches: list[str] = []  # this reply's, oldest first
        self._speed_at: float | None = None  # when the running speed was last shown (None: not yet this reply)
        self._badge_key: str | None = None  # the submodel the badge is styled for (None: not styled yet)
        self.set_badge("", "idle")  # styled from the start: "idle" read as plain text until a reply had run

    def set_submodels(self, names_by_size) -> None:
        n = len(names_by_size)
        self.colors = {name: PARENT_COLOR if i == n - 1 else PALETTE[i % len(PALETTE)]
                       for i, name in enumerate(names_by_size)}
        self.sparkline.colors = self.colors

    def set_path(self, text: str) -> None:
        self.path.setText(text)

    def set_memory(self, text: str) -> None:
        self.memory.setText(text)

    def set_server(self, text: str) -> None:
        """The local server's one line (`ServerStatus.summary`); hidden when empty (the server is off)."""
        self.server.setText(text)
        self.server.setVisible(bool(text))

    def reset(self, submodel: str = "", phase: str = "") -> None:
        """A reply starts. `submodel` is the one about to produce the first token (it is shown
        during the time to first token, instead of whichever produced the last one)."""
        self.sparkline.clear()
        self.switches = []
        self.switch_note.setText("")
        self.switch_note.setToolTip(SWITCH_TIP)
        self.ttft.setText("TTFT …")
        self.speed.setText("– tok/s")
        self._speed_at = None
        if submodel:
            self.set_badge(submodel, phase)

    def clear(self) -> None:
        """No reply to show (a chat without one streaming is on screen, a send was refused): nothing runs."""
        self.reset()
        self.ttft.setText("TTFT –")
        self.set_badge("", "idle")

    def set_badge(self, submodel: str, phase: str = "") -> None:
        text = f"{submodel} {phase}".strip()
        self.badge.setText(text)
        if submodel != self._badge_key:  # a style sheet per change of submodel, not per token
            self._badge_key = submodel
            color = self.colors.get(submodel, "#888888")
            self.badge.setStyleSheet(f"background:{color}; color:white; border-radius:9px; padding:2px 8px;"
                                     "font-weight:bold;")

    def on_tokens(self, batch) -> None:
        """The tokens of one frame (app.reply.TokenBatch), with the reply's time to first token and speed
        so far (the runtime's Progress): one update of each part, whatever the number of tokens."""
        if self.badge.text() != f"{batch.submodel} {batch.phase}":
            self.set_badge(batch.submodel, batch.phase)
        self.sparkline.add_many(batch.points)
        self.ttft.setText(f"TTFT {batch.ttft_ms:.0f} ms")
        now = time.monotonic()
        if batch.tokens_per_s > 0 and (self._speed_at is None or now - self._speed_at >= SPEED_EVERY_S):
            self.speed.setText(f"{batch.tokens_per_s:.1f} tok/s")  # (the reply's end shows its final speed)
            self._speed_at = now

    def on_switch(self, old: str, new: str, tokens: int, ms: float, reason: str = "answer") -> None:
        """A switch where it happened: a mark on the sparkline, a note with its reason and re-prefill cost
        (the newest switch; the tooltip lists every switch of the reply)."""
        self.set_badge(new, "" if reason == "answer" else "thinking")
        self.sparkline.mark(reason)
        why = SWITCH_WHY.get(reason, f" ({reason})")
        self.switches.append(f"{old} → {new}{why}: re-prefilled {tokens} tok in {ms:.0f} ms")
        self.switch_note.setText(self.switches[-1])  # the newest; all of the reply's in the tooltip
        if len(self.switches) > 1:
            self.switch_note.setToolTip("This reply's switches of submodel, oldest first:\n" + "\n".join(self.switches))

    def on_done(self, done) -> None:
        produced = done.thinking_tokens + done.answer_tokens > 0  # (a reply stopped before its first token: "–")
        self.ttft.setText(f"TTFT {done.ttft_ms:.0f} ms" if produced else "TTFT –")
        self.speed.setText(f"{done.tokens_per_s:.1f} tok/s" if produced and done.tokens_per_s > 0 else "– tok/s")
        self.set_badge(done.answer_submodel, "✓" if done.finish_reason == "end_of_turn"
                       else finish_words(done.finish_reason))
