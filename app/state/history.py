"""Chat history in SQLite (no Qt): conversations and messages, committed as they happen.

WAL mode, one commit per message, and the streaming reply is written every second or so, so
a crash loses at most about a second of text. The schema has a version and a migration path
(`MIGRATIONS`): opening an older database upgrades it in one transaction. Deleting a
conversation is a soft delete first (so it can be undone); `purge_deleted` removes them.

The database file is input from outside (a crash, a full disk, another version, a hand copy), so
opening it never raises; `notices` says, one line each, what was wrong and what was done:
- damaged or not ours (garbage, truncated, not SQLite, an unreadable schema): the file (with its
  -wal/-shm) is moved aside under a timestamped name, never deleted, a new history is started, and
  whatever chats SQLite can still read from the old file are copied into it;
- written by a newer version: opened read-only (never migrated down);
- the file or its folder cannot be written, or it is locked: opened read-only.
Read-only means an in-memory copy of the chats: they are shown, the file is never touched, and
every write of user content raises `HistoryReadOnly` (its message says why, for the window).
A chat whose stored settings or a reply whose details are not JSON, or hold wrong types, falls
back to defaults for that chat or reply alone (`app.state.settings.check_sampling` checks sampling).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from runtime.private_files import private_before_open

from .attachments import as_context, valid_attachments
from .settings import check_sampling

log = logging.getLogger(__name__)
SCHEMA_VERSION = 3

# version -> statements that bring a database from version-1 to version.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,"
        " updated REAL NOT NULL, system_prompt TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}')",
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id)"
        " ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, thinking TEXT NOT NULL DEFAULT '',"
        " meta TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, complete INTEGER NOT NULL DEFAULT 1)",
        "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
    ],
    # 2: soft delete, so deleting a conversation can be undone.
    2: ["ALTER TABLE conversations ADD COLUMN deleted REAL"],
    # 3: versions. A message follows its parent (0: it starts the chat), so an edit or a regeneration is a
    # sibling of what it replaces, and the chat shows the branch that ends at its leaf. A chat written
    # before was a line: each message follows the one before it, and its last message is the leaf.
    3: ["ALTER TABLE messages ADD COLUMN parent_id INTEGER",
        "UPDATE messages SET parent_id = COALESCE((SELECT max(p.id) FROM messages p WHERE"
        " p.conversation_id = messages.conversation_id AND p.id < messages.id), 0)",
        "ALTER TABLE conversations ADD COLUMN leaf_id INTEGER",
        "UPDATE conversations SET leaf_id = (SELECT max(m.id) FROM messages m"
        " WHERE m.conversation_id = conversations.id)",
        "CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id)"],
}
# The columns this version reads, with the value to use where a row (or an older/newer schema) lacks one.
# A parent or a leaf that is NULL (a chat copied from an older or damaged file) reads as the line it was:
# a message follows the one before it, and the newest message is the leaf.
CONVERSATION_COLUMNS = {"id": None, "title": "Untitled chat", "created": 0.0, "updated": 0.0,
                        "system_prompt": "", "settings": "{}", "deleted": None, "leaf_id": None}
MESSAGE_COLUMNS = {"id": None, "conversation_id": None, "role": "user", "content": "", "thinking": "",
                   "meta": "{}", "created": 0.0, "complete": 1, "parent_id": None}
# A reply's details (what produced it) and the type each must have to be shown. Counts, timings and
# switches are the runtime's own serialisations (runtime/events.py: Progress, Switch and Done.to_dict).
META_TYPES = {"think_submodel": (str, type(None)), "answer_submodel": str, "finish_reason": str, "depth": str,
              "budget_hit": bool, "thinking_budget": "number", "thinking_tokens": "number",
              "answer_tokens": "number", "ttft_ms": "number", "tokens_per_s": "number", "thinking_ms": "number",
              "elapsed_ms": "number", "switch": dict, "thinking_end": str,
              # {"0.5M": 40, "1.0M": 12}: tokens per submodel, in the order they worked
              "thinking_by_submodel": dict, "answer_by_submodel": dict,
              # [["0.5M", 5], ["1.0M", 20], ["0.5M", 3]]: the thought's stretches in order (when it moved)
              "thinking_path": list,
              # every switch of the reply: Switch.to_dict(), {"from", "to", "reprefill_tokens", "ms", "reason", ...}
              "switches": list,
              # the prompt's tokens as the model read it, and the earliest messages left out to fit the context
              "prompt_tokens": "number", "context_dropped": "number",
              # a user message's files as context (app/state/attachments.py): [{"name", "text", "kind"}]
              "attachments": list}
MAX_PATH = 1024  # a thought's stretches on one submodel, at most (a longer one is not a record this app wrote)
DAMAGE_CODES = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT"}


class HistoryReadOnly(RuntimeError):
    """A write to a history that is open read-only; str(e) is one line for the window."""


class HistoryFull(HistoryReadOnly):
    """A write that the disk had no room for (nothing was written); str(e) is one line for the window."""

    def __init__(self):
        super().__init__("The disk is full: free some space, then send again. Your message is kept in the box.")


MAX_SHOWN_CHARS = 200_000  # of one message's text read to show; the rest stays in the file (export_text has all)
# A hostile file's queries (a recursive view, a huge table) are stopped after this many steps of
# SQLite's virtual machine: about 30 s of CPU on a busy 2-core PC, counted as work, not wall clock.
READ_STEPS, STEPS_PER_CHECK = 1_000_000_000, 10_000


class _Damaged(Exception):
    """The file is not a history this version can use as it is; the reason is for the notice."""


class _Newer(Exception):
    def __init__(self, version: int):
        super().__init__(version)
        self.version = version


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str  # "user", "assistant" or "system"
    content: str
    thinking: str = ""
    meta: dict = field(default_factory=dict)  # what produced it: submodels, budget, counts, timings
    complete: bool = True
    parent_id: int = 0  # the message it follows (0: it starts the chat)
    versions: tuple[int, ...] = ()  # it and its siblings (edits, regenerations), oldest first; () when alone

    def as_chat(self) -> dict:
        """The message as the model is sent it (a user message's attached files included)."""
        out = {"role": self.role, "content": as_context(self.content, self.meta.get("attachments"))
               if self.role == "user" else self.content}
        if self.role == "assistant" and self.thinking:
            out["reasoning_content"] = self.thinking
        return out


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    updated: float
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)  # depth and sampling for this conversation


