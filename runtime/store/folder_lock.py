"""One writer per download folder, across processes (the app and the command line alike).

The lock is an OS lock on `.elastic-chat/lock` inside the folder (flock on Linux and macOS, a
byte-range lock on Windows), so it dies with its process: a lock left by a crashed or killed
download is simply free again, with no stale file to clean up. The holder writes who it is (pid,
host, since when, what for) into the file, so the one that is refused can say who holds it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ..errors import ElasticError
from .remote_names import BOOKKEEPING, UnsafeName, is_link, open_no_follow

LOCK_NAME = "lock"
_WINDOWS_LOCK_OFFSET = 1 << 30  # lock a byte far past the text, so others can still read who holds it


class FolderBusy(ElasticError):
    """Another process writes into this folder; the message says who."""


def bookkeeping_dir(folder: Path, create: bool = False) -> Path:
    """`folder/.elastic-chat`, a real folder (never a planted link)."""
    path = Path(folder) / BOOKKEEPING
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            os.mkdir(path)
        return path
    if is_link(st) or not os.path.isdir(path):
        raise UnsafeName(f"{path} is not a plain folder (a link or a file); remove it, then try again")
    return path


class FolderLock:
    """`with FolderLock(folder, "download"):` holds the folder or raises FolderBusy at once."""

    def __init__(self, folder: Path, purpose: str, wait_s: float = 1.0):
        self.folder, self.purpose, self.wait_s = Path(folder), purpose, wait_s
        self.fd: int | None = None

    def acquire(self) -> "FolderLock":
        path = bookkeeping_dir(self.folder, create=True) / LOCK_NAME
        fd = open_no_follow(path, os.O_RDWR | os.O_CREAT)
        deadline = time.monotonic() + self.wait_s  # someone merely peeking (`holder`) lets go within microseconds
        while not _try_lock(fd, exclusive=True):
            if time.monotonic() > deadline:
                who = _read_holder(fd)
                os.close(fd)
                raise FolderBusy(f"another {who} is already writing to {self.folder}; wait for it to finish, "
                                 "or pause or cancel it there, then try again")
            time.sleep(0.05)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "purpose": self.purpose}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(info).encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            _unlock(fd)
            os.close(fd)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def holder(folder: Path) -> str | None:
    """Who holds `folder`'s lock, in words, or None when nobody does. Never takes it for long."""
    path = Path(folder) / BOOKKEEPING / LOCK_NAME
    try:
        if is_link(os.lstat(path)):
            return None
        fd = open_no_follow(path, os.O_RDWR)
    except (OSError, ElasticError):
        return None
    try:
        if _try_lock(fd, exclusive=False):
            _unlock(fd)
            return None
        return _read_holder(fd)
    finally:
        os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode())
        pid, host, since, purpose = int(info["pid"]), str(info["host"]), float(info["since"]), str(info["purpose"])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "process (it has not said who it is yet)"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    purpose = purpose if purpose.isalpha() else "task"
    return f"{purpose} (pid {pid} on {''.join(c for c in host if c.isprintable())[:64]}, since {when})"


if os.name == "nt":
    import msvcrt

    def _try_lock(fd: int, exclusive: bool) -> bool:
        # Windows has no shared byte-range lock in msvcrt; peeking takes it exclusively for an instant.
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _try_lock(fd: int, exclusive: bool) -> bool:
        # flock, not fcntl/lockf: a flock belongs to the open file, so two downloads in one process
        # exclude each other too, and it is released when the process dies.
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
