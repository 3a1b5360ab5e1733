"""The selectable plain-text label the tool views share (what a tool call or its consent shows is text from
outside: never rich text, never links)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QLabel


def plain_label(text: str, object_name: str = "", mono: bool = False) -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if object_name:
        label.setObjectName(object_name)
    if mono:
        label.setFont(QFont("monospace"))
    label.setText(text)
    return label
