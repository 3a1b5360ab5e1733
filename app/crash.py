"""Crashes leave a trace: uncaught exceptions are written to the log in the user data folder and
shown in a dialog that names the file; a fatal error in native code (a segfault, an abort inside
Qt or torch) is written there by `faulthandler`; and the next start says the last session ended
unexpectedly, because a marker file written at start was not removed by a clean exit."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import traceback
from pathlib import Path

log = logging.getLogger("elastic-chat")
MARKER = "session.running"
_fault_file = None  # open for the life of the process: faulthandler writes to its descriptor when Python cannot


def report(exc_type, exc, tb, log_path: Path) -> str:
    """Logs the exception and returns the message the user sees."""
    log.error("uncaught exception\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
    return (f"Elastic Chat hit an unexpected problem: {exc_type.__name__}: {exc}\n\n"
            f"The details were written to {log_path}. Your chats are saved; if this keeps happening, "
            "please include that file in a bug report.")


def install(log_path: Path) -> None:
    global _fault_file

    def hook(exc_type, exc, tb):
        message = report(exc_type, exc, tb, log_path)
        try:
            from PySide6.QtWidgets import QApplication, QMessageBox

            if QApplication.instance() is not None:
                QMessageBox.critical(None, "Elastic Chat", message)
                return
        except Exception:
            pass
        print(message, file=sys.stderr)

    sys.excepthook = hook
    threading.excepthook = lambda args: report(args.exc_type, args.exc_value, args.exc_traceback, log_path)
    try:
        if _fault_file is None:
            _fault_file = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (kept open on purpose)
        faulthandler.enable(file=_fault_file, all_threads=True)
    except OSError as e:  # an unwritable log: the app still runs, the trace goes to stderr
        faulthandler.enable()
        log.warning("fatal-error traces go to stderr: %s", e)


def begin_session(data_dir: Path, log_path: Path) -> str:
    """Marks this session as running; returns a line for the user when the last one did not end cleanly."""
    marker = Path(data_dir) / MARKER
    notice = ""
    if marker.exists():
        notice = (f"Elastic Chat closed unexpectedly last time. If it crashed, the details are in {log_path} "
                  "(please include that file in a bug report).")
        log.warning("the last session did not end cleanly (%s was left behind)", marker.name)
    try:
        marker.write_text(f"{os.getpid()}\n")
    except OSError as e:
        log.warning("could not write %s: %s", marker, e)
    return notice


def end_session(data_dir: Path) -> None:
    """A clean exit: the next start has nothing to report."""
    try:
        (Path(data_dir) / MARKER).unlink(missing_ok=True)
    except OSError as e:
        log.warning("could not remove the session marker: %s", e)
