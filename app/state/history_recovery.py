"""Opening the history's file whatever state it is in, and recovering what it holds (no Qt).

The database file is input from outside (a crash, a full disk, another version, a hand copy), so
opening it never raises; `notices` says, one line each, what was wrong and what was done:
- damaged or not ours (garbage, truncated, not SQLite, an unreadable schema): the file (with its
  -wal/-shm) is moved aside under a timestamped name, never deleted, a new history is started, and
  whatever chats SQLite can still read from the old file are copied into it;
- written by a newer version: opened read-only (never migrated down);
- the file or its folder cannot be written, or it is locked: opened read-only.
Once open, another program may take the file's write lock for a while (DB Browser with unsaved edits):
a write then waits at most BUSY_TIMEOUT_S and raises `HistoryBusy`; the file stays writable.
Read-only means an in-memory copy of the chats: they are shown, the file is never touched, and
every write of user content raises `HistoryReadOnly` (app/state/history.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from pathlib import Path

from runtime.api import private_before_open, show

from .history_rows import as_text, chat_settings, reply_meta
from .history_schema import (
    CONVERSATION_COLUMNS,
    MESSAGE_COLUMNS,
    SCHEMA_VERSION,
    Damaged,
    Newer,
    is_damage,
    migrate,
    probe_columns,
    schema_version,
)
from .reasons import why

log = logging.getLogger(__name__)
# A hostile file's queries (a recursive view, a huge table) are stopped after this many steps of
# SQLite's virtual machine: about 30 s of CPU on a busy 2-core PC, counted as work, not wall clock.
READ_STEPS, STEPS_PER_CHECK = 1_000_000_000, 10_000
# How long a write waits for another program's write lock (DB Browser with unsaved edits, a sync tool)
# once the file is open. The window writes on its GUI thread, so SQLite's default 5 s froze it at every
# send and every save of a streaming reply; SQLite's own writers (a checkpoint, another short write)
# hold the lock for milliseconds, so a quarter second still rides those out, and a lock held longer
# costs the window at most this per write before HistoryBusy says so (app/pending_saves.py retries).
# Opening keeps the 5 s: a migration is one write worth waiting for, before the window shows.
BUSY_TIMEOUT_S, OPENING_TIMEOUT_S = 0.25, 5.0


class HistoryOpening:
    """How History (app/state/history.py) opens its file: History.__init__ sets `path`, `notices`,
    `read_only` and `moved_aside`, then calls `_open` and `_note_bad_json`."""

    def _open(self) -> sqlite3.Connection:
        name = self.path.name
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return self._open_read_only(f"its folder {self.path.parent} cannot be created ({why(e)})",
                                        "Start Elastic Chat with --data-dir pointing at a folder you can write.")
        self._set_aside_orphan_journal()
        exists = self.path.exists() or self.path.is_symlink()
        if exists and not self.path.is_file():
            return self._replace_damaged("it is not a file")
        if exists and self.path.stat().st_size == 0:
            self.notices.append(f"{name} was empty (0 bytes, no chats in it); a new history was started.")
        problem = _unwritable(self.path)
        if problem:
            return self._open_read_only(problem, "Make the file and its folder writable, then restart Elastic Chat.")
        try:
            return self._open_writable()
        except Newer as e:
            return self._open_read_only(
                f"it was written by a newer Elastic Chat (schema {e.version}; this version knows {SCHEMA_VERSION})",
                "It is not changed; update Elastic Chat to add to it.")
        except Damaged as e:
            return self._replace_damaged(str(e))
        except sqlite3.Error as e:
            if is_damage(e):
                return self._replace_damaged(why(e))
            return self._open_read_only(f"it cannot be written ({why(e)})",
                                        "Close other programs using it (or free disk space), then restart.")
        except Exception as e:  # a case not foreseen here: keep the file as it is rather than guess
            log.exception("opening %s", self.path)
            return self._open_read_only(f"it could not be opened ({type(e).__name__}: {e})",
                                        "The details are in elastic-chat.log; please report them.")

    def _open_writable(self) -> sqlite3.Connection:
        try:  # the chats are the user's alone (0600); done before SQLite holds a lock, never after
            private_before_open(self.path)
        except OSError as e:
            log.warning("could not make %s private: %s", self.path.name, e)
        db = sqlite3.connect(str(self.path), isolation_level=None, timeout=OPENING_TIMEOUT_S)  # explicit transactions
        try:  # read-only checks first: a file that is not ours must reach the side unchanged, byte for byte
            _check_pages(db)
            _refuse_code(db)
            current = schema_version(db)
            if current > SCHEMA_VERSION:
                raise Newer(current)
            if current == 0 and _other_tables(db):
                raise Damaged("it is a database of another program, not an Elastic Chat history")
            if current == SCHEMA_VERSION:
                probe_columns(db)
            else:
                migrate(db, current)  # one transaction: rolled back, the file is as it was
                probe_columns(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        except BaseException:
            db.close()
            raise
        return db

    def _replace_damaged(self, reason: str) -> sqlite3.Connection:
        """Moves the file (and its journal) aside, starts a new history and copies into it what SQLite
        can still read from the old one."""
        name = self.path.name
        aside = _aside_name(self.path)
        try:
            os.replace(self.path, aside)
        except OSError as e:
            return self._open_read_only(f"it could not be read ({reason}) nor moved aside ({why(e)})",
                                        "Move it away yourself, then restart Elastic Chat.")
        for suffix in ("-wal", "-shm"):
            journal = Path(f"{self.path}{suffix}")
            if journal.exists():
                try:
                    os.replace(journal, f"{aside}{suffix}")
                except OSError as e:
                    log.warning("could not move %s aside: %s", journal, e)
        self.moved_aside = aside
        try:
            db = self._open_writable()
        except (sqlite3.Error, Damaged, Newer) as e:  # the folder refuses a new file after all
            self.notices.append(f"{name} could not be read ({reason}); it was moved aside to {aside.name}.")
            return self._open_read_only(f"a new history could not be created ({why(e)})",
                                        "Make the data folder writable, then restart Elastic Chat.")
        recovered = _salvage(aside, db)
        self.notices.append(f"{name} could not be read ({reason}); it was moved aside to {aside.name} (nothing "
                            f"was deleted) and a new history was started. {recovered}")
        log.warning(self.notices[-1])
        return db

    def _open_read_only(self, problem: str, what_to_do: str) -> sqlite3.Connection:
        """An in-memory copy of what the file holds: shown, never written back."""
        db = sqlite3.connect(":memory:", isolation_level=None)
        migrate(db, 0)
        copied = "It holds no chats." if not self.path.is_file() else _copy_read_only(self.path, db)
        self.read_only = f"{self.path.name} is open read-only: {problem}"
        self.notices.append(f"{self.read_only}. {copied} New messages cannot be saved. {what_to_do}")
        log.warning(self.notices[-1])
        return db

    def _set_aside_orphan_journal(self) -> None:
        """A -wal left without its database may still hold chats: keep it, out of the new file's way."""
        wal = Path(f"{self.path}-wal")
        if self.path.exists() or not wal.is_file() or wal.stat().st_size == 0:
            return
        aside = _aside_name(self.path)
        try:
            os.replace(wal, f"{aside}-wal")
            if Path(f"{self.path}-shm").exists():
                os.replace(f"{self.path}-shm", f"{aside}-shm")
        except OSError as e:
            log.warning("could not move %s aside: %s", wal, e)
            return
        self.notices.append(f"{wal.name} was left without its database; it was moved aside to {aside.name}-wal.")

    def _note_bad_json(self) -> None:
        """One notice for chats whose stored settings, and one for replies whose details, are not usable.
        SQLite's json_valid finds candidates fast; Python's parser decides (it accepts NaN, SQLite not)."""
        try:
            # CASE, not OR: json_type raises on text that is not JSON, and OR does not short-circuit.
            rows = self.db.execute("SELECT id, title, settings FROM conversations WHERE deleted IS NULL AND CASE"
                                   " WHEN json_valid(settings) THEN json_type(settings) != 'object' OR"
                                   " json_type(settings, '$.sampling') IS NOT NULL ELSE 1 END").fetchall()
            meta = self.db.execute("SELECT meta FROM messages WHERE CASE WHEN json_valid(meta)"
                                   " THEN json_type(meta) != 'object' ELSE 1 END").fetchall()
        except sqlite3.Error as e:  # a page found bad only now: the reads fall back per row anyway
            log.warning("could not scan %s for unreadable settings: %s", self.path, e)
            return
        bad_chats = sorted({(r[0], as_text(r[1], "Untitled chat")) for r in rows if not chat_settings(r[2])[1]})
        if bad_chats:
            titles = ", ".join(f"“{t[:40]}”" for _, t in bad_chats[:3]) + (", …" if len(bad_chats) > 3 else "")
            self.notices.append(f"{len(bad_chats)} chat{'s' if len(bad_chats) > 1 else ''} ({titles}) had stored "
                                "settings that are not valid JSON or have wrong types; "
                                f"{'they use' if len(bad_chats) > 1 else 'it uses'} the default settings.")
        bad_meta = sum(1 for (m,) in meta if not reply_meta(m)[1])
        if bad_meta:
            self.notices.append(f"{bad_meta} repl{'ies' if bad_meta > 1 else 'y'} had details (submodels, timings) "
                                "that could not be read; those details are not shown.")


