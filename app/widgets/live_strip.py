"""The live strip: which submodel is producing tokens, a per-token latency sparkline coloured
by submodel, time to first token, tokens/s, memory in use, and the compute path."""

from __future__ import annotations

from collections import deque

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

PALETTE = ["#3b82f6", "#f59e0b", "#a855f7", "#ec4899"]  # smaller submodels, smallest first
PARENT_COLOR = "#76b900"  # the largest submodel


class Sparkline(QWidget):
    """Milliseconds per token, newest on the right, one colour per submodel."""

    def __init__(self, capacity: int = 160):
        super().__init__()
        self.points: deque[tuple[float, str]] = deque(maxlen=capacity)
        self.colors: dict[str, str] = {}
        self.setMinimumSize(220, 34)
        self.setToolTip("Latency of each token (ms), coloured by the submodel that produced it")

    def add(self, ms: float, submodel: str) -> None:
        self.points.append((ms, submodel))
        self.update()

    def clear(self) -> None:
        self.points.clear()
        self.update()

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        w, h = self.width(), self.height()
        p.setPen(QPen(self.palette().mid().color(), 1))
        p.drawRect(0, 0, w - 1, h - 1)
        if not self.points:
            return
        top = max(ms for ms, _ in self.points) or 1.0
        step = (w - 4) / max(1, self.points.maxlen - 1)
        x0 = w - 2 - step * (len(self.points) - 1)
        for i, (ms, sub) in enumerate(self.points):
            x = x0 + i * step
            y = h - 3 - (h - 6) * min(ms / top, 1.0)
            p.setPen(QPen(QColor(self.colors.get(sub, "#888888")), max(1.5, step - 0.5)))
            p.drawLine(QPointF(x, h - 3), QPointF(x, y))
        p.setPen(self.palette().text().color())
        p.drawText(4, 12, f"{top:.0f} ms")


class LiveStrip(QWidget):
    def __init__(self):
        super().__init__()
        self.setObjectName("liveStrip")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        self.badge = QLabel("idle")
        self.badge.setObjectName("badge")
        self.badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.badge.setMinimumWidth(120)
        self.badge.setToolTip("The submodel producing the current token")
        self.switch_note = QLabel("")
        self.switch_note.setObjectName("stat")
        self.sparkline = Sparkline()
        self.ttft = QLabel("TTFT –")
        self.speed = QLabel("– tok/s")
        self.memory = QLabel("")
        self.path = QLabel("")
        for w in (self.ttft, self.speed, self.memory, self.path):
            w.setObjectName("stat")
        row.addWidget(self.badge)
        row.addWidget(self.switch_note)
        row.addWidget(self.sparkline, 1)
        for w in (self.ttft, self.speed, self.memory, self.path):
            row.addWidget(w)
        self.colors: dict[str, str] = {}
        self.tokens = 0
        self.first_token_s = None

    def set_submodels(self, names_by_size) -> None:
        n = len(names_by_size)
        self.colors = {name: PARENT_COLOR if i == n - 1 else PALETTE[i % len(PALETTE)]
                       for i, name in enumerate(names_by_size)}
        self.sparkline.colors = self.colors

    def set_path(self, text: str) -> None:
        self.path.setText(text)
        self.path.setToolTip("The compute path running the model's matmuls")

    def set_memory(self, text: str) -> None:
        self.memory.setText(text)

    def reset(self) -> None:
        self.sparkline.clear()
        self.switch_note.setText("")
        self.ttft.setText("TTFT …")
        self.speed.setText("– tok/s")
        self.tokens = 0

    def set_badge(self, submodel: str, phase: str = "") -> None:
        color = self.colors.get(submodel, "#888888")
        text = f"{submodel} {phase}".strip()
        self.badge.setText(text)
        self.badge.setMinimumWidth(max(120, self.badge.fontMetrics().horizontalAdvance(text) + 32))
        self.badge.setStyleSheet(f"background:{color}; color:white; border-radius:9px; padding:2px 8px;"
                                 "font-weight:bold;")

    def on_token(self, submodel: str, phase: str, latency_ms: float, elapsed_s: float) -> None:
        if self.badge.text() != f"{submodel} {phase}":
            self.set_badge(submodel, phase)
        self.sparkline.add(latency_ms, submodel)
        self.tokens += 1
        if self.tokens == 1:
            self.ttft.setText(f"TTFT {latency_ms:.0f} ms")
        elif elapsed_s > 0:
            self.speed.setText(f"{(self.tokens - 1) / elapsed_s:.1f} tok/s")

    def on_switch(self, old: str, new: str, tokens: int, ms: float) -> None:
        self.set_badge(new)
        self.switch_note.setText(f"{old} → {new}: re-prefilled {tokens} tokens in {ms:.0f} ms")

    def on_done(self, done) -> None:
        self.ttft.setText(f"TTFT {done.ttft_ms:.0f} ms")
        self.speed.setText(f"{done.tokens_per_s:.1f} tok/s")
        self.set_badge(done.answer_submodel, "✓" if done.finish_reason == "end_of_turn"
                       else done.finish_reason.replace("_", " "))
