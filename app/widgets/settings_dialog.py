"""The Settings dialog: defaults for every chat, this chat's system prompt and sampling, and the
local server.

Ownership: the window makes one dialog per opening and deletes it as soon as it closes
(`MainWindow.open_settings`); nothing outside it keeps a reference, and its own connections go to
its methods, never to lambdas holding `self`. A lambda that holds the dialog is a Python reference
cycle through a Qt connection: the dialog then outlived the window until the interpreter's exit,
where PySide tore it down after the application object, deleting Qt-owned children directly (the
"shared QObject was deleted directly" seen at every quit after Settings, then a segfault or a heap
corruption abort).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Slot
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

from runtime.api import CONTEXT, CONTEXT_OVERFLOW, MAX_NEW_TOKENS, SAMPLING

from ..state.settings import FONT_SIZE, THEMES, Settings
from .option_box import option_box
from .screen_fit import Page, fit_to_screen
from .server_settings import ServerSettingsBox


class SettingsDialog(QDialog):
    """Defaults for every chat, this chat's system prompt and sampling, and the local server."""

    def __init__(self, parent, settings: Settings, system_prompt: str, chat_settings: dict, server_address: str = "",
                 tools=None, context_ceiling: int = 0):
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
        from runtime.api import models_dir

        self.models_dir = QLineEdit(settings.models_dir or str(models_dir()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_models_dir)
        row = QHBoxLayout()
        row.addWidget(self.models_dir, 1)
        row.addWidget(browse)
        form.addRow("Models folder", row)
        self.default_sampling = SamplingRows(form, vars(settings.sampling))
        self.tabs.addTab(Page(general), "Defaults")
        chat = QWidget()
        chat_form = QFormLayout(chat)
        self.chat_prompt = QPlainTextEdit(system_prompt)
        chat_form.addRow("System prompt", self.chat_prompt)
        self.chat_sampling = SamplingRows(chat_form, {**vars(settings.sampling), **chat_settings.get("sampling", {})})
        self.tabs.addTab(Page(chat), "This chat")
        server = QWidget()
        server_column = QVBoxLayout(server)
        self.server_box = ServerSettingsBox(settings.server_enabled, settings.server_host, settings.server_port,
                                            settings.server_api_key, server_address,
                                            web=(settings.server_allow_hosts, settings.server_allow_origins))
        server_column.addWidget(self.server_box)
        server_column.addStretch(1)
        self.server_tab = self.tabs.addTab(Page(server), "Server")
        if tools is not None:  # app/tools_controller.py; approving and revoking act at once (mcp_settings.py)
            from .mcp_settings import McpSettingsBox

            self.mcp = McpSettingsBox(tools)
            self.mcp_tab = self.tabs.addTab(Page(self.mcp), "MCP servers")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        fit_to_screen(self, parent)  # at a large font the pages scroll; OK and Cancel stay on the screen

    @Slot()
    def _browse_models_dir(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Models folder", self.models_dir.text())
        if chosen:
            self.models_dir.setText(chosen)

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
        from runtime.api import default_models_dir

        folder = self.models_dir.text().strip()
        s.models_dir = "" if not folder or Path(folder) == default_models_dir() else folder
        for k, v in self.default_sampling.values().items():
            setattr(s.sampling, k, v)
        s.server_enabled, s.server_host, s.server_port, s.server_api_key = self.server_box.values()
        s.server_allow_hosts, s.server_allow_origins = (list(v) for v in self.server_box.web_values())

    def conversation_values(self) -> tuple[str, dict]:
        return self.chat_prompt.toPlainText(), {"sampling": self.chat_sampling.values()}


class SamplingRows:
    """The sampling options (runtime/options.py SAMPLING), each with its range, step and help, as rows of
    the tab's own form: one label column for every row of the tab. (A form of their own, nested in a
    row, had its own label column, and their fields stood left of the ones above.)"""

    def __init__(self, form: QFormLayout, values: dict):
        self.fields = {}
        for option in SAMPLING:
            self.fields[option.name] = box = option_box(option, values[option.name])
            form.addRow(option.name.replace("_", "-"), box)

    def values(self) -> dict:
        return {k: w.value() for k, w in self.fields.items()}
