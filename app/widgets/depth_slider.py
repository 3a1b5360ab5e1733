"""The reasoning-depth slider: stops from the runtime's depth table; a stop whose submodel does
not fit is disabled, with the planner's reason as its tooltip.

Each stop's label sits under its tick and says who thinks and with what budget (the runtime's
table, sized from the checkpoint's ceiling). Clicking a label or anywhere on the groove jumps
straight to that stop; the handle shows a focus ring when the keyboard is on it.

A move applies to the next reply; while a reply thinks it also moves the rest of that thought (the
controller does it; `set_live` only changes what the line under the slider says). Any list of stops
renders: names, thinkers and budgets all come from the stops."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QLabel, QSizePolicy, QSlider, QStyle, QStyleOptionSlider, QVBoxLayout, QWidget

from .elided_label import ElidedLabel


@dataclass(frozen=True)
class SliderStop:
    name: str
    detail: str  # "0.5M thinks ≤12 tokens → 1.5M answers"
    enabled: bool
    reason: str  # why it is disabled
    budget: str = ""  # under the name: who thinks and its budget in tokens, "0.5M ≤12"; "none"
    about: str = ""  # the depth table's description of the stop


def slider_stops(stops, reasons: dict[str, str]) -> list[SliderStop]:
    """Stops from `runtime.depth` with what to say about each; `reasons` maps a submodel that is
    not in memory to the planner's explanation."""
    out = []
    for s in stops:
        detail = (f"{s.think} thinks ≤{s.budget} tokens → {s.answer} answers" if s.think
                  else f"no thinking → {s.answer} answers")
        if s.estimated:  # DepthLevel.estimated: why this stop is never the default
            detail += (f" · {s.think}'s widths are only estimated, so its thinking may be poor; Verify nesting in "
                       "the model manager")
        reason = "" if s.available else s.unavailable or reasons.get(s.missing, f"{s.missing} is not in memory")
        budget = f"{s.think} ≤{s.budget}" if s.think else "none"
        out.append(SliderStop(s.name, detail, s.available, reason, budget, s.about))
    return out


class StopSlider(QSlider):
    """A slider that jumps to where it is clicked and rings its handle when it has focus."""

    sig_ticks_moved = Signal()  # resized, or a font or style change moved its ticks

    def __init__(self):
        super().__init__(Qt.Orientation.Horizontal)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.setPageStep(1)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def _option(self) -> QStyleOptionSlider:
        opt = QStyleOptionSlider()
        self.initStyleOption(opt)
        return opt

    def _rect(self, control):
        return self.style().subControlRect(QStyle.ComplexControl.CC_Slider, self._option(), control, self)

    def tick_x(self, value: int) -> float:
        """Where the tick of `value` is, in this widget's coordinates."""
        groove, handle = self._rect(QStyle.SubControl.SC_SliderGroove), self._rect(QStyle.SubControl.SC_SliderHandle)
        span = groove.width() - handle.width()
        return groove.x() + handle.width() / 2 + QStyle.sliderPositionFromValue(self.minimum(), self.maximum(),
                                                                                value, span)

    def value_at(self, x: float) -> int:
        return min(range(self.minimum(), self.maximum() + 1), key=lambda v: abs(self.tick_x(v) - x))

    def mousePressEvent(self, event) -> None:
        if (event.button() == Qt.MouseButton.LeftButton
                and not self._rect(QStyle.SubControl.SC_SliderHandle).contains(event.position().toPoint())):
            self.setValue(self.value_at(event.position().x()))  # a jump, not Qt's one page step
        super().mousePressEvent(event)  # the handle is under the pointer now: a drag may follow

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.sig_ticks_moved.emit()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self.sig_ticks_moved.emit()

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        handle = QRectF(self._rect(QStyle.SubControl.SC_SliderHandle))
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setBrush(Qt.BrushStyle.NoBrush)
        outline = QColor(self.palette().text().color())  # the handle stands out on a dark groove too
        outline.setAlpha(150)
        p.setPen(QPen(outline, 1))
        p.drawRoundedRect(handle.adjusted(0.5, 0.5, -0.5, -0.5), 3, 3)
        if self.hasFocus():  # the keyboard is here: a ring in the accent colour, on the handle's edge
            p.setPen(QPen(self.palette().highlight().color(), 2.5))  # (outside it would be clipped)
            p.drawRoundedRect(handle.adjusted(1.25, 1.25, -1.25, -1.25), 3, 3)
        p.end()


class _StopLabel(QLabel):
    """A stop's name over its thinking budget; just the name where two lines do not fit."""

    clicked = Signal()

    def __init__(self, name: str, budget: str):
        super().__init__()
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.long = f"{name}<br><small>{budget}</small>" if budget else name
        self.short = name
        self.setText(self.long)

    def size_of(self, long: bool) -> QSize:
        shown = self.text()
        self.setText(self.long if long else self.short)
        size = self.sizeHint()
        self.setText(shown)
        return size

    def use(self, long: bool) -> None:
        text = self.long if long else self.short
        if self.text() != text:
            self.setText(text)

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mousePressEvent(event)


