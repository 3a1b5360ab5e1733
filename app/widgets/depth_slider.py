"""The reasoning-depth slider: stops from the runtime's depth table; a stop whose submodel does
not fit is disabled, with the planner's reason as its tooltip."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QLabel, QSlider, QVBoxLayout, QWidget


@dataclass(frozen=True)
class SliderStop:
    name: str
    detail: str  # "0.5M thinks ≤12 tokens → 1.5M answers"
    enabled: bool
    reason: str  # why it is disabled


def slider_stops(stops, reasons: dict[str, str]) -> list[SliderStop]:
    """Stops from `runtime.depth` with what to say about each; `reasons` maps a submodel that is
    not in memory to the planner's explanation."""
    out = []
    for s in stops:
        detail = (f"{s.think} thinks ≤{s.budget} tokens → {s.answer} answers" if s.think
                  else f"no thinking → {s.answer} answers")
        reason = "" if s.available else reasons.get(s.missing, f"{s.missing} is not in memory")
        out.append(SliderStop(s.name, detail, s.available, reason))
    return out


class DepthSlider(QWidget):
    sig_changed = Signal(str)  # the stop's name; applies to the next reply

    def __init__(self):
        super().__init__()
        self.stops: list[SliderStop] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        title = QLabel("Reasoning depth")
        title.setObjectName("sectionTitle")
        layout.addWidget(title)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.slider.setPageStep(1)
        self.slider.valueChanged.connect(self._moved)
        layout.addWidget(self.slider)
        self.labels = QGridLayout()
        layout.addLayout(self.labels)
        self.detail = QLabel("")
        self.detail.setObjectName("depthDetail")
        self.detail.setWordWrap(True)
        layout.addWidget(self.detail)
        self._current = 0

    def set_stops(self, stops: list[SliderStop], selected: str) -> None:
        self.stops = stops
        while self.labels.count():
            old = self.labels.takeAt(0).widget()
            old.hide()
            old.deleteLater()
        for i, s in enumerate(stops):
            label = QLabel(s.name)
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            label.setEnabled(s.enabled)
            label.setToolTip(s.detail if s.enabled else f"Unavailable: {s.reason}")
            self.labels.addWidget(label, 0, i)
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, len(stops) - 1))
        index = self._index(selected)
        if index is None or not stops[index].enabled:
            index = self._nearest_enabled(index or 0)
        self._current = index
        self.slider.setValue(index)
        self.slider.blockSignals(False)
        self._show(index)

    def _index(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.stops) if s.name.lower() == (name or "").lower()), None)

    def _nearest_enabled(self, index: int) -> int:
        enabled = [i for i, s in enumerate(self.stops) if s.enabled]
        return min(enabled, key=lambda i: (abs(i - index), -i)) if enabled else 0

    def _moved(self, index: int) -> None:
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

    def _show(self, index: int) -> None:
        if self.stops:
            s = self.stops[index]
            self.detail.setText(f"{s.name}: {s.detail}  (applies to the next reply)")
            self.slider.setToolTip(s.detail)

    @property
    def selected(self) -> str:
        return self.stops[self._current].name if self.stops else ""
