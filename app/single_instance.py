"""One app per user and data folder: a second launch asks the first to raise its window and
exits. A local socket is the lock (its name: runtime.paths.instance_name); one left behind by a crash is
removed, never obeyed."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtNetwork import QLocalServer, QLocalSocket


def ask_running_instance(name: str, message: str = "raise", timeout_ms: int = 1000) -> str | None:
    """Sends `message` to a running instance; its reply, or None when none is running."""
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(timeout_ms):
        return None
    sock.write(message.encode() + b"\n")
    sock.waitForBytesWritten(timeout_ms)
    reply = sock.readLine().data() if sock.waitForReadyRead(timeout_ms) else b""
    sock.disconnectFromServer()
    return reply.decode().strip()


class InstanceServer(QObject):
    sig_raise = Signal()

    def __init__(self, name: str, status=lambda: "ok"):
        super().__init__()
        self.name, self.status = name, status
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not self.server.listen(name):
            # Nobody answered (the caller checked), so this is a stale lock from a crash: remove it.
            QLocalServer.removeServer(name)
            if not self.server.listen(name):
                raise RuntimeError(f"cannot listen on {name}: {self.server.errorString()}")
        self.server.newConnection.connect(self._accept)

    @Slot()
    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.readyRead.connect(lambda s=sock: self._answer(s))
            sock.disconnected.connect(sock.deleteLater)  # Qt deletes it in its own time, never Python directly

    def _answer(self, sock) -> None:
        command = sock.readLine().data().decode().strip()
        if command == "raise":
            self.sig_raise.emit()
            sock.write(b"raised\n")
        else:
            sock.write((self.status() + "\n").encode())
        sock.flush()
        sock.disconnectFromServer()

    def close(self) -> None:
        """Stops answering (at exit, before the application object goes)."""
        self.server.close()
