"""Crashes leave a trace: uncaught exceptions are written to the log in the user data folder and
shown in a dialog that names the file; a fatal error in native code (a segfault, an abort inside
Qt or torch) is written there by `faulthandler`; and the next start says the last session ended
unexpectedly, because a marker file written at start was not removed by a clean exit.

The dialog is only ever opened on the GUI thread: an exception in a worker's slot reaches the hook
in the worker's thread, where touching a widget crashes Qt (a segfault, then the same again at every
start). From any other thread the message crosses to the GUI thread by a queued signal of `Relay`,
made there by `install_relay` once the application exists; before that it goes to stderr.

A model whose load fails, or that is loading when the process dies, is not loaded again at the next
start without asking: `LoadRecord` writes which model is loading before the load starts and removes
it when the load and warm-up are done, keeping a failure's message; `blocked` tells the next start.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import stat
import sys
import threading
import traceback
from pathlib import Path

from runtime.api import open_append, read_tail, write_private

log = logging.getLogger("elastic-chat")
MARKER = "session.running"
_fault_file = None  # open for the life of the process: faulthandler writes to its descriptor when Python cannot


def report(exc_type, exc, tb, log_path: Path) -> str:
    """Logs the exception and returns the message the user sees."""
    log.error("uncaught exception\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
    return (f"Elastic Chat hit an unexpected problem: {exc_type.__name__}: {exc}\n\n"
            f"The details were written to {log_path}. Your chats are saved; if this keeps happening, "
            "please include that file in a bug report.")


_relay = None  # the Relay living on the GUI thread (install_relay)


def install_relay() -> None:
    """Call on the GUI thread once the QApplication exists: from then on a crash in any thread
    shows its dialog there."""
    global _relay
    from PySide6.QtCore import QObject, Signal, Slot
    from PySide6.QtWidgets import QMessageBox

    class Relay(QObject):
        sig_message = Signal(str)

        @Slot(str)
        def show(self, message: str) -> None:
            QMessageBox.critical(None, "Elastic Chat", message)

    if _relay is None:
        _relay = Relay()
        _relay.sig_message.connect(_relay.show)  # queued from other threads: the receiver lives here


def show_message(message: str) -> None:
    """The crash dialog, on the GUI thread whichever thread asks; stderr when there is no GUI yet."""
    try:
        from PySide6.QtCore import QThread
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance()
        if app is not None and QThread.currentThread() == app.thread():
            from PySide6.QtWidgets import QMessageBox

            QMessageBox.critical(None, "Elastic Chat", message)
            return
        if app is not None and _relay is not None:  # another thread: the relay's slot runs on the GUI thread
            _relay.sig_message.emit(message)
            return
    except Exception as e:  # reporting a crash must not raise another
        log.warning("could not show the crash dialog: %s", e)
    print(message, file=sys.stderr)


def install(log_path: Path) -> None:
    global _fault_file

    def hook(exc_type, exc, tb):
        show_message(report(exc_type, exc, tb, log_path))

    sys.excepthook = hook
    threading.excepthook = lambda args: hook(args.exc_type, args.exc_value, args.exc_traceback)
    try:
        if _fault_file is None:
            _fault_file = open_append(log_path)  # kept open on purpose; a planted link is refused
        faulthandler.enable(file=_fault_file, all_threads=True)
        _unread_stderr_to(_fault_file)
    except OSError as e:  # an unwritable log: the app still runs, the trace goes to stderr
        faulthandler.enable()
        log.warning("fatal-error traces go to stderr: %s", e)
    _qt_messages_to_log()


def _unread_stderr_to(log_file) -> None:
    """Points a stderr that nobody reads (/dev/null, or none: a desktop launcher's) at the log. Python's
    own fatal errors ("Fatal Python error: none_dealloc", then abort) switch faulthandler off and write
    their reason to stderr alone; a terminal, a pipe or a file keeps it (someone reads those)."""
    try:
        st = os.fstat(2)
    except OSError:  # no stderr at all
        st = None
    if st is None or (stat.S_ISCHR(st.st_mode) and not os.isatty(2)):
        if sys.stderr is not None:
            sys.stderr.flush()
        os.dup2(log_file.fileno(), 2)
        log.info("stderr went nowhere; it goes to this log")


def _qt_messages_to_log() -> None:
    """Qt's warnings, criticals and fatals go to the log too (and to stderr, as Qt's own handler does):
    a qFatal's reason was on stderr alone, and faulthandler's trace after it said only "Aborted"."""
    try:
        from PySide6.QtCore import QtMsgType, qInstallMessageHandler
    except ImportError:
        return
    levels = {QtMsgType.QtInfoMsg: logging.INFO, QtMsgType.QtWarningMsg: logging.WARNING,
              QtMsgType.QtCriticalMsg: logging.ERROR, QtMsgType.QtFatalMsg: logging.CRITICAL}

    def handler(kind, _context, message):
        if kind in levels:
            log.log(levels[kind], "Qt: %s", message)
        if sys.stderr is not None:
            print(message, file=sys.stderr, flush=True)
    qInstallMessageHandler(handler)


def stop_qt_messages() -> None:
    """Qt's own handler again, at the end of main: no Python is called once the interpreter winds down."""
    try:
        from PySide6.QtCore import qInstallMessageHandler
    except ImportError:
        return
    qInstallMessageHandler(None)


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


LOADING, FAILED = "model.loading", "model.failed"


class LoadRecord:
    """Which model is loading, or failed to load, in the data folder, so the next start knows.

    Written by the engine worker (its thread: files only, no widgets): `begin` before a load,
    `end` when it is done (warm-up included) or failed. A start that finds `model.loading` knows the
    last process died loading that model; `model.failed` keeps a failure's message."""

    def __init__(self, data_dir: Path):
        self.folder = Path(data_dir)

    def begin(self, model: str) -> None:
        self._write(LOADING, {"model": model})

    def end(self, model: str, error: str = "") -> None:
        if error:
            self._write(FAILED, {"model": model, "error": error[:2000]})
        else:
            self._remove(FAILED)
        self._remove(LOADING)

    def clear(self) -> None:
        """The user chose to try again, or chose another model: nothing is held against it."""
        self._remove(LOADING)
        self._remove(FAILED)

    def blocked(self, model: str) -> str:
        """Why `model` should not be loaded without asking ("" when nothing is known against it)."""
        loading, failed = self._read(LOADING), self._read(FAILED)
        if loading.get("model") == model:
            return "the last session ended while it was loading"
        if failed.get("model") == model:
            return f"it failed to load last time: {failed.get('error') or 'no reason was recorded'}"
        return ""

    def _read(self, name: str) -> dict:
        from runtime.api import JsonFileError, read_json_file

        try:
            data = read_json_file(self.folder / name, 64 << 10)
        except (FileNotFoundError, JsonFileError):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)}

    def _write(self, name: str, data: dict) -> None:
        import json
        import tempfile

        try:  # a private temporary file renamed over the record: never half a record, never through a link
            fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=self.folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.folder / name)
        except OSError as e:
            log.warning("could not write %s: %s", name, e)

    def _remove(self, name: str) -> None:
        try:
            (self.folder / name).unlink(missing_ok=True)
        except OSError as e:
            log.warning("could not remove %s: %s", name, e)
