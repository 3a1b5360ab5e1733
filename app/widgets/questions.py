"""A yes/no question whose text is shown as written.

QMessageBox.question reads its text as rich text when it looks like HTML, so a chat titled
"vector<int> sort" was asked about as "vector sort", and "<b>$5</b>" came out bold (a real-window session).
Names in a question come from the user, a checkpoint or a server: they are text, never markup."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget


def ask(parent: QWidget | None, title: str, text: str) -> bool:
    """Asks `text` with Yes and No (No the default); True for Yes."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setDefaultButton(QMessageBox.StandardButton.No)
    return box.exec() == QMessageBox.StandardButton.Yes
