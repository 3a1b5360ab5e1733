"""Entry point of `elastic-chat`: the desktop app.

    elastic-chat [--checkpoint DIR] [--data-dir DIR] [--theme system|light|dark] [--probe FILE]

With no checkpoint the bundled demo model loads (its NVFP4 export, so the app takes the
quantized path a real RTX PC takes). `--probe` plans with a recorded hardware probe instead
of this PC's (for demos and tests). A second launch raises the running window and exits.
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

    from runtime.paths import data_dir, instance_name, log_file

    from . import crash
    from .single_instance import InstanceServer, ask_running_instance
    from .state.data_files import check_data_files, prepare_data_folder
    from .state.settings import Settings

    data = prepare_data_folder(args.data_dir or data_dir())  # never raises: an unusable folder -> a temporary copy
    folder = data.path
    log_path = log_file(folder)
    logging.basicConfig(level=logging.INFO, filename=str(log_path),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    crash.install(log_path)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    crash.install_relay()  # crash dialogs from any thread open on this one
    app.setApplicationName("Elastic Chat")
    app.setDesktopFileName("elastic-chat")
    name = instance_name(folder)
    if ask_running_instance(name, "raise") is not None:
        print("Elastic Chat is already running; its window was raised.")
        return 0

    from .main_window import MainWindow
    from .theme import apply_theme

    settings_path = folder / "settings.json"
    settings = Settings.load(settings_path)
    if args.theme:
        settings.theme = args.theme
    if settings.models_dir:
        os.environ["ELASTIC_CHAT_MODELS"] = settings.models_dir
    apply_theme(app, settings.theme, settings.font_size)
    check_data_files(data, settings)  # opens (and repairs) the history once; notices go to the window's banner
    notice = crash.begin_session(folder, log_path)
    window = MainWindow(folder, settings, settings_path, args.checkpoint, args.probe, notice=notice)
    raised = []

    def bring_to_front():
        raised.append(1)
        window.showNormal()
        window.raise_()
        window.activateWindow()
        logging.getLogger("elastic-chat").info("raised by a second launch")
    server = InstanceServer(name, lambda: f"ok visible={window.isVisible()} raised={len(raised)} "
                                          f"title={window.windowTitle()}")
    server.sig_raise.connect(bring_to_front)
    window.show()
    logging.getLogger("elastic-chat").info("window shown")
    code = app.exec()
    server.close()
    window = None  # the window (and its controller) go before the application object, explicitly
    crash.end_session(folder)
    logging.getLogger("elastic-chat").info("clean exit")
    return code


if __name__ == "__main__":
    sys.exit(main())
