"""A download folder's record: which files this download wrote, their hashes, size and identity.

It lives in the folder's hidden `.elastic-chat/`, where no repo file name can reach it, in two
parts, so that recording a file costs the same for the first file and the 6,000th:

- `download.json`, the snapshot: repo, revision, `complete` and every file recorded so far,
  replaced atomically (`write_record`) when a download starts a record and when it ends;
- `download.journal`, the files recorded since: one JSON line appended per verified file
  (`RecordJournal`), after the file is in place and hashed. Reading the record (`read_manifest`)
  replays the journal onto the snapshot; a line cut short by a kill is not a line, so a file whose
  line was not finished is not trusted (the next run hashes it again). `write_record` folds the
  journal into the snapshot, then deletes it.

Folders from versions before 0.2 kept the record as `.elastic-chat-download.json` at the top,
which is still read. Both parts are read as hostile input too: a damaged or planted record is one
line, and its file names pass the same check as the hub's, so it can never point a check outside
the folder.
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
JOURNAL = "download.journal"  # inside .elastic-chat/
LEGACY_MANIFEST = ".elastic-chat-download.json"  # where versions before 0.2 kept the record
MAX_RECORD_BYTES = 32 << 20
HASH_BLOCK = 1 << 20


def record_path(folder: Path) -> Path:
    return Path(folder) / ".elastic-chat" / RECORD


def journal_path(folder: Path) -> Path:
    return Path(folder) / ".elastic-chat" / JOURNAL


def read_manifest(folder: Path) -> dict:
    """The download record of `folder`, checked, with its journal replayed: {} when there is none;
    DownloadError (one line) when it is damaged. Its file names pass the same check as the hub's,
    so a planted record cannot point a check outside the folder."""
    for path in (record_path(folder), Path(folder) / LEGACY_MANIFEST):
        raw = _read_bounded(path)
        if raw is None:
            continue
        try:
            record = parse_json_bytes(raw, MAX_RECORD_BYTES, kind=None)
            if path == record_path(folder):
                _replay(record, journal_path(folder))
            return _checked_record(record)
        except (OSError, ValueError, TypeError, RecursionError, ElasticError) as e:
            raise DownloadError(f"the download record {path} is damaged ({reason(e)}); delete it and run the "
                                "download again (files in place are checked, not fetched again)") from None
    return {}


def _read_bounded(path: Path) -> bytes | None:
    """The bytes of one part of the record (never through a link), None when it is not there."""
    try:
        fd = open_no_follow(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not hang the read
    except FileNotFoundError:
        return None
    except (OSError, ElasticError) as e:
        raise DownloadError(f"the download record {path} cannot be read ({reason(e)})") from None
    try:
        with os.fdopen(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                raise ValueError("not a plain file")
            raw = src.read(MAX_RECORD_BYTES + 1)
    except (OSError, ValueError) as e:
        raise DownloadError(f"the download record {path} is damaged ({reason(e)}); delete it and run the "
                            "download again (files in place are checked, not fetched again)") from None
    if len(raw) > MAX_RECORD_BYTES:
        raise DownloadError(f"the download record {path} is larger than {MAX_RECORD_BYTES >> 20} MB; delete it "
                            "and run the download again (files in place are checked, not fetched again)")
    return raw


def _replay(record, journal: Path) -> None:
    """Applies the journal's lines to the snapshot `record` (in place). Only lines of the snapshot's
    repo and revision count (a journal left from another revision is stale); an unfinished last
    line is what a kill leaves mid-write, and is not a line."""
    raw = _read_bounded(journal)
    if not raw or not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return
    lines = raw.split(b"\n")[:-1]  # the part after the last newline was never finished
    if not lines:
        return
    head = json.loads(lines[0].decode("utf-8"))
    if not isinstance(head, dict) or (head.get("repo"), head.get("revision")) != (record.get("repo"),
                                                                                   record.get("revision")):
        return
    changed = False
    for line in lines[1:]:
        entry = json.loads(line.decode("utf-8"))
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise TypeError("a journal line is not a file entry")
        name = entry.pop("path")
        changed = changed or record["files"].get(name) != entry
        record["files"][name] = entry
    if changed:  # a download was under way: its end rewrites the snapshot, complete or not
        record["complete"] = False


def write_record(folder: Path, record: dict) -> None:
    """Replaces the record atomically (never through a link), folding in and deleting the journal
    (`record` must already hold what it said); drops the pre-0.2 record."""
    path = record_path(folder)
    tmp = path.with_name(RECORD + ".tmp")
    with os.fdopen(open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as out:
        out.write(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    for stale in (journal_path(folder), Path(folder) / LEGACY_MANIFEST):
        try:
            if stat.S_ISREG(os.lstat(stale).st_mode):
                stale.unlink()
        except FileNotFoundError:
            pass


class RecordJournal:
    """Appends one line per verified file to the record's journal: a constant cost per file."""

    def __init__(self, folder: Path, repo: str, revision: str):
        self.path = journal_path(folder)
        self._head = json.dumps({"repo": repo, "revision": revision}) + "\n"
        self._fd: int | None = None

    def append(self, name: str, entry: dict) -> None:
        if self._fd is None:
            self._fd = open_no_follow(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a planted hard link would be written through
                self.close()
                raise DownloadError(f"{self.path} is not a plain file of its own; delete it and run the download again")
            if st.st_size == 0:
                _write_line(self._fd, self._head)
        _write_line(self._fd, json.dumps({"path": name, **entry}) + "\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_line(fd: int, line: str) -> None:
    data = memoryview(line.encode("utf-8"))
    while data:  # one write each time in practice (O_APPEND): a kill leaves at most one unfinished line
        data = data[os.write(fd, data):]


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
