"""Entry point of `elastic-chat`: the desktop app.

    elastic-chat [--checkpoint DIR] [--data-dir DIR] [--theme system|light|dark] [--probe FILE]

With no checkpoint the bundled demo model loads (its NVFP4 export, so the app takes the
quantized path a real RTX PC takes). `--probe` plans with a recorded hardware probe instead
of this PC's (for demos and tests).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elastic-chat", description="Elastic Chat desktop app")
    parser.add_argument("--checkpoint", help="a checkpoint folder to open (default: the last one, or the demo)")
    parser.add_argument("--data-dir", type=Path, help="where chats and settings live (default: the user data folder)")
    parser.add_argument("--theme", choices=["system", "light", "dark"])
    parser.add_argument("--probe", help="a recorded hardware probe (JSON) to plan with")
    args = parser.parse_args(argv)

    from PySide6.QtWidgets import QApplication

    from runtime.model_store import data_dir

    from .main_window import MainWindow
    from .settings import Settings
    from .theme import apply_theme

    folder = args.data_dir or data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, filename=str(folder / "elastic-chat.log"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings_path = folder / "settings.json"
    settings = Settings.load(settings_path)
    if args.theme:
        settings.theme = args.theme
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Elastic Chat")
    apply_theme(app, settings.theme, settings.font_size)
    window = MainWindow(folder, settings, settings_path, args.checkpoint, args.probe)
    window.show()
    return app.exec()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
