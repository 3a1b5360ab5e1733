"""The history's files beside other programs (issue 37, item 1): an outside reader never crashes the
app, and the app never opens (and so never closes) a descriptor of its live database files.

Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's too: the
next reader then believes it is first, resets the -shm the app has mapped, and the app dies of a
Bus error in BEGIN IMMEDIATE. The crash needs processes, so the writer runs in one of its own.
"""

import builtins
import io
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.state import history_recovery
from app.state.history import History
from app.state.history_schema import MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]
LIVE = ("", "-wal", "-shm")


def _old_database(path: Path) -> None:
    """A version-1 history, as an earlier Elastic Chat wrote it (0644, the default mode then)."""
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for statement in MIGRATIONS[1]:
        db.execute(statement)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute("INSERT INTO conversations (title, created, updated) VALUES ('old chat', 1, 1)")
    db.commit()
    db.close()
    os.chmod(path, 0o644)


def _left_by_a_kill(path: Path) -> None:
    """A current history whose -wal and -shm were left behind (the app was killed), all 0644."""
    h = History(path)
    h.add_message(h.new_conversation("c").id, "user", "hi")
    # a copy of the three files as they are while open, as a kill leaves them
    copies = {s: Path(f"{path}{s}").read_bytes() for s in LIVE if Path(f"{path}{s}").exists()}
    h.close()
    for suffix, data in copies.items():
        Path(f"{path}{suffix}").write_bytes(data)
        os.chmod(f"{path}{suffix}", 0o644)


def _closed_cleanly(path: Path) -> None:
    """The usual start: the history of an earlier session, closed at a clean quit."""
    h = History(path)
    h.add_message(h.new_conversation("c").id, "user", "hi")
    h.close()


def _damaged(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)


def _orphan_journal(path: Path) -> None:
    Path(f"{path}-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\x00" * 100)


STARTS = {"new": lambda path: None, "closed cleanly": _closed_cleanly, "old schema, 0644": _old_database,
          "left by a kill": _left_by_a_kill, "damaged": _damaged, "orphan journal": _orphan_journal}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists its descriptors in /proc (Linux)")
