"""The files attached to the message being written: each with its size in tokens and a remove button."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class AttachmentRow(QWidget):
    """Dumb: shows what the controller's `sig_attachments` says; ✕ asks to remove one (`sig_remove`)."""

    sig_remove = Signal(int)

    def __init__(self):
        super().__init__()
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch()
        self.items: list[QWidget] = []
        self.setVisible(False)

    def show_files(self, files) -> None:
        """`files`: [(name, tokens or -1 while counting, note)]."""
        for w in self.items:
            self.row.removeWidget(w)
            w.deleteLater()
        self.items = []
        for i, (name, tokens, note) in enumerate(files):
            chip = QWidget()
            chip.setObjectName("attachment")
            line = QHBoxLayout(chip)
            line.setContentsMargins(6, 0, 0, 0)
            size = f"{tokens:,} tokens" if tokens >= 0 else "counting…"
            label = QLabel(f"📎 {name} · {size}")
            label.setToolTip(f"{name}: {size} of the context" + (f"; {note}" if note else "")
                             + ". Its text is sent with your message.")
            remove = QToolButton()
            remove.setText("✕")
            remove.setAutoRaise(True)
            remove.setToolTip(f"Remove {name}")
            remove.clicked.connect(lambda _=False, i=i: self.sig_remove.emit(i))
            line.addWidget(label)
            line.addWidget(remove)
            self.row.insertWidget(i, chip)
            self.items.append(chip)
        self.setVisible(bool(files))
