"""A download folder's record: which files this download wrote, their hashes, size and identity.

It lives in the folder's hidden `.elastic-chat/download.json`, where no repo file name can reach
it; folders from versions before 0.2 kept it as `.elastic-chat-download.json` at the top, which is
still read. It is read as hostile input too: a damaged or planted record is one line, and its file
names pass the same check as the hub's, so it can never point a check outside the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from ...errors import ElasticError
from ...json_file import parse_json_bytes
from ..remote_names import check_remote_names, open_no_follow, show
from .hub_files import HEX40, HEX64, DownloadError, check_repo_id

RECORD = "download.json"  # inside .elastic-chat/
LEGACY_MANIFEST = ".elastic-chat-download.json"  # where versions before 0.2 kept the record
MAX_RECORD_BYTES = 32 << 20
HASH_BLOCK = 1 << 20


def record_path(folder: Path) -> Path:
    return Path(folder) / ".elastic-chat" / RECORD


def read_manifest(folder: Path) -> dict:
    """The download record of `folder`, checked: {} when there is none; DownloadError (one line) when
    it is damaged. Its file names pass the same check as the hub's, so a planted record cannot
    point a check outside the folder."""
    for path in (record_path(folder), Path(folder) / LEGACY_MANIFEST):
        try:
            fd = open_no_follow(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        except (OSError, ElasticError) as e:
            raise DownloadError(f"the download record {path} cannot be read ({reason(e)})") from None
        try:
            with os.fdopen(fd, "rb") as src:
                raw = src.read(MAX_RECORD_BYTES + 1)
            return _checked_record(parse_json_bytes(raw, MAX_RECORD_BYTES, kind=None))
        except (OSError, ValueError, TypeError, RecursionError, ElasticError) as e:
            raise DownloadError(f"the download record {path} is damaged ({reason(e)}); delete it and run the "
                                "download again (files in place are checked, not fetched again)") from None
    return {}


def write_record(folder: Path, record: dict) -> None:
    """Replaces the record atomically (never through a link); drops the pre-0.2 one."""
    path = record_path(folder)
    tmp = path.with_name(RECORD + ".tmp")
    with os.fdopen(open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as out:
        out.write(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    legacy = Path(folder) / LEGACY_MANIFEST
    try:
        if stat.S_ISREG(os.lstat(legacy).st_mode):
            legacy.unlink()
    except FileNotFoundError:
        pass


def reason(e: Exception) -> str:
    """An exception's reason in a few words (urllib wraps the real one in `.reason`)."""
    why = getattr(e, "reason", None) or e
    return str(why) or type(e).__name__


def _checked_record(data) -> dict:
    if not isinstance(data, dict):
        raise TypeError("not an object")
    repo, revision, files, complete = data.get("repo"), data.get("revision"), data.get("files"), data.get("complete")
    if not isinstance(repo, str) or not isinstance(revision, str) or not isinstance(files, dict):
        raise TypeError("repo, revision or files has the wrong type")
    if not isinstance(complete, bool):
        raise TypeError("complete is not true or false")
    check_repo_id(repo)
    check_remote_names(files)
    for name, e in files.items():
        if not isinstance(e, dict) or type(e.get("size")) is not int or e["size"] < 0:
            raise TypeError(f"the entry of {show(name)} is malformed")
        for key, pattern in (("sha256", HEX64), ("git_sha1", HEX40)):
            if e.get(key) is not None and not (isinstance(e[key], str) and pattern.fullmatch(e[key])):
                raise TypeError(f"the {key} of {show(name)} is malformed")
        for key in ("mtime_ns", "ino"):
            if e.get(key) is not None and type(e[key]) is not int:
                raise TypeError(f"the {key} of {show(name)} is malformed")
    return data


HASH_NAMES = {"sha256": "SHA-256", "git_sha1": "git hash"}


def digest(src, size: int, kind: str, on_block=None) -> str:
    """The hex digest of an open binary file from its current position: "sha256", or "git_sha1"
    (the hub's hash for small files: SHA-1 of "blob SIZE\\0" and the bytes). The one hashing loop
    that downloads and `models verify` share; `on_block` runs between blocks (a download's stop)."""
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1()
    if kind == "git_sha1":
        h.update(f"blob {size}\0".encode())
    while block := src.read(HASH_BLOCK):
        if on_block is not None:
            on_block()
        h.update(block)
    return h.hexdigest()


def hash_mismatch(src, size: int, sha256: str | None, git_sha1: str | None, on_block=None) -> str | None:
    """None when the file matches its recorded hash (SHA-256 preferred) or none is recorded, else
    the name of the hash it fails ("SHA-256" or "git hash")."""
    kind, want = ("sha256", sha256) if sha256 else ("git_sha1", git_sha1)
    if not want:
        return None
    return None if digest(src, size, kind, on_block) == want else HASH_NAMES[kind]


def _digest_path(path: Path, kind: str) -> str:
    with os.fdopen(open_no_follow(path, os.O_RDONLY), "rb") as f:
        return digest(f, os.fstat(f.fileno()).st_size, kind)


def sha256_of(path: Path) -> str:
    return _digest_path(path, "sha256")


def git_blob_sha1(path: Path) -> str:
    return _digest_path(path, "git_sha1")
