"""System-prompt presets in the main window: choosing one sets the chat's system prompt."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QLabel, QVBoxLayout, QWidget

OWN, SAVE = "\x00own", "\x00save"  # the combo's data for "this chat's own prompt" and "save as preset"


class PromptPresets(QWidget):
    """Dumb: `show_presets` lists them and marks the chat's; choosing asks for it (`sig_chosen`: the
    prompt), and the last item asks to save the chat's prompt as a preset (`sig_save`)."""

    sig_chosen = Signal(str)
    sig_save = Signal()

    def __init__(self):
        super().__init__()
        rows = QVBoxLayout(self)
        rows.setContentsMargins(0, 0, 0, 0)
        self.combo = QComboBox()
        self.combo.setToolTip("The chat's system prompt: choose a preset, or save this chat's prompt as one "
                              "(edit it in Chat → Chat settings)")
        self.combo.setMinimumContentsLength(4)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.activated.connect(self._chosen)
        title = QLabel("Prompt")
        title.setObjectName("sectionTitle")
        rows.addWidget(title)
        rows.addWidget(self.combo)
        self.presets: dict[str, str] = {}

    def show_presets(self, presets: dict[str, str], prompt: str) -> None:
        """`presets`: name -> prompt, in order; `prompt`: the chat's system prompt now."""
        self.presets = dict(presets)
        self.combo.blockSignals(True)
        self.combo.clear()
        match = next((name for name, text in presets.items() if text == prompt), None)
        if match is None:
            self.combo.addItem("This chat's own prompt", OWN)
        for name, text in presets.items():
            self.combo.addItem(name, name)
            self.combo.setItemData(self.combo.count() - 1, text[:300] or "(no system prompt)",
                                   Qt.ItemDataRole.ToolTipRole)
        self.combo.addItem("Save this chat's prompt as a preset…", SAVE)
        self.combo.setCurrentIndex(0 if match is None else self.combo.findData(match))
        self.combo.blockSignals(False)

    def _chosen(self, index: int) -> None:
        key = self.combo.itemData(index)
        if key == SAVE:
            self.sig_save.emit()
        elif key in self.presets:
            self.sig_chosen.emit(self.presets[key])
