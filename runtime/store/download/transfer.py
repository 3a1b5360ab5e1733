"""Downloading a checkpoint from the Hugging Face hub so that it survives anything, a hostile hub included.

- What to fetch comes from `hub_files.resolve`: a `RemoteModel`, which cannot be built from a file
  list that is unsafe to write. Each path is then built through no symbolic link (`remote_names`).
- One writer per folder (`folder_lock`): a second download of the same folder, in this process or
  another, is refused with who holds it; a lock left by a killed process is free again.
- Our own records live in the folder's hidden `.elastic-chat/` (no repo name can reach it): the
  download record (`record`: a snapshot and an append-only journal, so recording a file costs the
  same whatever the file count), the lock, and each file's partial copy, fetched with Range
  requests so a download resumes where it stopped, even after the app was closed or crashed.
- Every request goes through the one hub opener (`hub_http`): its redirect rules, the token kept
  to the hub's origin, and a call that pause or cancel stops at once, whatever it is waiting for.
- Reads are small and bounded in time: a socket timeout, a minimum rate over a window (a trickle
  is a stall), and pause or cancel closes the connection at once (Ctrl+C is prompt). A server
  that sends more than the hub listed is cut off at the listed size.
- Retries are bounded by progress, not by hope: a try counts as progress only when it takes the
  file past the furthest point any try reached (by `MIN_PROGRESS`, or to its end), so a server
  that answers a resume with the whole file (200 to a Range request: the file starts over, and so
  does its byte count) and drops at the same place each time fails after `max_failures` tries,
  with a line that says so.
- Each file is hashed by reading what is on disk (SHA-256 for LFS files, the git blob id for
  small ones), renamed into place only when it matches, and the file now in place must be the
  very file that was hashed; the run ends by checking every file in place again. A file already
  there that we did not write is never deleted or overwritten.
- Free disk is checked before the first byte, and a full disk stops the download with one line.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import os
import re
import shutil
import stat
import threading
import time
import urllib.error
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...units import format_bytes
from ..folder_lock import FolderLock, bookkeeping_dir
from ..remote_names import UnsafeName, is_link, open_no_follow, show, target_path
from .hub_files import (  # noqa: F401 (re-exported)
    DownloadError,
    RemoteFile,
    RemoteModel,
    check_repo_id,
    file_url,
    http_message,
    hub_endpoint,
    hub_token,
    offline,
    resolve,
)
from .hub_http import HubCall, HubRefused
from .record import (  # noqa: F401 (re-exported)
    HASH_BLOCK,
    LEGACY_MANIFEST,
    RecordJournal,
    git_blob_sha1,
    hash_mismatch,
    read_manifest,
    reason,
    record_path,
    sha256_of,
    write_record,
)

QUEUED, DOWNLOADING, STALLED, VERIFYING, DONE, FAILED, PAUSED, CANCELLED = (
    "queued", "downloading", "stalled", "verifying", "done", "failed", "paused", "cancelled")
READ = 64 * 1024  # one socket read: small, so pause and the stall watchdog act between reads
DISK_MARGIN = 512 * 1024 * 1024
MIN_PROGRESS = READ  # a try that moves a file's furthest point by less (and does not end it) is a failed one


@dataclass(frozen=True)
class DownloadProgress:
    state: str
    done_bytes: int
    total_bytes: int
    speed_bps: float  # over the last few seconds; 0 while stalled
    eta_s: float | None
    file: str = ""
    message: str = ""  # what happened, in words (why it failed, why it stalled)

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 1.0


# ----------------------------------------------------------------------------- the download

class _Retry(Exception):
    def __init__(self, message: str, state: str = DOWNLOADING, wait: float | None = None):
        super().__init__(message)
        self.message, self.state, self.wait = message, state, wait


class _Stopped(Exception):
    """Paused or cancelled: unwinds to `run`, which reports which."""


class Download:
    """Downloads `remote` into `dest`. `run()` blocks (call it from a worker thread) and returns
    the final DownloadProgress: DONE when every file is complete and verified, PAUSED or CANCELLED when
    asked; it raises an ElasticError (one line) when it gives up or the folder is unsafe or busy."""

    def __init__(self, remote: RemoteModel, dest: Path, on_progress: Callable[[DownloadProgress], None] | None = None,
                 stall_seconds: float = 30.0, max_failures: int = 6, backoff: tuple[float, ...] = (1, 2, 4, 8, 16, 30),
                 token: str | None = None, min_rate_bps: float = 16 * 1024):
        self.remote, self.dest = remote, Path(os.path.abspath(dest))
        self.on_progress = on_progress or (lambda p: None)
        self.stall_seconds, self.max_failures, self.backoff = stall_seconds, max_failures, backoff
        self.min_rate_bps = min_rate_bps  # slower than this over `stall_seconds` counts as stalled
        self.token = token
        self._pause, self._cancel = threading.Event(), threading.Event()
        self._done_bytes = 0
        self._reached = 0  # how far the current try took its file
        self._range_ignored = False  # the server answered a resume with the whole file
        self._journal: RecordJournal | None = None
        self._manifest: dict = {}
        self._ours: set[str] = set()  # names this folder's record says we wrote: ours to replace
        self._window: deque[tuple[float, int]] = deque()
        self._last = DownloadProgress(QUEUED, 0, remote.total_bytes, 0.0, None)

    # controls, from any thread (pause also from a signal handler): they only set a flag; the hub
    # call in flight is watched and its socket shut within a poll (hub_http.POLL_S)
    def pause(self) -> None:
        """Stops the run in progress, or the next one if asked before it began (it then returns PAUSED)."""
        self._pause.set()

    def resume(self) -> None:
        self._pause.clear()

    def cancel(self) -> None:
        self._cancel.set()

    def _stopping(self) -> bool:
        return self._pause.is_set() or self._cancel.is_set()

    @property
    def progress(self) -> DownloadProgress:
        return self._last

    def run(self) -> DownloadProgress:
        try:
            home = Path.home().resolve()
            if home == self.dest.resolve() or home.is_relative_to(self.dest.resolve()):
                raise DownloadError(f"{self.dest} holds your home folder: give the download a folder of its own "
                                    "(a repo's files, dotfiles included, would land among yours)")
            if self.dest.exists() and not self.dest.is_dir():
                raise DownloadError(f"{self.dest} is a file, not a folder: choose another destination")
            self.dest.mkdir(parents=True, exist_ok=True)
            with FolderLock(self.dest, "download"):
                return self._run_locked()
        except OSError as e:  # the disk side; network errors are retried inside
            raise DownloadError(_disk_message(e, self.dest)) from None
        finally:
            self._pause.clear()  # a paused job may run again

    def _run_locked(self) -> DownloadProgress:
        try:
            self._manifest = read_manifest(self.dest)
        except DownloadError as e:
            self._manifest = {}
            self._emit(QUEUED, message=f"{e}; starting a new record")
        self._ours = set(self._manifest.get("files", {}))
        parts = bookkeeping_dir(self.dest, create=True) / "parts"
        st = _lstat(parts)
        if st is None:
            parts.mkdir()
        elif is_link(st) or not stat.S_ISDIR(st.st_mode):
            raise UnsafeName(f"{parts} is not a plain folder (a link or a file); remove it, then try again")
        self._adopt_legacy_parts()
        self._done_bytes = sum(self._have(f) for f in self.remote.files)
        self._check_disk()
        self._emit(QUEUED)
        try:
            for f in self.remote.files:
                self._check_stop()
                if not self._already_here(f):
                    self._fetch_verified(f)
            self._final_check()
        except _Stopped:
            if self._cancel.is_set():
                self._discard_parts()
                return self._emit(CANCELLED, message="cancelled; partial files removed")
            return self._emit(PAUSED, message="paused; resume continues where it stopped")
        finally:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
        self._record(complete=True)
        return self._emit(DONE, message="every file is complete and verified")

    # -------------------------------------------------------------- per file

    def _final(self, f: RemoteFile, create_parents: bool = False) -> Path:
        return target_path(self.dest, f.path, create_parents)

    def _part(self, f: RemoteFile) -> Path:
        # Named by a hash of the remote name: flat, fixed length, and out of reach of any repo name.
        return self.dest / ".elastic-chat" / "parts" / (hashlib.sha256(f.path.encode()).hexdigest()[:40] + ".part")

    def _have(self, f: RemoteFile) -> int:
        st = _lstat(self._final(f))
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == f.size:
            return f.size
        st = _lstat(self._part(f))
        return min(st.st_size, f.size) if st is not None and stat.S_ISREG(st.st_mode) else 0

    def _already_here(self, f: RemoteFile) -> bool:
        """A file already in place: trusted if our record has it unchanged, else hashed now. One that
        differs is replaced only if our record says we wrote it; anything else is the user's."""
        final = self._final(f)
        st = _lstat(final)
        if st is None:
            return False
        if not stat.S_ISREG(st.st_mode):
            raise DownloadError(f"{final} is not a plain file, but {show(f.path)} goes there; move it away "
                                "and run the download again")
        entry = self._entry(f)
        if entry and entry["size"] == f.size == st.st_size and _unchanged(entry, st):
            return True
        if st.st_size == f.size:
            self._emit(VERIFYING, file=f.path, message="checking a file already on disk")
            problem, hashed = self._check_file(final, f)
            if problem is None:
                self._record(f, hashed)
                return True
        if f.path not in self._ours:
            raise DownloadError(f"{final} already exists and is not the hub's {show(f.path)}; it was not written "
                                "by this download, so it is left alone: move it away or choose an empty folder")
        self._done_bytes -= min(st.st_size, f.size)
        final.unlink()
        return False

    def _fetch_verified(self, f: RemoteFile) -> None:
        """Fetches and verifies one file, retrying as needed; raises _Stopped when paused or cancelled.
        Only a try that takes the file past the furthest point reached before resets the count."""
        failures, furthest = 0, self._have(f)
        self._range_ignored = False
        while True:
            self._check_stop()
            self._reached = 0
            try:
                self._fetch(f)
                self._verify_and_place(f)
                return
            except _Retry as r:
                before, furthest = furthest, max(furthest, self._reached)
                moved = furthest - before
                failures = 0 if moved > 0 and moved >= min(MIN_PROGRESS, f.size - before) else failures + 1
                if failures >= self.max_failures:
                    why = r.message
                    if self._range_ignored:
                        why += (f"; the server does not resume (it answers a byte range with the whole file), so "
                                f"every try starts over and none got past {furthest:,} bytes")
                    raise DownloadError(f"{show(f.path)}: {why}; gave up after {failures} tries without progress. "
                                        "Run the download again to resume, or try later") from None
                # after progress (failures back at 0) the shortest wait, not the longest
                wait = r.wait if r.wait is not None else self.backoff[min(max(failures, 1), len(self.backoff)) - 1]
                self._emit(r.state, file=f.path, message=f"{r.message}; retrying in {wait:.0f} s")
                self._sleep(wait)

    def _check_stop(self) -> None:
        if self._pause.is_set() or self._cancel.is_set():
            raise _Stopped

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (self._cancel.is_set() or self._pause.is_set()):
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def _fetch(self, f: RemoteFile) -> None:
        """Streams the rest of `f` into its partial file, never past the listed size."""
        part = self._part(f)
        fd = open_no_follow(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a planted hard link would be written through
                raise DownloadError(f"{part} is not a plain file of its own; delete it and run the download again")
            have = st.st_size
            if have > f.size:
                self._done_bytes -= f.size
                os.ftruncate(fd, 0)
                have = 0
                self._reached = have
            if have < f.size:
                self._stream(f, fd, have)
        finally:
            os.close(fd)

    def _stream(self, f: RemoteFile, fd: int, have: int) -> None:
        headers = {"User-Agent": "elastic-chat/0.2"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if have:
            headers["Range"] = f"bytes={have}-"
        url = file_url(self.remote.repo, self.remote.revision, f.path)
        with HubCall(stop=self._stopping) as call:
            try:
                response = call.open(url, headers, self.stall_seconds)
            except HubRefused as e:
                raise DownloadError(f"{show(f.path)}: {e}") from None
            except urllib.error.HTTPError as e:
                self._http_error(e)
            except TimeoutError:
                self._check_stop()
                raise _Retry(f"stalled: no answer for {self.stall_seconds:.0f} s", STALLED) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
                self._check_stop()  # pause shuts the socket under the connect or the headers
                raise _Retry(f"network connection lost ({reason(e)})") from None
            with response:
                have = self._check_range(response, fd, have)
                self._read_body(f, response, fd, have)

    def _check_range(self, response, fd: int, have: int) -> int:
        """Where the body starts: at `have` for a matching 206, at 0 for a whole file (200)."""
        encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":  # we ask for identity: the hashes and the ranges are of the bytes as stored
            raise DownloadError(f"the hub sent a file encoded as {show(encoding)}, not as it is stored; refusing it")
        if response.status == 206:
            m = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", response.headers.get("Content-Range", "").strip())
            if have and m and int(m.group(1)) == have:
                return have
        if have:  # the server ignored the range, or answered another one: start the file over
            self._range_ignored = self._range_ignored or response.status == 200
            self._done_bytes -= have
            self._reached = 0
            os.ftruncate(fd, 0)
        if response.status == 206:  # a piece from somewhere else: ask again for the whole file
            raise _Retry("the server answered with another part of the file; starting it over", wait=0)
        return 0

    def _read_body(self, f: RemoteFile, response, fd: int, have: int) -> None:
        last_emit = 0.0
        mark_t, mark_have = time.monotonic(), have  # the stall window: at least min_rate over stall_seconds
        self._emit(DOWNLOADING, file=f.path)
        while have < f.size:
            self._check_stop()
            try:
                chunk = response.read1(min(READ, f.size - have))  # one socket read at most: returns what arrived
            except TimeoutError:
                self._check_stop()
                raise _Retry(f"stalled: no data for {self.stall_seconds:.0f} s", STALLED) from None
            except (OSError, http.client.HTTPException, ValueError) as e:
                self._check_stop()  # pause closes the socket under the read
                raise _Retry(f"network connection lost ({reason(e)})") from None
            if not chunk:
                self._check_stop()
                raise _Retry("the connection closed early")
            _write_all(fd, chunk, f.path)
            have += len(chunk)
            self._reached = have
            self._done_bytes += len(chunk)
            now = time.monotonic()
            if now - last_emit >= 0.1:
                self._emit(DOWNLOADING, file=f.path)
                last_emit = now
            if now - mark_t >= self.stall_seconds:
                rate = (have - mark_have) / (now - mark_t)
                if rate < self.min_rate_bps:  # a trickle: counted as a failed try, the bytes are kept
                    raise _Retry(f"stalled: only {rate:.0f} bytes/s for {now - mark_t:.0f} s", STALLED)
                mark_t, mark_have = now, have
        # Listed size reached: whatever else the server would send is not read (the `with` closes it).

    def _http_error(self, e: urllib.error.HTTPError):
        if e.code == 429:
            retry_after = e.headers.get("Retry-After") if e.headers else None
            wait = min(float(retry_after), 600.0) if retry_after and retry_after.isdigit() else 30.0
            raise _Retry(f"rate limited by the hub (HTTP 429); waiting {wait:.0f} s", wait=wait)
        if e.code >= 500:
            raise _Retry(f"the hub answered with a server error ({e.code})")
        raise DownloadError(http_message(e.code, self.remote.repo, e.headers)) from None

    def _check_file(self, path: Path, f: RemoteFile) -> tuple[str | None, os.stat_result]:
        """Hashes the file at `path` as it is on disk: (what is wrong or None, the stat of what was read)."""
        fd = open_no_follow(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as src:
            st = os.fstat(src.fileno())
            if not stat.S_ISREG(st.st_mode):
                return "is not a plain file", st
            if st.st_size != f.size:
                return f"has {st.st_size} bytes, the hub says {f.size}", st
            if not (f.sha256 or f.git_sha1):
                return None, st
            wrong = hash_mismatch(src, st.st_size, f.sha256, f.git_sha1, on_block=self._check_stop)
            if os.fstat(src.fileno()).st_size != st.st_size:
                return "changed while it was being checked", st
        if wrong:
            return f"does not match the hub's {wrong} (corrupted in transit)", st
        return None, st

    def _verify_and_place(self, f: RemoteFile) -> None:
        part = self._part(f)
        self._emit(VERIFYING, file=f.path)
        problem, hashed = self._check_file(part, f)
        if problem:
            part.unlink()
            self._done_bytes -= min(hashed.st_size, f.size)
            raise _Retry(f"{show(f.path)} {problem}; the bad copy was discarded and will be downloaded again", wait=0)
        final = self._final(f, create_parents=True)
        if _lstat(final) is not None and f.path not in self._ours:
            raise DownloadError(f"{final} appeared while {show(f.path)} was downloading and was not written by it; "
                                "move it away and run the download again")
        os.replace(part, final)
        placed = os.lstat(final)
        if _identity(placed) != _identity(hashed):  # what is in place must be what was hashed
            raise DownloadError(f"{final} changed between its check and now: another program writes into "
                                f"{self.dest}; stop it and run the download again")
        self._record(f, placed)

    def _final_check(self) -> None:
        """Every file in place is still the one verified (same size and modification time)."""
        for f in self.remote.files:
            final = self._final(f)
            st, entry = _lstat(final), self._entry(f)
            if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != f.size or not entry \
                    or not _unchanged(entry, st):
                raise DownloadError(f"{final} changed after it was verified (another program writes into "
                                    f"{self.dest}?); run the download again")

    # -------------------------------------------------------------- bookkeeping

    def _adopt_legacy_parts(self) -> None:
        """Partial files of versions before 0.2 lay next to their file as NAME.part: move them to parts/.
        Only in a folder whose old record says it was ours: a user's own NAME.part is left alone."""
        legacy = _lstat(self.dest / LEGACY_MANIFEST)
        if legacy is None or not stat.S_ISREG(legacy.st_mode):
            return
        names = {f.path for f in self.remote.files}
        for f in self.remote.files:
            if f.path + ".part" in names or _lstat(self._part(f)) is not None:
                continue
            try:
                old = target_path(self.dest, f.path + ".part")
            except UnsafeName:
                continue
            st = _lstat(old)
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                os.replace(old, self._part(f))

    def _check_disk(self) -> None:
        left = self.remote.total_bytes - self._done_bytes
        free = shutil.disk_usage(self.dest).free
        if left + DISK_MARGIN > free:
            raise DownloadError(f"not enough disk space in {self.dest}: {format_bytes(left, 'GiB')} left to "
                                f"download (+{format_bytes(DISK_MARGIN, 'GiB')} margin), {format_bytes(free, 'GiB')} "
                                "free. Free some space or choose another models folder")

    def _emit(self, state: str, file: str = "", message: str = "") -> DownloadProgress:
        now = time.monotonic()
        self._window.append((now, self._done_bytes))
        while self._window and now - self._window[0][0] > 5:
            self._window.popleft()
        t0, b0 = self._window[0]
        speed = (self._done_bytes - b0) / (now - t0) if now - t0 > 0.2 and state == DOWNLOADING else 0.0
        left = self.remote.total_bytes - self._done_bytes
        eta = left / speed if speed > 0 else None
        self._last = DownloadProgress(state, self._done_bytes, self.remote.total_bytes, speed, eta, file, message)
        self.on_progress(self._last)
        return self._last

    def _discard_parts(self) -> None:
        for f in self.remote.files:
            self._part(f).unlink(missing_ok=True)

    def _entry(self, f: RemoteFile) -> dict | None:
        m = self._manifest
        return m.get("files", {}).get(f.path) if m.get("revision") == self.remote.revision else None

    def _record(self, f: RemoteFile | None = None, st: os.stat_result | None = None, complete: bool = False) -> None:
        """The record lists each verified file as soon as it is in place (one journal line), so a
        crash loses nothing; the end of the download writes the whole record once."""
        m = self._manifest
        if m.get("revision") != self.remote.revision or m.get("repo") != self.remote.repo:
            # a new record: the snapshot on disk must stop vouching for the old revision's files now
            m = self._manifest = {"repo": self.remote.repo, "revision": self.remote.revision, "files": {},
                                  "complete": False}
            bookkeeping_dir(self.dest, create=True)
            write_record(self.dest, m)
        if f is not None:
            entry = {"size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1,
                     "mtime_ns": st.st_mtime_ns if st is not None else None,
                     "ino": st.st_ino if st is not None else None}
            m["files"][f.path] = entry
            self._ours.add(f.path)
            if self._journal is None:
                self._journal = RecordJournal(self.dest, self.remote.repo, self.remote.revision)
            self._journal.append(f.path, entry)
        if complete:
            m["complete"] = all(f.path in m["files"] for f in self.remote.files)
            write_record(self.dest, m)


def _write_all(fd: int, data: bytes, name: str) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise DownloadError(f"the disk is full while writing {show(name)}; free some space and run the "
                                "download again (it resumes)") from None
        raise DownloadError(f"cannot write {show(name)}: {e.strerror or e}") from None


def _disk_message(e: OSError, dest: Path) -> str:
    if e.errno == errno.ENOSPC:
        return f"the disk holding {dest} is full; free some space and run the download again (it resumes)"
    where = f" ({e.filename})" if e.filename else ""
    return f"cannot write in {dest}{where}: {e.strerror or e}; choose another folder or fix its permissions"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _unchanged(entry: dict, st: os.stat_result) -> bool:
    """The file is the one the record describes: same modification time and, when known, same inode."""
    return entry.get("mtime_ns") == st.st_mtime_ns and entry.get("ino") in (None, st.st_ino)


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

