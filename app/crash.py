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

from .state.private_files import open_append, read_tail, write_private

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
            _fault_file = open_append(log_path)  # kept open on purpose; a planted link is refused
        faulthandler.enable(file=_fault_file, all_threads=True)
    except OSError as e:  # an unwritable log: the app still runs, the trace goes to stderr
        faulthandler.enable()
        log.warning("fatal-error traces go to stderr: %s", e)


def begin_session(data_dir: Path, log_path: Path) -> str:
    """Marks this session as running; returns a line for the user when the last one did not end cleanly:
    its marker was left behind, or it crashed after its clean exit (while the interpreter tore down),
    which only the fatal-error trace that faulthandler wrote after the "clean exit" line shows."""
    marker = Path(data_dir) / MARKER
    notice = ""
    if marker.exists() or marker.is_symlink():
        notice = (f"Elastic Chat closed unexpectedly last time. If it crashed, the details are in {log_path} "
                  "(please include that file in a bug report).")
        log.warning("the last session did not end cleanly (%s was left behind)", marker.name)
    elif crashed_after_clean_exit(log_path):
        notice = (f"Elastic Chat crashed while quitting last time; your chats and settings were saved. The details "
                  f"are in {log_path} (please include that file in a bug report).")
        log.warning("the last session crashed after its clean exit")
    try:
        write_private(marker, f"{os.getpid()}\n".encode())
    except OSError as e:
        log.warning("could not write %s: %s", marker, e)
    return notice


CLEAN_EXIT, FATAL = b"elastic-chat: clean exit", b"Fatal Python error"
LOG_TAIL_BYTES = 256 * 1024  # a fatal-error trace is a few KB; the log itself may be large


def crashed_after_clean_exit(log_path: Path) -> bool:
    """Whether the log's last session wrote a fatal-error trace after its "clean exit" line."""
    try:
        tail = read_tail(log_path, LOG_TAIL_BYTES)
    except OSError:
        return False
    end = tail.rfind(CLEAN_EXIT)
    return end >= 0 and FATAL in tail[end:]


def end_session(data_dir: Path) -> None:
    """A clean exit: the next start has nothing to report."""
    try:
        (Path(data_dir) / MARKER).unlink(missing_ok=True)
    except OSError as e:
        log.warning("could not remove the session marker: %s", e)
