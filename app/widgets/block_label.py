"""A word-wrapping label that keeps its height for each width until its text, font or style changes.

A rendered markdown block never changes, but the chat's layout asks every block of a message for its height
again whenever anything in the message moves (the streaming tail, a label of the header): about five times
per block per frame, and QLabel lays its text out again each time. With 25 blocks that was 5-10 ms of the
GUI thread per frame (issue 38, item 1: the window at its engine's pace). A kept height is what QLabel
would say: it is forgotten whenever something it depends on changes.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QLabel

FORGETS = (QEvent.Type.FontChange, QEvent.Type.ApplicationFontChange, QEvent.Type.StyleChange,
           QEvent.Type.LayoutDirectionChange, QEvent.Type.ContentsRectChange)
KEPT = 8  # widths kept at most (a window being resized asks for many)


class BlockLabel(QLabel):
    def __init__(self):
        super().__init__()
        self._heights: dict[int, int] = {}  # width -> the height QLabel gave for it

    def setText(self, text: str) -> None:  # Qt's name
        self._heights.clear()
        super().setText(text)

    def heightForWidth(self, width: int) -> int:  # Qt's name
        height = self._heights.get(width)
        if height is None:
            if len(self._heights) >= KEPT:
                self._heights.clear()
            height = self._heights[width] = super().heightForWidth(width)
        return height

    def changeEvent(self, event) -> None:
        if event.type() in FORGETS:
            self._heights.clear()
        super().changeEvent(event)
