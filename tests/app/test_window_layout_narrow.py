"""The window at 700 px (half of a 1366x768 laptop screen): the chat list folds away below
NARROW_PX, the Chats button (Ctrl+B) shows it again and the choice is kept in window.json; every
control that matters stays visible and inside the window; the live strip shows words or nothing,
never "R… S… C…" (issue 38, item 7)."""

import json
import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from app.main_window import MainWindow
from app.sidebar_fold import NARROW_PX
from app.state.settings import Settings
from app.widgets.elided_label import ElidedLabel
from app.widgets.live_strip import LiveStrip

LOAD_MS = 300000  # the demo's load and warm-up on a busy shared CPU
NARROW = (700, 500)




def open_window(qtbot, data: Path, font_size: int) -> MainWindow:
    data.mkdir(parents=True, exist_ok=True)
    w = MainWindow(data, Settings(max_new_tokens=20, font_size=font_size), data / "settings.json")
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: getattr(w, "loaded", None) is not None, timeout=LOAD_MS)
    return w


def resized(qtbot, w: MainWindow, size: tuple[int, int]) -> None:
    w.resize(*size)
    qtbot.waitUntil(lambda: w.size().toTuple() == size, timeout=60000)  # refused when its minimum is wider


def important(w: MainWindow) -> dict[str, QWidget]:
    return {"input": w.input, "Send": w.send_button, "Stop": w.stop_button, "depth slider": w.depth.slider,
            "strip": w.strip, "strip badge": w.strip.badge, "Chats": w.chats_button, "Models": w.manager_button,
            "Settings": w.settings_button, "Attach": w.attach_button, "Tools": w.tools_button,
            "Answer now": w.answer_now_button, "Think longer": w.think_longer_button}


def outside(w: MainWindow, widgets: dict[str, QWidget]) -> list[str]:
    """The names of `widgets` not shown whole inside the window."""
    QApplication.processEvents()
    bad = []
    for name, widget in widgets.items():
        box = widget.rect().translated(widget.mapTo(w, widget.rect().topLeft()))
        if not widget.isVisible() or widget.width() < 8 or not w.rect().contains(box):
            bad.append(f"{name} at {box.getRect()} in {w.rect().getRect()}")
    return bad


def shown(label: ElidedLabel) -> str:
    """What the label paints (its text() is the whole text)."""
    return QLabel.text(label)


def all_inside(qtbot, w: MainWindow, widgets: dict[str, QWidget]) -> None:
    """Waits until every one of `widgets` is shown whole inside the window (the layout settles in the
    event loop); on a timeout the assertion names the ones that are not."""
    def check() -> None:
        assert outside(w, widgets) == []

    qtbot.waitUntil(check, timeout=60000)


def letters_and_ellipsis(strip: LiveStrip) -> list[str]:
    """The strip's texts shown cut to a letter or two and "…" (or cut at all: a readable label shows a form
    of its text in whole words)."""
    bad = []
    for label in strip.findChildren(ElidedLabel):
        painted = shown(label)
        if label.isVisible() and label.width() > 0 and painted != label.text() and (
                re.fullmatch(r".{0,2}…", painted) or painted.endswith("…")):
            bad.append(f"{label.text()!r} shown as {painted!r}")
    return bad


