"""Chat history in SQLite (no Qt): conversations and messages, committed as they happen.

WAL mode, one commit per message, and the streaming reply is written every second or so, so
a crash loses at most about a second of text. The schema has a version and a migration path
(`MIGRATIONS`): opening an older database upgrades it in one transaction. Deleting a
conversation is a soft delete first (so it can be undone); `purge_deleted` removes them.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 2

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
}


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str  # "user", "assistant" or "system"
    content: str
    thinking: str = ""
    meta: dict = field(default_factory=dict)  # what produced it: submodels, budget, counts, timings
    complete: bool = True

    def as_chat(self) -> dict:
        out = {"role": self.role, "content": self.content}
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), isolation_level=None)  # explicit transactions
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ schema

    def version(self) -> int:
        has_meta = self.db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        if not has_meta:
            return 0
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        current = self.version()
        if current > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} was written by a newer Elastic Chat (schema {current}); update the app")
        if current == SCHEMA_VERSION:
            return
        with self._tx():
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    self.db.execute(statement)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def _tx(self):
        db = self.db

        class Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, *exc):
                db.execute("ROLLBACK" if exc_type else "COMMIT")
        return Tx()

    # ------------------------------------------------------------------ conversations

    def new_conversation(self, title: str = "New chat", system_prompt: str = "", settings: dict | None = None) -> Conversation:
        now = time.time()
        with self._tx():
            cur = self.db.execute("INSERT INTO conversations (title, created, updated, system_prompt, settings)"
                                  " VALUES (?, ?, ?, ?, ?)", (title, now, now, system_prompt, json.dumps(settings or {})))
        return self.conversation(cur.lastrowid)

    def conversation(self, cid: int) -> Conversation:
        row = self.db.execute("SELECT id, title, updated, system_prompt, settings FROM conversations WHERE id=?",
                              (cid,)).fetchone()
        if row is None:
            raise KeyError(cid)
        return Conversation(row[0], row[1], row[2], row[3], json.loads(row[4] or "{}"))

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
        return [Conversation(r[0], r[1], r[2], r[3], json.loads(r[4] or "{}")) for r in rows]

    def rename(self, cid: int, title: str) -> None:
        title = title.strip() or "Untitled chat"
        with self._tx():
            self.db.execute("UPDATE conversations SET title=? WHERE id=?", (title, cid))

    def update_settings(self, cid: int, system_prompt: str, settings: dict) -> None:
        with self._tx():
            self.db.execute("UPDATE conversations SET system_prompt=?, settings=? WHERE id=?",
                            (system_prompt, json.dumps(settings), cid))

    def delete(self, cid: int) -> None:
        """Soft delete: the conversation disappears from lists but `undelete` brings it back."""
        with self._tx():
            self.db.execute("UPDATE conversations SET deleted=? WHERE id=?", (time.time(), cid))

    def undelete(self, cid: int) -> None:
        with self._tx():
            self.db.execute("UPDATE conversations SET deleted=NULL WHERE id=?", (cid,))

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        with self._tx():
            cur = self.db.execute("DELETE FROM conversations WHERE deleted IS NOT NULL AND deleted <= ?",
                                  (time.time() - older_than_s,))
        return cur.rowcount

    # ------------------------------------------------------------------ messages

    def messages(self, cid: int) -> list[Message]:
        rows = self.db.execute("SELECT id, conversation_id, role, content, thinking, meta, complete FROM messages"
                               " WHERE conversation_id=? ORDER BY id", (cid,)).fetchall()
        return [Message(r[0], r[1], r[2], r[3], r[4], json.loads(r[5] or "{}"), bool(r[6])) for r in rows]

    def add_message(self, cid: int, role: str, content: str, thinking: str = "", meta: dict | None = None,
                    complete: bool = True) -> Message:
        now = time.time()
        with self._tx():
            cur = self.db.execute("INSERT INTO messages (conversation_id, role, content, thinking, meta, created, complete)"
                                  " VALUES (?, ?, ?, ?, ?, ?, ?)",
                                  (cid, role, content, thinking, json.dumps(meta or {}), now, int(complete)))
            self.db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, cid))
        return Message(cur.lastrowid, cid, role, content, thinking, meta or {}, complete)

    def update_message(self, mid: int, content: str, thinking: str, meta: dict | None = None,
                       complete: bool = False) -> None:
        """Writes a streaming reply so far (called about once a second) or its final state."""
        with self._tx():
            if meta is None:
                self.db.execute("UPDATE messages SET content=?, thinking=?, complete=? WHERE id=?",
                                (content, thinking, int(complete), mid))
            else:
                self.db.execute("UPDATE messages SET content=?, thinking=?, meta=?, complete=? WHERE id=?",
                                (content, thinking, json.dumps(meta), int(complete), mid))

    def delete_messages_from(self, cid: int, mid: int) -> None:
        """Removes message `mid` and everything after it (edit and regenerate start over from there)."""
        with self._tx():
            self.db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?", (cid, mid))

    def export_text(self, cid: int) -> str:
        conv = self.conversation(cid)
        lines = [f"# {conv.title}", ""]
        for m in self.messages(cid):
            lines += [f"**{m.role}**:", "", m.content, ""]
        return "\n".join(lines)
