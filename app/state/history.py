"""Chat history in SQLite (no Qt): conversations and messages, committed as they happen.

WAL mode, one commit per message, and the streaming reply is written every second or so, so
a crash loses at most about a second of text. Deleting a conversation is a soft delete first
(so it can be undone); `purge_deleted` removes them. This module is the store; the rest of the
history lives beside it:
- app/state/history_schema.py: the schema's version and the migrations that bring an older file up to it;
- app/state/history_recovery.py: opening the file whatever state it is in (damaged, newer, read-only),
  and what `notices` says about it;
- app/state/history_rows.py: the rows as the app's values (`Message`, `Conversation`, a reply's details,
  the tree of versions), read whatever the rows hold;
- app/state/history_search.py: the sidebar's search over titles and message text.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path

from .history_recovery import HistoryOpening
from .history_rows import (
    MAX_SHOWN_CHARS,
    Conversation,
    Message,
    MessageTree,
    as_text,
    conversation_from_row,
    cut_shown,
)
from .history_schema import schema_version
from .history_search import first_match, matching_chats, register_search, search_words

log = logging.getLogger(__name__)
CONVERSATION_FIELDS = "id, title, updated, system_prompt, settings, title_by"  # as conversation_from_row reads them


class HistoryReadOnly(RuntimeError):
    """A write to a history that is open read-only; str(e) is one line for the window."""


class HistoryFull(HistoryReadOnly):
    """A write that the disk had no room for (nothing was written); str(e) is one line for the window."""

    def __init__(self):
        super().__init__("The disk is full: free some space, then send again. Your message is kept in the box.")


class HistoryBusy(HistoryReadOnly):
    """Another program holds the history's write lock (DB Browser with unsaved edits, a sync or backup
    tool): nothing was written; str(e) is one line for the window, `unsaved` says what waits."""

    def __init__(self, name: str, unsaved: str = "this change was not saved (a message you sent stays in the box)",
                 then: str = "then try again"):
        super().__init__(f"{name} is in use by another program: {unsaved}. Close that program; {then}.")
        self.name = name


class History(HistoryOpening):
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.notices: list[str] = []  # one line per problem found while opening, for the window's banner
        self.read_only = ""  # why writes are refused; "" while the history is writable
        self.moved_aside: Path | None = None  # where an unreadable file went
        self.db = self._open()  # made private (0600) before SQLite opens it: HistoryOpening._open_writable
        register_search(self.db)
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

    # ------------------------------------------------------------------ schema

    def version(self) -> int:
        return schema_version(self.db)

    def _tx(self):
        db, name = self.db, self.path.name

        class Tx:
            def __enter__(self):
                try:
                    db.execute("BEGIN IMMEDIATE")  # waits at most BUSY_TIMEOUT_S for another writer
                except sqlite3.Error as e:
                    if _is_busy(e):
                        raise HistoryBusy(name) from e
                    raise

            def __exit__(self, exc_type, exc, tb):
                if exc_type is None:
                    try:
                        db.execute("COMMIT")
                    except sqlite3.Error as e:
                        if db.in_transaction:
                            db.execute("ROLLBACK")
                        if _is_full(e):
                            raise HistoryFull() from e
                        if _is_busy(e):
                            raise HistoryBusy(name) from e
                        raise
                    return False
                if db.in_transaction:  # SQLite ends some transactions itself (a full disk)
                    db.execute("ROLLBACK")
                if issubclass(exc_type, sqlite3.Error) and _is_full(exc):
                    raise HistoryFull() from exc
                if issubclass(exc_type, sqlite3.Error) and _is_busy(exc):
                    raise HistoryBusy(name) from exc
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
        row = self.db.execute(f"SELECT {CONVERSATION_FIELDS} FROM conversations WHERE id=?", (cid,)).fetchone()
        if row is None:
            raise KeyError(cid)
        return conversation_from_row(row)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; `search` (app/state/history_search.py) keeps the chats whose title or messages hold
        every one of its words, each with the words around its first match in `match`."""
        words = search_words(search)
        query = f"SELECT {CONVERSATION_FIELDS} FROM conversations WHERE deleted IS NULL"
        where, args = matching_chats(words)
        rows = self.db.execute(query + where + " ORDER BY updated DESC, id DESC", args).fetchall()
        return [conversation_from_row(r, first_match(self.db, r[0], as_text(r[1]), words) if words else "")
                for r in rows]

    def rename(self, cid: int, title: str) -> None:
        """The user's name for the chat: no automatic title replaces it."""
        self._writable()
        title = title.strip() or "Untitled chat"
        with self._tx():
            self.db.execute("UPDATE conversations SET title=?, title_by='user' WHERE id=?", (title, cid))

    def title_automatically(self, cid: int, title: str, final: bool = True) -> bool:
        """Names chat `cid` `title` unless someone has named it (the user, an import, an earlier version);
        `final`: no later automatic title replaces this one. Returns whether the title was set."""
        self._writable()
        with self._tx():
            cur = self.db.execute("UPDATE conversations SET title=?, title_by=? WHERE id=? AND title_by IS NULL",
                                  (title, "auto" if final else None, cid))
        return cur.rowcount > 0

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

    def drop_if_empty(self, cid: int) -> bool:
        """Removes chat `cid` for good if it never held a message and nobody named it (nothing is lost, so
        there is nothing to undo); whether it went. Never on a history kept as it is."""
        if self.read_only:
            return False
        with self._tx():
            cur = self.db.execute("DELETE FROM conversations WHERE id=? AND title_by IS NULL AND NOT EXISTS"
                                  " (SELECT 1 FROM messages WHERE conversation_id=?)", (cid, cid))
        return cur.rowcount > 0

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

    def _tree(self, cid: int, full: bool = False) -> MessageTree:
        texts = "content, thinking" if full else f"substr(content, 1, {MAX_SHOWN_CHARS}), " \
                                                  f"substr(thinking, 1, {MAX_SHOWN_CHARS})"
        rows = self.db.execute(f"SELECT id, conversation_id, role, {texts}, meta, complete, parent_id, created,"
                               " finished, length(content), length(thinking) FROM messages WHERE conversation_id=?"
                               " ORDER BY id", (cid,)).fetchall()
        if full:
            rows = [r[:10] for r in rows]
        else:
            rows = [(*r[:3], cut_shown(as_text(r[3]), r[10]), cut_shown(as_text(r[4]), r[11]), *r[5:10]) for r in rows]
        leaf = self.db.execute("SELECT leaf_id FROM conversations WHERE id=?", (cid,)).fetchone()
        return MessageTree(rows, leaf[0] if leaf else None)

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
        return Message(cur.lastrowid, cid, role, content, thinking, meta or {}, complete, parent, versions, now)

    def set_leaf(self, cid: int, mid: int) -> None:
        """The chat shows the branch that ends at message `mid` (0: none of it, before its first message)."""
        self._writable()
        with self._tx():
            self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (mid, cid))

    def show_version(self, cid: int, mid: int) -> None:
        """The chat shows version `mid` of a message and, after it, its newest continuation."""
        self.set_leaf(cid, self._tree(cid).newest_leaf_under(mid))

    def update_message(self, mid: int, content: str, thinking: str, meta: dict | None = None,
                       complete: bool = False, finished: float | None = None) -> float | None:
        """Writes a streaming reply so far (called about once a second) or its final state; `complete`
        also stores the time it ended (`finished`, else now: a save kept waiting keeps the reply's own end),
        which it returns (None while it streams)."""
        self._writable()
        finished = (finished or time.time()) if complete else None
        with self._tx():
            if meta is None:
                self.db.execute("UPDATE messages SET content=?, thinking=?, complete=?, finished=? WHERE id=?",
                                (content, thinking, int(complete), finished, mid))
            else:
                self.db.execute("UPDATE messages SET content=?, thinking=?, meta=?, complete=?, finished=?"
                                " WHERE id=?", (content, thinking, json.dumps(meta), int(complete), finished, mid))
        return finished

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
        """A new chat holding `messages` ((id, parent, role, content, thinking, meta, complete, created,
        finished), parents before their children, ids the file's own, times None where the file has none);
        `shown` is the leaf to show. The chat keeps its title (no automatic one). One transaction."""
        self._writable()
        now = time.time()
        with self._tx():
            cid = self.db.execute("INSERT INTO conversations (title, created, updated, system_prompt, settings,"
                                  " title_by) VALUES (?, ?, ?, ?, ?, 'import')",
                                  (title, now, now, system_prompt, json.dumps(settings))).lastrowid
            ids = {0: 0}
            for mid, parent, role, content, thinking, meta, complete, created, finished in messages:
                ids[mid] = self.db.execute(
                    "INSERT INTO messages (conversation_id, role, content, thinking, meta, created, complete,"
                    " parent_id, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (cid, role, content, thinking, json.dumps(meta), created or now, int(complete), ids[parent],
                     finished)).lastrowid
            self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (ids[shown], cid))
        return cid

    def export_text(self, cid: int) -> str:
        conv = self.conversation(cid)
        lines = [f"# {conv.title}", ""]
        for m in self.messages(cid, full=True):
            lines += [f"**{m.role}**:", "", m.content, ""]
        return "\n".join(lines)



def _is_busy(e: BaseException) -> bool:
    """Another connection holds the lock this write needs (SQLITE_BUSY, or SQLITE_LOCKED in a shared cache)."""
    name = getattr(e, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(e).lower()


def _is_full(e: BaseException) -> bool:
    return getattr(e, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(e).lower()