@pytest.mark.parametrize("font_size", [Settings().font_size, 14])
def test_a_700x500_window_folds_the_chat_list_and_keeps_every_control_inside(qtbot, tmp_path, themed, font_size):
    """At 14 pt the window could not be narrower than 769 px: the chat list's column and the chat's
    column side by side."""
    themed("light", font_size)
    data = tmp_path / "data"
    w = open_window(qtbot, data, font_size)
    resized(qtbot, w, NARROW)
    assert w.width() <= 700 and not w.left_column.isVisible() and not w.chats_button.isChecked()
    all_inside(qtbot, w, important(w))
    assert letters_and_ellipsis(w.strip) == []
    w.chats_button.click()  # shown again, by choice
    qtbot.waitUntil(lambda: w.sidebar.list.isVisible(), timeout=60000)
    assert w.chats_button.isChecked() and w.chats_action.isChecked()
    if font_size == Settings().font_size:  # both columns fit 700 px (at 14 pt they need more: the window grows)
        all_inside(qtbot, w, {**important(w), "chat list": w.sidebar.list, "model picker": w.picker.combo})
        assert w.width() <= 700
    w.close()
    state = json.loads((data / "window.json").read_text())
    assert state["chats_narrow"] is True and state["chats_wide"] is True
    again = open_window(qtbot, data, font_size)  # the choice comes back with the window
    assert again.width() < NARROW_PX and again.left_column.isVisible()
    again.input.setFocus()
    qtbot.keyClick(again.input, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)  # hides it again
    assert not again.left_column.isVisible() and again.input.toPlainText() == ""
    assert again.chats_action.shortcut().toString() == "Ctrl+B"
    resized(qtbot, again, (1280, 720))  # wide: the wide window's own choice (shown)
    assert again.left_column.isVisible() and again.chats_button.isChecked()
    all_inside(qtbot, again, important(again))
    assert letters_and_ellipsis(again.strip) == [] and again.strip.memory.width() > 0  # "RAM … MiB", whole
    again.close()
    assert json.loads((data / "window.json").read_text())["chats_narrow"] is False


STRIP_TEXTS = {"path": "CUDA · NVFP4 weights, fused Triton kernels · decode: CUDA graph · experts in RAM",
               "memory": "VRAM 12.3 GiB · RAM 1,234 MiB",
               "server": "Serving 127.0.0.1:8000 · POST /v1/chat/completions · 2 waiting"}


@pytest.mark.parametrize("width", [1020, 684, 420])  # the strip in a 1280 px window, a 700 px one, less
def test_the_strip_shows_words_or_nothing_never_a_letter_and_an_ellipsis(qtbot, width):
    host = QWidget()
    qtbot.addWidget(host)
    strip = LiveStrip()
    strip.setParent(host)
    strip.set_submodels(["0.5M", "1.0M", "1.5M"])
    strip.set_badge("0.5M", "thinking")
    strip.on_switch("0.5M", "1.0M", 123, 456.0, reason="depth")
    strip.ttft.setText("TTFT 812 ms")
    strip.speed.setText("31.4 tok/s")
    strip.set_path(STRIP_TEXTS["path"])
    strip.set_memory(STRIP_TEXTS["memory"])
    strip.set_server(STRIP_TEXTS["server"])
    strip.resize(width, strip.sizeHint().height())
    host.resize(width, 80)
    host.show()
    qtbot.waitExposed(host)
    qtbot.waitUntil(lambda: strip.badge.width() > 0, timeout=60000)
    assert letters_and_ellipsis(strip) == []
    placed = {label for label in strip.findChildren(ElidedLabel) if label.width() > 0}
    assert {strip.badge, strip.ttft, strip.speed} <= placed  # who produces tokens and how fast: always
    assert shown(strip.ttft) == "TTFT 812 ms" and shown(strip.speed) == "31.4 tok/s"
    if width >= 1020:  # a 1280 px window has room for memory, the server and the compute path, in words
        assert {strip.memory, strip.server, strip.path} <= placed
        assert shown(strip.memory).startswith("VRAM 12.3 GiB") and shown(strip.path).startswith("CUDA")
        assert shown(strip.server).startswith("Serving 127.0.0.1:8000")
    for label in placed:  # squeezed ones say the whole text when hovered
        assert label.text() in label.toolTip() or shown(label) == label.text()
    by_priority = [strip.badge, strip.ttft, strip.speed, strip.switch_note, strip.sparkline, strip.memory,
                   strip.server, strip.path]
    dropped = [part.width() == 0 for part in by_priority]
    assert dropped == sorted(dropped), dropped  # what goes is the least important: a tail of the order
    assert strip.minimumSizeHint().width() < 200  # it never sets the window's width


def test_the_chat_list_choices_load_only_as_booleans(tmp_path):
    from app.state.window_state import WindowState

    (tmp_path / "window.json").write_text(json.dumps({"chats_wide": False, "chats_narrow": True}))
    s = WindowState.load(tmp_path)
    assert (s.chats_wide, s.chats_narrow) == (False, True)
    (tmp_path / "window.json").write_text(json.dumps({"chats_wide": "no", "chats_narrow": 1}))
    s = WindowState.load(tmp_path)
    assert (s.chats_wide, s.chats_narrow) == (True, False)  # not booleans: the defaults
