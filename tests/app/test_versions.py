"""Versions instead of overwrites: an edit or a regeneration is a sibling of what it replaces, the tree is
saved (schema 3), a chat saved before versions reads as the line it was, and the window's < 1/2 > moves
between branches."""

import sqlite3

import pytest

from app.state.history import History
from app.state.history_schema import MIGRATIONS, SCHEMA_VERSION
from app.state.settings import Settings
from tests.app_support import ask, make_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=40))
    yield w
    w.close()


def _version_2_file(path):
    """A history as version 2 wrote it: two chats, each a line of messages."""
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for version in (1, 2):
        for statement in MIGRATIONS[version]:
            db.execute(statement)
    db.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    for cid, title in ((1, "first"), (2, "second")):
        db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (?, ?, 1, 1)", (cid, title))
    for mid, cid, role, text in ((1, 1, "user", "a"), (2, 2, "user", "x"), (3, 1, "assistant", "b"),
                                 (4, 1, "user", "c"), (5, 2, "assistant", "y"), (6, 1, "assistant", "d")):
        db.execute("INSERT INTO messages (id, conversation_id, role, content, created) VALUES (?, ?, ?, ?, 1)",
                   (mid, cid, role, text))
    db.commit()
    db.close()


def test_a_version_2_history_is_migrated_into_lines_of_one_version_each(tmp_path):
    path = tmp_path / "history.sqlite3"
    _version_2_file(path)
    h = History(path)
    try:
        assert h.version() == SCHEMA_VERSION == 4 and not h.notices
        first = h.messages(1)
        assert [m.content for m in first] == ["a", "b", "c", "d"]
        assert [m.parent_id for m in first] == [0, 1, 3, 4] and all(m.versions == () for m in first)
        assert [m.content for m in h.messages(2)] == ["x", "y"] and h.messages(2)[1].parent_id == 2
        h.add_message(1, "user", "e")  # after the leaf the migration set
        assert [m.content for m in h.messages(1)] == ["a", "b", "c", "d", "e"]
    finally:
        h.close()


def test_versions_and_the_branch_shown_survive_a_reopen(tmp_path):
    path = tmp_path / "history.sqlite3"
    h = History(path)
    cid = h.new_conversation("c").id
    q1 = h.add_message(cid, "user", "q1")
    a1 = h.add_message(cid, "assistant", "a1")
    h.add_message(cid, "user", "q2")
    h.add_message(cid, "assistant", "a2")
    h.set_leaf(cid, q1.parent_id)  # edit q1: a new version starts the chat
    q1b = h.add_message(cid, "user", "q1 edited")
    h.add_message(cid, "assistant", "a1 to the edit")
    h.set_leaf(cid, q1b.id)  # regenerate that reply
    h.add_message(cid, "assistant", "a1 again")
    h.close()
    h = History(path)
    try:
        shown = h.messages(cid)
        assert [m.content for m in shown] == ["q1 edited", "a1 again"]
        assert shown[0].versions == (q1.id, q1b.id) and len(shown[1].versions) == 2
        h.show_version(cid, q1.id)  # back to the first version: its later turns were kept
        assert [m.content for m in h.messages(cid)] == ["q1", "a1", "q2", "a2"]
        h.show_version(cid, a1.id)
        assert [m.content for m in h.messages(cid)] == ["q1", "a1", "q2", "a2"]
        assert len(h.all_messages(cid)) == 7
    finally:
        h.close()


def test_a_tree_with_damaged_links_still_reads(tmp_path):
    h = History(tmp_path / "history.sqlite3")
    try:
        cid = h.new_conversation("c").id
        ids = [h.add_message(cid, "user" if i % 2 == 0 else "assistant", str(i)).id for i in range(4)]
        h.db.execute("UPDATE messages SET parent_id=NULL WHERE id=?", (ids[1],))  # copied from an old file
        h.db.execute("UPDATE messages SET parent_id=999 WHERE id=?", (ids[2],))  # a parent that is gone
        h.db.execute("UPDATE messages SET parent_id='x' WHERE id=?", (ids[3],))  # not a number
        h.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (ids[1], cid))
        assert [m.content for m in h.messages(cid)] == ["0", "1"]
        h.db.execute("UPDATE messages SET parent_id=? WHERE id=?", (ids[1], ids[0]))  # a cycle
        assert [m.content for m in h.messages(cid)] == ["0", "1"]
        h.db.execute("UPDATE conversations SET leaf_id='nonsense' WHERE id=?", (cid,))
        # the newest message is the leaf, and each lost link reads as the line: it follows the one before it
        assert [m.content for m in h.messages(cid)] == ["0", "1", "2", "3"]
    finally:
        h.close()


def test_editing_an_earlier_message_keeps_the_later_turns_in_the_other_branch(qtbot, window):
    c = window.controller
    ask(qtbot, window, "hello", "Off")
    ask(qtbot, window, "What is 2 + 3?", "Off")
    first = c.history.messages(c.chats.current)[0]
    window.start_edit(first.id)
    window.input.setPlainText("how do I get the real model?")
    with qtbot.waitSignal(c.sig_reply_done, timeout=180000):
        window.send()
    shown = c.history.messages(c.chats.current)
    assert [m.content for m in shown][0] == "how do I get the real model?" and len(shown) == 2
    top = window.chat.widgets[0]
    assert top.version_label.text() == "2/2" and not top.buttons["Next"].isEnabled()
    top.buttons["Previous"].click()  # the earlier branch, with both of its turns
    assert [m.content for m in c.history.messages(c.chats.current)][::2] == ["hello", "What is 2 + 3?"]
    assert window.chat.widgets[0].version_label.text() == "1/2" and len(window.chat.widgets) == 4
    with qtbot.waitSignal(c.sig_reply_done, timeout=180000):
        window.chat.widgets[-1].buttons["Regenerate"].click()
    last = window.chat.widgets[-1]
    assert last.version_label.text() == "2/2" and len(c.history.all_messages(c.chats.current)) == 7
