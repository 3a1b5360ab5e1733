"""The window's size, position, sidebar width and whether the chat list shows (in a wide and in a
narrow window: app/sidebar_fold.py) across restarts (no Qt): `window.json` in the user
data folder, written atomically. The file is hostile like any input: anything that is not a sane
number is ignored (the defaults are used), and `place` fits what is left to the screens there are.

What is saved is the frame the user left: `x`, `y` are the top-left corner of the window's frame
(title bar included, which is where Qt's `move` puts a window), `width`, `height` the inside (what
`resize` sets), and `frame_width`, `frame_height` what the frame adds. Saving the inside's corner
and moving the frame there made the window creep down by a title bar at every restart.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.api import read_json_file, write_private

log = logging.getLogger(__name__)
FILE = "window.json"
MAX_FILE_BYTES = 1 << 20  # a window.json is about 100 bytes


@dataclass
class WindowState:
    x: int | None = None
    y: int | None = None
    width: int = 1180
    height: int = 720
    maximized: bool = False
    sidebar: int = 240
    frame_width: int | None = None  # what the window manager's frame adds; None: not known yet
    frame_height: int | None = None
    chats_wide: bool = True  # the chat list shows in a wide window (the user's choice)
    chats_narrow: bool = False  # and in a narrow one

    @classmethod
    def load(cls, data_dir: Path) -> "WindowState":
        path = Path(data_dir) / FILE
        try:
            data = read_json_file(path, MAX_FILE_BYTES, follow_links=False)
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as e:
            log.warning("%s could not be read (%s); the default window size is used", path, e)
            return cls()
        s = cls()
        for key, lo, hi in (("x", -100000, 100000), ("y", -100000, 100000), ("width", 300, 100000),
                            ("height", 200, 100000), ("sidebar", 80, 2000), ("frame_width", 0, 400),
                            ("frame_height", 0, 400)):
            v = data.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
                setattr(s, key, v)
        for key in ("maximized", "chats_wide", "chats_narrow"):
            if isinstance(data.get(key), bool):
                setattr(s, key, data[key])
        return s

    def save(self, data_dir: Path) -> None:
        path = Path(data_dir) / FILE
        try:
            write_private(path, (json.dumps(asdict(self), indent=2) + "\n").encode())
        except OSError as e:  # a read-only folder: the window just opens at the default size next time
            log.warning("could not save %s: %s", path, e)


Rect = tuple[int, int, int, int]  # x, y, width, height
GUESSED_FRAME = (16, 48)  # before the first save: room for a title bar and borders, so the first launch fits


def place(s: WindowState, screens: list[Rect]) -> Rect:
    """Where the window's frame goes (x, y) and its inside's size (width, height): the saved frame, on
    the screen (available area, first = primary) that holds most of it, shrunk and moved to lie wholly
    on it; the first time, centred on the primary screen and fitted to it."""
    fw = s.frame_width if s.frame_width is not None else GUESSED_FRAME[0]
    fh = s.frame_height if s.frame_height is not None else GUESSED_FRAME[1]
    screens = [r for r in screens if r[2] > 0 and r[3] > 0] or [(0, 0, 1280, 720)]
    area = screens[0]
    if s.x is not None and s.y is not None:
        frame = (s.x, s.y, s.width + fw, s.height + fh)
        best = max(screens, key=lambda r: _overlap(r, frame))
        if _overlap(best, frame) > 0:
            area = best
    ax, ay, aw, ah = area
    width, height = max(1, min(s.width, aw - fw)), max(1, min(s.height, ah - fh))
    if s.x is None or s.y is None or _overlap(area, (s.x, s.y, width + fw, height + fh)) == 0:
        return ax + max(0, (aw - width - fw) // 2), ay + max(0, (ah - height - fh) // 2), width, height
    x = min(max(s.x, ax), ax + aw - width - fw)
    y = min(max(s.y, ay), ay + ah - height - fh)
    return x, y, width, height


def _overlap(a: Rect, b: Rect) -> int:
    w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    h = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    return max(0, w) * max(0, h)
