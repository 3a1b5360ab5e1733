"""A one-line label that never widens the window: it asks for room for its whole text but
accepts a few characters, shows "…" when squeezed, and then carries the whole text in its tooltip."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", tooltip: str = "", min_chars: int = 6,
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight):
        super().__init__()
        self._full, self._tip, self._min_chars, self._mode = "", tooltip, min_chars, mode
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setText(text)

    # The full text is the label's value; what is painted is a shortened copy.
    def setText(self, text: str) -> None:  # Qt's name
        text = text or ""
        if text == self._full:
            return
        fm = self.fontMetrics()
        wider = fm.horizontalAdvance(text) != fm.horizontalAdvance(self._full)
        self._full = text
        self._elide()
        if wider:  # a new width: the row shares out its room again (not on every token's new number)
            self.updateGeometry()

    def text(self) -> str:
        return self._full

    def setToolTip(self, tip: str) -> None:
        self._tip = tip
        self._elide()

    def is_elided(self) -> bool:
        return super().text() != self._full

    def _elide(self) -> None:
        room = self.contentsRect().width() - 2 * self.margin()
        shown = self.fontMetrics().elidedText(self._full, self._mode, room)
        if shown != super().text():
            QLabel.setText(self, shown)
        tip = self._tip
        if shown != self._full and self._full:
            tip = f"{self._full}\n{tip}" if tip and tip != self._full else self._full
        QLabel.setToolTip(self, tip)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._elide()

    def changeEvent(self, event) -> None:  # a font change re-measures
        super().changeEvent(event)
        if event.type() in (event.Type.FontChange, event.Type.StyleChange):
            self._elide()
            self.updateGeometry()

    def _extra(self) -> int:
        """Width the label adds around its text (margins, stylesheet padding)."""
        fm = self.fontMetrics()
        return super().sizeHint().width() - fm.horizontalAdvance(super().text())

    def sizeHint(self) -> QSize:  # room for the whole text
        hint = super().sizeHint()
        return QSize(self._extra() + self.fontMetrics().horizontalAdvance(self._full) + 1, hint.height())

    def minimumSizeHint(self) -> QSize:  # a few characters and the ellipsis
        fm = self.fontMetrics()
        least = min(fm.horizontalAdvance(self._full), fm.horizontalAdvance("x" * self._min_chars + "…"))
        return QSize(self._extra() + least + 1, super().minimumSizeHint().height())
