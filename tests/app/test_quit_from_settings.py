"""Ctrl+Q quits while the Settings dialog is open (issue 38, item 8): the window's shortcuts wait while a
modal dialog runs, so the dialog itself takes Ctrl+Q, closes as Cancel, and the window then closes as
File → Quit closes it."""

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.state.settings import Settings
from tests.app_support import make_window


@pytest.mark.slow
@pytest.mark.parametrize("tab", [0, 2, 3])
def test_ctrl_q_in_settings_cancels_the_dialog_and_quits(qtbot, tmp_path, tab):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=160, theme="light"))
    seen = []

    def press_ctrl_q():
        dialog = QApplication.activeModalWidget()
        if dialog is None or QApplication.activeWindow() is not dialog:  # not shown, or not the user's yet
            QTimer.singleShot(50, press_ctrl_q)
            return
        seen.append(dialog)
        dialog.theme.setCurrentText("dark")  # an edit that Cancel must drop
        qtbot.keyClick(dialog.focusWidget() or dialog, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
        if dialog.isVisible():  # the key did nothing (it is handled at once): close it so the test can fail
            dialog.reject()

    QTimer.singleShot(50, press_ctrl_q)
    w.dialogs.open_settings(tab=tab)  # returns once the dialog has closed
    assert seen and not seen[0].isVisible()
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=60000)  # once the code after the dialog has run
    assert not w.controller.thread.isRunning()  # quit: the engine thread ended
    assert w.settings.theme == "light" and Settings.load(tmp_path / "data" / "settings.json").theme == "light"
