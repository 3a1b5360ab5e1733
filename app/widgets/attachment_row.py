"""The files attached to the message being written: each with its size in tokens and a remove button.

A chip's marks are icons from the style (a file, a close cross), never emoji or dingbats: the fonts a
PC has often lack 📎 and ✕, which then show as an empty box (issue 38)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QStyle, QToolButton, QWidget

ICON_PX = 14  # the file icon beside a chip's name
KEPT = (". The message you are editing was sent with it: the new version keeps it and sends its text again, "
        "unless you remove it here (Esc cancels the edit).")


class AttachmentRow(QWidget):
    """Dumb: shows what the controller's `sig_attachments` says; the close button asks to remove one
    (`sig_remove`)."""

    sig_remove = Signal(int)

    def __init__(self):
        super().__init__()
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch()
        self.items: list[QWidget] = []
        self.setVisible(False)

    def show_files(self, files) -> None:
        """`files`: [(name, tokens or -1, note[, how[, kept]])]: `how` says how the tokens were counted when it
        was not the model's own tokenizer (an estimate, and why), or why they were not ("" and -1: counting);
        `kept`: a file of a sent message being edited, which its new version keeps unless removed."""
        for w in self.items:
            self.row.removeWidget(w)
            w.deleteLater()
        self.items = [self._chip(i, *file) for i, file in enumerate(files)]
        for i, chip in enumerate(self.items):
            self.row.insertWidget(i, chip)
        self.setVisible(bool(files))

    def _chip(self, i: int, name: str, tokens: int, note: str, how: str = "", kept: bool = False) -> QWidget:
        chip = QWidget()
        chip.setObjectName("attachment")
        line = QHBoxLayout(chip)
        line.setContentsMargins(6, 0, 0, 0)
        line.setSpacing(4)
        style = self.style()
        icon = QLabel()
        icon.setObjectName("attachmentIcon")
        icon.setPixmap(style.standardIcon(QStyle.StandardPixmap.SP_FileIcon).pixmap(ICON_PX, ICON_PX))
        size = chip_size(tokens, how)
        label = QLabel(f"{name} · {size}" + (" · kept" if kept else ""))
        label.setToolTip(f"{name}: {size} of the context" + (f" ({how})" if how else "") + (f"; {note}" if note else "")
                         + (KEPT if kept else ". Its text is sent with your message."))
        line.addWidget(icon)
        line.addWidget(label)
        line.addWidget(self._remove_button(i, name))
        return chip

    def _remove_button(self, i: int, name: str) -> QToolButton:
        style = self.style()
        remove = QToolButton()
        remove.setIcon(style.standardIcon(QStyle.StandardPixmap.SP_TitleBarCloseButton))
        remove.setAutoRaise(True)
        remove.setToolTip(f"Remove {name}")
        remove.setAccessibleName(f"Remove {name}")
        remove.clicked.connect(lambda _=False, i=i: self.sig_remove.emit(i))
        return remove


def chip_size(tokens: int, how: str) -> str:
    """A chip's size: counted, estimated (`how` says from what), not counted (`how` says why), or counting."""
    if tokens >= 0:
        return f"about {tokens:,} tokens (estimated)" if how.startswith("estimated") else f"{tokens:,} tokens"
    return "not counted" if how else "counting…"
