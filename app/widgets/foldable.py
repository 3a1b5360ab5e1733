"""A frame whose first line (a toggle with an arrow) opens and closes what is under it: a reply's thinking,
a tool call's arguments and result."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QToolButton, QVBoxLayout, QWidget


class Foldable(QFrame):
    def __init__(self, name: str, body: QWidget, margins: tuple[int, int, int, int], opened: bool):
        """`name`: the frame's object name (the theme styles it; its toggle is `<name>Toggle`)."""
        super().__init__()
        self.setObjectName(name)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*margins)
        self.toggle = QToolButton()
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
