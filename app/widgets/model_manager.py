"""The model manager: hardware, the catalog's variants with a fit verdict per submodel,
downloads (progress, speed, ETA, pause, resume, cancel, stalled), verify, delete, import, use.

Every slow step (probing, downloading, hashing, deleting) runs in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QMetaObject, QThread, Qt, Signal, Slot
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QFileDialog, QHBoxLayout, QHeaderView, QLabel,
                               QMessageBox, QProgressBar, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout)

from ..workers import DownloadWorker, TaskRunner, start_in_thread, stop_thread

VERDICT_COLORS = {"fits": "#16a34a", "tight": "#d97706", "does not fit": "#dc2626"}
VERDICT_MARKS = {"fits": "✓ fits", "tight": "! tight", "does not fit": "✗ no"}


@dataclass
class Row:
    key: str  # catalog variant id, or a local model's name
    title: str
    format: str
    size: str
    path_text: str
    fits: list  # SubmodelFit
    repo: str | None
    folder: Path | None  # on disk, when it is
    local_name: str | None
    status: str


def _size(n: int | None) -> str:
    if not n:
        return "–"
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class ModelManager(QDialog):
    sig_use = Signal(str, str)  # checkpoint folder, resident submodel ("" = the largest that fits)
    sig_changed = Signal()  # the set of local models changed

    def __init__(self, parent=None, probe_file: str | None = None, context: int = 8192, active: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Model manager")
        self.resize(1180, 540)
        self.probe_file, self.context, self.active = probe_file, context, active
        self.plan = None
        self.rows: list[Row] = []
        self.downloads: dict[str, tuple[DownloadWorker, QThread]] = {}
        self.tasks = TaskRunner(self)
        layout = QVBoxLayout(self)
        self.hardware = QLabel("Probing the hardware…")
        self.hardware.setWordWrap(True)
        layout.addWidget(self.hardware)
        self.default = QLabel("")
        self.default.setWordWrap(True)
        self.default.setObjectName("depthDetail")
        layout.addWidget(self.default)
        self.table = QTableWidget(0, 8)
        self.table.setHorizontalHeaderLabels(["Model", "Format", "Size", "Compute path", "Parent", "Middle",
                                              "Smallest", "Status"])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        for column in range(8):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch if column in (0, 3)
                                        else QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(True)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        layout.addWidget(self.table, 1)
        legend = QLabel("Per submodel: ✓ fits, ! tight (close other GPU programs or lower the context), ✗ does not "
                        "fit. Hover a verdict for the numbers. The largest submodel that fits is loaded; smaller "
                        "ones share its memory.")
        legend.setWordWrap(True)
        legend.setObjectName("depthDetail")
        layout.addWidget(legend)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        self.progress_text = QLabel("")
        self.progress_text.setWordWrap(True)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_text)
        buttons = QHBoxLayout()
        self.buttons = {}
        for name in ("Download", "Pause", "Resume", "Cancel", "Verify", "Delete", "Import folder…", "Use", "Refresh"):
            b = QPushButton(name)
            buttons.addWidget(b)
            self.buttons[name] = b
        layout.addLayout(buttons)
        self.buttons["Download"].clicked.connect(self.download)
        self.buttons["Resume"].clicked.connect(self.download)
        self.buttons["Pause"].clicked.connect(lambda: self._control("pause"))
        self.buttons["Cancel"].clicked.connect(lambda: self._control("cancel"))
        self.buttons["Verify"].clicked.connect(self.verify)
        self.buttons["Delete"].clicked.connect(self.delete)
        self.buttons["Import folder…"].clicked.connect(self.import_folder)
        self.buttons["Use"].clicked.connect(self.use)
        self.buttons["Refresh"].clicked.connect(self.refresh)
        self.refresh()

    # ------------------------------------------------------------------ data

    def refresh(self) -> None:
        self.hardware.setText("Probing the hardware…")
        self._run(self._gather, self._show)

    def _gather(self):  # noqa: PLR6301 (runs in a worker thread)
        """Worker thread: probe, plan and list (reads safetensors headers, not weights)."""
        from runtime.catalog import load_catalog
        from runtime.hardware import load_probe, probe
        from runtime.model_store import list_models, models_dir
        from runtime.planner import checkpoint_sizing, make_plan

        hw = load_probe(self.probe_file) if self.probe_file else probe(models_dir())
        catalog = load_catalog()
        models = list_models()
        local = {}
        for m in models:
            v = catalog.for_repo(m.repo) if m.repo else None
            if v is not None and m.complete and not m.problem:
                local[v.id] = checkpoint_sizing(m.path)
        return hw, catalog, make_plan(hw, catalog, self.context, local), models

    def _show(self, result) -> None:
        hw, catalog, plan, models = result
        self.plan = plan
        self.hardware.setText(f"<b>Hardware:</b> {hw.summary()}")
        self.default.setText(f"Suggested: <b>{catalog.variant(plan.default).title}</b>. {plan.default_reason}")
        by_repo = {m.repo: m for m in models if m.repo}
        rows = []
        for vp in plan.variants:
            v = catalog.variant(vp.variant)
            local = by_repo.get(v.repo) if v.repo else next((m for m in models if m.source == "bundled"), None)
            folder = local.path if local else (v.path if v.bundled else None)
            status = self._status_of(v, local)
            rows.append(Row(v.id, v.title, v.format, _size(vp.download_bytes or (local.size_bytes if local else 0)),
                            vp.compute_path, list(vp.submodels), v.repo, folder, local.name if local else None, status))
        known = {r.local_name for r in rows}
        for m in models:
            if m.name not in known and m.source == "imported":
                rows.append(Row(m.name, f"{m.name} (imported)", m.format, _size(m.size_bytes), "", [], None, m.path,
                                m.name, m.problem or "ready"))
        self.rows = rows
        self._fill()

    def _status_of(self, v, local) -> str:
        if v.id in self.downloads:
            return "downloading"
        if local is None:
            return "not downloaded"
        if local.problem:
            return local.problem
        return "active" if str(local.path) == self.active else "ready"

    def _fill(self) -> None:
        selected = self._selected_key()
        self.table.setRowCount(len(self.rows))
        for i, r in enumerate(self.rows):
            cells = [r.title, r.format, r.size, r.path_text]
            for j, text in enumerate(cells):
                self.table.setItem(i, j, QTableWidgetItem(text))
            for j in range(3):
                fit = r.fits[j] if j < len(r.fits) else None
                item = QTableWidgetItem(f"{fit.name} {VERDICT_MARKS[fit.verdict]}" if fit else "")
                if fit:
                    item.setToolTip(fit.reason)
                    item.setForeground(QColor(VERDICT_COLORS[fit.verdict]))
                self.table.setItem(i, 4 + j, item)
            self.table.setItem(i, 7, QTableWidgetItem(r.status))
            self.table.item(i, 0).setData(Qt.ItemDataRole.UserRole, r.key)
            if r.key == selected:
                self.table.selectRow(i)
        self._update_buttons()

    def _selected_key(self) -> str | None:
        items = self.table.selectedItems()
        return self.table.item(items[0].row(), 0).data(Qt.ItemDataRole.UserRole) if items else None

    def row(self, key: str | None = None) -> Row | None:
        key = key or self._selected_key()
        return next((r for r in self.rows if r.key == key), None)

    def select(self, key: str) -> None:
        for i, r in enumerate(self.rows):
            if r.key == key:
                self.table.selectRow(i)

    def _update_buttons(self) -> None:
        r = self.row()
        downloading = r is not None and r.key in self.downloads
        can_get = r is not None and r.repo is not None and r.status not in ("ready", "active") and not downloading
        on_disk = r is not None and r.folder is not None and r.folder.exists()
        self.buttons["Download"].setEnabled(can_get and r.status == "not downloaded")
        self.buttons["Resume"].setEnabled(can_get and r.status != "not downloaded")
        self.buttons["Pause"].setEnabled(downloading)
        self.buttons["Cancel"].setEnabled(downloading)
        self.buttons["Verify"].setEnabled(on_disk and not downloading)
        self.buttons["Delete"].setEnabled(on_disk and not downloading and r.local_name not in (None, "demo"))
        usable = on_disk and r.status in ("ready", "active") and any(f.verdict != "does not fit" for f in r.fits)
        self.buttons["Use"].setEnabled(bool(usable) or (on_disk and not r.fits and r.status == "ready"))

    # ------------------------------------------------------------------ actions

    def download(self) -> None:
        from runtime.model_store import download_dir

        r = self.row()
        if r is None or r.repo is None or r.key in self.downloads:
            return
        worker = DownloadWorker(r.repo, download_dir(r.repo))
        thread = start_in_thread(worker, f"download {r.repo}")
        worker.sig_progress.connect(self._on_progress)
        worker.sig_finished.connect(self._on_finished)
        self.downloads[r.key] = (worker, thread)
        r.status = "queued"
        self.progress.setVisible(True)
        self.progress.setRange(0, 1000)
        self.progress_text.setText(f"Resolving {r.repo} on the hub…")
        self._fill()
        QMetaObject.invokeMethod(worker, "run", Qt.ConnectionType.QueuedConnection)

    def _key_of(self, worker) -> str | None:
        return next((k for k, (w, _) in self.downloads.items() if w is worker), None)

    @Slot(object)
    def _on_progress(self, p) -> None:
        key = self._key_of(self.sender())
        if key is None:
            return
        self.progress.setValue(int(1000 * p.fraction))
        speed = f"{p.speed_bps / 1e6:.1f} MB/s" if p.speed_bps else "0 MB/s"
        eta = f", {int(p.eta_s) // 60} min {int(p.eta_s) % 60} s left" if p.eta_s is not None else ""
        text = (f"{p.state.upper()}: {_size(p.done_bytes)} of {_size(p.total_bytes)}, {speed}{eta}"
                + (f" — {p.message}" if p.message else ""))
        self.progress_text.setText(text)
        r = self.row(key)
        if r:
            r.status = f"{p.state} {100 * p.fraction:.0f}%"
            self.table.setItem(self.rows.index(r), 7, QTableWidgetItem(r.status))

    @Slot(object, str)
    def _on_finished(self, final, error: str) -> None:
        worker = self.sender()
        key = self._key_of(worker)
        if key is None:
            return
        _, thread = self.downloads.pop(key)
        stop_thread(thread)
        if error:
            self.progress_text.setText(f"Download failed: {error}")
        elif final is not None:
            self.progress_text.setText({"done": "Download complete and verified.",
                                        "paused": "Paused. Resume continues where it stopped, even after a restart.",
                                        "cancelled": "Cancelled; the partial files were removed."}.get(final.state,
                                                                                                        final.state))
        self.sig_changed.emit()
        self.refresh()

    def _control(self, what: str) -> None:
        r = self.row()
        if r and r.key in self.downloads:
            getattr(self.downloads[r.key][0], what)()

    def verify(self) -> None:
        from runtime.model_store import verify

        r = self.row()
        if r and r.folder:
            self.progress_text.setText(f"Verifying {r.folder}… (hashing can take a minute for big files)")
            self._run(verify, self._verified, r.folder)

    def _verified(self, report) -> None:
        if report.ok:
            self.progress_text.setText(f"{report.folder.name} is intact ({report.checked} file hashes checked).")
        else:
            self.progress_text.setText("Problems: " + "; ".join(report.problems))

    def delete(self) -> None:
        from runtime.model_store import delete

        r = self.row()
        if not r or not r.local_name:
            return
        answer = QMessageBox.question(self, "Delete model", f"Delete {r.title} ({r.size}) from this PC?\n"
                                      "Imported folders are only removed from the list; their files stay.")
        if answer == QMessageBox.StandardButton.Yes:
            self._run(delete, lambda msg: (self.progress_text.setText(msg), self.sig_changed.emit(), self.refresh()),
                      r.local_name)

    def import_folder(self, folder: str | None = None) -> None:
        from runtime.model_store import import_folder

        folder = folder or QFileDialog.getExistingDirectory(self, "Import a checkpoint folder")
        if folder:
            self.progress_text.setText(f"Checking {folder}…")
            self._run(import_folder, lambda m: (self.progress_text.setText(f"Imported {m.name}."),
                                                self.sig_changed.emit(), self.refresh()), Path(folder))

    def use(self) -> None:
        r = self.row()
        if not r or not r.folder:
            return
        vp = next((v for v in self.plan.variants if v.variant == r.key), None) if self.plan else None
        resident = vp.resident if vp and vp.resident and vp.resident != vp.submodels[0].name else ""
        self.active = str(r.folder)
        self.sig_use.emit(str(r.folder), resident or "")
        self.refresh()

    def _run(self, fn, done, *args) -> None:
        self.tasks.run(fn, args, done, lambda error: self.progress_text.setText(f"Failed: {error}"))

    def shutdown(self) -> None:
        """Pauses running downloads (they resume next time) and stops every thread."""
        for worker, thread in list(self.downloads.values()):
            worker.pause()
            stop_thread(thread)
        self.downloads.clear()
        self.tasks.shutdown()
