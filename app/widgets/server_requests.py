"""The local server's recent requests and a command to try it, under its on/off switch in Settings.

A dumb view: the server control (app/server_control.py) says what happened, at most 4 times a second
and only when a request has finished; this shows it. Newest first; what was asked is never known here
(the server's log keeps the method and the path alone).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..server_control import ServerStatus, curl_example

COLUMNS = ("Time", "Method", "Route", "Status", "Duration", "Client")
VISIBLE_ROWS = 6  # the table's height; more scroll


class RecentRequestsView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.caption = QLabel()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COLUMNS.index("Route"), QHeaderView.ResizeMode.Stretch)
        row = self.table.verticalHeader().defaultSectionSize()
        self.table.setFixedHeight(header.sizeHint().height() + row * VISIBLE_ROWS + 2 * self.table.frameWidth())
        self.curl = QPlainTextEdit()
        self.curl.setReadOnly(True)
        self.curl.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.curl.setFixedHeight(self.curl.fontMetrics().lineSpacing() * 4 + 16)
        self.copy = QPushButton("Copy")
        self.copy.setToolTip("Copy the command to paste it in a terminal")
        self.copy.clicked.connect(self._copy)
        curl_row = QHBoxLayout()
        curl_row.addWidget(self.curl, 1)
        curl_row.addWidget(self.copy, 0, Qt.AlignmentFlag.AlignTop)
        self.curl_caption = QLabel()
        self.curl_caption.setWordWrap(True)
        layout.addWidget(self.caption)
        layout.addWidget(self.table)
        layout.addWidget(self.curl_caption)
        layout.addLayout(curl_row)
        self.show_requests(())
        self.show_status(ServerStatus(False, "", None, 0))

    @Slot(object)
    def show_requests(self, entries) -> None:
        """`entries`: RequestEntry values, newest first."""
        self.caption.setText(f"Recent requests ({len(entries)}, newest first; kept until the app quits, "
                             "without what was asked)" if entries else
                             "Recent requests: none yet. Each request to the server shows here.")
        self.table.setRowCount(len(entries))
        for row, e in enumerate(entries):
            cells = (e.time_text(), e.method, e.route, str(e.status), _duration(e.duration_ms), e.client)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if COLUMNS[column] in ("Status", "Duration"):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, column, item)

    @Slot(object)
    def show_status(self, status: ServerStatus) -> None:
        command = curl_example(status)
        if command != self.curl.toPlainText():
            self.curl.setPlainText(command)
        self.curl.setEnabled(bool(command))
        self.copy.setEnabled(bool(command))
        if not command and status.running:
            self.curl_caption.setText("Try it from a terminal: a command appears here when a model loaded in "
                                      "this app is served.")
        elif not command:
            self.curl_caption.setText("Try it from a terminal: a command appears here while the server runs.")
        elif status.keyed:
            self.curl_caption.setText("Try it from a terminal (set ELASTIC_CHAT_API_KEY to the API key first):")
        else:
            self.curl_caption.setText("Try it from a terminal:")

    @Slot()
    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.curl.toPlainText())


def _duration(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"
