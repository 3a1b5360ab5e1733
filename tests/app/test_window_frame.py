"""The window's frame across restarts (app/state/window_state.py `place`, app/main_window.py
`restore_frame`, `frame_of`): it stays where the user left it, wholly on a screen, and the first
launch fits. It crept down by a title bar at every restart (the inside's corner was saved and the
frame moved there) and the first launch hid the status bar on a 1280x720 screen."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from app.state.window_state import WindowState, place
from tests.paths import ROOT

# (screens' available areas, the window manager's frame: left, top, right, bottom borders)
SCREENS = {
    "720p-with-panel": ([(0, 0, 1280, 688)], (1, 29, 1, 1)),
    "768p-left-dock": ([(64, 0, 1302, 768)], (4, 24, 4, 4)),
    "1080p": ([(0, 27, 1920, 1053)], (0, 37, 0, 0)),
    "small-800x600": ([(0, 0, 800, 600)], (2, 30, 2, 2)),
    "two-screens": ([(0, 0, 1920, 1040), (1920, 200, 1280, 1024)], (1, 29, 1, 1)),
}


def simulate(areas, borders, state: WindowState) -> tuple[WindowState, tuple]:
    """One start and quit under a window manager that draws `borders`: place the frame, then read
    back what Qt reports (frameGeometry's corner, geometry's size) the way frame_of saves it."""
    left, top, right, bottom = borders
    x, y, w, h = place(state, areas)
    frame = (x, y, w + left + right, h + top + bottom)  # move() put the frame's corner at (x, y)
    saved = WindowState(x, y, w, h, False, state.sidebar, left + right, top + bottom)
    return saved, frame


@pytest.mark.parametrize("screen", SCREENS, ids=list(SCREENS))
def test_the_frame_stays_put_and_on_the_screen_over_many_restarts(screen):
    areas, borders = SCREENS[screen]
    state = WindowState()  # the first launch
    frames = []
    for _ in range(30):
        state, frame = simulate(areas, borders, state)
        frames.append(frame)
        assert any(fx >= ax and fy >= ay and fx + fw <= ax + aw and fy + fh <= ay + ah
                   for ax, ay, aw, ah in areas for fx, fy, fw, fh in [frame]), (frame, areas)
    assert len(set(frames)) == 1, frames[:3]  # no creep: the second start is where the first was


@pytest.mark.parametrize("screen", SCREENS, ids=list(SCREENS))
def test_a_frame_left_off_screen_or_too_big_comes_back_whole(screen):
    areas, borders = SCREENS[screen]
    for x, y, w, h in [(5000, 5000, 800, 600), (-3000, 40, 900, 700), (100, 640, 1100, 700),
                       (0, 0, 4000, 3000), (-10, -50, 1280, 720)]:
        left, top, right, bottom = borders  # the frame the last session saved is this window manager's
        _, frame = simulate(areas, borders, WindowState(x, y, w, h, frame_width=left + right,
                                                        frame_height=top + bottom))
        fx, fy, fw, fh = frame
        assert any(fx >= ax and fy >= ay and fx + fw <= ax + aw and fy + fh <= ay + ah
                   for ax, ay, aw, ah in areas), (frame, (x, y, w, h))


def test_the_second_screen_is_kept_and_a_gone_one_is_not():
    both = [(0, 0, 1920, 1040), (1920, 200, 1280, 1024)]
    on_second = WindowState(2000, 300, 900, 600, frame_width=2, frame_height=30)
    assert place(on_second, both)[:2] == (2000, 300)
    x, y, w, h = place(on_second, both[:1])  # the second screen was unplugged: centred on the first
    assert 0 <= x and x + w <= 1920 and 0 <= y and y + h <= 1040


def test_a_damaged_or_hostile_file_gives_a_window_that_fits(tmp_path):
    for text in ('{"x": 1e308, "y": "0", "width": -1, "frame_height": 99999}', "[]", '{"x": true, "y": false}'):
        (tmp_path / "window.json").write_text(text)
        x, y, w, h = place(WindowState.load(tmp_path), [(0, 0, 1280, 688)])
        assert 0 <= x and x + w <= 1280 and 0 <= y and y + h <= 688


# A real window manager (openbox on a private Xvfb): the real restore and save code, many restarts.
RESTARTS = r"""
import json, os, sys
sys.path.insert(0, os.environ["ELASTIC_TEST_ROOT"])
from pathlib import Path
from PySide6.QtWidgets import QApplication, QMainWindow, QPlainTextEdit
from PySide6.QtTest import QTest
from app.main_window import frame_of, restore_frame
from app.state.window_state import WindowState
app = QApplication([])
data = Path(sys.argv[1])
for _ in range(int(sys.argv[2])):
    w = QMainWindow()
    w.setCentralWidget(QPlainTextEdit())
    w.statusBar().showMessage("status")
    restore_frame(w, WindowState.load(data))
    w.show()
    for _ in range(100):  # until the window manager has framed it
        QTest.qWait(30)
        if w.frameGeometry() != w.geometry():
            break
    QTest.qWait(200)
    f, a = w.frameGeometry(), w.screen().availableGeometry()
    print(json.dumps({"frame": [f.x(), f.y(), f.width(), f.height()], "area": [a.x(), a.y(), a.width(), a.height()]}))
    x, y, width, height, fw, fh = frame_of(w)
    WindowState(x, y, width, height, False, 240, fw, fh).save(data)
    w.close()
    w.deleteLater()
    QTest.qWait(100)
"""


@pytest.mark.slow
@pytest.mark.parametrize("size", ["1280x720", "1024x768", "1920x1080"])
def test_restarts_under_a_real_window_manager(tmp_path, size):
    if not (shutil.which("Xvfb") and shutil.which("openbox")):
        pytest.skip("needs Xvfb and openbox (a window manager that draws frames)")
    display = f":{170 + list(map(int, size.split('x')))[0] % 97}"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{size}x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "ELASTIC_TEST_ROOT": str(ROOT)}
    wm = None
    try:
        time.sleep(1.0)
        wm = subprocess.Popen(["openbox"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        proc = subprocess.run([sys.executable, "-c", RESTARTS, str(tmp_path), "8"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert len(runs) == 8
        for r in runs:
            (fx, fy, fw, fh), (ax, ay, aw, ah) = r["frame"], r["area"]
            assert fx >= ax and fy >= ay and fx + fw <= ax + aw and fy + fh <= ay + ah, r  # the status bar shows
        assert len({tuple(r["frame"]) for r in runs[1:]}) == 1, runs  # no creep after the first start
    finally:
        for p in (wm, xvfb):
            if p is not None:
                p.terminate()
                p.wait(timeout=30)
