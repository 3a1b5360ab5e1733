"""The model manager dialog: hardware, the catalog's variants with a fit verdict per submodel and
how far their nested widths can be trusted (the Nesting column), downloads (progress, speed, ETA,
pause, resume, cancel, stalled), verify, verify nesting, delete, import, use.

A view of `app.models_controller.ModelsController`, which owns the plan, the downloads and
the tasks and outlives this dialog: closing it stops nothing, reopening it shows where each
download is.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from runtime.api import CONTEXT

from ..model_texts import progress_text, states_text
from ..models_controller import ACTIONS, UNREACHABLE, ModelRow, ModelsController
from .fitted_table import FittedTable
from .nesting_dialog import NestingDialog
from .questions import ask

VERDICT_COLORS = {"fits": "#16a34a", "tight": "#d97706", "does not fit": "#dc2626"}
VERDICT_MARKS = {"fits": "✓ fits", "tight": "! tight", "does not fit": "✗ no"}
COLUMNS = ["Model", "Format", "Size", "Compute path", "Parent", "Middle", "Smallest", "Nesting", "Status"]
NESTING, STATUS = COLUMNS.index("Nesting"), COLUMNS.index("Status")
STATE_COLORS = {"verified": "#16a34a", "estimated": "#d97706"}  # declared: the text colour


class ModelManager(QDialog):
    sig_use = Signal(str, str)  # checkpoint folder, resident submodel ("" = the largest that fits)
    sig_changed = Signal()  # the set of local models changed

    def __init__(self, parent=None, probe_file: str | None = None, context: int = CONTEXT.default, active: str = "",
                 models: ModelsController | None = None):
        super().__init__(parent)
        self.setWindowTitle("Model manager")
        self.resize(1180, 540)
        if models is None:  # no app-wide controller given: one that lives as long as the parent window
            models = ModelsController(probe_file, context, active, parent=parent)
        self.models = models
        self.rows: list[ModelRow] = []
        self.nesting_dialog: NestingDialog | None = None
        layout = QVBoxLayout(self)
        self.hardware = QLabel("Probing the hardware…")
        self.hardware.setWordWrap(True)
        layout.addWidget(self.hardware)
        self.default = QLabel("")
        self.default.setWordWrap(True)
        self.default.setObjectName("depthDetail")
        layout.addWidget(self.default)
        layout.addWidget(self._build_table(), 1)
        legend = QLabel("Per submodel: ✓ fits, ! tight (close other GPU programs or lower the context), ✗ does not "
                        "fit. Hover a verdict for the numbers. The largest submodel that fits is loaded; smaller "
                        "ones share its memory. Nesting: the nested submodels' widths are verified (checked against "
                        "a sliced checkpoint), declared (the checkpoint's elastic.json) or estimated (the catalog's "
                        "guess; never thinks by default); hover for each one, and Verify nesting… to check them.")
        legend.setWordWrap(True)
        legend.setObjectName("depthDetail")
        layout.addWidget(legend)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        self.progress_text = QLabel("")
        self.progress_text.setWordWrap(True)
        self.progress_text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_text)
        layout.addLayout(self._build_buttons())
        # bound slots of this dialog: Qt drops these connections when the dialog goes away
        models.sig_inventory.connect(self._show_inventory)
        models.sig_progress.connect(self._show_progress)
        models.sig_message.connect(self._show_message)
        models.sig_changed.connect(self.sig_changed)
        models.sig_use.connect(self.sig_use)
        self._show_current()
        self.refresh()

    def _build_table(self) -> QTableWidget:
        """One row per model: the columns of COLUMNS, selected a row at a time."""
        self.table = FittedTable(0, len(COLUMNS))  # the names keep a readable share at any font size
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        # Names elide in the middle, keeping the end that tells variants apart ("… (FP8)"); the
        # tooltip has them whole. Wrapping broke them mid-word and made rows uneven.
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setVisible(False)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        return self.table

    def _build_buttons(self) -> QHBoxLayout:
        """One button per action (ACTIONS), each enabled for the selected row as it allows."""
        buttons = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for name in ACTIONS:
            b = QPushButton(name)
            buttons.addWidget(b)
            self.buttons[name] = b
        self.buttons["Use"].setToolTip("Load this model in place of the current one")
        self.buttons["Download"].clicked.connect(self._download)
        self.buttons["Resume"].clicked.connect(self._download)
        self.buttons["Pause"].clicked.connect(self._pause)
        self.buttons["Cancel"].clicked.connect(self._cancel)
        self.buttons["Verify"].clicked.connect(self._verify)
        self.buttons["Verify nesting…"].clicked.connect(self.verify_nesting)
        self.buttons["Verify nesting…"].setToolTip("Check this checkpoint's nested submodels against a sliced "
                                                   "checkpoint (a hub repo or a folder)")
        self.buttons["Delete"].clicked.connect(self.delete)
        self.buttons["Import folder…"].clicked.connect(self.import_folder)
        self.buttons["Add server…"].clicked.connect(self.add_server)
        self.buttons["Add server…"].setToolTip("Chat with a model on an OpenAI-compatible server (vLLM, SGLang, "
                                               "llama.cpp, another Elastic Chat)")
        self.buttons["Use"].clicked.connect(self._use)
        self.buttons["Refresh"].clicked.connect(self.refresh)
        return buttons

    # ------------------------------------------------------------------ showing

    def _show_current(self) -> None:
        """What the controller already knows: a reopened dialog starts where the last one was."""
        if self.models.inventory is not None:
            self._show_inventory(self.models.inventory)
        running = [k for k in self.models.downloads if k in self.models.progress]
        if running:
            self._show_progress(running[-1], self.models.progress[running[-1]])
        if self.models.message:
            self.progress_text.setText(self.models.message)

    def refresh(self) -> None:
        if self.models.inventory is None:
            self.hardware.setText("Probing the hardware…")
        self.models.refresh()

    @Slot(object)
    def _show_inventory(self, inventory) -> None:
        self.hardware.setText(inventory.hardware)
        self.default.setText(inventory.suggestion)
        self.rows = list(inventory.rows)
        self._fill()

    def _fill(self) -> None:
        selected = self._selected_key()
        self.table.setRowCount(len(self.rows))
        for i, r in enumerate(self.rows):
            cells = [r.title, r.format, r.size, r.path_text or "–"]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)  # a cell too narrow elides; hovering shows all of it
                self.table.setItem(i, j, item)
            if r.folder is not None:
                self.table.item(i, 0).setToolTip(f"{r.title}\n{r.folder}")
            if r.placement:  # the parent does not fit the GPU: where its parts would live, and the speed
                self.table.item(i, 3).setToolTip(f"{r.path_text}\n{r.placement}")
            for j in range(3):
                fit = r.fits[j] if j < len(r.fits) else None
                item = QTableWidgetItem(f"{fit.name} {VERDICT_MARKS[fit.verdict]}" if fit else "–")
                if fit:
                    item.setToolTip(fit.reason)
                    item.setForeground(QColor(VERDICT_COLORS[fit.verdict]))
                self.table.setItem(i, 4 + j, item)
            text, tip = states_text(r.fits)
            item = QTableWidgetItem(text)
            item.setToolTip(tip)
            color = STATE_COLORS["estimated"] if "estimated" in text else STATE_COLORS.get(text)
            if color:
                item.setForeground(QColor(color))
            self.table.setItem(i, NESTING, item)
            self._set_status(i, r.status, r.status_note)
            self.table.item(i, 0).setData(Qt.ItemDataRole.UserRole, r.key)
            if r.key == selected:
                self.table.selectRow(i)
        self.table.fit_columns()
        self._update_buttons()

    def _set_status(self, i: int, status: str, note: str = "") -> None:
        item = QTableWidgetItem(status)
        item.setToolTip(note or status)
        if status == "active":
            item.setText("active (in use)")
        elif status.endswith(UNREACHABLE):  # a server that did not answer: the tooltip says what it said
            item.setForeground(QColor(VERDICT_COLORS["does not fit"]))
        self.table.setItem(i, STATUS, item)
        self.table.fit_columns()

    @Slot(str, object)
    def _show_progress(self, key: str, p) -> None:
        self.progress.setVisible(True)
        self.progress.setValue(int(1000 * p.fraction))
        self.progress_text.setText(progress_text(p))
        index = next((i for i, r in enumerate(self.rows) if r.key == key), None)
        if index is not None and key in self.models.downloads:
            self._set_status(index, f"{p.state} {int(100 * p.fraction)}%")

    @Slot(str)
    def _show_message(self, text: str) -> None:
        self.progress_text.setText(text)

    def _selected_key(self) -> str | None:
        items = self.table.selectedItems()
        return self.table.item(items[0].row(), 0).data(Qt.ItemDataRole.UserRole) if items else None

    def row(self, key: str | None = None) -> ModelRow | None:
        key = key or self._selected_key()
        return next((r for r in self.rows if r.key == key), None)

    def select(self, key: str) -> None:
        for i, r in enumerate(self.rows):
            if r.key == key:
                self.table.selectRow(i)

    def _update_buttons(self) -> None:
        for name, enabled in self.models.actions(self._selected_key()).items():
            self.buttons[name].setEnabled(enabled)
        r = self.row()
        self.buttons["Use"].setToolTip("This model is in use" if r is not None and r.status == "active"
                                       else "Load this model in place of the current one")

    # ------------------------------------------------------------------ asking the controller

    def _download(self) -> None:
        key = self._selected_key()
        if key and self._confirm_download(self.row()):
            self.progress.setVisible(True)
            self.progress.setValue(0)
            self.models.download(key)

    def _pause(self) -> None:
        self.models.pause(self._selected_key())

    def _cancel(self) -> None:
        self.models.cancel(self._selected_key())

    def _verify(self) -> None:
        self.models.verify(self._selected_key())

    def verify_nesting(self) -> NestingDialog | None:
        """Opens the nesting check for the selected checkpoint (one dialog, reused)."""
        r = self.row()
        if r is None or not self.models.actions(r.key)["Verify nesting…"]:
            return None
        if self.nesting_dialog is not None:
            self.nesting_dialog.close()
            self.nesting_dialog.deleteLater()
        self.nesting_dialog = NestingDialog(self, self.models, r)
        self.nesting_dialog.show()
        return self.nesting_dialog

    def _confirm_download(self, r) -> bool:
        """A download none of whose submodels can run on this PC goes ahead only when the user says so."""
        from runtime.api import NO

        if r is None or not r.fits or any(f.verdict != NO for f in r.fits):
            return True
        return ask(self, "Download a model this PC cannot run?",
                   f"{r.title} is {r.size} to download, and no submodel of it can run on this PC: {r.fits[-1].reason}."
                   "\n\nDownload it anyway (to copy to another PC, or for a later GPU)?")

    def delete(self) -> None:
        r = self.row()
        if r and r.remote:  # only the entry goes: the server is not this PC's
            if ask(self, "Remove server", f"Remove {r.title} from the list?"):
                self.models.delete(r.key)
            return
        if not r or not r.local_name:
            return
        if r.imported:  # its files are the user's: only the entry in the list goes
            answer = ask(self, "Remove from the list", f"Remove {r.title} from the list?\nIts folder {r.folder} and "
                         "every file in it stay on this PC; import it again to bring it back.")
        else:
            answer = ask(self, "Delete model", f"Delete {r.title} ({r.size}) from this PC?\n"
                         f"Its downloaded files in {r.folder} are deleted.")
        if answer:
            self.models.delete(r.key)

    def import_folder(self, folder: str | None = None) -> None:
        folder = folder or QFileDialog.getExistingDirectory(self, "Import a checkpoint folder")
        if folder:
            self.models.import_folder(folder)

    def add_server(self) -> QDialog:
        """Opens the "Add server…" dialog (app/widgets/remote_source.py), modeless."""
        from .remote_source import RemoteSourceDialog

        dialog = RemoteSourceDialog(self, self.models)
        dialog.show()
        return dialog

    def _use(self) -> None:
        self.models.use(self._selected_key())

    def shutdown(self) -> None:
        """Stops the controller's downloads and tasks: for the app's exit, not for closing the dialog."""
        self.models.shutdown()
