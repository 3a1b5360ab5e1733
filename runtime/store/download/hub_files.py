"""What the hub says a repo holds, checked before anything touches the disk.

Files, sizes, commit and SHA-256 come from the hub's model-info call (`/api/models/{repo}` with
`blobs=true`, the call `HfApi.model_info(files_metadata=True)` makes), read through the one hub
opener (`hub_http`): bounded in size after decompression (`MAX_METADATA_BYTES`) and in time as a
whole (`METADATA_DEADLINE_S`, however slowly the bytes come), and stoppable from another thread
(a pause or cancel before the download began). It honours HF_ENDPOINT, HF_TOKEN and the stored
login; offline mode (HF_HUB_OFFLINE=1) fails at once. A `RemoteModel` cannot be built from a list
that is unsafe to write: its names pass `remote_names` (strictly inside the folder on every OS, no
tool folder), sizes, hashes and the commit are checked by type and form, and the repo id by the
hub's rules.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from ...errors import ElasticError
from ..remote_names import check_remote_name, check_remote_names, show
from .hub_http import DownloadError, HubCall, read_bounded

MAX_FILE_BYTES = 1 << 48
MAX_METADATA_BYTES = 64 << 20  # a file list of 100,000 files is about 25 MB of JSON
METADATA_DEADLINE_S = 60.0
READ_TIMEOUT_S = 30.0
HEX40, HEX64 = re.compile(r"[0-9a-f]{40}"), re.compile(r"[0-9a-f]{64}")
_REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


def check_repo_id(repo) -> str:
    """A hub repo id (`owner/name`): it names a folder and goes into URLs, so it is checked like a name."""
    parts = repo.split("/") if isinstance(repo, str) else []
    if not 1 <= len(parts) <= 2 or not all(_REPO_PART.fullmatch(p) for p in parts) or ".." in repo or "--" in repo:
        shown = show(repo) if isinstance(repo, str) else repr(repo)[:80]
        raise DownloadError(f"{shown} is not a hub repo id: use "
                            "owner/name, letters, digits, '.', '_' and '-' (for example nvidia/Some-Model)")
    return repo


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
    """A hub repo's files at one commit. Built only from a list that is safe to write: the one check
    of everything the hub says (names, sizes, hashes, commit), before anything touches the disk."""

    repo: str
    revision: str  # the commit sha the files belong to
    files: tuple[RemoteFile, ...]

    def __post_init__(self):
        try:
            check_repo_id(self.repo)
            if not isinstance(self.revision, str) or not HEX40.fullmatch(self.revision):
                raise DownloadError(f"the commit {show(str(self.revision))} is not a 40-digit git hash")
            if not self.files:
                raise DownloadError("it lists no files")
            for f in self.files:
                _check_remote_file(f)
            check_remote_names(f.path for f in self.files)
        except ElasticError as e:
            raise DownloadError(f"the hub's file list for {show(str(self.repo))} cannot be used: {e}. Nothing "
                                "was written; report it to the repo's owner") from None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _check_remote_file(f: RemoteFile) -> None:
    check_remote_name(f.path)
    if type(f.size) is not int or not 0 <= f.size <= MAX_FILE_BYTES:
        raise DownloadError(f"{show(f.path)} has an impossible size {show(str(f.size))}")
    if f.sha256 is not None and not (isinstance(f.sha256, str) and HEX64.fullmatch(f.sha256)):
        raise DownloadError(f"{show(f.path)} has a malformed SHA-256 {show(str(f.sha256))}")
    if f.git_sha1 is not None and not (isinstance(f.git_sha1, str) and HEX40.fullmatch(f.git_sha1)):
        raise DownloadError(f"{show(f.path)} has a malformed git hash {show(str(f.git_sha1))}")


# ----------------------------------------------------------------------------- metadata

def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()  # HF_TOKEN, else the stored login


class MetadataStopped(DownloadError):
    """The caller stopped `resolve` (a pause or cancel) before the hub had answered."""


def resolve(repo: str, revision: str | None = None, stop: Callable[[], bool] | None = None,
            deadline_s: float = METADATA_DEADLINE_S) -> RemoteModel:
    """Files, sizes, hashes and the commit of `repo` at `revision`, from the hub's metadata.
    `stop` is polled while the call is in flight: when it turns true, MetadataStopped at once."""
    check_repo_id(repo)
    if offline():
        raise DownloadError("offline mode is on (HF_HUB_OFFLINE=1): unset it to download models")
    info = _model_info(repo, revision, stop, deadline_s)
    if not isinstance(info, dict):
        raise DownloadError(f"the hub's answer about {repo} is not an object; try again later, or check HF_ENDPOINT")
    siblings = info.get("siblings")
    if not isinstance(siblings, list):
        raise DownloadError(f"the hub's file list for {repo} is not a list")
    try:
        files = tuple(_remote_file(s) for s in siblings)
    except (TypeError, ValueError) as e:
        raise DownloadError(f"the hub's file list for {repo} cannot be used: {e}. Nothing was written; report it "
                            "to the repo's owner") from None
    return RemoteModel(repo, info.get("sha"), files)


def _model_info(repo: str, revision: str | None, stop, deadline_s: float):
    url = f"{hub_endpoint()}/api/models/{repo}"
    if revision is not None:
        url += f"/revision/{quote(str(revision), safe='')}"
    headers = {"User-Agent": "elastic-chat/0.2", "Accept": "application/json", "Accept-Encoding": "gzip"}
    token = hub_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with HubCall(deadline_s, stop) as call:
        try:
            with call.open(url + "?blobs=true", headers, READ_TIMEOUT_S) as response:
                raw = read_bounded(response, MAX_METADATA_BYTES)
            if call.interrupted:  # the socket was shut under the read: what arrived is cut short
                raise _interrupted(call, repo)
        except DownloadError:
            if call.interrupted:
                raise _interrupted(call, repo) from None
            raise
        except urllib.error.HTTPError as e:
            e.close()
            raise DownloadError(_info_error(e, repo, revision)) from None
        except (OSError, ValueError, http.client.HTTPException) as e:
            if call.interrupted:
                raise _interrupted(call, repo) from None
            raise DownloadError(f"cannot reach {hub_endpoint()} ({_reason(e)}): check the network") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise DownloadError(f"the hub's answer about {repo} could not be read ({type(e).__name__}); try again "
                            "later, or check HF_ENDPOINT") from None


def _interrupted(call: HubCall, repo: str) -> DownloadError:
    if call.interrupted == "stopped":
        return MetadataStopped(f"stopped before the hub said what {repo} holds")
    return DownloadError(f"the hub did not finish saying what {repo} holds within {call.deadline_s:.0f} s (it "
                         f"answers too slowly); try again later, or check HF_ENDPOINT")


def _info_error(e, repo: str, revision: str | None) -> str:
    """The hub's error for a model-info call in words (its X-Error-Code, as the hub library reads it)."""
    code = e.headers.get("X-Error-Code", "") if e.headers else ""
    message = e.headers.get("X-Error-Message", "") if e.headers else ""
    if code == "GatedRepo":
        return (f"{repo} is gated: accept its licence on {hub_endpoint()}/{repo} (logged in as the same user), "
                "then try again")
    if code == "RevisionNotFound":
        return f"{repo} has no revision {show(str(revision))}"
    if e.code == 401 and message == "Invalid credentials in Authorization header":
        return "the hub refused your token (HF_TOKEN or the stored login): log in again with `hf auth login`"
    if code == "RepoNotFound" or e.code in (401, 404):
        # the hub answers 401 for a missing repo too, and for a private one without a login
        return (f"{repo} was not found on {hub_endpoint()}; check the name, or log in (`hf auth login` or "
                "HF_TOKEN) if it is private")
    return http_message(e.code, repo, e.headers)


def _reason(e: Exception) -> str:
    why = getattr(e, "reason", None) or e
    return str(why) or type(e).__name__


def _remote_file(s) -> RemoteFile:
    """One entry of the hub's file list; its values are checked by RemoteModel."""
    if not isinstance(s, dict):
        raise TypeError(f"it holds {show(repr(s))} where a file entry belongs")
    lfs = s.get("lfs")
    if lfs is not None and not (isinstance(lfs, dict) and isinstance(lfs.get("sha256"), str)):
        raise TypeError(f"the LFS entry of {show(str(s.get('rfilename')))} is malformed")
    return RemoteFile(s.get("rfilename"), s.get("size"), lfs["sha256"] if lfs else None,
                      None if lfs else s.get("blobId"))


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
        wait = wait if wait and wait.isdigit() else None
        return f"the hub is rate limiting downloads: wait {wait + ' s' if wait else 'a minute'} and try again"
    if status and status >= 500:
        return f"the hub answered with a server error ({status}); it is usually temporary, try again later"
    return f"the hub answered with HTTP {status}"


def file_url(repo: str, revision: str, path: str) -> str:
    return f"{hub_endpoint()}/{repo}/resolve/{revision}/{quote(path)}"
