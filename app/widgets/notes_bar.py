"""The line above the chat for an error or a notice, with the offers that go with it: a lower depth (a
reply ran out of memory), undo (chats deleted), leaving out turns or taking the message back (a chat
longer than the context), a free port (the server's was taken), trying a held model again.

Dumb: it shows what it is told and says what the user picked; it hides itself before saying so."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from .banner import Banner

UNDO_MS = 15000  # how long Undo is offered after a chat is deleted


def _button(text: str, tip: str = "") -> QPushButton:
    b = QPushButton(text)
    b.setToolTip(tip)
    b.setVisible(False)
    return b


class NotesBar(QWidget):
    sig_lower_depth = Signal()
    sig_leave_out = Signal()
    sig_take_back = Signal()
    sig_undelete = Signal(int)  # the chat to bring back (the newest deleted)
    sig_use_port = Signal(int)
    sig_retry = Signal()

    def __init__(self):
        super().__init__()
        self.lines_shown = 0  # how many lines show_error has shown (a caller tells a new one from an old one)
        self.error = Banner("errorBanner")
        self.error.sig_closed.connect(self.hide_error)  # its offers go with it
        self.lower_depth = _button("")
        self.leave_out = _button("Leave out earliest turns",
                                 "Answer with the earliest turns of this chat left out (the system prompt stays)")
        self.take_back = _button("Take message back",
                                 "Remove your last message from the chat and put its text back in the message box")
        self.undo = _button("Undo")
        self.use_port = _button("")  # the server's port is taken: move it to a nearby free one
        self.retry_load = _button("Try again")  # a remembered model that failed or crashed loading last time
        self.lower_depth.clicked.connect(lambda: self._picked(self.lower_depth, self.sig_lower_depth))
        self.leave_out.clicked.connect(lambda: self._picked(None, self.sig_leave_out))
        self.take_back.clicked.connect(lambda: self._picked(None, self.sig_take_back))
        self.retry_load.clicked.connect(lambda: self._picked(self.retry_load, self.sig_retry))
        self.use_port.clicked.connect(self._use_port)
        self.undo.clicked.connect(self._undo)
        self.deleted: list[tuple[int, str]] = []  # chats deleted lately, oldest first: Undo restores the newest
        self.undo_timer = QTimer(self)
        self.undo_timer.setSingleShot(True)
        self.undo_timer.setInterval(UNDO_MS)
        self.undo_timer.timeout.connect(self._undo_expired)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.error, 1)
        for b in (self.lower_depth, self.leave_out, self.take_back, self.undo, self.use_port, self.retry_load):
            row.addWidget(b)
        self._parts = (self.error, self.lower_depth, self.leave_out, self.take_back, self.undo, self.use_port,
                       self.retry_load)
        for w in self._parts:
            w.installEventFilter(self)
        self.setVisible(False)

    def eventFilter(self, watched, event) -> bool:
        """The bar takes no room (not even the column's spacing) while it has nothing to show."""
        if event.type() in (QEvent.Type.ShowToParent, QEvent.Type.HideToParent):
            self.setVisible(any(not w.isHidden() for w in self._parts))
        return False

    def show_error(self, message: str, lower: str = "", kind: str = "error") -> None:
        """Shows `message`: an error, or a notice (`kind` "banner"); `lower`: a depth stop to offer (out of
        memory)."""
        self.error.setObjectName("errorBanner" if kind == "error" else "banner")
        self.error.style().unpolish(self.error)  # the object name picks the theme's style: re-apply it
        self.error.style().polish(self.error)
        self.error.setText(message)
        self.error.setVisible(True)
        self.lines_shown += 1
        for b in (self.leave_out, self.take_back, self.use_port):
            b.setVisible(False)
        self.lower_depth.setVisible(bool(lower))
        if lower:
            self.lower_depth.setText(f"Use {lower}")
            self.lower_depth.setToolTip(f"Switch the reasoning depth to {lower}, which needs less memory")

    def withdraw(self, message: str) -> None:
        """The line goes if it still says `message` (which no longer holds); any later line stays."""
        if message and not self.error.isHidden() and self.error.text() == message:
            self.hide_error()

    def hide_error(self) -> None:
        for w in (self.error, self.lower_depth, self.leave_out, self.take_back, self.use_port):
            w.setVisible(False)

    def _picked(self, offer: QPushButton | None, signal) -> None:
        """An offer was taken: the line goes (with `offer`, or with every offer of the line), then `signal`."""
        if offer is None:
            self.hide_error()
        else:
            offer.setVisible(False)
            self.error.setVisible(False)
        signal.emit()

    def offer_overflow(self, message: str, trimmable: bool) -> None:
        """A chat too long for the context: leaving out turns (when that would do), taking the message back."""
        self.show_error(message)
        self.leave_out.setVisible(trimmable)
        self.take_back.setVisible(True)

    def offer_port(self, port: int) -> None:
        """The server's port was taken: serving on `port` instead."""
        self.use_port.setText(f"Use port {port}")
        self.use_port.setToolTip(f"Serve on port {port} instead (saved in Settings → Server); "
                                 "programs that use the server must be told the new address")
        self.use_port.setProperty("port", port)
        self.use_port.setVisible(True)

    def _use_port(self) -> None:
        port = self.use_port.property("port")
        self.hide_error()
        if port:
            self.sig_use_port.emit(int(port))

    def offer_retry(self, tip: str) -> None:
        self.retry_load.setToolTip(tip)
        self.retry_load.setVisible(True)

    def chat_deleted(self, cid: int, title: str) -> None:
        self.deleted.append((cid, title))
        self._offer_undo(f"Deleted “{title}”.")

    def _offer_undo(self, said: str) -> None:
        n = len(self.deleted)
        more = f" Undo brings back {n} deleted chats, newest first." if n > 1 else ""
        self.show_error(said + more, kind="banner")
        self.undo.setText("Undo" if n == 1 else f"Undo ({n})")
        self.undo.setVisible(True)
        self.undo_timer.start()

    def _undo(self) -> None:
        if self.deleted:
            cid, title = self.deleted.pop()
            self.sig_undelete.emit(cid)
            if self.deleted:
                self._offer_undo(f"Restored “{title}”.")
                return
        self.undo.setVisible(False)
        self.error.setVisible(False)

    def _undo_expired(self) -> None:
        self.deleted.clear()
        self.undo.hide()
