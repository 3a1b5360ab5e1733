"""What the hub says a repo holds, checked before anything touches the disk.

Files, sizes, commit and SHA-256 come from the hub library's metadata call
(`HfApi.model_info(files_metadata=True)`), which honours HF_ENDPOINT, HF_TOKEN and the stored
login; offline mode (HF_HUB_OFFLINE=1) fails at once. A `RemoteModel` cannot be built from a list
that is unsafe to write: its names pass `remote_names` (strictly inside the folder on every OS),
sizes, hashes and the commit are checked by type and form, and the repo id by the hub's rules.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...errors import ElasticError
from ..remote_names import check_remote_name, check_remote_names, show

MAX_FILE_BYTES = 1 << 48
HEX40, HEX64 = re.compile(r"[0-9a-f]{40}"), re.compile(r"[0-9a-f]{64}")
_REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


class DownloadError(ElasticError):
    """A download problem, with a message that says what to do."""


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


def resolve(repo: str, revision: str | None = None) -> RemoteModel:
    """Files, sizes, hashes and the commit of `repo` at `revision`, from the hub's metadata."""
    check_repo_id(repo)
    if offline():
        raise DownloadError("offline mode is on (HF_HUB_OFFLINE=1): unset it to download models")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi(endpoint=hub_endpoint(), token=hub_token())
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=30)
    except GatedRepoError:
        raise DownloadError(f"{repo} is gated: accept its licence on {hub_endpoint()}/{repo} "
                            "(logged in as the same user), then try again") from None
    except RevisionNotFoundError:
        raise DownloadError(f"{repo} has no revision {show(str(revision))}") from None
    except RepositoryNotFoundError:
        raise DownloadError(f"{repo} was not found on {hub_endpoint()}; check the name, or log in "
                            "(`hf auth login` or HF_TOKEN) if it is private") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        raise DownloadError(http_message(status, repo, e.response.headers if e.response is not None else {})) from None
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:  # an answer, but not the hub's kind
        raise DownloadError(f"the hub's answer about {repo} could not be read ({type(e).__name__}); try again "
                            "later, or check HF_ENDPOINT") from None
    except Exception as e:  # connection refused, DNS, TLS ...
        raise DownloadError(f"cannot reach {hub_endpoint()} ({type(e).__name__}): check the network") from None
    siblings = info.siblings or []
    if not isinstance(siblings, list):
        raise DownloadError(f"the hub's file list for {repo} is not a list")
    files = []
    for s in siblings:
        lfs = getattr(s, "lfs", None)
        sha256 = lfs.get("sha256") if isinstance(lfs, dict) else None
        files.append(RemoteFile(getattr(s, "rfilename", None), s.size if s.size is not None else 0, sha256,
                                None if lfs else getattr(s, "blob_id", None)))
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
        wait = wait if wait and wait.isdigit() else None
        return f"the hub is rate limiting downloads: wait {wait + ' s' if wait else 'a minute'} and try again"
    if status and status >= 500:
        return f"the hub answered with a server error ({status}); it is usually temporary, try again later"
    return f"the hub answered with HTTP {status}"


def file_url(repo: str, revision: str, path: str) -> str:
    from urllib.parse import quote

    return f"{hub_endpoint()}/{repo}/resolve/{revision}/{quote(path)}"
