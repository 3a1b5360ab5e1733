"""How Elastic Chat touches the files in its data folder (the app's settings, history, log and window
state; the MCP servers and their approvals): the folder and everything in it is the user's alone, and
nothing planted there is read through or written through.

- The folder is made 0700 and every file in it 0600: settings.json holds the server's API key, the
  history holds the chats.
- A write is atomic and new: a fresh temporary name opened with O_CREAT|O_EXCL|O_NOFOLLOW (never a
  fixed `settings.tmp` another process may have planted as a link, or a FIFO), written, fsynced,
  renamed over the file, and the folder fsynced, so a kill or a power cut leaves the old file or the
  new one, never half of one and never a write through a link.
- A read is non-blocking, of a regular file only, without following a link, and bounded: a FIFO
  cannot hang the start, /dev/zero cannot fill the memory, a link cannot make the app read (or, for
  the log, append to) a file elsewhere.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import stat
from pathlib import Path

PRIVATE_FILE, PRIVATE_FOLDER = 0o600, 0o700
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


class NotARegularFile(OSError):
    """A name in the data folder that is a link, a FIFO, a device or a folder where a file belongs."""


def make_private_folder(folder: Path) -> None:
    """Creates `folder` (and its parents) if needed and makes it 0700 when it is the user's."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_FOLDER)
    st = os.stat(folder)
    if hasattr(os, "getuid") and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(folder, stat.S_IMODE(st.st_mode) & ~0o077)


def _open_regular(path: Path, flags: int, mode: int = PRIVATE_FILE) -> int:
    """A descriptor on `path`, which must be a regular file (a link is refused by the kernel: ELOOP)."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotARegularFile(e.errno, "it is a link, not a file", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(0, "it is not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The first `max_bytes + 1` bytes at most of the regular file `path` (the caller refuses more);
    FileNotFoundError when there is none, NotARegularFile for a link, FIFO, device or folder."""
    fd = _open_regular(Path(path), os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read(max_bytes + 1)


def read_tail(path: Path, max_bytes: int) -> bytes:
    """The last `max_bytes` of the regular file `path` (a log)."""
    fd = _open_regular(Path(path), os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - max_bytes))
        return f.read(max_bytes)


def open_append(path: Path) -> io.TextIOWrapper:
    """The log, opened for appending (line-buffered text), created 0600; never through a link."""
    fd = _open_regular(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    _make_private(fd)
    os.set_blocking(fd, True)
    return io.TextIOWrapper(io.FileIO(fd, "w"), encoding="utf-8", errors="backslashreplace", line_buffering=True)


def write_private(path: Path, data: bytes) -> None:
    """Replaces `path` with `data` atomically (see the module's docstring); raises OSError."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY, PRIVATE_FILE)
    try:
        try:
            _make_private(fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(path.parent)


def private_before_open(path: Path, companions: tuple[str, ...] = ("-wal", "-shm")) -> None:
    """Makes a database that another library opens (SQLite: the history) the user's alone, called just
    before it opens it: a missing file is created empty and 0600 (SQLite then gives its -wal and -shm the
    database's mode), and an existing one and its companions (`path` + suffix) lose group and other bits.

    It changes modes by name and never opens an existing file: closing ANY descriptor of a file drops
    every POSIX lock the process holds on it, SQLite's too; the next reader then believes it is alone,
    resets the -shm the app has mapped, and the app dies of a Bus error (or two processes each own the
    WAL index, which is how databases get corrupted). Raises OSError (NotARegularFile for a link)."""
    path = Path(path)
    try:  # new, so no library holds it yet
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY,
                         PRIVATE_FILE))
    except FileExistsError:
        pass
    for name in (str(path), *(f"{path}{suffix}" for suffix in companions)):
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(0, "it is a link or not a regular file", name)
        if hasattr(os, "getuid") and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(name, stat.S_IMODE(st.st_mode) & ~0o077)


def _make_private(fd: int) -> None:
    if hasattr(os, "fchmod"):
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            os.fchmod(fd, mode & ~0o077)


def _sync_folder(folder: Path) -> None:
    """The rename itself reaches the disk (POSIX; Windows has no folder descriptors)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
