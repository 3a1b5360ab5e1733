"""Downloading a checkpoint from the Hugging Face hub so that it survives anything.

- Files, sizes, commit and SHA-256 come from the hub library's metadata call
  (`HfApi.model_info(files_metadata=True)`), which honours HF_ENDPOINT, HF_TOKEN and the
  stored login. Offline mode (HF_HUB_OFFLINE=1) fails at once with a clear message.
- Each file streams into its own `NAME.part` with Range requests, so a download resumes
  where it stopped, even after the app was closed or crashed.
- A stall watchdog: no bytes for `stall_seconds` is reported as "stalled" and retried with
  backoff; a bounded number of failures in a row without progress gives up.
- SHA-256 is computed while streaming (a resumed file re-reads its .part once) and compared
  with the hub's LFS hash; small files are checked against their git blob id. Only a file
  whose hash matches is renamed into place (atomically). A mismatch discards the .part,
  says so, and fetches the file again.
- Free disk is checked before the first byte (what is left to fetch plus a margin) and a
  full disk during the download stops it with a clear message.
- Progress goes to a callback as immutable values; pause, resume and cancel are
  thread-safe and take effect within one chunk.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import ElasticError

QUEUED, DOWNLOADING, STALLED, VERIFYING, DONE, FAILED, PAUSED, CANCELLED = (
    "queued", "downloading", "stalled", "verifying", "done", "failed", "paused", "cancelled")
MANIFEST = ".elastic-chat-download.json"
CHUNK = 1 << 20
DISK_MARGIN = 512 * 1024 * 1024


class DownloadError(ElasticError):
    """A download problem, with a message that says what to do."""


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    git_sha1: str | None  # small files: the git blob id

    def check_hash(self) -> str:
        return "sha256" if self.sha256 else "git-sha1" if self.git_sha1 else "size"


@dataclass(frozen=True)
class RemoteModel:
    repo: str
    revision: str  # the commit sha the files belong to
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Progress:
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


# ----------------------------------------------------------------------------- metadata

def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()  # HF_TOKEN, else the stored login


def resolve(repo: str, revision: str | None = None) -> RemoteModel:
    """Files, sizes, hashes and the commit of `repo` at `revision`, from the hub's metadata."""
    if offline():
        raise DownloadError("offline mode is on (HF_HUB_OFFLINE=1): unset it to download models")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    api = HfApi(endpoint=hub_endpoint(), token=hub_token())
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=30)
    except GatedRepoError:
        raise DownloadError(f"{repo} is gated: accept its licence on {hub_endpoint()}/{repo} "
                            "(logged in as the same user), then try again") from None
    except RevisionNotFoundError:
        raise DownloadError(f"{repo} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise DownloadError(f"{repo} was not found on {hub_endpoint()}; check the name, or log in "
                            "(`hf auth login` or HF_TOKEN) if it is private") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        raise DownloadError(http_message(status, repo, e.response.headers if e.response is not None else {})) from None
    except Exception as e:  # connection refused, DNS, TLS ...
        raise DownloadError(f"cannot reach {hub_endpoint()} ({type(e).__name__}): check the network") from None
    files = []
    for s in info.siblings or []:
        lfs = s.lfs
        sha256 = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        files.append(RemoteFile(s.rfilename, int(s.size or 0), sha256, None if lfs else s.blob_id))
    if not files:
        raise DownloadError(f"{repo} lists no files")
    return RemoteModel(repo, info.sha, tuple(files))


def http_message(status: int | None, repo: str, headers) -> str:
    if status == 401:
        return f"{repo} needs you to log in: run `hf auth login` or set HF_TOKEN, then try again"
    if status == 403:
        return (f"access to {repo} is refused: it is gated; accept its licence on {hub_endpoint()}/{repo} "
                "with the account whose token you use")
    if status == 404:
        return f"{repo} or one of its files was not found on the hub"
    if status == 429:
        wait = headers.get("Retry-After") if headers else None
        return f"the hub is rate limiting downloads: wait {wait + ' s' if wait else 'a minute'} and try again"
    if status and status >= 500:
        return f"the hub answered with a server error ({status}); it is usually temporary, try again later"
    return f"the hub answered with HTTP {status}"