@pytest.mark.parametrize("start", STARTS)
def test_the_history_never_opens_its_live_files_once_sqlite_has_them(tmp_path, monkeypatch, start):
    """Once SQLite holds a file, no second descriptor of it (the database, its -wal or its -shm) is
    opened by Python (os.open or open) while the history opens, writes, streams and closes: closing
    that descriptor would drop SQLite's locks."""
    path = tmp_path / "history.sqlite3"
    STARTS[start](path)
    opened_twice = []
    real_os_open, real_open = os.open, builtins.open

    def held_by_this_process(file) -> bool:
        try:
            st = os.stat(file)
        except (OSError, TypeError, ValueError):
            return False
        for fd in os.listdir("/proc/self/fd"):
            try:
                held = os.fstat(int(fd))
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino):
                return True
        return False

    def check(file):
        if isinstance(file, (str, os.PathLike)) and held_by_this_process(file):
            opened_twice.append(os.fspath(file))

    def os_open(file, *args, **kwargs):
        check(file)
        return real_os_open(file, *args, **kwargs)

    def any_open(file, *args, **kwargs):
        check(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", any_open)
    monkeypatch.setattr(io, "open", any_open)
    h = History(path)
    assert not h.read_only
    cid = h.new_conversation("streaming").id
    mid = h.add_message(cid, "assistant", "", complete=False).id
    for n in range(5):
        h.update_message(mid, "x" * n, "")
    h.finish_message(mid, {})
    assert opened_twice == []
    for suffix in LIVE:  # and the files are the user's alone all the same
        if Path(f"{path}{suffix}").exists():
            assert stat.S_IMODE(Path(f"{path}{suffix}").stat().st_mode) == 0o600, suffix
    h.close()


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from app.state.history import History
    h = History(Path(sys.argv[1]))
    assert not h.read_only, h.read_only
    cid = h.new_conversation("streaming").id
    mid = h.add_message(cid, "assistant", "", complete=False).id
    print("ready", flush=True)
    text = ""
    for n in range(int(sys.argv[2])):  # the controller's persist, about once a second in the app
        text += "token " * 20
        h.update_message(mid, text, "")
        if n % 50 == 0:
            cid = h.new_conversation(f"chat {n}").id
            mid = h.add_message(cid, "assistant", "", complete=False).id
            text = ""
    h.close()
    print("done", flush=True)
""")

READERS = {
    "read-only URI": "c = sqlite3.connect(f'file:{p}?mode=ro', uri=True)",
    "plain connect": "c = sqlite3.connect(p)",
    "shell-like, with a checkpoint": "c = sqlite3.connect(p); c.execute('PRAGMA wal_checkpoint(PASSIVE)')",
}


@pytest.mark.slow
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("start", ["closed cleanly", "left by a kill"])
def test_an_outside_reader_never_crashes_a_writing_history(tmp_path, reader, start):
    """A backup tool or the sqlite3 shell opening the database over and over while a reply streams
    into it: the writer finishes (before the fix it died of SIGBUS in 9 of these 12 runs, 2 each).
    A history made new in this session did not crash that way, so the starts are older files."""
    path = tmp_path / "history.sqlite3"
    STARTS[start](path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "1500"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
    reading = textwrap.dedent(f"""
        import sqlite3, sys
        p = sys.argv[1]
        while True:
            try:
                {READERS[reader]}
                c.execute('SELECT count(*) FROM messages').fetchall()
                c.close()
            except sqlite3.Error:
                pass  # busy or mid-checkpoint: a reader's own problem, retried
    """)
    outside = subprocess.Popen([sys.executable, "-c", reading, str(path)])
    try:
        out, err = writer.communicate(timeout=600)  # a guard against a hang, never a measure
    finally:
        outside.kill()
        outside.wait()
    assert writer.returncode == 0, f"the writer died ({writer.returncode}): {err[-2000:]}"
    assert out.strip() == "done"
    check = sqlite3.connect(str(path))
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


def test_no_lock_of_this_app_is_one_that_closing_another_descriptor_drops():
    """The app's own locks (the single instance, a model folder) are flock or msvcrt locks, which belong
    to their open file; a POSIX record lock (lockf, F_SETLK) would be dropped by any close of the file
    elsewhere in the process, the very fault SQLite's locks met."""
    offenders = []
    for folder in ("app", "runtime", "training", "tools"):
        for source in sorted((ROOT / folder).rglob("*.py")):
            text = source.read_text(encoding="utf-8")
            offenders += [f"{source.relative_to(ROOT)}: {w}" for w in ("lockf(", "F_SETLK", "F_OFD_SETLK")
                          if w in text]
    assert offenders == []


def _newer_history(path: Path, chats: int, messages: int) -> None:
    """A history written by a newer Elastic Chat: this version shows an in-memory copy of it."""
    History(path).close()
    db = sqlite3.connect(str(path))
    db.executemany("INSERT INTO conversations (id, title, created, updated) VALUES (?, ?, 1, 1)",
                   [(c + 1, f"chat {c}") for c in range(chats)])
    db.executemany("INSERT INTO messages (conversation_id, role, content, created, parent_id)"
                   " VALUES (?, 'user', ?, 1, 0)",
                   [(c + 1, f"message {m} " * 20) for c in range(chats) for m in range(messages)])
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()


def _copied(path: Path) -> tuple[int, list[str]]:
    h = History(path)
    try:
        assert "newer Elastic Chat" in h.read_only
        return h.db.execute("SELECT count(*) FROM messages").fetchone()[0], h.notices
    finally:
        h.close()


@pytest.mark.parametrize("chats, messages", [(1, 20_000), (200, 100), (10_000, 1)])
def test_reading_a_copy_is_bounded_by_work_not_by_the_clock(tmp_path, monkeypatch, chats, messages):
    """The copy of a history opened read-only is read whole however the wall clock moves (before, a
    30-second wall-clock limit cut it short on a busy PC)."""
    path = tmp_path / "history.sqlite3"
    _newer_history(path, chats, messages)
    start, steps = time.monotonic(), iter(range(10**9))
    monkeypatch.setattr(time, "monotonic", lambda: start + 10.0 * next(steps))  # a very busy PC
    copied, notices = _copied(path)
    assert copied == chats * messages and not any("could not be read" in n for n in notices), notices


@pytest.mark.parametrize("steps", [0, 10_000, 100_000])
def test_reading_a_hostile_size_is_cut_short_by_its_work_alone(tmp_path, monkeypatch, steps):
    path = tmp_path / "history.sqlite3"
    _newer_history(path, 1, 20_000)
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now)  # only work can stop it
    monkeypatch.setattr(history_recovery, "READ_STEPS", steps)
    copied, notices = _copied(path)
    assert copied < 20_000 and any("Some parts of it could not be read" in n for n in notices), notices
