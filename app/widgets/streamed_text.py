"""A selectable plain text that grows as it streams, at the cost of what it adds (issue 38, item 1).

A word-wrapping QLabel given a longer text lays the whole text out again, several times (its size hints
at more than one width): at 30 frames a second a 6,500-character thought took 25-43 ms of the GUI
thread per frame, time the engine's worker thread waited for the GIL. Here the text lives in a
QTextDocument; a text that extends the one shown gets only its new characters inserted at the end, so
only the last paragraph is laid out again. A text that is not an extension (replaced) is set whole.
It looks like the label it replaces: the application's font and the theme's colour for its object name,
no frame, no background, no scroll bars, wrapping at the width it is given (anywhere inside a word too
long for a line), its height that of its text.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette, QTextCursor, QTextOption
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextEdit


class StreamedText(QTextEdit):
    def __init__(self, object_name: str = ""):
        super().__init__()
        if object_name:
            self.setObjectName(object_name)
        self.setReadOnly(True)
        self.setAcceptRichText(False)
        self.setUndoRedoEnabled(False)  # an undo stack would keep every insert of a long reply
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # Ctrl+C copies still
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # as a selectable label: never a Tab stop
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.viewport().setAutoFillBackground(False)  # the frame around it shows through (theme.py says so too)
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Base, Qt.GlobalColor.transparent)
        self.setPalette(palette)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(0)  # a label's text starts at its edge
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._text = ""
        self._fit_height()

    def text(self) -> str:
        """The whole text shown (as a label's `text()`)."""
        return self._text

    def setText(self, text: str) -> None:  # a label's name, so callers need not know which it is
        """Shows `text`: only its new end when it extends the text shown, else the whole of it."""
        text = text or ""
        if text == self._text:
            return
        if self._text and text.startswith(self._text):
            cursor = QTextCursor(self.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text[len(self._text):])
        else:
            self.setPlainText(text)
        self._text = text

    def wheelEvent(self, event) -> None:
        event.ignore()  # it never scrolls itself: the chat around it scrolls

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit_height()

    def _fit_height(self, *_) -> None:
        """Its height follows the text's at its width (one more line's worth only when a line is added).
        Hidden (a folded thought, a chat being built), it is not measured: that would lay out the whole text
        at a width it may never have; it is measured when shown."""
        if not self.isVisible():
            return
        height = math.ceil(self.document().size().height()) + 2 * self.frameWidth()
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(max(height, 1))