def file_url(repo: str, revision: str, path: str) -> str:
    from urllib.parse import quote

    return f"{hub_endpoint()}/{repo}/resolve/{revision}/{quote(path)}"


# ----------------------------------------------------------------------------- the download

class _Retry(Exception):
    def __init__(self, message: str, state: str = DOWNLOADING, wait: float | None = None, progress: bool = False):
        super().__init__(message)
        self.message, self.state, self.wait, self.progress = message, state, wait, progress


class _NoAuthAcrossHosts(urllib.request.HTTPRedirectHandler):
    """Follows redirects (the hub sends file bytes from a CDN) without carrying the token to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.request.urlparse(newurl).netloc != urllib.request.urlparse(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_opener = urllib.request.build_opener(_NoAuthAcrossHosts)


class Download:
    """Downloads `remote` into `dest`. `run()` blocks (call it from a worker thread) and returns
    the final Progress: DONE when every file is complete and verified, PAUSED or CANCELLED when
    asked; it raises DownloadError when it gives up."""

    def __init__(self, remote: RemoteModel, dest: Path, on_progress: Callable[[Progress], None] | None = None,
                 stall_seconds: float = 30.0, max_failures: int = 6, backoff: tuple[float, ...] = (1, 2, 4, 8, 16, 30),
                 token: str | None = None):
        self.remote, self.dest = remote, Path(dest)
        self.on_progress = on_progress or (lambda p: None)
        self.stall_seconds, self.max_failures, self.backoff = stall_seconds, max_failures, backoff
        self.token = token
        self._pause, self._cancel = threading.Event(), threading.Event()
        self._done_bytes = 0
        self._hashers: dict[str, tuple[int, "hashlib._Hash"]] = {}  # path -> (bytes hashed, running SHA-256)
        self._window: deque[tuple[float, int]] = deque()
        self._last = Progress(QUEUED, 0, remote.total_bytes, 0.0, None)

    # controls, from any thread
    def pause(self) -> None:
        self._pause.set()

    def resume(self) -> None:
        self._pause.clear()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def progress(self) -> Progress:
        return self._last

    def run(self) -> Progress:
        self._pause.clear()
        self.dest.mkdir(parents=True, exist_ok=True)
        self._done_bytes = sum(self._have(f) for f in self.remote.files)
        self._check_disk()
        self._emit(QUEUED)
        for f in self.remote.files:
            if self._already_here(f):
                continue
            if not self._fetch_verified(f):
                return self._last  # paused or cancelled
        self._record(complete=True)
        return self._emit(DONE, message="every file is complete and verified")

    # -------------------------------------------------------------- per file

    def _have(self, f: RemoteFile) -> int:
        final, part = self.dest / f.path, self._part(f)
        if final.exists() and final.stat().st_size == f.size:
            return f.size
        return min(part.stat().st_size, f.size) if part.exists() else 0

    def _part(self, f: RemoteFile) -> Path:
        return self.dest / (f.path + ".part")

    def _already_here(self, f: RemoteFile) -> bool:
        """A final file from an earlier run: trusted if the manifest recorded it, else checked now."""
        final = self.dest / f.path
        if not final.exists():
            return False
        entry = self._manifest_entry(f)
        if entry and entry.get("size") == f.size == final.stat().st_size:
            return True
        self._emit(VERIFYING, file=f.path, message="checking a file already on disk")
        if final.stat().st_size == f.size and _hash_matches(final, f):
            self._record(f)
            return True
        self._done_bytes -= min(final.stat().st_size, f.size)
        final.unlink()
        return False

    def _fetch_verified(self, f: RemoteFile) -> bool:
        """Fetches and verifies one file, retrying as needed. False when paused or cancelled."""
        failures = 0
        while True:
            if self._cancel.is_set():
                self._discard_parts()
                self._emit(CANCELLED, file=f.path, message="cancelled; partial files removed")
                return False
            if self._pause.is_set():
                self._emit(PAUSED, file=f.path, message="paused; resume continues where it stopped")
                return False
            try:
                if self._fetch(f):
                    self._verify_and_place(f)
                    return True
            except _Retry as r:
                failures = 0 if r.progress else failures + 1
                if failures >= self.max_failures:
                    raise DownloadError(f"{f.path}: {r.message}; gave up after {failures} tries in a row. "
                                        "Run the download again to resume") from None
                wait = r.wait if r.wait is not None else self.backoff[min(failures, len(self.backoff)) - 1]
                self._emit(r.state, file=f.path, message=f"{r.message}; retrying in {wait:.0f} s")
                self._sleep(wait)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (self._cancel.is_set() or self._pause.is_set()):
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def _hasher(self, f: RemoteFile, part: Path, have: int):
        """The running SHA-256 of the first `have` bytes of the .part (re-read once after a restart)."""
        done, h = self._hashers.get(f.path, (0, None))
        if h is None or done != have:
            h = hashlib.sha256()
            if have:
                self._emit(VERIFYING, file=f.path, message="re-reading the partial file to resume its checksum")
                with open(part, "rb") as src:
                    for block in iter(lambda: src.read(CHUNK), b""):
                        h.update(block)
        return h

    def _fetch(self, f: RemoteFile) -> bool:
        """Streams the rest of `f` into its .part. True when the .part has every byte."""
        part = self._part(f)
        have = part.stat().st_size if part.exists() else 0
        if have > f.size:
            part.unlink()
            self._done_bytes -= have - f.size
            have = 0
        if have == f.size:
            return True
        headers = {"User-Agent": "elastic-chat/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if have:
            headers["Range"] = f"bytes={have}-"
        request = urllib.request.Request(file_url(self.remote.repo, self.remote.revision, f.path), headers=headers)
        try:
            response = _opener.open(request, timeout=self.stall_seconds)
        except urllib.error.HTTPError as e:
            self._http_error(e)
        except TimeoutError:
            raise _Retry(f"stalled: no answer for {self.stall_seconds:.0f} s", STALLED) from None
        except (urllib.error.URLError, OSError) as e:
            raise _Retry(f"network connection lost ({_reason(e)})") from None
        progressed = False
        with response:
            if have and response.status != 206:  # the server ignored the range: start over
                self._done_bytes -= have
                have = 0
            h = self._hasher(f, part, have)
            try:
                with open(part, "ab" if have else "wb") as out:
                    self._emit(DOWNLOADING, file=f.path)
                    while not (self._pause.is_set() or self._cancel.is_set()):
                        chunk = response.read(CHUNK)
                        if not chunk:
                            break
                        out.write(chunk)
                        h.update(chunk)
                        have += len(chunk)
                        self._hashers[f.path] = (have, h)
                        progressed = True
                        self._done_bytes += len(chunk)
                        self._emit(DOWNLOADING, file=f.path)
            except TimeoutError:
                raise _Retry(f"stalled: no data for {self.stall_seconds:.0f} s", STALLED, progress=progressed) from None
            except OSError as e:
                if getattr(e, "errno", None) == 28:  # ENOSPC
                    raise DownloadError(f"the disk is full while writing {f.path}; free some space and run the "
                                        "download again (it resumes)") from None
                raise _Retry(f"network connection lost ({_reason(e)})", progress=progressed) from None
            except http.client.HTTPException as e:
                raise _Retry(f"the connection broke ({type(e).__name__})", progress=progressed) from None
        if self._pause.is_set() or self._cancel.is_set():
            return False
        if have < f.size:
            raise _Retry("the connection closed early", progress=progressed)
        return True

    def _http_error(self, e: urllib.error.HTTPError):
        if e.code == 429:
            retry_after = e.headers.get("Retry-After") if e.headers else None
            wait = float(retry_after) if retry_after and retry_after.isdigit() else 30.0
            raise _Retry(f"rate limited by the hub (HTTP 429); waiting {wait:.0f} s", wait=wait)
        if e.code >= 500:
            raise _Retry(f"the hub answered with a server error ({e.code})")
        raise DownloadError(http_message(e.code, self.remote.repo, e.headers)) from None

    def _verify_and_place(self, f: RemoteFile) -> None:
        part = self._part(f)
        self._emit(VERIFYING, file=f.path)
        size = part.stat().st_size
        have, h = self._hashers.pop(f.path, (0, None))
        problem = None
        if size != f.size:
            problem = f"has {size} bytes, the hub says {f.size}"
        elif f.sha256 and (h.hexdigest() if h is not None and have == size else sha256_of(part)) != f.sha256:
            problem = "does not match the hub's SHA-256 (corrupted in transit)"
        elif not f.sha256 and f.git_sha1 and git_blob_sha1(part) != f.git_sha1:
            problem = "does not match the hub's git hash (corrupted in transit)"
        if problem:
            part.unlink()
            self._done_bytes -= size
            raise _Retry(f"{f.path} {problem}; the bad copy was discarded and will be downloaded again", wait=0)
        os.replace(part, self.dest / f.path)
        self._record(f)

    # -------------------------------------------------------------- bookkeeping

    def _check_disk(self) -> None:
        left = self.remote.total_bytes - self._done_bytes
        free = shutil.disk_usage(self.dest).free
        if left + DISK_MARGIN > free:
            raise DownloadError(f"not enough disk space in {self.dest}: {left / 1e9:.1f} GB left to download "
                                f"(+{DISK_MARGIN / 1e9:.1f} GB margin), {free / 1e9:.1f} GB free. Free some "
                                "space or choose another models folder")

    def _emit(self, state: str, file: str = "", message: str = "") -> Progress:
        now = time.monotonic()
        self._window.append((now, self._done_bytes))
        while self._window and now - self._window[0][0] > 5:
            self._window.popleft()
        t0, b0 = self._window[0]
        speed = (self._done_bytes - b0) / (now - t0) if now - t0 > 0.2 and state == DOWNLOADING else 0.0
        left = self.remote.total_bytes - self._done_bytes
        eta = left / speed if speed > 0 else None
        self._last = Progress(state, self._done_bytes, self.remote.total_bytes, speed, eta, file, message)
        self.on_progress(self._last)
        return self._last

    def _discard_parts(self) -> None:
        for f in self.remote.files:
            self._part(f).unlink(missing_ok=True)
        self._hashers.clear()

    def _manifest(self) -> dict:
        return read_manifest(self.dest)

    def _manifest_entry(self, f: RemoteFile) -> dict | None:
        m = self._manifest()
        return m.get("files", {}).get(f.path) if m.get("revision") == self.remote.revision else None

    def _record(self, f: RemoteFile | None = None, complete: bool = False) -> None:
        """The manifest lists each verified file as soon as it is in place, so a crash loses nothing."""
        m = self._manifest()
        if m.get("revision") != self.remote.revision:
            m = {"repo": self.remote.repo, "revision": self.remote.revision, "files": {}}
        if f is not None:
            m["files"][f.path] = {"size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1}
        m["complete"] = complete or len(m["files"]) == len(self.remote.files)
        tmp = self.dest / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(m, indent=2) + "\n")
        os.replace(tmp, self.dest / MANIFEST)


def read_manifest(folder: Path) -> dict:
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _hash_matches(path: Path, f: RemoteFile) -> bool:
    if f.sha256:
        return sha256_of(path) == f.sha256
    if f.git_sha1:
        return git_blob_sha1(path) == f.git_sha1
    return path.stat().st_size == f.size


def _reason(e: Exception) -> str:
    reason = getattr(e, "reason", None) or e
    return str(reason) or type(e).__name__


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1()
    h.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()
