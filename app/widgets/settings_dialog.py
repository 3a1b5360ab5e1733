"""The Settings dialog: defaults for every chat, this chat's system prompt and sampling, and the
local server."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from runtime.options import CONTEXT, CONTEXT_OVERFLOW, MAX_NEW_TOKENS, SAMPLING

from ..state.settings import FONT_SIZE, THEMES, Settings
from .option_box import option_box
from .server_settings import ServerSettingsBox


class SettingsDialog(QDialog):
    """Defaults for every chat, this chat's system prompt and sampling, and the local server."""

    def __init__(self, parent, settings: Settings, system_prompt: str, chat_settings: dict, server_address: str = "",
                 context_ceiling: int = 0):
        """`context_ceiling`: the longest context the memory plan allows the loaded model (0: no plan)."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        layout.addWidget(self.tabs)
        general = QWidget()
        form = QFormLayout(general)
        self.theme = QComboBox()
        self.theme.addItems(list(THEMES))
        self.theme.setCurrentText(settings.theme)
        self.font_size = option_box(FONT_SIZE, settings.font_size)
        self.default_prompt = QPlainTextEdit(settings.system_prompt)
        self.max_tokens = option_box(MAX_NEW_TOKENS, settings.max_new_tokens)
        form.addRow("Theme", self.theme)
        form.addRow("Font size", self.font_size)
        form.addRow("Default system prompt", self.default_prompt)
        form.addRow("Max reply tokens", self.max_tokens)
        context = CONTEXT.within(high=context_ceiling) if context_ceiling >= CONTEXT.low else CONTEXT
        self.context = option_box(context, min(settings.context, context.high))
        self.context.setSingleStep(1024)
        self.context.setToolTip(self.context.toolTip() + (
            f" At most {context.high:,} here: the longest the memory plan fits on this PC." if context_ceiling
            else " The memory plan could not be made, so it is not capped by this PC's memory.")
            + " A change reloads the model.")
        form.addRow("Context length", self.context)
        self.overflow = QComboBox()
        for value, words in CONTEXT_OVERFLOW.values:
            self.overflow.addItem(words[:1].upper() + words[1:], value)
        self.overflow.setCurrentIndex(max(0, self.overflow.findData(settings.context_overflow)))
        self.overflow.setToolTip(CONTEXT_OVERFLOW.help[:1].upper() + CONTEXT_OVERFLOW.help[1:] + ".")
        form.addRow("When a chat is longer", self.overflow)
        from runtime.paths import models_dir

        self.models_dir = QLineEdit(settings.models_dir or str(models_dir()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(lambda: self.models_dir.setText(
            QFileDialog.getExistingDirectory(self, "Models folder", self.models_dir.text()) or self.models_dir.text()))
        row = QHBoxLayout()
        row.addWidget(self.models_dir, 1)
        row.addWidget(browse)
        form.addRow("Models folder", row)
        self.default_sampling = _SamplingForm(vars(settings.sampling))
        form.addRow(self.default_sampling)
        self.tabs.addTab(general, "Defaults")
        chat = QWidget()
        chat_form = QFormLayout(chat)
        self.chat_prompt = QPlainTextEdit(system_prompt)
        chat_form.addRow("System prompt", self.chat_prompt)
        self.chat_sampling = _SamplingForm({**vars(settings.sampling), **chat_settings.get("sampling", {})})
        chat_form.addRow(self.chat_sampling)
        self.tabs.addTab(chat, "This chat")
        server = QWidget()
        server_column = QVBoxLayout(server)
        self.server_box = ServerSettingsBox(settings.server_enabled, settings.server_host, settings.server_port,
                                            settings.server_api_key, server_address)
        server_column.addWidget(self.server_box)
        server_column.addStretch(1)
        self.server_tab = self.tabs.addTab(server, "Server")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def accept(self) -> None:
        """OK keeps the dialog open while the server's values cannot be used (its note says why)."""
        if self.server_box.problem():
            self.tabs.setCurrentIndex(self.server_tab)
            self.server_box.host.setFocus()
            return
        super().accept()

    def apply(self, s: Settings) -> None:
        s.theme, s.font_size = self.theme.currentText(), self.font_size.value()
        s.system_prompt, s.max_new_tokens = self.default_prompt.toPlainText(), self.max_tokens.value()
        s.context, s.context_overflow = self.context.value(), self.overflow.currentData()
        from runtime.paths import default_models_dir

        folder = self.models_dir.text().strip()
        s.models_dir = "" if not folder or Path(folder) == default_models_dir() else folder
        for k, v in self.default_sampling.values().items():
            setattr(s.sampling, k, v)
        s.server_enabled, s.server_host, s.server_port, s.server_api_key = self.server_box.values()

    def conversation_values(self) -> tuple[str, dict]:
        return self.chat_prompt.toPlainText(), {"sampling": self.chat_sampling.values()}


class _SamplingForm(QWidget):
    """The sampling options (runtime/options.py SAMPLING), each with its range, step and help."""

    def __init__(self, values: dict):
        super().__init__()
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.fields = {}
        for option in SAMPLING:
            self.fields[option.name] = box = option_box(option, values[option.name])
            form.addRow(option.name.replace("_", "-"), box)

    def values(self) -> dict:
        return {k: w.value() for k, w in self.fields.items()}
