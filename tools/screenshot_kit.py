"""What both screenshot scripts need: waiting on the real event loop, and saving a widget's picture."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def start(default_out: Path) -> tuple[argparse.Namespace, Path]:
    """Reads `--out`, makes it, and points the app's home at a fresh scratch folder (returned)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="elastic-shots-"))
    os.environ["ELASTIC_CHAT_HOME"] = str(work / "home")
    return args, work


def wait(app, cond, seconds: float, pause: float = 0.005) -> bool:
    """Runs the event loop until `cond()` holds or `seconds` pass; returns `cond()`."""
    from PySide6.QtCore import QEventLoop

    end = time.time() + seconds
    while time.time() < end and not cond():
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 30)
        time.sleep(pause)
    return cond()


def shoot(app, widget, path: Path) -> None:
    """Saves what the widget shows now, and says where, at which size (and the smallest it allows)."""
    app.processEvents()
    widget.grab().save(str(path))
    print("wrote", path, f"{widget.width()}x{widget.height()}",
          f"(minimum {widget.minimumSizeHint().width()}x{widget.minimumSizeHint().height()})")
