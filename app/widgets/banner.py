"""A line of notice across the window, with a button that closes it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QToolButton


class Banner(QFrame):
    """Hidden until it has something to say; its ✕ hides it (and says so: `sig_closed`). The theme styles
    it by its object name (`banner`, `errorBanner`)."""

    sig_closed = Signal()

    def __init__(self, name: str):
        super().__init__()
        self.setObjectName(name)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # its lines name chats, files, servers: text, not markup
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.close_button = QToolButton()
        self.close_button.setObjectName("bannerClose")
        self.close_button.setText("✕")
        self.close_button.setToolTip("Close this note")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self._close)
        row.addWidget(self.label, 1)
        row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self.setVisible(False)

    def text(self) -> str:
        return self.label.text()

    def setText(self, text: str) -> None:  # the QLabel name its callers use
        self.label.setText(text)

    def _close(self) -> None:
        self.setVisible(False)
        self.sig_closed.emit()
