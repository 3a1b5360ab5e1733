"""The per-call consent dialog: what the model wants to run (the tool, its server, its arguments pretty-
printed with long values folded) and three answers: Allow once, Always allow this tool in this chat,
Decline. Esc, closing the window and Enter decline (nothing runs by accident).

A dumb view: it shows a runtime.tool_loop.PendingCall and says what the user chose (`sig_decided` with
ALLOW_ONCE, ALLOW_IN_CHAT or DECLINE); the controller hands that to the waiting reply. Everything shown
came from the model or a server, so it is shown as plain text, never as rich text or a link.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

from runtime.api import ALLOW_IN_CHAT, ALLOW_ONCE, DECLINE, PendingCall, describe_arguments, for_approval

from .labels import plain_label

FOLD_CHARS = 200


class ToolConsentDialog(QDialog):
    sig_decided = Signal(str)  # ALLOW_ONCE, ALLOW_IN_CHAT or DECLINE

    def __init__(self, parent, call: PendingCall, calls_left: int | None = None):
        super().__init__(parent)
        self.call, self.answer = call, DECLINE
        self.setWindowTitle("Allow this tool call?")
        self.setModal(True)
        layout = QVBoxLayout(self)
        where = f" from the MCP server “{for_approval(call.server)}”" if call.server else ""
        self.title = plain_label(f"The model wants to run the tool “{for_approval(call.name)}”{where}.", "consentTitle")
        font = self.title.font()
        font.setBold(True)
        self.title.setFont(font)
        layout.addWidget(self.title)
        if call.description:
            layout.addWidget(plain_label(for_approval(call.description), "consentDescription"))
        layout.addWidget(plain_label("With these arguments:"))
        self.arguments = QPlainTextEdit()
        self.arguments.setReadOnly(True)
        self.arguments.setFont(QFont("monospace"))
        self.arguments.setObjectName("consentArguments")
        layout.addWidget(self.arguments, 1)
        self.folded = describe_arguments(call.arguments, FOLD_CHARS)
        self.whole = describe_arguments(call.arguments, fold=1 << 62)
        self.show_whole = QCheckBox("Show long values in full")
        self.show_whole.setVisible(self.folded != self.whole)
        self.show_whole.toggled.connect(self._show)
        layout.addWidget(self.show_whole)
        self._show(False)
        if calls_left is not None:
            layout.addWidget(plain_label(f"This reply may make {calls_left} more tool call"
                                    f"{'' if calls_left == 1 else 's'}.", "consentLimit"))
        buttons = QHBoxLayout()
        self.once = QPushButton("Allow once")
        self.in_chat = QPushButton("Always allow this tool in this chat")
        self.decline = QPushButton("Decline")
        for button in (self.once, self.in_chat):
            button.setAutoDefault(False)
        self.decline.setDefault(True)  # Enter declines; allowing takes a deliberate click
        self.once.clicked.connect(lambda: self._decide(ALLOW_ONCE))
        self.in_chat.clicked.connect(lambda: self._decide(ALLOW_IN_CHAT))
        self.decline.clicked.connect(lambda: self._decide(DECLINE))
        buttons.addWidget(self.once)
        buttons.addWidget(self.in_chat)
        buttons.addStretch(1)
        buttons.addWidget(self.decline)
        layout.addLayout(buttons)
        self.resize(560, 360)
        self._decided = False

    def _show(self, whole: bool) -> None:
        self.arguments.setPlainText(for_approval(self.whole if whole else self.folded, keep_newlines=True))

    def _decide(self, answer: str) -> None:
        self.answer = answer
        if answer == DECLINE:
            self.reject()
        else:
            self.accept()

    def done(self, result: int) -> None:
        """Every way the dialog closes (a button, Esc, the window's close box) says one answer, once."""
        if result != QDialog.DialogCode.Accepted:
            self.answer = DECLINE
        super().done(result)
        if not self._decided:
            self._decided = True
            self.sig_decided.emit(self.answer)