class History:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.notices: list[str] = []  # one line per problem found while opening, for the window's banner
        self.read_only = ""  # why writes are refused; "" while the history is writable
        self.moved_aside: Path | None = None  # where an unreadable file went
        self.db = self._open()
        self._note_bad_json()

    def close(self) -> None:
        """Never raises (it runs when the app closes, whatever state the file is in)."""
        db, self.db = self.db, None
        if db is None:
            return
        try:
            db.close()
        except sqlite3.Error as e:
            log.warning("closing %s: %s", self.path, e)

    # ------------------------------------------------------------------ opening

    def _open(self) -> sqlite3.Connection:
        name = self.path.name
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return self._open_read_only(f"its folder {self.path.parent} cannot be created ({_why(e)})",
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
        except _Newer as e:
            return self._open_read_only(
                f"it was written by a newer Elastic Chat (schema {e.version}; this version knows {SCHEMA_VERSION})",
                "It is not changed; update Elastic Chat to add to it.")
        except _Damaged as e:
            return self._replace_damaged(str(e))
        except sqlite3.Error as e:
            if _is_damage(e):
                return self._replace_damaged(_why(e))
            return self._open_read_only(f"it cannot be written ({_why(e)})",
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
        db = sqlite3.connect(str(self.path), isolation_level=None, timeout=5)  # explicit transactions
        try:  # read-only checks first: a file that is not ours must reach the side unchanged, byte for byte
            _check_pages(db)
            _refuse_code(db)
            current = _version(db)
            if current > SCHEMA_VERSION:
                raise _Newer(current)
            if current == 0 and _other_tables(db):
                raise _Damaged("it is a database of another program, not an Elastic Chat history")
            if current == SCHEMA_VERSION:
                _probe(db)
            else:
                _migrate(db, current)  # one transaction: rolled back, the file is as it was
                _probe(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")
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
            return self._open_read_only(f"it could not be read ({reason}) nor moved aside ({_why(e)})",
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
        except (sqlite3.Error, _Damaged, _Newer) as e:  # the folder refuses a new file after all
            self.notices.append(f"{name} could not be read ({reason}); it was moved aside to {aside.name}.")
            return self._open_read_only(f"a new history could not be created ({_why(e)})",
                                        "Make the data folder writable, then restart Elastic Chat.")
        recovered = _salvage(aside, db)
        self.notices.append(f"{name} could not be read ({reason}); it was moved aside to {aside.name} (nothing "
                            f"was deleted) and a new history was started. {recovered}")
        log.warning(self.notices[-1])
        return db

    def _open_read_only(self, why: str, what_to_do: str) -> sqlite3.Connection:
        """An in-memory copy of what the file holds: shown, never written back."""
        db = sqlite3.connect(":memory:", isolation_level=None)
        _migrate(db, 0)
        copied = "It holds no chats." if not self.path.is_file() else _copy_read_only(self.path, db)
        self.read_only = f"{self.path.name} is open read-only: {why}"
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
        bad_chats = sorted({(r[0], _text(r[1], "Untitled chat")) for r in rows if not _chat_settings(r[2])[1]})
        if bad_chats:
            titles = ", ".join(f"“{t[:40]}”" for _, t in bad_chats[:3]) + (", …" if len(bad_chats) > 3 else "")
            self.notices.append(f"{len(bad_chats)} chat{'s' if len(bad_chats) > 1 else ''} ({titles}) had stored "
                                "settings that are not valid JSON or have wrong types; "
                                f"{'they use' if len(bad_chats) > 1 else 'it uses'} the default settings.")
        bad_meta = sum(1 for (m,) in meta if not _meta(m)[1])
        if bad_meta:
            self.notices.append(f"{bad_meta} repl{'ies' if bad_meta > 1 else 'y'} had details (submodels, timings) "
                                "that could not be read; those details are not shown.")

    # ------------------------------------------------------------------ schema

    def version(self) -> int:
        return _version(self.db)

    def _tx(self):
        db = self.db

        class Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, exc, tb):
                if exc_type is None:
                    try:
                        db.execute("COMMIT")
                    except sqlite3.Error as e:
                        if db.in_transaction:
                            db.execute("ROLLBACK")
                        if _is_full(e):
                            raise HistoryFull() from e
                        raise
                    return False
                if db.in_transaction:  # SQLite ends some transactions itself (a full disk)
                    db.execute("ROLLBACK")
                if issubclass(exc_type, sqlite3.Error) and _is_full(exc):
                    raise HistoryFull() from exc
                return False
        return Tx()

    def _writable(self) -> None:
        if self.read_only:
            raise HistoryReadOnly(f"Nothing was saved: {self.read_only}.")

    # ------------------------------------------------------------------ conversations

    def new_conversation(self, title: str = "New chat", system_prompt: str = "",
                         settings: dict | None = None) -> Conversation:
        """Also works read-only (the empty chat lives in memory), so the window always has a chat to show."""
        now = time.time()
        with self._tx():
            cur = self.db.execute("INSERT INTO conversations (title, created, updated, system_prompt, settings)"
                                  " VALUES (?, ?, ?, ?, ?)",
                                  (title, now, now, system_prompt, json.dumps(settings or {})))
        return self.conversation(cur.lastrowid)

    def conversation(self, cid: int) -> Conversation:
        row = self.db.execute("SELECT id, title, updated, system_prompt, settings FROM conversations WHERE id=?",
                              (cid,)).fetchone()
        if row is None:
            raise KeyError(cid)
        return _conversation(row)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; `search` matches titles and message text."""
        query = ("SELECT id, title, updated, system_prompt, settings FROM conversations WHERE deleted IS NULL")
        args: tuple = ()
        if search:
            like = f"%{search}%"
            query += (" AND (title LIKE ? OR id IN (SELECT conversation_id FROM messages WHERE content LIKE ?"
                      " OR thinking LIKE ?))")
            args = (like, like, like)
        rows = self.db.execute(query + " ORDER BY updated DESC, id DESC", args).fetchall()
        return [_conversation(r) for r in rows]

    def rename(self, cid: int, title: str) -> None:
        self._writable()
        title = title.strip() or "Untitled chat"
        with self._tx():
            self.db.execute("UPDATE conversations SET title=? WHERE id=?", (title, cid))

    def update_settings(self, cid: int, system_prompt: str, settings: dict) -> None:
        self._writable()
        with self._tx():
            self.db.execute("UPDATE conversations SET system_prompt=?, settings=? WHERE id=?",
                            (system_prompt, json.dumps(settings), cid))

    def delete(self, cid: int) -> None:
        """Soft delete: the conversation disappears from lists but `undelete` brings it back."""
        self._writable()
        with self._tx():
            self.db.execute("UPDATE conversations SET deleted=? WHERE id=?", (time.time(), cid))

    def undelete(self, cid: int) -> None:
        self._writable()
        with self._tx():
            self.db.execute("UPDATE conversations SET deleted=NULL WHERE id=?", (cid,))

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        if self.read_only:
            return 0  # nothing is removed from a history that is kept as it is
        with self._tx():
            cur = self.db.execute("DELETE FROM conversations WHERE deleted IS NOT NULL AND deleted <= ?",
                                  (time.time() - older_than_s,))
        return cur.rowcount

    # ------------------------------------------------------------------ messages

    def messages(self, cid: int, full: bool = False) -> list[Message]:
        """The branch the chat shows: from its first message to its leaf, each with its versions; each text
        cut at MAX_SHOWN_CHARS (a 7 MB message kept the window from opening) with a line saying how much is
        not shown; `full`: the whole texts (export_text)."""
        return self._tree(cid, full).branch()

    def all_messages(self, cid: int, full: bool = True) -> list[Message]:
        """Every message of the chat, every branch, oldest first (export, recovery): whole texts unless told."""
        tree = self._tree(cid, full)
        return [tree.message(i) for i in tree.ids]

    def _tree(self, cid: int, full: bool = False) -> "_Tree":
        texts = "content, thinking" if full else f"substr(content, 1, {MAX_SHOWN_CHARS}), " \
                                                  f"substr(thinking, 1, {MAX_SHOWN_CHARS})"
        rows = self.db.execute(f"SELECT id, conversation_id, role, {texts}, meta, complete, parent_id, length(content),"
                               " length(thinking) FROM messages WHERE conversation_id=? ORDER BY id", (cid,)).fetchall()
        if full:
            rows = [r[:8] for r in rows]
        else:
            rows = [(*r[:3], _cut(_text(r[3]), r[8]), _cut(_text(r[4]), r[9]), *r[5:8]) for r in rows]
        leaf = self.db.execute("SELECT leaf_id FROM conversations WHERE id=?", (cid,)).fetchone()
        return _Tree(rows, leaf[0] if leaf else None)

    def add_message(self, cid: int, role: str, content: str, thinking: str = "", meta: dict | None = None,
                    complete: bool = True, parent: int | None = None) -> Message:
        """Adds a message after `parent` (default: the end of the branch shown), which becomes the leaf."""
        self._writable()
        now = time.time()
        with self._tx():
            if parent is None:
                parent = self._tree(cid).leaf
            cur = self.db.execute("INSERT INTO messages"
                                  " (conversation_id, role, content, thinking, meta, created, complete, parent_id)"
                                  " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                  (cid, role, content, thinking, json.dumps(meta or {}), now, int(complete), parent))
            self.db.execute("UPDATE conversations SET updated=?, leaf_id=? WHERE id=?", (now, cur.lastrowid, cid))
        versions = self._tree(cid).versions(cur.lastrowid)
        return Message(cur.lastrowid, cid, role, content, thinking, meta or {}, complete, parent, versions)

    def set_leaf(self, cid: int, mid: int) -> None:
        """The chat shows the branch that ends at message `mid` (0: none of it, before its first message)."""
        self._writable()
        with self._tx():
            self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (mid, cid))

    def show_version(self, cid: int, mid: int) -> None:
        """The chat shows version `mid` of a message and, after it, its newest continuation."""
        self.set_leaf(cid, self._tree(cid).newest_leaf_under(mid))

    def update_message(self, mid: int, content: str, thinking: str, meta: dict | None = None,
                       complete: bool = False) -> None:
        """Writes a streaming reply so far (called about once a second) or its final state."""
        self._writable()
        with self._tx():
            if meta is None:
                self.db.execute("UPDATE messages SET content=?, thinking=?, complete=? WHERE id=?",
                                (content, thinking, int(complete), mid))
            else:
                self.db.execute("UPDATE messages SET content=?, thinking=?, meta=?, complete=? WHERE id=?",
                                (content, thinking, json.dumps(meta), int(complete), mid))

    def finish_message(self, mid: int, meta: dict) -> None:
        """Marks a reply complete with `meta`, its text as stored (it may be longer than `messages` shows)."""
        self._writable()
        with self._tx():
            self.db.execute("UPDATE messages SET meta=?, complete=1 WHERE id=?", (json.dumps(meta), mid))
    def delete_message(self, cid: int, mid: int) -> None:
        """Removes one message that nothing follows (a reply that never started, a question taken back);
        the branch shown then ends at its parent."""
        self._writable()
        tree = self._tree(cid)
        if mid not in tree.rows or tree.children.get(mid):
            return
        with self._tx():
            self.db.execute("DELETE FROM messages WHERE id=? AND conversation_id=?", (mid, cid))
            if tree.leaf == mid:
                self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (tree.parent(mid), cid))

    def delete_messages_from(self, cid: int, mid: int) -> None:
        """Removes message `mid` and everything after it (edit and regenerate start over from there)."""
        self._writable()
        with self._tx():
            self.db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?", (cid, mid))

    def import_chat(self, title: str, system_prompt: str, settings: dict, messages: list[tuple], shown: int) -> int:
        """A new chat holding `messages` ((id, parent, role, content, thinking, meta, complete), parents
        before their children, ids the file's own); `shown` is the leaf to show. One transaction."""
        self._writable()
        now = time.time()
        with self._tx():
            cid = self.db.execute("INSERT INTO conversations (title, created, updated, system_prompt, settings)"
                                  " VALUES (?, ?, ?, ?, ?)",
                                  (title, now, now, system_prompt, json.dumps(settings))).lastrowid
            ids = {0: 0}
            for mid, parent, role, content, thinking, meta, complete in messages:
                ids[mid] = self.db.execute(
                    "INSERT INTO messages (conversation_id, role, content, thinking, meta, created, complete,"
                    " parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (cid, role, content, thinking, json.dumps(meta), now, int(complete), ids[parent])).lastrowid
            self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (ids[shown], cid))
        return cid

    def export_text(self, cid: int) -> str:
        conv = self.conversation(cid)
        lines = [f"# {conv.title}", ""]
        for m in self.messages(cid, full=True):
            lines += [f"**{m.role}**:", "", m.content, ""]
        return "\n".join(lines)


# ---------------------------------------------------------------------- rows -> values, whatever they hold
# SQLite keeps any type in any column, so a hand-edited or damaged row can hold a number where text
# belongs, bytes that are not UTF-8, or NULL; each is turned into what the app expects.

def _cut(text: str, length) -> str:
    """`text` (the first MAX_SHOWN_CHARS of a message) with a line saying what is not shown."""
    if not isinstance(length, int) or length <= MAX_SHOWN_CHARS:  # (a BLOB's length counts bytes, not characters)
        return text
    return (f"{text}\n\n[… {length - MAX_SHOWN_CHARS:,} more characters are not shown here. "
            "Copy conversation (in the Chat menu) copies the whole message.]")


def _text(value, default: str = "") -> str:
    if value is None:
        return default
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _number(value, default: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _flag(value) -> bool:
    return bool(_number(value, 1.0))


def _json_object(value) -> dict | None:
    try:
        data = json.loads(_text(value, "{}") or "{}")
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _chat_settings(value) -> tuple[dict, bool]:
    """A chat's settings with only valid values kept (the app's defaults fill the rest); ok=False when
    something had to be dropped."""
    data = _json_object(value)
    if data is None:
        return {}, False
    sampling = data.get("sampling")
    if sampling is None:
        return data, True
    if not isinstance(sampling, dict):
        return {k: v for k, v in data.items() if k != "sampling"}, False
    clean, problems = check_sampling(sampling)
    return {**data, "sampling": clean}, not problems and len(clean) == len(sampling)


def _meta(value) -> tuple[dict, bool]:
    data = _json_object(value)
    if data is None:
        return {}, False
    _migrate_meta(data)
    clean = {}
    for key, kind in META_TYPES.items():
        if key not in data:
            continue
        v = data[key]
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)) if kind == "number" \
            else isinstance(v, kind)
        if ok and key == "switch":
            ok = _is_switch(v)
        elif ok and key == "switches":
            ok = all(isinstance(x, dict) and _is_switch(x) for x in v)
        elif ok and key == "attachments":
            ok = valid_attachments(v)
        elif ok and key == "thinking_path":
            ok = len(v) <= MAX_PATH and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
                                            and _is_count(x[1]) for x in v)
        elif ok and key in ("thinking_by_submodel", "answer_by_submodel"):
            ok = all(isinstance(name, str) and _is_count(n) for name, n in v.items())
        if ok:
            clean[key] = v
    clean.update({k: v for k, v in data.items() if k not in META_TYPES})
    return clean, len(clean) == len(data)


def _migrate_meta(data: dict) -> None:
    """Reads what earlier versions wrote as this one writes it: `total_ms` is `elapsed_ms`, a switch's
    `tokens` its `reprefill_tokens`, and tokens per submodel a list of [name, count] pairs."""
    if "total_ms" in data and "elapsed_ms" not in data:
        data["elapsed_ms"] = data.pop("total_ms")
    switches = data.get("switches") if isinstance(data.get("switches"), list) else []
    for switch in [data.get("switch"), *switches]:
        if isinstance(switch, dict) and "tokens" in switch and "reprefill_tokens" not in switch:
            switch["reprefill_tokens"] = switch.pop("tokens")
    pairs = data.get("thinking_by_submodel")
    if isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        by = dict(pairs)
        if len(by) == len(pairs):  # (names repeated: not a record this app wrote; dropped as damaged)
            data["thinking_by_submodel"] = by


def _is_switch(v: dict) -> bool:
    return all(isinstance(v.get(k, ""), str) for k in ("from", "to", "reason"))


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class _Tree:
    """One chat's messages as a tree, read whatever the rows hold: a parent that is NULL (a chat from
    before versions), not a number, or not in the chat (lost with a damaged page, salvaged without it)
    is the message before it, so a chat keeps its line; a cycle is cut where it closes."""

    def __init__(self, rows, leaf):
        self.rows = {r[0]: r for r in rows}
        self.ids = [r[0] for r in rows]
        before = {mid: (self.ids[i - 1] if i else 0) for i, mid in enumerate(self.ids)}
        self.parents = {}
        for mid, r in self.rows.items():
            p = r[7]
            known = isinstance(p, int) and (p == 0 or p in self.rows)
            self.parents[mid] = p if known else before[mid]
        self.children: dict[int, list[int]] = {}
        for mid in self.ids:
            self.children.setdefault(self.parents[mid], []).append(mid)
        valid = isinstance(leaf, int) and (leaf == 0 or leaf in self.rows)
        self.leaf = leaf if valid else (self.ids[-1] if self.ids else 0)

    def parent(self, mid: int) -> int:
        return self.parents.get(mid, 0)

    def path(self, leaf: int) -> list[int]:
        out, seen = [], set()
        while leaf in self.rows and leaf not in seen:
            seen.add(leaf)
            out.append(leaf)
            leaf = self.parents[leaf]
        return out[::-1]

    def versions(self, mid: int) -> tuple[int, ...]:
        role = _text(self.rows[mid][2], "user")
        same = tuple(i for i in self.children.get(self.parents[mid], []) if _text(self.rows[i][2], "user") == role)
        return same if len(same) > 1 else ()

    def newest_leaf_under(self, mid: int) -> int:
        seen = set()
        while self.children.get(mid) and mid not in seen:
            seen.add(mid)
            mid = max(self.children[mid])
        return mid

    def message(self, mid: int) -> Message:
        r = self.rows[mid]
        return Message(r[0], r[1], _text(r[2], "user"), _text(r[3]), _text(r[4]), _meta(r[5])[0], _flag(r[6]),
                       self.parents[mid], self.versions(mid))

    def branch(self) -> list[Message]:
        return [self.message(i) for i in self.path(self.leaf)]


def _conversation(row) -> Conversation:
    return Conversation(row[0], _text(row[1], "Untitled chat"), _number(row[2]), _text(row[3]),
                        _chat_settings(row[4])[0])


# ---------------------------------------------------------------------- the file

def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return str(e) or type(e).__name__


def _is_damage(e: sqlite3.Error) -> bool:
    name = getattr(e, "sqlite_errorname", "") or ""
    if any(name.startswith(code) for code in DAMAGE_CODES):
        return True
    text = str(e).lower()
    return "malformed" in text or "not a database" in text


def _unwritable(path: Path) -> str:
    """Why the file or its folder cannot be written ("" when both can), found by trying (not by
    os.access, which a root user, ACLs or a read-only mount make lie)."""
    if path.is_file():
        try:
            with open(path, "r+b"):
                pass
        except OSError as e:
            return f"the file cannot be written ({_why(e)})"
    probe = path.with_name(f".{path.name}.write-test-{os.getpid()}")
    try:
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as e:
        return f"its folder cannot be written ({_why(e)})"
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
        raise _Damaged("its pages are damaged: " + _text(rows[0][0])[:80] if rows else "its pages are damaged")


def _refuse_code(db: sqlite3.Connection) -> None:
    """Views and triggers run code on every read or write (an endless recursive view kept the window
    from opening); Elastic Chat never makes any, so a file that has them is not one of its histories."""
    rows = db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger') LIMIT 3").fetchall()
    if rows:
        raise _Damaged(f"it holds a {rows[0][0]} ({_text(rows[0][1])[:40]}), which Elastic Chat never writes")


def _is_full(e: BaseException) -> bool:
    return getattr(e, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(e).lower()


def _bound_reads(db: sqlite3.Connection) -> None:
    """Interrupts any statement on `db` (a hostile file's copy) once its statements together have run
    READ_STEPS virtual-machine steps (SQLite calls the handler every STEPS_PER_CHECK of them)."""
    left = [READ_STEPS // STEPS_PER_CHECK]

    def count() -> int:
        left[0] -= 1
        return 1 if left[0] < 0 else 0
    db.set_progress_handler(count, STEPS_PER_CHECK)


def _version(db: sqlite3.Connection) -> int:
    if not db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone():
        return 0
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    try:
        version = int(row[0]) if row else 0
    except (TypeError, ValueError):
        version = -1
    if version < 0:
        raise _Damaged(f"its schema version {_text(row[0])[:20]!r} is not a version number")
    return version


def _other_tables(db: sqlite3.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]


def _migrate(db: sqlite3.Connection, current: int) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                db.execute(statement)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    except sqlite3.Error as e:
        db.execute("ROLLBACK")
        if _is_damage(e):
            raise
        raise _Damaged(f"its schema cannot be brought up to date ({e})") from None
    db.execute("COMMIT")


def _probe(db: sqlite3.Connection) -> None:
    """Every column this version reads is there (a hand-made or half-migrated file may lack one)."""
    try:
        db.execute(f"SELECT {', '.join(CONVERSATION_COLUMNS)} FROM conversations LIMIT 1").fetchall()
        db.execute(f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages LIMIT 1").fetchall()
    except sqlite3.Error as e:
        if _is_damage(e):
            raise
        raise _Damaged(f"its tables are not the ones Elastic Chat writes ({e})") from None


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
        return f"Its chats could not be read ({_why(e)})."
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
