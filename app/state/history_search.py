"""The sidebar's search over the history (no Qt): which chats hold every word of a query, in their title or
their messages' text, and the words around the first place each matches.

Why not SQLite's FTS5: its index is a virtual table kept by triggers, and a history file holding triggers
or tables of another kind is refused as not one of ours (app/state/history_recovery.py: code in a file is
run on every write); its tokenizers also split neither Chinese nor Japanese into words, so a word inside a
sentence of those scripts would never match. Instead each word is a plain substring test: `LIKE` (its
`%`, `_` and escape escaped) on a text of ASCII alone, `instr` over a case-folded copy of any other text
(a Python function registered on the connection: SQLite's own `lower` and `LIKE` fold ASCII only, so
"ПРИВЕТ" would not find "привет"). The query is the user's text, never SQL nor
a pattern: it is bound as a parameter, `%`, `_`, `*` and quotes are characters like any other ("a phrase
in quotes" is one term), and it is cut to MAX_QUERY characters and MAX_WORDS terms; a query of quotes
alone looks for them.
"""

from __future__ import annotations

import re
import sqlite3

from .history_rows import as_text

MAX_QUERY = 200  # characters of a query read (a pasted page searches for its start)
MAX_WORDS = 8
AROUND = 16  # characters shown before a match in the sidebar (from a word's start); twice as many after
TERM = re.compile(r'"([^"]+)"|([^\s"]+)')  # "a phrase" or a word; a lone quote is neither


def folded(text) -> str:
    """SQL `folded(x)`: x case-folded ("Straße" -> "strasse"), "" for NULL; a BLOB is read as UTF-8."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text).casefold()


def register_search(db: sqlite3.Connection) -> None:
    """Makes `folded` available to the queries below on `db` (each connection needs it once)."""
    db.create_function("folded", 1, folded, deterministic=True)


def search_words(query: str) -> list[str]:
    """The query's terms, case-folded, each once, in order: at most MAX_WORDS from its first MAX_QUERY
    characters; [] for a query with no term (the whole list is shown)."""
    out: list[str] = []
    for m in TERM.finditer((query or "")[:MAX_QUERY]):
        term = " ".join((m.group(1) or m.group(2)).split()).casefold()
        if term and term not in out:
            out.append(term)
    if not out and (query or "").strip():  # only quotes: they are what is looked for, never "everything"
        out = [" ".join(query[:MAX_QUERY].split()).casefold()]
    return out[:MAX_WORDS]


def matching_chats(words: list[str]) -> tuple[str, tuple]:
    """The WHERE clause's rest (" AND ...") keeping the chats that hold every one of `words`, and its
    parameters; ("", ()) when there are none."""
    clause, args = "", []
    for word in words:
        title, title_args = _holds("title", word)
        content, content_args = _holds("content", word)
        thinking, thinking_args = _holds("thinking", word)
        clause += (f" AND ({title} OR id IN (SELECT conversation_id FROM messages WHERE {content} OR {thinking}))")
        args += title_args + content_args + thinking_args
    return clause, tuple(args)


def _holds(column: str, word: str) -> tuple[str, list]:
    """SQL that is true where `column` holds the case-folded `word`, and its parameters. Calling Python for
    every row is about 6x slower than SQLite's own LIKE, so a text of ASCII alone (its length in
    characters is its length in bytes) is matched by LIKE, which folds ASCII exactly as casefold does; only
    a text with other characters is folded in Python. `%`, `_` and the escape are escaped: LIKE reads
    the word as characters, never as a pattern."""
    wider = f"length({column}) < length(CAST({column} AS BLOB))"
    folded_holds = f"({wider} AND instr(folded({column}), ?) > 0)"
    if not word.isascii():  # (a text of ASCII alone cannot hold it)
        return folded_holds, [word]
    pattern = "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return f"({column} LIKE ? ESCAPE '\\' OR {folded_holds})", [pattern, word]


def first_match(db: sqlite3.Connection, cid: int, title: str, words: list[str]) -> str:
    """The words around the first place in chat `cid` where the first of `words` occurs ("" when only
    its title holds it): "…so the **term** was…" without marks, one line."""
    if not words or words[0] in folded(title):
        return ""
    word = words[0]
    for column in ("content", "thinking"):
        row = db.execute(f"SELECT {column} FROM messages WHERE conversation_id=? AND instr(folded({column}), ?) > 0"
                         " ORDER BY id LIMIT 1", (cid, word)).fetchone()
        if row is not None:
            return snippet(row[0], word)
    return ""


def first_matching_message(messages, query: str) -> int | None:
    """The id of the first of `messages` (a chat's branch as shown) whose text or thinking holds the query's
    first term, the one its search result shows around; None without a query or a match."""
    words = search_words(query)
    if not words:
        return None
    return next((m.id for m in messages if words[0] in folded(m.content) or words[0] in folded(m.thinking)), None)


def snippet(text, word: str) -> str:
    """About 3 * AROUND characters of `text` around the first `word` in it, on one line."""
    text = as_text(text)
    fold = text.casefold()
    at = fold.find(word) if len(fold) == len(text) else text.lower().find(word)  # (folding changed its length)
    at = max(at, 0)
    start = max(0, at - AROUND)
    if start and " " in text[start:at]:  # begin at a word
        start += text[start:at].index(" ") + 1
    piece = " ".join(text[start:at + len(word) + 2 * AROUND].split())
    return ("…" if start else "") + piece + ("…" if at + len(word) + 2 * AROUND < len(text) else "")
