"""The model picker in the main window: the models on this PC, which one is loaded and which of its
submodels are in memory, and Unload. The model manager stays the place to download, verify and import."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QVBoxLayout,
    QWidget,
)

from .elided_label import ElidedLabel

NONE = ""  # the combo's data for "no model loaded"
COMBO_TIP = "The models on this PC: choose one to load it (download more in the model manager)"


class MiddleElidedCombo(QComboBox):
    """A combo box whose names elide in the middle, closed and in its list: names of one family share
    a long start ("NVIDIA-Nemotron-…") and differ at the end ("… (FP8)"), which Qt's elision at the
    right cut off. Each item's tooltip, and the box's, has the whole name."""

    def __init__(self):
        super().__init__()
        self.view().setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.currentIndexChanged.connect(self.show_tip)

    def shown_text(self) -> str:
        """The current name as painted, elided in the middle to the room the style gives it."""
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        room = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                           QStyle.SubControl.SC_ComboBoxEditField, self).width()
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideMiddle, room)

    def paintEvent(self, _event) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    def show_tip(self, _index: int = -1) -> None:
        """The whole name of the model shown in the tooltip."""
        name = self.currentText()
        self.setToolTip(f"{name}\n{COMBO_TIP}" if name else COMBO_TIP)


class ModelPicker(QWidget):
    """Dumb: `set_models` lists what is on disk, `set_loaded` says what is in memory. Choosing a model
    asks to load it (`sig_load`: its row key), Unload asks to free it (`sig_unload`)."""

    sig_load = Signal(str)
    sig_unload = Signal()

    def __init__(self):
        super().__init__()
        rows = QVBoxLayout(self)  # short rows: it sits above the chats, in the narrow left column
        rows.setContentsMargins(0, 0, 0, 0)
        below = QHBoxLayout()
        self.combo = MiddleElidedCombo()
        self.combo.setToolTip(COMBO_TIP)
        self.combo.setMinimumContentsLength(4)  # never widens the window (test_window_size); the list shows all
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.activated.connect(self._chosen)
        self.resident = ElidedLabel("", min_chars=4)  # one line, elided, whatever the font
        self.resident.setObjectName("messageInfo")
        self.unload = QPushButton("Unload")
        self.unload.setToolTip("Free the model's memory (RAM or VRAM); choose a model to load one again")
        self.unload.clicked.connect(self.sig_unload.emit)
        self.unload.setEnabled(False)
        title = QLabel("Model")
        title.setObjectName("sectionTitle")
        rows.addWidget(title)
        rows.addWidget(self.combo)
        below.addWidget(self.resident, 1)
        below.addWidget(self.unload)
        rows.addLayout(below)
        self.loaded_folder = ""
        self.loaded_name = ""  # what the combo says while the loaded model has no row (a server's, a folder gone)
        self.rows: list = []

    def set_models(self, rows) -> None:
        """`rows`: the model manager's ModelRows; those on disk are offered."""
        self.rows = [r for r in rows if r.on_disk]
        self._fill()

    def set_loaded(self, folder: str, name: str, in_memory: tuple[str, ...], every: tuple[str, ...]) -> None:
        """A model is loaded from `folder` ("" : none); `in_memory` of its submodels `every` are resident."""
        from runtime.api import is_spec

        self.loaded_folder, self.loaded_name = folder, name if folder else ""
        self.unload.setEnabled(bool(folder))
        if folder and is_spec(folder):  # a model on another computer's server: nothing of it is in this PC's memory
            self.resident.setText("served: " + ", ".join(in_memory) if in_memory else "served")
            self.resident.setToolTip(f"{name}: answered by that server; nothing of it is loaded on this PC")
        elif folder:
            missing = [n for n in every if n not in in_memory]
            self.resident.setText("in memory: " + ", ".join(in_memory))
            self.resident.setToolTip(f"{name}: submodels {', '.join(in_memory)} are in memory"
                                     + (f"; {', '.join(missing)} are not (the model manager says why)" if missing
                                        else ", all of them"))
        else:
            self.resident.setText("none loaded")
            self.resident.setToolTip("No model is in memory: choose one to load it")
        self._fill()

    def _fill(self) -> None:
        from pathlib import Path

        self.combo.blockSignals(True)
        self.combo.clear()
        current = -1
        for r in self.rows:
            self.combo.addItem(r.title, r.key)
            self.combo.setItemData(self.combo.count() - 1, r.title, Qt.ItemDataRole.ToolTipRole)
            if self.loaded_folder and Path(r.folder).resolve() == Path(self.loaded_folder).resolve():
                current = self.combo.count() - 1
        if current < 0:
            label = self.loaded_name or "No model loaded"
            self.combo.insertItem(0, label, NONE)
            current = 0
        self.combo.setCurrentIndex(current)
        self.combo.blockSignals(False)
        self.combo.show_tip()

    def _chosen(self, index: int) -> None:
        key = self.combo.itemData(index)
        if key and not self._is_loaded(key):
            self.sig_load.emit(key)

    def _is_loaded(self, key: str) -> bool:
        from pathlib import Path

        row = next((r for r in self.rows if r.key == key), None)
        return bool(row and self.loaded_folder) and Path(row.folder).resolve() == Path(self.loaded_folder).resolve()
