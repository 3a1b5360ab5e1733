"""The status bar's line about the model ("demo-nvfp4: 0.5M, 1.0M, 1.5M in memory; NVFP4 weights read
in registers by the CPU kernels") stays: it was a temporary message, so the first menu item hovered (its
status tip), an edit's hint or a "Conversation copied" replaced it, and the bar stayed empty until the next
load (found using the window, session 11). Now it comes back once the passing message goes, and in a
narrow window it shortens with "…" rather than being cut mid-letter or widening the window."""

from PySide6.QtGui import QStatusTipEvent
from PySide6.QtWidgets import QApplication, QLabel

from app.main_window import MainWindow
from app.state.settings import Settings
from app.widgets.elided_label import ElidedLabel

LOAD_MS = 300000  # the demo's load and warm-up on a busy shared CPU


def status_shown(w: MainWindow) -> str:
    """What the status bar shows: its passing message, else its visible labels' whole texts."""
    QApplication.processEvents()
    bar = w.statusBar()
    if bar.currentMessage():
        return bar.currentMessage()
    return " ".join(label.text() for label in bar.findChildren(QLabel) if label.isVisible())


def test_the_model_line_comes_back_after_a_status_tip_and_a_passing_message(qtbot, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    w = MainWindow(data, Settings(max_new_tokens=20), data / "settings.json")
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.loaded is not None, timeout=LOAD_MS)
    name = w.controller.loaded.title or w.controller.loaded.name  # the models list's name (app/workers.py)
    qtbot.waitUntil(lambda: f"{name}: " in status_shown(w), timeout=60000)
    line = status_shown(w)
    assert "in memory" in line
    QApplication.sendEvent(w, QStatusTipEvent("Download, verify and choose models"))  # a menu item hovered
    assert status_shown(w) == "Download, verify and choose models"
    QApplication.sendEvent(w, QStatusTipEvent(""))  # and left: Qt clears the bar's message
    qtbot.waitUntil(lambda: status_shown(w) == line, timeout=60000)
    w.statusBar().showMessage("Editing a sent message: Enter resends it")
    w.statusBar().clearMessage()  # the edit ended
    qtbot.waitUntil(lambda: status_shown(w) == line, timeout=60000)
    labels = [label for label in w.statusBar().findChildren(ElidedLabel) if label.text() == line]
    assert labels and labels[0].minimumSizeHint().width() < 200  # it never sets the window's width
    w.close()
