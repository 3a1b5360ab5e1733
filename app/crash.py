"""Uncaught exceptions: written to the log in the user data folder, and shown in a dialog that
names the file, so a bug is a message with somewhere to look, not a dead window."""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from pathlib import Path

log = logging.getLogger("elastic-chat")


def report(exc_type, exc, tb, log_path: Path) -> str:
    """Logs the exception and returns the message the user sees."""
    log.error("uncaught exception\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
    return (f"Elastic Chat hit an unexpected problem: {exc_type.__name__}: {exc}\n\n"
            f"The details were written to {log_path}. Your chats are saved; if this keeps happening, "
            "please include that file in a bug report.")


def install(log_path: Path) -> None:
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
