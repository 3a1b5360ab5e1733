"""One app per user and data folder: a second launch asks the first to raise its window and exits.

Principles (issue 24):
- Start-up is atomic: a lock file, locked with flock (msvcrt on Windows) for the app's whole life,
  decides which launch is the app, before any socket exists. Two launches at the same instant cannot
  both win, and a lock left by a crash is no lock at all (the kernel drops it with the process).
- Everything lives in a folder only the user can enter (runtime.paths.socket_folders: 0700, owned by
  the user, not a link; one that is not is skipped, never used). Another user cannot pre-create the
  name, and nothing there can block the start: the winner of the lock removes whatever is at the
  socket's name (it can only be a stale socket of an earlier session).
- Every message on the socket is hostile: at most MAX_MESSAGE bytes, a connection that says nothing
  is closed after a short time, only the exact lines `raise` and `status` are commands, and anything
  else is one line in the log (never a traceback), answered with nothing.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from runtime.api import MAX_SOCKET_PATH, instance_name, socket_file_name, socket_folders

log = logging.getLogger("elastic-chat")
MAX_MESSAGE = 64  # the longest command is 7 bytes
QUIET_MS = 2000  # a connection that has not sent a whole line by then is closed
COMMANDS = (b"raise", b"status")


class InstanceError(OSError):
    """No private folder for the lock and socket could be made (the reason is in the message)."""


class InstanceLock:
    """The lock that makes this process the app for `data`; `held` is False when another process has it."""

    def __init__(self, data: Path):
        self.folder, why = private_folder(data)
        if self.folder is None:
            raise InstanceError(why)
        name = socket_file_name(data)
        self.socket = (rf"\\.\pipe\{instance_name(data)}" if sys.platform == "win32"
                       else str(self.folder / name))
        path = self.folder / f"{name}.lock"
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                           | getattr(os, "O_CLOEXEC", 0), 0o600)
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise InstanceError(f"{path} is not a regular file")
        self.held = _try_lock(self._fd)

    def release(self) -> None:
        """At exit (the kernel releases it anyway when the process ends, however it ends)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self.held = None, False


def private_folder(data: Path) -> tuple[Path | None, str]:
    """The first of `socket_folders(data)` that is (or can be made) a folder of the user's alone, 0700,
    with a path short enough for a socket; (None, why) when none is."""
    problems = []
    for folder in socket_folders(data):
        if sys.platform != "win32" and len(str(folder / socket_file_name(data))) > MAX_SOCKET_PATH:
            problems.append(f"{folder}: too long a path for a socket")
            continue
        why = _make_private(folder)
        if not why:
            return folder, ""
        problems.append(f"{folder}: {why}")
        log.warning("not using %s for the instance lock: %s", folder, why)
    return None, "no private folder for the instance lock (" + "; ".join(problems) + ")"


def _make_private(folder: Path) -> str:
    """"" when `folder` is a real folder of this user's, 0700 (made so if it was not); else why not."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError as e:
        return (e.strerror or str(e)).lower()
    if not stat.S_ISDIR(st.st_mode):
        return "it is a link or a file, not a folder"
    if hasattr(os, "getuid"):
        if st.st_uid != os.getuid():
            return "another user owns it"
        if stat.S_IMODE(st.st_mode) & 0o077:
            try:
                os.chmod(folder, 0o700)
            except OSError as e:
                return f"it cannot be made private ({(e.strerror or str(e)).lower()})"
    return ""


def _set_aside(path: str) -> bool:
    """Renames what blocks the socket's name (a folder, say) aside, never deleting it; whether it went."""
    if sys.platform == "win32" or not os.path.lexists(path):
        return False
    aside = f"{path}.in-the-way-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    try:
        os.rename(path, aside)
    except OSError as e:
        log.warning("cannot move %s aside: %s", path, e)
        return False
    log.warning("%s was in the way of the instance socket; it was moved aside to %s", path, aside)
    return True


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def ask_running_instance(socket: str, message: str = "raise", timeout_ms: int = 1000) -> str | None:
    """Sends `message` to a running instance; its reply, or None when none answers."""
    sock = QLocalSocket()
    sock.connectToServer(socket)
    if not sock.waitForConnected(timeout_ms):
        return None
    sock.write(message.encode() + b"\n")
    sock.waitForBytesWritten(timeout_ms)
    reply = sock.readLine(MAX_MESSAGE * 4).data() if sock.waitForReadyRead(timeout_ms) else b""
    sock.disconnectFromServer()
    return reply.decode(errors="replace").strip()


def ask_until_answered(socket: str, message: str, seconds: float) -> str | None:
    """`ask_running_instance` until it answers: the lock's holder may still be starting its server."""
    end = time.monotonic() + seconds
    while True:
        reply = ask_running_instance(socket, message, 500)
        if reply is not None or time.monotonic() > end:
            return reply
        time.sleep(0.1)


class InstanceServer(QObject):
    """Answers later launches on the lock holder's socket. Only made by the holder of `InstanceLock`."""

    sig_raise = Signal()

    def __init__(self, lock: InstanceLock, status=lambda: "ok"):
        super().__init__()
        if not lock.held:
            raise InstanceError("the instance lock is not held")
        self.status = status
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        QLocalServer.removeServer(lock.socket)  # the lock is ours: what is there is a stale socket, in our folder
        if not self.server.listen(lock.socket) and not (_set_aside(lock.socket) and self.server.listen(lock.socket)):
            raise InstanceError(f"cannot listen on {lock.socket}: {self.server.errorString()}")
        self.server.newConnection.connect(self._accept)

    @Slot()
    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.setReadBufferSize(MAX_MESSAGE + 1)
            sock.readyRead.connect(self._answer)
            sock.disconnected.connect(sock.deleteLater)  # Qt deletes it in its own time, never Python directly
            QTimer.singleShot(QUIET_MS, sock, sock.abort)  # the timer goes with the socket

    @Slot()
    def _answer(self) -> None:
        sock = self.sender()
        if not isinstance(sock, QLocalSocket) or sock.state() != QLocalSocket.LocalSocketState.ConnectedState:
            return
        if not sock.canReadLine():
            if sock.bytesAvailable() > MAX_MESSAGE:
                self._refuse(sock, f"{sock.bytesAvailable()} bytes without a line break")
            return
        line = sock.readLine(MAX_MESSAGE + 1).data()
        command = line.rstrip(b"\r\n")
        if command == b"raise":
            self.sig_raise.emit()
            reply = b"raised\n"
        elif command == b"status":
            reply = (self.status().replace("\n", " ") + "\n").encode()
        else:
            self._refuse(sock, f"{len(line)} bytes that are not a command")
            return
        sock.write(reply)
        sock.flush()
        sock.disconnectFromServer()

    def _refuse(self, sock: QLocalSocket, what: str) -> None:
        log.warning("the instance socket ignored a message: %s", what)
        sock.abort()

    def close(self) -> None:
        """Stops answering (at exit, before the application object goes)."""
        self.server.close()
