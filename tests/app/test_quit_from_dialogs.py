"""Ctrl+Q quits from every dialog the window opens (issue 38, item 8), as File → Quit does: the model
manager, its Add server… dialog, Settings, the message boxes, the text and file pickers, a window-modal
dialog like a tool call's consent. A modal dialog closes as Cancel first, so nothing it held is applied."""

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QFileDialog, QInputDialog, QMessageBox
from shiboken6 import isValid

from app.state.settings import Settings
from app.widgets.model_manager import ModelManager
from app.widgets.remote_source import RemoteSourceDialog
from app.widgets.settings_dialog import SettingsDialog
from tests.app_support import make_window

LOOKS = 2400  # how many times a test looks for its dialog, 50 ms apart, before it gives up


def press_ctrl_q_when_shown(qtbot, kind, pressed: list, looks: int = LOOKS) -> None:
    """Once a dialog of `kind` is the active window, presses Ctrl+Q in it (on its focused widget, as a
    user does). A modal one the key did not close is closed here, so the test fails instead of hanging."""
    dialog = QApplication.activeWindow()
    if not isinstance(dialog, kind) or not dialog.isVisible():
        if looks > 0:
            QTimer.singleShot(50, lambda: press_ctrl_q_when_shown(qtbot, kind, pressed, looks - 1))
        else:
            modal = QApplication.activeModalWidget()
            if modal is not None:
                modal.reject()
        return
    pressed.append(dialog)
    qtbot.keyClick(dialog.focusWidget() or dialog, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    if dialog.isVisible() and dialog.isModal():
        dialog.reject()


def settings_cancelled(w):
    w.dialogs.open_settings(tab=0)


def delete_confirmation(w):
    w.dialogs.confirm_delete(w.controller.chats.current)


def window_modal(w):  # opened as a tool call's consent is: open(), not exec()
    dialog = QDialog(w)
    dialog.setWindowTitle("A window-modal dialog")
    dialog.open()


def save_preset(w):  # (a chat without a system prompt is refused before a name is asked)
    w.controller.chats.set_system_prompt("Answer in one line.")
    w.dialogs.save_preset()


def manager(w):
    w.dialogs.open_manager()


def add_server(w):
    w.dialogs.open_manager()
    w.dialogs.manager.add_server()


OPENERS = {  # a dialog the window opens -> (how it opens, its kind)
    "model manager": (manager, ModelManager),
    "add server": (add_server, RemoteSourceDialog),
    "settings": (settings_cancelled, SettingsDialog),
    "delete confirmation": (delete_confirmation, QMessageBox),
    "save prompt preset": (save_preset, QInputDialog),
    "export picker": (lambda w: w.dialogs.export_chat(), QFileDialog),
    "about": (lambda w: w.dialogs.show_about(), QMessageBox),
    "shortcuts": (lambda w: w.dialogs.show_shortcuts(), QMessageBox),
    "window-modal": (window_modal, QDialog),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPENERS))
def test_ctrl_q_in_any_dialog_of_the_window_quits(qtbot, tmp_path, name):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=160, theme="light"))
    opener, kind = OPENERS[name]
    pressed: list = []
    QTimer.singleShot(50, lambda: press_ctrl_q_when_shown(qtbot, kind, pressed))
    opener(w)  # a modal one returns once it has closed; a modeless one at once
    qtbot.waitUntil(lambda: bool(pressed), timeout=180000)
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=60000)
    assert not isValid(pressed[0]) or not pressed[0].isVisible()  # a static dialog is deleted as it closes
    assert not w.controller.thread.isRunning()  # quit as File → Quit does: the engine thread ended
    assert Settings.load(tmp_path / "data" / "settings.json").theme == "light"


def test_ctrl_q_with_a_drop_down_list_open_quits(qtbot, tmp_path):
    """An open list takes every key: Ctrl+Q with the model picker's list open did nothing (a real-window
    session). Every drop-down of the window has the key in its list (the prompt presets' too)."""
    from PySide6.QtGui import QKeySequence
    from PySide6.QtWidgets import QComboBox

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=160, theme="light"))
    combos = w.findChildren(QComboBox)
    assert len(combos) >= 2 and w.picker.combo in combos
    for combo in combos:
        keys = [a.shortcut() for a in combo.view().window().actions()]
        assert QKeySequence("Ctrl+Q") in keys, combo
    combo = w.picker.combo
    combo.showPopup()
    qtbot.waitUntil(combo.view().window().isVisible, timeout=10000)
    qtbot.keyClick(combo.view(), Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=60000)
    assert not w.controller.thread.isRunning()
