"""The window's size, position and sidebar width across restarts (no Qt): `window.json` in the user
data folder, written atomically. The file is hostile like any input: anything that is not a sane
number is ignored (the defaults are used), and the caller fits what is left to the screens there are."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.json_file import read_json_file

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

    @classmethod
    def load(cls, data_dir: Path) -> "WindowState":
        path = Path(data_dir) / FILE
        try:
            data = read_json_file(path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as e:
            log.warning("%s could not be read (%s); the default window size is used", path, e)
            return cls()
        s = cls()
        for key, lo, hi in (("x", -100000, 100000), ("y", -100000, 100000), ("width", 300, 100000),
                            ("height", 200, 100000), ("sidebar", 80, 2000)):
            v = data.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
                setattr(s, key, v)
        if isinstance(data.get("maximized"), bool):
            s.maximized = data["maximized"]
        return s

    def save(self, data_dir: Path) -> None:
        path = Path(data_dir) / FILE
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
            os.replace(tmp, path)
        except OSError as e:  # a read-only folder: the window just opens at the default size next time
            log.warning("could not save %s: %s", path, e)