def _unwritable(path: Path) -> str:
    """Why the file or its folder cannot be written ("" when both can), found by trying (not by
    os.access, which a root user, ACLs or a read-only mount make lie)."""
    if path.is_file():
        try:
            with open(path, "r+b"):
                pass
        except OSError as e:
            return f"the file cannot be written ({why(e)})"
    probe = path.with_name(f".{path.name}.write-test-{os.getpid()}")
    try:
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as e:
        return f"its folder cannot be written ({why(e)})"
    return ""


def _aside_name(path: Path) -> Path:
    """history.unreadable-YYYYmmdd-HHMMSS.sqlite3, never the name of a file that exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = path.with_name(f"{path.stem}.unreadable-{stamp}{'' if n == 1 else f'-{n}'}{path.suffix}")
        if not any(Path(f"{candidate}{s}").exists() for s in ("", "-wal", "-shm")):
            return candidate
    return path.with_name(f"{path.stem}.unreadable-{stamp}-{os.getpid()}{path.suffix}")


def _check_pages(db: sqlite3.Connection) -> None:
    rows = db.execute("PRAGMA quick_check(5)").fetchall()
    if rows != [("ok",)]:
        raise Damaged("its pages are damaged: " + as_text(rows[0][0])[:80] if rows else "its pages are damaged")


def _refuse_code(db: sqlite3.Connection) -> None:
    """Views and triggers run code on every read or write (an endless recursive view kept the window
    from opening); Elastic Chat never makes any, so a file that has them is not one of its histories."""
    rows = db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger') LIMIT 3").fetchall()
    if rows:
        raise Damaged(f"it holds a {rows[0][0]} ({show(as_text(rows[0][1]), 40)}), which Elastic Chat never writes")


def _bound_reads(db: sqlite3.Connection) -> None:
    """Interrupts any statement on `db` (a hostile file's copy) once its statements together have run
    READ_STEPS virtual-machine steps (SQLite calls the handler every STEPS_PER_CHECK of them)."""
    left = [READ_STEPS // STEPS_PER_CHECK]

    def count() -> int:
        left[0] -= 1
        return 1 if left[0] < 0 else 0
    db.set_progress_handler(count, STEPS_PER_CHECK)


def _other_tables(db: sqlite3.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]


def _read_only_connection(path: Path) -> sqlite3.Connection:
    """The file opened for reading only. mode=ro still replays a WAL left by a crash but needs the
    -shm; in a folder that cannot be written, immutable=1 reads the file alone."""
    last: sqlite3.Error | None = None
    for flags in ("mode=ro", "immutable=1"):
        try:
            src = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True)
        except sqlite3.Error as e:
            last = e
            continue
        try:
            src.execute("SELECT count(*) FROM sqlite_master").fetchone()
            _bound_reads(src)
            return src
        except sqlite3.Error as e:
            src.close()
            last = e
    raise last


def _copy_read_only(path: Path, db: sqlite3.Connection) -> str:
    """Copies the chats of the file at `path` into `db` (in memory); one sentence on what it holds."""
    try:
        src = _read_only_connection(path)
    except sqlite3.Error as e:
        return f"Its chats could not be read ({why(e)})."
    try:
        chats, messages, lost = _copy_chats(src, db)
    finally:
        src.close()
    text = f"Its {chats} chat{'' if chats == 1 else 's'} ({messages} messages) are shown."
    return text + (" Some parts of it could not be read." if lost else "")


def _salvage(aside: Path, db: sqlite3.Connection) -> str:
    """Copies into `db` what SQLite can still read from the damaged file; one sentence for the notice.
    A file cut short (a full disk, a half copy) is read from a copy padded back to the size its header
    declares: SQLite refuses the short file, but the pages that are there read normally."""
    if not aside.is_file():  # a folder, a pipe (opening one would wait forever), a device
        return "No chats could be recovered from it."
    chats = messages = lost = 0
    padded = _padded_copy(aside)
    for source in ([aside] + ([padded] if padded else [])):
        try:
            src = _read_only_connection(source)
        except sqlite3.Error:
            continue
        try:
            chats, messages, lost = _copy_chats(src, db)
        except sqlite3.Error as e:
            log.warning("salvaging %s: %s", source, e)
        finally:
            src.close()
        if chats:
            break
    if padded:
        for path in (padded, Path(f"{padded}-wal"), Path(f"{padded}-shm")):
            path.unlink(missing_ok=True)
    if not chats:
        return "No chats could be recovered from it."
    return (f"Recovered from it: {chats} chat{'' if chats == 1 else 's'} with {messages} "
            f"message{'' if messages == 1 else 's'}" + ("; some parts could not be read." if lost else "."))


def _padded_copy(path: Path) -> Path | None:
    """A copy of a SQLite file shorter than its header says, padded with zero pages (None otherwise)."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
        size = path.stat().st_size
        if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
            return None
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        declared = int.from_bytes(header[28:32], "big") * page_size
        if not size < declared <= 16 * size + 2**20:  # not short, or a header too damaged to trust
            return None
        copy = path.with_name(f".{path.name}.padded-{os.getpid()}")
        shutil.copyfile(path, copy)
        with open(copy, "r+b") as f:
            f.truncate(declared)
        return copy
    except OSError as e:
        log.warning("could not make a padded copy of %s: %s", path, e)
        return None


def _copy_chats(src: sqlite3.Connection, dst: sqlite3.Connection) -> tuple[int, int, int]:
    """Copies the conversations and messages SQLite can still read from `src` (any schema version,
    any damage) into `dst` (this version's schema), streaming each table once in id order (`_scan`).
    A row that lacks a value our schema requires (NOT NULL) is an artefact of a damaged page, not a
    chat, and is skipped. Messages whose conversation row is lost are kept in a "Recovered chat".
    Returns (chats, messages, parts that could not be read)."""
    required = {"conversations": ("title", "created"), "messages": ("conversation_id", "role", "content", "created")}

    def rows(table: str, wanted: dict):
        try:
            kind = src.execute("SELECT type FROM sqlite_master WHERE name=?", (table,)).fetchone()
            if kind is None or kind[0] != "table":  # a view of that name is code, not chats: never run it
                return
            have = {r[1] for r in src.execute(f"PRAGMA table_info({table})")}
        except sqlite3.Error:
            damaged.append((table, None))
            return
        if "id" not in have:
            return
        must = [i for i, c in enumerate(wanted) if c in required[table] and c in have]
        for row in _scan(src, table, ", ".join(c if c in have else "NULL" for c in wanted), damaged):
            if all(row[i] is not None for i in must):
                yield row
            else:
                damaged.append((table, row[0]))

    def insert(table: str, columns: dict, row) -> int:
        values = [d if v is None else v for v, d in zip(row, columns.values())]
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(values))})"
        try:
            return dst.execute(sql, values).lastrowid
        except sqlite3.IntegrityError:  # a duplicated id in a damaged table: keep the row under a new id
            return dst.execute(sql, [None] + values[1:]).lastrowid

    chats: dict[object, int] = {}  # conversation id in src -> id in dst
    copied, damaged = 0, []
    dst.execute("BEGIN IMMEDIATE")
    try:
        for table, columns in (("conversations", CONVERSATION_COLUMNS), ("messages", MESSAGE_COLUMNS)):
            for row in rows(table, columns):
                if table == "conversations":
                    if row[0] not in chats:
                        chats[row[0]] = insert(table, columns, row)
                    continue
                if row[1] not in chats:  # its conversation row is gone: keep the messages under a new title
                    now = time.time()
                    chats[row[1]] = dst.execute("INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)",
                                                (f"Recovered chat {len(chats) + 1}", now, now)).lastrowid
                insert(table, columns, (row[0], chats[row[1]], *row[2:]))
                copied += 1
    except BaseException:
        dst.execute("ROLLBACK")
        raise
    dst.execute("COMMIT")
    return len(chats), copied, len(damaged)


