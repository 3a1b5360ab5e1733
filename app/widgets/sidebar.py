"""Conversations: new, search, rename, delete (the window confirms and offers undo)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)


class ElidedButton(QPushButton):
    """A push button whose text elides when the sidebar is narrow (at a large font size), so the
    sidebar's minimum width does not follow its buttons' text; the tooltip names the action."""

    def __init__(self, text: str, tooltip: str):
        super().__init__(text)
        self.full = text
        self.setToolTip(tooltip)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.fontMetrics().horizontalAdvance("xx…") + 16), hint.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        margin = self.sizeHint().width() - self.fontMetrics().horizontalAdvance(self.text())
        shown = self.fontMetrics().elidedText(self.full, Qt.TextElideMode.ElideRight, self.width() - margin)
        if shown != self.text():
            self.setText(shown)

    def sizeHint(self) -> QSize:  # as wide as the whole text
        hint = super().sizeHint()
        fm = self.fontMetrics()
        return QSize(hint.width() - fm.horizontalAdvance(self.text()) + fm.horizontalAdvance(self.full), hint.height())


SEARCH_PAUSE_MS = 250
TITLE_ROLE = Qt.ItemDataRole.UserRole + 1  # a list item's chat title (a search's result shows more)
SHOWN_ROLE = Qt.ItemDataRole.UserRole + 2  # its text as listed (put back after a result's rename is cancelled)


class Sidebar(QWidget):
    sig_new = Signal()
    sig_select = Signal(int)
    sig_rename = Signal(int, str)
    sig_delete = Signal(int)
    sig_search = Signal(str)

    def __init__(self):
        super().__init__()
        self.setObjectName("sidebar")
        self.setMinimumWidth(210)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        self.new_button = ElidedButton("New chat", "New chat (Ctrl+N)")
        self.new_button.clicked.connect(self.sig_new.emit)
        layout.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats and messages")
        self.search.setToolTip("Finds the chats whose title or messages hold every word; \"a phrase\" in quotes")
        self.search.setClearButtonEnabled(True)
        # the search runs once typing pauses (over a large history it reads every message's text)
        self.search_timer = QTimer(self, singleShot=True, interval=SEARCH_PAUSE_MS)
        self.search_timer.timeout.connect(self._search_now)
        self.search.textChanged.connect(self.search_timer.start)
        layout.addWidget(self.search)
        self.list = QListWidget()
        self.list.setObjectName("conversationList")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.currentItemChanged.connect(self._selected)
        self.list.itemChanged.connect(self._renamed)
        self.list.itemDelegate().closeEditor.connect(self._rename_ended)
        layout.addWidget(self.list, 1)
        buttons = QHBoxLayout()
        self.rename_button = ElidedButton("Rename", "Rename (F2)")
        self.rename_button.clicked.connect(self.start_rename)
        self.delete_button = ElidedButton("Delete", "Delete (Del); you can undo")
        self.delete_button.clicked.connect(self._delete)
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout.addLayout(buttons)
        QShortcut(QKeySequence(Qt.Key.Key_F2), self.list, self.start_rename)
        QShortcut(QKeySequence(Qt.Key.Key_Delete), self.list, self._delete)
        self._filling = False

    def set_conversations(self, conversations, current: int | None) -> None:
        self._filling = True
        self.list.clear()
        for c in conversations:
            match = getattr(c, "match", "")  # a search's result: where the chat holds the words
            item = QListWidgetItem(f"{c.title}\n{match}" if match else c.title)
            item.setToolTip(f"{c.title}\n\n{match}" if match else c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            item.setData(TITLE_ROLE, c.title)
            item.setData(SHOWN_ROLE, item.text())
            if not match:  # (a result's text is its title and its match: start_rename shows the title alone)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if c.id == current:
                self.list.setCurrentItem(item)
        self._filling = False

    def _search_now(self) -> None:
        self.sig_search.emit(self.search.text())

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def _selected(self, item, _previous) -> None:
        if item is not None and not self._filling:
            self.sig_select.emit(item.data(Qt.ItemDataRole.UserRole))

    def start_rename(self) -> None:
        """Edits the selected chat's title in the list; a search's result shows its title alone meanwhile
        (its text is also where it matches, which is not part of the name)."""
        item = self.list.currentItem()
        if item is None:
            return
        if not item.flags() & Qt.ItemFlag.ItemIsEditable:
            self._filling = True  # (not a rename yet)
            item.setText(item.data(TITLE_ROLE))
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self._filling = False
        self.list.editItem(item)

    def _rename_ended(self, *_editor) -> None:
        """An item edited but not renamed (Esc, the same title, a rename refused) shows its text as listed
        again, a result where it matches; a renamed one was already listed anew by the rename's refresh."""
        for row in range(self.list.count()):
            item = self.list.item(row)
            shown = item.data(SHOWN_ROLE)
            if shown is not None and item.text() != shown:
                self._filling = True
                item.setText(shown)
                if shown != item.data(TITLE_ROLE):  # a result: renamed by start_rename alone
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self._filling = False

    def _renamed(self, item) -> None:
        if not self._filling:
            self.sig_rename.emit(item.data(Qt.ItemDataRole.UserRole), item.text())

    def _delete(self) -> None:
        cid = self.current_id()
        if cid is not None:
            self.sig_delete.emit(cid)