class _TickLabels(QWidget):
    """The stops' labels, each centred under its tick; the end ones kept inside the edges."""

    GAP = 6

    def __init__(self, slider: StopSlider):
        super().__init__()
        self.slider = slider
        self.labels: list[_StopLabel] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # The labels follow the ticks: a resize of this row alone is not enough, since the slider may
        # get its new geometry after this row did, and a font change moves the ticks without a resize.
        slider.sig_ticks_moved.connect(self.place)

    def set_labels(self, labels: list[_StopLabel]) -> None:
        for old in self.labels:
            old.hide()
            old.deleteLater()
        self.labels = labels
        for label in labels:
            label.setParent(self)
            label.show()
        self.updateGeometry()
        self.place()

    def place(self) -> None:
        long = self.width() >= self._needed(long=True)
        offset = self.mapFromGlobal(self.slider.mapToGlobal(QPoint(0, 0))).x()
        for i, label in enumerate(self.labels):
            label.use(long)
            size = label.sizeHint()
            size.setHeight(self.height())
            x = round(offset + self.slider.tick_x(i) - size.width() / 2)
            label.setGeometry(max(0, min(x, self.width() - size.width())), 0, size.width(), size.height())

    def _needed(self, long: bool) -> int:
        """Wide enough that neighbouring labels, centred on evenly spaced ticks, do not touch."""
        if not self.labels:
            return 0
        widths = [label.size_of(long).width() for label in self.labels]
        pitch = max(((a + b) / 2 + self.GAP for a, b in zip(widths, widths[1:])), default=0)
        # the ends sit inside the edges, so half an end label is needed beyond its tick
        handle = self.slider.style().pixelMetric(QStyle.PixelMetric.PM_SliderLength, None, self.slider)
        ends = max(widths[0] / 2, handle / 2) + max(widths[-1] / 2, handle / 2)
        return round(pitch * (len(widths) - 1) + ends)

    def _height(self) -> int:  # the two-line height whichever is shown, so nothing below jumps
        return max((label.size_of(long=True).height() for label in self.labels), default=0)

    def sizeHint(self) -> QSize:
        return QSize(self._needed(long=True), self._height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self._needed(long=False), self._height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.place()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.place()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # the labels' sizes changed: so did what fits
            self.updateGeometry()
            self.place()


# What a move does now, by the phase of the reply shown (controller.sig_live_phase).
WHEN = {"": "applies to the next reply", "thinking": "applies now to this thought too",
        "answer": "applies to the next reply; this one is answering"}


class DepthSlider(QWidget):
    sig_changed = Signal(str)  # the stop's name; the next reply's depth (and the thought in flight's)

    def __init__(self):
        super().__init__()
        self.stops: list[SliderStop] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        title = QLabel("Reasoning depth")
        title.setObjectName("sectionTitle")
        layout.addWidget(title)
        self.slider = StopSlider()
        self.slider.valueChanged.connect(self._moved)
        layout.addWidget(self.slider)
        self.ticks = _TickLabels(self.slider)
        layout.addWidget(self.ticks)
        self.detail = ElidedLabel("", min_chars=8)  # one line whatever the font; the tooltip has the rest
        self.detail.setObjectName("depthDetail")
        layout.addWidget(self.detail)
        self._current = 0
        self.live = ""  # the phase of the reply shown (WHEN's keys)
        self.reply_note = ""  # what steering changed in the reply shown (app/steering.py's sig_budget_note)

    @property
    def labels(self) -> list[QLabel]:
        return self.ticks.labels

    def set_stops(self, stops: list[SliderStop], selected: str) -> None:
        """Shows `stops` with `selected` chosen: the depth's owner (app/depth_choice.py) has already
        resolved it to one the model can run; the slider keeps no fallback rule of its own."""
        self.stops = stops
        labels = []
        for i, s in enumerate(stops):
            label = _StopLabel(s.name, s.budget)
            label.setEnabled(s.enabled)
            label.setToolTip(self._tip(s) if s.enabled else f"Unavailable: {s.reason}")
            label.setCursor(Qt.CursorShape.PointingHandCursor)
            label.clicked.connect(lambda i=i: self.jump(i))
            labels.append(label)
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, len(stops) - 1))
        index = self._current = self._index(selected) or 0
        self.slider.setValue(index)
        self.slider.blockSignals(False)
        self.ticks.set_labels(labels)
        self._show(index)

    def jump(self, index: int) -> None:
        """A click on a stop's label: go straight there (or say why not)."""
        if 0 <= index < len(self.stops):
            if index == self.slider.value():
                self._moved(index)
            else:
                self.slider.setValue(index)
            self.slider.setFocus(Qt.FocusReason.MouseFocusReason)

    def _index(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.stops) if s.name.lower() == (name or "").lower()), None)

    def _moved(self, index: int) -> None:
        if not 0 <= index < len(self.stops):
            return
        stop = self.stops[index]
        if not stop.enabled:
            back = self._current
            self.slider.blockSignals(True)
            self.slider.setValue(back)
            self.slider.blockSignals(False)
            self.detail.setText(f"{stop.name} is unavailable: {stop.reason}")
            self.slider.setToolTip(stop.reason)
            return
        self._current = index
        self._show(index)
        self.sig_changed.emit(stop.name)

    def set_live(self, phase: str) -> None:
        """The reply shown is thinking, answering, or there is none ("")."""
        self.live = phase if phase in WHEN else ""
        self._show(self._current)

    def show_reply_note(self, note: str) -> None:
        """Leads the line under the slider while it holds: "this reply: budget raised to 24 tokens"."""
        self.reply_note = note
        self._show(self._current)

    @staticmethod
    def _tip(s: SliderStop) -> str:
        return f"{s.name}: {s.detail}" + (f". {s.about}" if s.about else "")

    def _show(self, index: int) -> None:
        if self.stops:
            s = self.stops[index]
            when = WHEN[self.live]
            note = self.reply_note[:1].upper() + self.reply_note[1:] + " · " if self.reply_note else ""
            self.detail.setText(f"{note}{s.name} · {s.detail} ({when})")
            self.slider.setToolTip(f"{self._tip(s)}\nA move {when}." + (f"\n{note[:-3]}." if note else ""))

    @property
    def selected(self) -> str:
        return self.stops[self._current].name if self.stops else ""