def _scan(src: sqlite3.Connection, table: str, columns: str, damaged: list):
    """Yields the rows of `table` in id order, stepping over what cannot be read: a row whose own
    content is damaged is skipped; at a damaged page the next id that can be reached is found by
    doubling, then bisecting, and the scan goes on from there. Each skip is appended to `damaged`."""

    def reachable(first: int):  # the first id >= first; None past the end; False at a damaged page
        try:
            row = src.execute(f"SELECT id FROM {table} WHERE id >= ? ORDER BY id LIMIT 1", (first,)).fetchone()
        except sqlite3.Error:
            return False
        return None if row is None else row[0]

    after = -(2**63)
    while True:
        try:
            for row in src.execute(f"SELECT {columns} FROM {table} WHERE id > ? ORDER BY id", (after,)):
                if not isinstance(row[0], int) or row[0] <= after:  # a damaged page's nonsense: the scan
                    damaged.append((table, row[0]))  # only moves forward, or it would start over forever
                    continue
                after = row[0]
                yield row
            return
        except sqlite3.Error:
            damaged.append((table, after))
        low = max(after, -1)
        bad_row = reachable(low + 1)
        if bad_row is None:
            return
        if bad_row is not False:  # the page is fine, the row's content (or its overflow page) is not
            after = bad_row
            continue
        step = 2
        while (found := reachable(low + step)) is False and step < 2**62:
            step *= 2
        if found is None or found is False:  # (False is an int: test it by identity)
            return
        lo, hi = low + step // 2, low + step  # lo lands on damage, hi reaches `found`
        while hi - lo > 1:
            middle = (lo + hi) // 2
            hit = reachable(middle)
            if hit is False:
                lo = middle
            else:
                hi, found = middle, found if hit is None else hit
        after = found - 1
