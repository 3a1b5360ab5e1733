"""Automatic chat titles (app/chat_titles.py): a few words from the first exchange, the same every time,
and never the user's or an import's title replaced (app/state/history.py `title_automatically`)."""

import time

import pytest

from app.chat_titles import MAX_CHARS, auto_title
from app.state.chat_files import chat_json, import_chat
from app.state.history import History
from tests.history_support import version_3_history

NOON = time.mktime((2026, 12, 3, 12, 0, 0, 0, 0, -1))


@pytest.mark.parametrize("text, files, reply, title", [
    # the first message's words, markdown, links and filler stripped; inline code keeps its text
    ("Hi! Can you please **explain** how `zip` works in [Python](https://python.org)?", [], "",
     "Explain how zip works in Python"),
    ("# Привет, мир\n> как дела?", [], "", "Привет, мир"),  # Cyrillic: the first line with words
    ("Hello,\n\nwhat is snake_case vs *camelCase*?", [], "", "What is snake_case vs camelCase"),
    ("What is C# good for?", [], "", "What is C# good for"),
    ("It takes ~5 to ~10 minutes?", [], "", "It takes ~5 to ~10 minutes"),  # "~" is "about" (it was dropped)
    ("Is ~~this~~ struck?", [], "", "Is this struck"),  # strikethrough's marks go
    ("Is ~/notes the folder?", [], "", "Is ~/notes the folder"),
    # code only: its language; without one, "Code"
    ("```python\nprint('hello world')\n```", [], "hello world", "Python code"),
    ("```\nx = 1\n```", [], "", "Code"),
    # only an attachment: its name (and how many more)
    ("", ["notes.txt"], "Here is a summary.", "notes.txt"),
    ("", ["report.pdf", "data.csv", "b.txt"], "", "report.pdf and 2 more"),
    # empty once stripped: the reply's words, else the chat's date
    ("hi!", [], "**42** is the answer", "42 is the answer"),
    ("  \u202e\u200b ", [], "", "Chat of 03 Dec 2026, 12:00"),
    ("", [], "", "Chat of 03 Dec 2026, 12:00"),
    ("https://example.com/a/b", [], "", "Chat of 03 Dec 2026, 12:00"),
])
def test_a_title_from_the_first_exchange(text, files, reply, title):
    assert auto_title(text, files, reply, NOON) == title
    assert auto_title(text, files, reply, NOON) == title  # deterministic


def test_a_long_message_is_cut_at_a_word_and_a_script_without_spaces_by_characters():
    long = auto_title("Please explain the difference between processes and threads in operating systems "
                      "and when each is the better choice " * 50)
    assert len(long) <= MAX_CHARS and long.endswith("…") and long == "Explain the difference between…"
    chinese = auto_title("请用简单的语言解释一下量子计算机的工作原理以及它和普通计算机的区别是什么"
                         "请用简单的语言解释一下")
    assert len(chinese) == MAX_CHARS and chinese.endswith("…") and chinese.startswith("请用简单的语言")
    assert len(auto_title("x" * 10000)) == MAX_CHARS


def test_a_title_set_by_the_user_or_an_import_is_never_replaced(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    try:
        fresh = h.new_conversation().id
        assert h.title_automatically(fresh, "For now", final=False)  # at the send: may still change
        assert h.conversation(fresh).title == "For now" and h.conversation(fresh).title_by is None
        assert h.title_automatically(fresh, "Final")
        assert not h.title_automatically(fresh, "Again") and h.conversation(fresh).title == "Final"  # made once

        renamed = h.new_conversation().id
        h.title_automatically(renamed, "For now", final=False)
        h.rename(renamed, "Mine")  # the user renames it while its first reply streams
        assert not h.title_automatically(renamed, "Auto")
        assert h.conversation(renamed).title == "Mine" and h.conversation(renamed).title_by == "user"

        h.add_message(fresh, "user", "q")
        path = tmp_path / "chat.json"
        import json

        path.write_text(json.dumps(chat_json(h, fresh)), encoding="utf-8")
        imported, _ = import_chat(h, path)
        assert not h.title_automatically(imported, "Auto")
        assert h.conversation(imported).title == "Final (imported)" and h.conversation(imported).title_by == "import"
    finally:
        h.close()


def test_chats_of_a_version_3_history_keep_their_titles(tmp_path):
    """A history written before automatic titles: its chats with messages keep their titles; an empty one
    can still get one."""
    path = tmp_path / "history.sqlite3"
    db = version_3_history(path)
    db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'renamed long ago', 1, 1)")
    db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (2, 'New chat', 1, 2)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created, parent_id)"
               " VALUES (1, 'user', 'hi', 1, 0)")
    db.commit()
    db.close()
    h = History(path)
    try:
        assert not h.title_automatically(1, "Hi") and h.conversation(1).title == "renamed long ago"
        assert h.title_automatically(2, "Sums")
    finally:
        h.close()


class _Front:
    """What Conversations reads of the chat controller to title a chat (app/controller.py)."""

    def __init__(self, history):
        self.history = history
        self.slots = []
        self.sig_reply_done = self

    def connect(self, slot):
        self.slots.append(slot)

    def reply_done(self, cid, reply):
        for slot in self.slots:
            slot(cid, reply)


def test_only_the_end_of_a_chats_first_reply_titles_it(tmp_path):
    """A chat recovered from a damaged file has no `title_by` but a past: a later reply never renames it."""
    from app.conversations import Conversations

    h = History(tmp_path / "h.sqlite3")
    try:
        front = _Front(h)
        Conversations(front)
        cid = h.new_conversation("Recovered chat 2").id
        h.add_message(cid, "user", "What is 2 + 2?")
        first = h.add_message(cid, "assistant", "4")
        h.add_message(cid, "user", "And 3 + 3?")
        later = h.add_message(cid, "assistant", "6")
        front.reply_done(cid, later)
        assert h.conversation(cid).title == "Recovered chat 2" and h.conversation(cid).title_by is None
        front.reply_done(cid, first)
        assert h.conversation(cid).title == "What is 2 + 2" and h.conversation(cid).title_by == "auto"
    finally:
        h.close()
