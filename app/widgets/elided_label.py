"""A one-line label that never widens the window: it asks for room for its whole text but
accepts less, shows "…" when squeezed, and then carries the whole text in its tooltip.

A label given `shorter` (a function from its text to shorter forms of it, longest first) is
"readable": squeezed, it shows the longest form that fits whole, and its minimum width is its
shortest form whole, never a letter and "…". A row that has no room even for that drops the label
(app/widgets/priority_row.py) rather than show "R… S… C…"."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", tooltip: str = "", min_chars: int = 6,
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight,
                 shorter: Callable[[str], list[str]] | None = None):
        super().__init__()
        self._full, self._tip, self._min_chars, self._mode = "", tooltip, min_chars, mode
        self._shorter = shorter
        self._forms: list[str] = [""]  # the whole text, then its shorter forms (readable labels only)
        # Its texts' widths, kept until the text, the font or the style changes: a row lays itself out
        # again at every frame of a streaming reply, asking each label several times.
        self._measured: dict[str, int] = {}
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setText(text)

    # The full text is the label's value; what is painted is a shortened copy.
    def setText(self, text: str) -> None:  # Qt's name
        text = text or ""
        if text == self._full:
            return
        fm = self.fontMetrics()
        old_least = self._least_width()
        wider = fm.horizontalAdvance(text) != fm.horizontalAdvance(self._full)
        self._full = text
        self._forms = [text, *(self._shorter(text) if self._shorter and text else [])]
        self._forget()
        self._elide()
        if wider or self._least_width() != old_least:  # the row shares out its room again (not per token)
            self.updateGeometry()

    def text(self) -> str:
        return self._full

    def shown(self) -> str:
        """What is painted: the whole text, a shorter form of it, or an elided one."""
        return super().text()

    @property
    def readable(self) -> bool:
        return self._shorter is not None

    def setToolTip(self, tip: str) -> None:
        self._tip = tip
        self._elide()

    def is_elided(self) -> bool:
        return super().text() != self._full

    def _elide(self) -> None:
        room = self.contentsRect().width() - 2 * self.margin()
        fm = self.fontMetrics()
        shown = next((form for form in self._forms if fm.horizontalAdvance(form) <= room), None)
        if shown is None:
            shown = fm.elidedText(self._forms[-1], self._mode, room)
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
            self._forget()
            self._elide()
            self.updateGeometry()

    def _forget(self) -> None:
        self._measured.clear()

    def _measure(self, name: str, how: Callable[[], int]) -> int:
        if name not in self._measured:
            self._measured[name] = how()
        return self._measured[name]

    def event(self, event) -> bool:  # a style polishes the label when it is first shown: measure again
        if event.type() == event.Type.Polish:
            self._forget()
        return super().event(event)

    def _extra(self) -> int:
        """Width the label adds around its text (margins, stylesheet padding): QLabel keeps its own hint."""
        return super().sizeHint().width() - self.fontMetrics().horizontalAdvance(super().text())

    def _least_width(self) -> int:
        """The narrowest text it shows: its shortest form whole (readable), else a few characters and "…"."""
        def least() -> int:
            fm = self.fontMetrics()
            if self.readable:
                return min((fm.horizontalAdvance(form) for form in self._forms), default=0)
            return min(fm.horizontalAdvance(self._full), fm.horizontalAdvance("x" * self._min_chars + "…"))
        return self._measure("least", least)

    def sizeHint(self) -> QSize:  # room for the whole text
        whole = self._measure("whole", lambda: self.fontMetrics().horizontalAdvance(self._full))
        return QSize(self._extra() + whole + 1, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self._extra() + self._least_width() + 1, super().minimumSizeHint().height())
