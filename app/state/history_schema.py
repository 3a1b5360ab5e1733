"""The history's schema: its version, the migrations that bring an older file up to it, the columns this
version reads, and the checks that a file is one of its histories at all (no Qt). Opening an older
database upgrades it in one transaction; a file that is not a history this version can use raises
`Damaged`, one written by a newer version `Newer` (app/state/history_recovery.py decides what to do).
"""

from __future__ import annotations

import sqlite3

from runtime.api import show

from .history_rows import as_text

SCHEMA_VERSION = 4

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
    # 4: automatic titles and a time per message. `title_by` says who named the chat: NULL while nobody has
    # (an automatic title may still replace it), 'auto' once its first reply ended, 'user' (renamed),
    # 'import', or 'kept' (a chat written before this version: its title stays as it is). `finished` is
    # when a reply ended (a user message's time is `created`, when it was sent).
    4: ["ALTER TABLE conversations ADD COLUMN title_by TEXT",
        "UPDATE conversations SET title_by = 'kept'"
        " WHERE EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = conversations.id)",
        "ALTER TABLE messages ADD COLUMN finished REAL"],
}
# The columns this version reads, with the value to use where a row (or an older/newer schema) lacks one.
# A parent or a leaf that is NULL (a chat copied from an older or damaged file) reads as the line it was:
# a message follows the one before it, and the newest message is the leaf.
CONVERSATION_COLUMNS = {"id": None, "title": "Untitled chat", "created": 0.0, "updated": 0.0,
                        "system_prompt": "", "settings": "{}", "deleted": None, "leaf_id": None, "title_by": None}
MESSAGE_COLUMNS = {"id": None, "conversation_id": None, "role": "user", "content": "", "thinking": "",
                   "meta": "{}", "created": 0.0, "complete": 1, "parent_id": None, "finished": None}
DAMAGE_CODES = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT"}


class Damaged(Exception):
    """The file is not a history this version can use as it is; the reason is for the notice."""


class Newer(Exception):
    def __init__(self, version: int):
        super().__init__(version)
        self.version = version


def is_damage(e: sqlite3.Error) -> bool:
    name = getattr(e, "sqlite_errorname", "") or ""
    if any(name.startswith(code) for code in DAMAGE_CODES):
        return True
    text = str(e).lower()
    return "malformed" in text or "not a database" in text


def schema_version(db: sqlite3.Connection) -> int:
    if not db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone():
        return 0
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    try:
        version = int(row[0]) if row else 0
    except (TypeError, ValueError):
        version = -1
    if version < 0:
        raise Damaged(f"its schema version {show(as_text(row[0]), 20)} is not a version number")
    return version


def migrate(db: sqlite3.Connection, current: int) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                db.execute(statement)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    except sqlite3.Error as e:
        db.execute("ROLLBACK")
        if is_damage(e):
            raise
        raise Damaged(f"its schema cannot be brought up to date ({e})") from None
    db.execute("COMMIT")


def probe_columns(db: sqlite3.Connection) -> None:
    """Every column this version reads is there (a hand-made or half-migrated file may lack one)."""
    try:
        db.execute(f"SELECT {', '.join(CONVERSATION_COLUMNS)} FROM conversations LIMIT 1").fetchall()
        db.execute(f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages LIMIT 1").fetchall()
    except sqlite3.Error as e:
        if is_damage(e):
            raise
        raise Damaged(f"its tables are not the ones Elastic Chat writes ({e})") from None
