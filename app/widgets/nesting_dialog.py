"""The "Verify nesting…" dialog: which sliced checkpoint to check a checkpoint on this PC against.

It offers the catalog's published slices for the checkpoint's family and takes any hub repo id
or folder the user types or picks; the check itself runs in the models controller's worker
thread (`ModelsController.verify_nesting`), with bytes read as progress and a cancel. The
verdict is one line: verified (and written to the checkpoint's elastic.json), refused (naming
the first tensor or config field that differs, nothing written) or not checked (why).
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
)

from ..models_controller import ModelRow, ModelsController


class NestingDialog(QDialog):
    def __init__(self, parent, models: ModelsController, row: ModelRow):
        super().__init__(parent)
        self.models, self.key = models, row.key
        self.setWindowTitle(f"Verify nesting — {row.title}")
        self.resize(720, 340)
        layout = QVBoxLayout(self)
        intro = QLabel(f"Checks that a sliced checkpoint is a nested submodel of <b>{html.escape(row.title)}</b>: its "
                       "widths come from the slice's config, and some of its tensors are compared with this "
                       "checkpoint's, value by value (headers and a few rows: megabytes, even from the hub). "
                       "A verified submodel is recorded in this checkpoint's elastic.json; a refused one changes "
                       "nothing.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        layout.addWidget(QLabel("Sliced checkpoint (a hub repo id, owner/name, or a folder):"))
        layout.addLayout(self._build_choice(row))
        if not row.slices:
            none = QLabel("The catalog lists no published slice for this model: type a repo id or pick a folder "
                          "(`python -m runtime extract` makes one).")
            none.setWordWrap(True)
            none.setObjectName("depthDetail")
            layout.addWidget(none)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # how much there is to read is known only once the headers are in
        self.busy.setVisible(False)
        layout.addWidget(self.busy)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verdict.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.verdict, 1)
        layout.addLayout(self._build_buttons(models))
        models.sig_nesting.connect(self._show)  # a bound slot: Qt drops it when the dialog goes away
        running = models.nesting is not None and models.nesting[0] == self.key
        self._set_running(running)
        if running:
            self.verdict.setText(models.message)

    def _build_choice(self, row: ModelRow) -> QHBoxLayout:
        """The slice to check: the catalog's published ones to pick from, or any repo id or folder."""
        choose = QHBoxLayout()
        self.slice = QComboBox()
        self.slice.setEditable(True)
        self.slice.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.slice.addItems(list(row.slices))
        self.slice.lineEdit().setPlaceholderText("owner/name or a folder")
        self.slice.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        for i in range(self.slice.count()):
            self.slice.setItemData(i, "Published for this model's family (assets/catalog.json)",
                                   Qt.ItemDataRole.ToolTipRole)
        choose.addWidget(self.slice, 1)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.setToolTip("Pick a sliced checkpoint's folder on this PC")
        self.folder_button.clicked.connect(self.pick_folder)
        choose.addWidget(self.folder_button)
        return choose

    def _build_buttons(self, models: ModelsController) -> QHBoxLayout:
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.verify_button = QPushButton("Verify")
        self.verify_button.setDefault(True)
        self.verify_button.clicked.connect(self.verify)
        self.cancel_button = QPushButton("Cancel check")
        self.cancel_button.clicked.connect(models.cancel_nesting)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        for b in (self.verify_button, self.cancel_button, close):
            buttons.addWidget(b)
        return buttons

    def pick_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A sliced checkpoint's folder")
        if folder:
            self.slice.setEditText(folder)

    def verify(self) -> None:
        where = self.slice.currentText().strip()
        if not where:
            self.verdict.setText("Type a hub repo id (owner/name) or pick a folder first.")
            return
        if not self.models.actions(self.key)["Verify nesting…"]:
            self.verdict.setText("Another check or a download of this model is running; wait for it to end.")
            return
        self.models.verify_nesting(self.key, where)

    @Slot(str, str, bool)
    def _show(self, key: str, line: str, running: bool) -> None:
        if key != self.key:
            return
        self.verdict.setText(line)
        self._set_running(running)

    def _set_running(self, running: bool) -> None:
        self.busy.setVisible(running)
        self.verify_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.slice.setEnabled(not running)
        self.folder_button.setEnabled(not running)
