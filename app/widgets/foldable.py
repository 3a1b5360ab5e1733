"""A frame whose first line (a toggle with an arrow) opens and closes what is under it: a reply's thinking,
a tool call's arguments and result."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QFrame, QSizePolicy, QToolButton, QVBoxLayout, QWidget

MIN_CHARS = 12  # the fewest letters a squeezed toggle shows before its "…"


class ElidingToggle(QToolButton):
    """A toggle whose text never widens the chat: it asks for room for its whole text, accepts less and
    then shows the text cut with "…", the whole of it in its tooltip. `text()` is always the whole text."""

    def __init__(self):
        super().__init__()
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)

    def setText(self, text: str) -> None:  # Qt's name
        text = text or ""
        if text == self._full:
            return
        fm = self.fontMetrics()
        wider = fm.horizontalAdvance(text) != fm.horizontalAdvance(self._full)
        self._full = text
        self._elide()
        if wider:  # the layout shares out its room again (a live count's width rarely changes)
            self.updateGeometry()

    def text(self) -> str:
        return self._full

    def shown(self) -> str:
        """What is painted: the whole text or a shortened one."""
        return QToolButton.text(self)

    def is_elided(self) -> bool:
        return self.shown() != self._full

    def _extra(self) -> int:
        """Width the button adds around its text (the arrow, padding)."""
        return QToolButton.sizeHint(self).width() - self.fontMetrics().horizontalAdvance(self.shown())

    def _elide(self) -> None:
        room = self.width() - self._extra() if self.isVisible() else self.fontMetrics().horizontalAdvance(self._full)
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(room, 0))
        if shown != self.shown():
            QToolButton.setText(self, shown)
        self.setToolTip(self._full if shown != self._full else "")

    def sizeHint(self) -> QSize:  # room for the whole text
        return QSize(self._extra() + self.fontMetrics().horizontalAdvance(self._full) + 1,
                     QToolButton.sizeHint(self).height())

    def minimumSizeHint(self) -> QSize:
        least = self.fontMetrics().horizontalAdvance(self._full[:MIN_CHARS] + "…")
        return QSize(self._extra() + min(least, self.fontMetrics().horizontalAdvance(self._full)) + 1,
                     QToolButton.minimumSizeHint(self).height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._elide()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._elide()


class Foldable(QFrame):
    def __init__(self, name: str, body: QWidget, margins: tuple[int, int, int, int], opened: bool):
        """`name`: the frame's object name (the theme styles it; its toggle is `<name>Toggle`)."""
        super().__init__()
        self.setObjectName(name)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*margins)
        self.toggle = ElidingToggle()
        self.toggle.setObjectName(f"{name}Toggle")
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setCheckable(True)
        self.toggle.setChecked(opened)
        self.toggle.toggled.connect(self._set_open)
        self.body = body
        layout.addWidget(self.toggle)
        layout.addWidget(body)
        self._set_open(opened)

    def _set_open(self, open_: bool) -> None:
        self.body.setVisible(open_)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
