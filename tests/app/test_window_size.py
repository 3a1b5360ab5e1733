"""The real window fits a 1280x720 screen in every state: after a reply at every depth stop, at
the default and at the largest font size the settings allow, and a 900x600 resize is honoured.
(It once grew to 1735 px wide after one reply: the live strip's text set its minimum width.)"""

from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.state.settings import Settings

SCREEN = (1280, 720)




def open_window(qtbot, data: Path, font_size: int) -> MainWindow:
    data.mkdir(parents=True, exist_ok=True)
    w = MainWindow(data, Settings(max_new_tokens=20, font_size=font_size), data / "settings.json")
    qtbot.addWidget(w)
    w.resize(*SCREEN)
    w.show()
    qtbot.waitUntil(lambda: getattr(w, "loaded", None) is not None, timeout=60000)
    return w


def largest_font_size() -> int:
    from app.widgets.settings_dialog import SettingsDialog

    dialog = SettingsDialog(None, Settings(), "", {})
    try:
        return dialog.font_size.maximum()
    finally:
        dialog.deleteLater()


def minimum_sizes(w: MainWindow) -> dict[str, tuple[int, int]]:
    QApplication.processEvents()
    central = w.centralWidget()
    sizes = {"window": w.minimumSizeHint().toTuple(), "central": central.minimumSizeHint().toTuple()}
    for i in range(central.count()):  # the sidebar and the chat column
        widget = central.widget(i)
        sizes[type(widget).__name__ + str(i)] = (widget.layout().minimumSize().toTuple() if widget.layout()
                                                else widget.minimumSizeHint().toTuple())
    return sizes


def assert_fits(w: MainWindow, when: str) -> None:
    for what, (width, height) in minimum_sizes(w).items():
        assert width <= SCREEN[0] and height <= SCREEN[1], f"{what} needs {width}x{height} {when}"


def reply_at_every_stop(qtbot, w: MainWindow) -> None:
    for stop in [s for s in w.depth.stops if s.enabled]:  # 20 tokens: each thinks (budget cut) and answers
        w.depth.set_stops(w.depth.stops, stop.name)
        w.input.setPlainText("What is 23 + 8 - 14?")
        with qtbot.waitSignal(w.controller.sig_reply_done, timeout=120000):
            w.send()
        assert_fits(w, f"after a reply at {stop.name}")


@pytest.mark.slow
def test_the_window_fits_1280x720_and_resizes_to_900x600(qtbot, tmp_path, themed):
    themed("light", Settings().font_size)
    w = open_window(qtbot, tmp_path / "data", Settings().font_size)
    assert_fits(w, "at launch")
    reply_at_every_stop(qtbot, w)
    w.resize(900, 600)
    qtbot.waitUntil(lambda: w.size().toTuple() == (900, 600), timeout=5000)
    w.close()


@pytest.mark.slow
def test_the_window_fits_1280x720_at_the_largest_font_size(qtbot, tmp_path, themed):
    largest = largest_font_size()
    themed("dark", largest)
    w = open_window(qtbot, tmp_path / "data", largest)
    assert_fits(w, f"at launch, font size {largest}")
    reply_at_every_stop(qtbot, w)
    w.resize(*SCREEN)
    qtbot.waitUntil(lambda: w.size().toTuple() == SCREEN, timeout=5000)
    w.close()


def test_a_short_window_keeps_the_chat_and_the_message_box_grows_with_its_text(qtbot, tmp_path):
    """At 860x560 with the demo's banner the chat was about 70 px tall: the message box kept 110 px empty."""
    w = open_window(qtbot, tmp_path / "data", Settings().font_size)
    w.resize(860, 560)
    qtbot.waitUntil(lambda: w.size().toTuple() == (860, 560), timeout=5000)
    line = w.input.fontMetrics().lineSpacing()
    empty, chat = w.input.height(), w.chat.height()
    assert empty < 3 * line + 16, (empty, line)  # two lines when empty, at any font
    heights = []
    for lines in (1, 3, 5, 12):
        w.input.setPlainText("\n".join(["a line"] * lines))
        qtbot.wait(20)
        heights.append(w.input.height())
    assert heights[0] == empty and heights[0] < heights[1] < heights[2] <= heights[3]
    assert heights[3] <= w.input.sizeHint().height() <= empty + 4 * line + 1  # six lines at most: more scroll
    assert 0 < chat - w.chat.height() <= heights[3] - empty  # the box grows into the chat, down to its minimum
    w.input.clear()
    qtbot.wait(20)
    assert w.input.height() == empty
    w.close()
