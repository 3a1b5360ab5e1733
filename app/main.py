"""Entry point of `elastic-chat`: the desktop app.

    elastic-chat [--checkpoint DIR] [--data-dir DIR] [--theme system|light|dark] [--probe FILE]

With no checkpoint the bundled demo model loads (its NVFP4 export, so the app takes the
quantized path a real RTX PC takes). `--probe` plans with a recorded hardware probe instead
of this PC's (for demos and tests). A second launch raises the running window and exits, or says
in a window that the running app did not answer (app/single_instance.py: a lock held for the app's
life decides, in a folder private to the user).

Teardown is explicit and in order: the window (and every widget it owns) is deleted while the
application object exists, wrappers left in reference cycles are collected, then "clean exit" is
logged and the session marker removed; a crash after that line is still reported at the next start
(app/crash.py reads the log's tail). Nothing is left for PySide's teardown at the interpreter's exit.
"""

from __future__ import annotations

import argparse
import gc
import logging
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

    from runtime.api import data_dir, log_file, use_models_dir

    from . import crash
    from .state.data_files import check_data_files, prepare_data_folder
    from .state.settings import Settings

    data = prepare_data_folder(args.data_dir or data_dir())  # never raises: an unusable folder -> a temporary copy
    folder = data.path
    log_path = log_file(folder)
    logging.basicConfig(level=logging.INFO, handlers=[_log_handler(log_path)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    crash.install(log_path)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    crash.install_relay()  # crash dialogs from any thread open on this one
    app.setApplicationName("Elastic Chat")
    app.setDesktopFileName("elastic-chat")
    instance, instance_problem = _claim_instance(folder)
    if instance is not None and not instance.held:
        return _second_launch(instance.socket)
    shown = _Shown()
    server, problem = _serve(instance, shown) if instance is not None else (None, "")
    instance_problem = instance_problem or problem
    if instance_problem:
        logging.getLogger("elastic-chat").warning("single instance: %s", instance_problem)

    from .main_window import MainWindow
    from .theme import apply_theme

    settings_path = folder / "settings.json"
    settings = Settings.load(settings_path)
    if args.theme:
        settings.theme = args.theme
    use_models_dir(settings.models_dir)
    apply_theme(app, settings.theme, settings.font_size)
    check_data_files(data, settings)  # opens (and repairs) the history once; notices go to the window's banner
    notice = crash.begin_session(folder, log_path)
    if instance_problem:
        notice = " ".join(x for x in (notice, f"A second launch cannot find this window: {instance_problem}.") if x)
    window = MainWindow(folder, settings, settings_path, args.checkpoint, args.probe, notice=notice)
    shown.window = window
    window.show()
    logging.getLogger("elastic-chat").info("window shown")
    watch = _close_on_terminate(window)
    code = app.exec()
    watch.stop()
    if server is not None:
        server.close()
    shown.window = None
    _delete_now(window)  # the window and every child it owns go now, while the application object exists
    window = None
    gc.collect()  # wrappers in reference cycles go now too, not in PySide's teardown at the interpreter's exit
    logging.getLogger("elastic-chat").info("clean exit")
    crash.end_session(folder)
    crash.stop_qt_messages()
    if instance is not None:
        instance.release()  # last: a launch from now on is the app
    return code


ANSWER_S = 10  # a running app answers at once; one that is starting (or quitting) may need a moment


def _second_launch(socket: str) -> int:
    """This launch found the app running: it asks that app to raise its window, and says so in a window
    of its own when that app does not answer (it is quitting, or busy): from a desktop launcher a line
    on stderr is nothing at all."""
    from PySide6.QtWidgets import QMessageBox

    from .single_instance import ask_until_answered

    if ask_until_answered(socket, "raise", ANSWER_S) == "raised":
        print("Elastic Chat is already running; its window was raised.")
        return 0
    text = ("Elastic Chat is already running, but it did not answer: it may be quitting or still starting. "
            "Wait a moment, then open it again.")
    print(text)
    logging.getLogger("elastic-chat").warning("a second launch was refused: %s", text)
    QMessageBox.information(None, "Elastic Chat", text)
    return 0


class _Shown:
    """The window a later launch raises and asks about; None until it exists and once it is gone."""

    def __init__(self):
        self.window, self.raised = None, 0

    def bring_to_front(self) -> None:
        if self.window is None:
            return  # still starting: the window shows itself
        self.raised += 1
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
        logging.getLogger("elastic-chat").info("raised by a second launch")

    def status(self) -> str:
        if self.window is None:
            return "starting"
        return f"ok visible={self.window.isVisible()} raised={self.raised} title={self.window.windowTitle()}"


def _serve(instance, shown: _Shown):
    """The instance socket for the lock's holder, before the window exists (a later launch gets an
    answer at once); (None, why) when it cannot listen."""
    from .single_instance import InstanceServer

    try:
        server = InstanceServer(instance, shown.status)
    except OSError as e:
        return None, str(e)
    server.sig_raise.connect(shown.bring_to_front)
    return server, ""


def _claim_instance(folder: Path):
    """The instance lock for `folder` (held or not), or (None, why) when no private folder can hold it:
    the app then runs without one rather than not at all."""
    from .single_instance import InstanceLock

    try:
        return InstanceLock(folder), ""
    except OSError as e:
        return None, str(e)


def _log_handler(log_path: Path) -> logging.Handler:
    """The log file, appended to without following a link (prepare_data_folder moved a planted one
    aside); stderr when even that fails."""
    from runtime.api import open_append

    try:
        return logging.StreamHandler(open_append(log_path))
    except OSError as e:
        print(f"Elastic Chat cannot write its log {log_path} ({e.strerror or e}); errors go here.", file=sys.stderr)
        return logging.StreamHandler(sys.stderr)


def _close_on_terminate(window):
    """SIGTERM (a logout, `kill`) and SIGINT (Ctrl+C in a terminal) close the window as its ✕ does:
    replies stopped, everything saved, a clean exit, so the next start does not report a crash. Python
    runs a signal handler only between bytecodes, so a timer gives it a turn while Qt's loop waits."""
    import signal

    from PySide6.QtCore import QTimer

    def close(signum, _frame):
        logging.getLogger("elastic-chat").info("%s: closing", signal.Signals(signum).name)
        QTimer.singleShot(0, window.close)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, close)
    timer = QTimer()
    timer.timeout.connect(lambda: None)
    timer.start(200)
    return timer


def _delete_now(widget) -> None:
    """Deletes a top-level widget's C++ object at once. Python references to it (lambdas connected to
    its signals hold one) would otherwise keep it until PySide's teardown at the interpreter's exit,
    after the application object, where deleting Qt-owned children crashed."""
    import shiboken6

    if shiboken6.isValid(widget):
        shiboken6.delete(widget)


if __name__ == "__main__":
    sys.exit(main())
