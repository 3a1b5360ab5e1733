"""The face of a model load: a bar of bytes read, one line saying what and how long, and Cancel.

Dumb: the window shows it when a load starts (`start`), feeds it the runtime's `LoadProgress`
values (already throttled by the worker), and hides it when the load ends (`finish`). Pressing
Cancel only emits `sig_cancel`; the controller sets the worker's flag, which the loader checks
between tensors.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget

from .elided_label import ElidedLabel

STEPS = 1000  # the bar's resolution (bytes do not fit a QProgressBar's int)


class LoadProgress(QWidget):
    sig_cancel = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, STEPS)
        self.bar.setTextVisible(False)
        self.bar.setAccessibleName("Model loading progress")
        self.text = ElidedLabel("", min_chars=12)  # its line never widens the window (it did, past the screen)
        self.cancel = QPushButton("Cancel")
        self.cancel.setToolTip("Stop loading this model (nothing stays loaded)")
        self.cancel.clicked.connect(self._cancel)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.text, 2)
        row.addWidget(self.bar, 1)
        row.addWidget(self.cancel)
        self.name = ""
        self.setVisible(False)

    def start(self, name: str) -> None:
        """A load of model `name` began."""
        self.name = name
        self.bar.setValue(0)
        self._say(f"Loading {name}…")
        self.cancel.setEnabled(True)
        self.setVisible(True)

    @Slot(object)
    def update_progress(self, p) -> None:
        """`p`: a runtime.checkpoint.reader.LoadProgress."""
        self.bar.setValue(round(STEPS * p.fraction))
        self._say(f"{self.name}: {p.line()}")

    def _say(self, line: str) -> None:
        self.text.setText(line)
        self.text.setToolTip(line)  # the whole line, where the label is too narrow for it

    def finish(self) -> None:
        self.setVisible(False)

    @Slot()
    def _cancel(self) -> None:
        self.cancel.setEnabled(False)
        self._say(f"Cancelling the load of {self.name}…")
        self.sig_cancel.emit()
