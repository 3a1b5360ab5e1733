"""The main window's dialogs: the model manager, settings, a tool call's consent, the file pickers
(export, import, attach), deleting a chat, saving a prompt preset, the shortcuts and About.

Each dialog is opened for the window (app/main_window.py) and hands what the user chose to the chat
controller or the window; none is kept longer than it is open, but the model manager and the shortcuts,
which are reopened where they were. Ctrl+Q quits from any of them (QuitFromDialogs).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QKeySequence, QWindow
from PySide6.QtWidgets import QApplication, QComboBox, QDialog, QFileDialog, QMessageBox, QWidget

from .widgets.model_manager import ModelManager
from .widgets.questions import ask
from .widgets.settings_dialog import SettingsDialog
from .window_layout import ANSWER_NOW_KEY, QUIT_KEY, THINK_LONGER_KEY

MARKDOWN_FILES, JSON_FILES = "Markdown, to read (*.md)", "JSON, to import elsewhere (*.json)"
SHORTCUTS = [("Enter", "send the message"), ("Shift+Enter", "new line in the message"),
             ("Ctrl+Enter", "send the message"), ("Esc", "stop the reply, or cancel editing a sent message"),
             (ANSWER_NOW_KEY, "answer now: end the reply's thinking at once"),
             (THINK_LONGER_KEY, "think longer: give the reply's thinking more budget"),
             ("Ctrl+N", "new chat (and the cursor in the message box)"), ("Tab", "leave the message box"),
             ("Ctrl+B", "show or hide the chat list"), ("F2", "rename the selected chat"),
             ("Del", "delete the selected chat (with undo)"),
             ("Ctrl+Shift+M", "model manager"), ("Ctrl+,", "settings"), (QUIT_KEY, "quit")]
MCP_TAB = 3  # the Settings dialog's "MCP servers" tab


TAKES_QUIT = "takesQuitKey"  # a dialog's property, once it has its own Ctrl+Q


class QuitFromDialogs(QObject):
    """Ctrl+Q in any dialog the window opens (the model manager, Add server…, Settings, a message box, a
    file picker, a tool call's consent) quits as File → Quit does. The window's own Quit shortcut works
    only while the window itself is the active one, and waits while a modal dialog runs; so each dialog of
    the window gets its own when it is first the active window: one place for all of them, later ones included.
    The dialogs on the way close as Cancel first, so nothing half-edited is applied."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        QApplication.instance().focusWindowChanged.connect(self._focus_changed)
        for combo in window.findChildren(QComboBox):  # an open list (the model picker's) takes every key too
            self.take(combo.view().window())

    @Slot(QWindow)
    def _focus_changed(self, focused) -> None:
        """(focusWindowChanged, not focusChanged: a dialog with nothing to focus takes no widget's focus)"""
        dialog = next((w for w in QApplication.topLevelWidgets() if focused is not None
                       and w.windowHandle() is focused), None)
        if isinstance(dialog, QDialog) and dialog.property(TAKES_QUIT) is None and self._opened_here(dialog):
            self.take(dialog)

    def _opened_here(self, dialog: QWidget) -> bool:
        parent = dialog.parentWidget()
        while parent is not None and parent is not self.window:
            parent = parent.parentWidget()
        return parent is self.window

    def take(self, dialog: QWidget) -> None:
        """Gives `dialog` (or a drop-down list's popup) the window's Ctrl+Q."""
        action = QAction(dialog)
        action.setShortcut(QKeySequence(QUIT_KEY))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(lambda: self.quit_from(dialog))
        dialog.addAction(action)
        dialog.setProperty(TAKES_QUIT, True)

    def quit_from(self, dialog: QWidget) -> None:
        """Closes the dialogs from `dialog` down to the window as Cancel, then the window: from the event
        loop, once the code that waited on a modal dialog (its `exec()`) has gone on, so that code never
        runs on a window already shut down."""
        while dialog is not None and dialog is not self.window:
            if isinstance(dialog, QDialog) and dialog.isVisible():
                dialog.reject()
            dialog = dialog.parentWidget()
        QTimer.singleShot(0, self.window.close)


class WindowDialogs(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.window, self.controller = window, window.controller
        self.manager: ModelManager | None = None
        self.shortcuts_dialog: QMessageBox | None = None
        self.consents: dict = {}  # request id -> its open tool-consent dialog
        self.quit_keys = QuitFromDialogs(window)

    def open_manager(self) -> None:
        if self.manager is None:  # "Use" reaches the window through its ModelsController
            self.manager = ModelManager(self.window, models=self.window.models)
        self.manager.show()
        self.manager.raise_()

    def open_settings(self, tab: int = 0) -> None:
        w, c = self.window, self.controller
        dialog = SettingsDialog(w, w.settings, *c.chats.settings(), server_address=c.server.status().address,
                                tools=c.tools, context_ceiling=w.loaded.context_ceiling if w.loaded else 0)
        dialog.tabs.setCurrentIndex(tab)
        box, requests = dialog.server_box, dialog.server_box.requests  # live while open; Qt drops the connections
        box.show_status(c.server.status())  # with the dialog
        requests.show_requests(c.server.recent_requests())
        c.server.sig_status.connect(box.show_status)
        c.server.sig_requests.connect(requests.show_requests)
        try:
            if dialog.exec() != QDialog.DialogCode.Accepted:  # (Ctrl+Q there: the window has closed)
                return
            before = (w.settings.models_dir, w.settings.context)
            dialog.apply(w.settings)
            conversation = dialog.conversation_values()
        finally:
            dialog.deleteLater()  # one owner, one lifetime: the dialog goes now, not with the window at exit
        c.save_settings()  # now, not at quit: a kill must not lose the API key
        if w.settings.models_dir != before[0]:
            w.model_panel.set_models_dir(w.settings.models_dir)
        w.meter.set_policy(w.settings.context_overflow)
        if w.settings.context != before[1]:
            w.model_panel.reload_for_context(w.settings.context)
        c.context.count()
        c.chats.set_settings(*conversation)
        w.show_presets()
        w.apply_appearance()
        c.server.apply(w.settings)

    def ask_consent(self, request_id: int, call, box) -> None:
        """A tool call waits for the user's consent: the dialog (window-modal, never blocking the window's
        thread); its one answer goes back to the waiting reply."""
        from .widgets.tool_consent import ToolConsentDialog

        dialog = ToolConsentDialog(self.window, call)
        dialog.sig_decided.connect(lambda answer: self.controller.tools.answered(request_id, box, answer))
        dialog.finished.connect(dialog.deleteLater)
        self.consents[request_id] = dialog
        dialog.finished.connect(lambda _: self.consents.pop(request_id, None))
        dialog.open()

    def consent_ended(self, request_id: int) -> None:
        """The reply stopped or ended while its dialog was open: the dialog goes (its call is declined)."""
        dialog = self.consents.pop(request_id, None)
        if dialog is not None:
            dialog.reject()

    # ------------------------------------------------------------------ files and chats

    def export_chat(self) -> None:
        c = self.controller
        if c.chats.current is None:
            return
        title = c.history.conversation(c.chats.current).title
        title = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title)
        suggested = str(Path.home() / f"{title.strip() or 'chat'}.md")
        path, kind = QFileDialog.getSaveFileName(self.window, "Export chat", suggested,
                                                 f"{MARKDOWN_FILES};;{JSON_FILES}")
        if path:
            as_json = path.lower().endswith(".json") or (kind == JSON_FILES and not path.lower().endswith(".md"))
            if as_json and not path.lower().endswith(".json"):
                path += ".json"
            c.chats.export_chat(path, as_json)

    def attach_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self.window, "Attach files", str(Path.home()),
                                                "Text, code and PDF files (*);;PDF files (*.pdf)")
        for path in paths:
            self.controller.composer.attach(path)

    def import_chat(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Import chat", str(Path.home()),
                                              "Chats exported as JSON (*.json);;All files (*)")
        if path:
            self.controller.chats.import_chat(path)

    def confirm_delete(self, cid: int) -> None:
        title = self.controller.history.conversation(cid).title
        if ask(self.window, "Delete chat", f"Delete “{title}”? You can undo right after."):
            self.controller.chats.delete(cid)

    def save_preset(self) -> None:
        from PySide6.QtWidgets import QInputDialog

        from .state.presets import check_preset, check_prompt, load_presets, save_presets

        w, c = self.window, self.controller
        prompt = c.chats.settings()[0] if c.chats.current is not None else ""
        if check_prompt(prompt):  # said before a name is asked for, not after
            w.notes.show_error(check_prompt(prompt))
            w.show_presets()
            return
        name, ok = QInputDialog.getText(w, "Save the system prompt", "A name for this chat's system prompt:")
        if ok:
            problem = check_preset(name, prompt)
            own, _ = load_presets(w.data_dir)
            problem = problem or save_presets(w.data_dir, {**own, name.strip(): prompt})
            if problem:
                w.notes.show_error(problem)
        w.show_presets()

    # ------------------------------------------------------------------ help

    def show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in SHORTCUTS)
        if self.shortcuts_dialog is None:
            self.shortcuts_dialog = QMessageBox(QMessageBox.Icon.NoIcon, "Keyboard shortcuts",
                                                f"<table>{rows}</table>", QMessageBox.StandardButton.Close,
                                                self.window)
            self.shortcuts_dialog.setModal(False)
        self.shortcuts_dialog.show()
        self.shortcuts_dialog.raise_()

    def show_about(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("elastic-chat")
        except PackageNotFoundError:
            v = "development copy"
        QMessageBox.about(self.window, "About Elastic Chat",
                          f"<b>Elastic Chat</b> {v}<br>A desktop chat for NVIDIA's Star Elastic models: a smaller "
                          "nested model thinks, the full model answers, without reloading weights.<br><br>"
                          f"Chats, settings and the log (elastic-chat.log) live in {self.window.data_dir}.")

    def close(self) -> None:
        """At the window's close: the dialogs that outlive their opening go, and their threads stop."""
        if self.manager is not None:
            self.manager.close()
            self.manager.deleteLater()
            self.manager = None
        if self.shortcuts_dialog is not None:
            self.shortcuts_dialog.close()
