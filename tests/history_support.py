"""History files as older versions of the app wrote them, for the migration tests; another program holding
the file's write lock, and the rows as a fresh connection reads them, for the locked-history tests."""

import sqlite3
import subprocess
import sys
from pathlib import Path

from app.state.history_schema import MIGRATIONS


def version_3_history(path: Path) -> sqlite3.Connection:
    """An empty history of schema 3 (before title_by and finished) at `path`, open for the test to fill;
    the test commits and closes it before the app's History opens it."""
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for version in (1, 2, 3):
        for statement in MIGRATIONS[version]:
            db.execute(statement)
    db.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    return db


_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN " + sys.argv[2])
db.execute("UPDATE meta SET value = value")  # an edit not yet saved, as DB Browser holds one
print("held", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
db.close()
"""


class HeldLock:
    """Another process holding the history's write lock with `BEGIN IMMEDIATE` or `BEGIN EXCLUSIVE` and an
    edit not yet saved (DB Browser, `sqlite3 history.sqlite3 "BEGIN IMMEDIATE;"` left open) until `release`."""

    def __init__(self, path: Path, kind: str = "IMMEDIATE"):
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), kind], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        self.proc.stdin.close()
        self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def stored_rows(path: Path) -> dict:
    """What the file holds, read by a fresh connection: chats (id -> (title, deleted)) and messages
    (id -> (role, content, complete, finished))."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        chats = {r[0]: r[1:] for r in db.execute("SELECT id, title, deleted FROM conversations")}
        messages = {r[0]: r[1:] for r in db.execute("SELECT id, role, content, complete, finished FROM messages")}
    finally:
        db.close()
    return {"chats": chats, "messages": messages}
