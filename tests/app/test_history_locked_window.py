"""In the window, on the demo model, while another process holds the history's write lock (`BEGIN
IMMEDIATE` or `BEGIN EXCLUSIVE` with an edit not saved): a message sent stays in the box, a reply streams
and ends and is shown, its saves wait and are written once the lock goes, a queued message comes back to
the box, renaming and deleting a chat are refused in one line, and a quit with a save still waiting says
so in the log without hanging. Before: `database is locked` reached Qt (the crash dialog) after a 5 s
freeze, and a reply that ended then was never saved. pytest-qt fails a test on any exception that reaches
Qt."""

import logging

import pytest

from app.state.settings import Settings
from tests.app_support import LONG, finish, hold, make_window
from tests.history_support import HeldLock, stored_rows

BUSY = "history.sqlite3 is in use by another program"


@pytest.mark.parametrize("kind", ["IMMEDIATE", "EXCLUSIVE"])
def test_a_history_another_program_holds_loses_nothing_and_raises_nothing(qtbot, tmp_path, gate, caplog, kind):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=24))
    c = w.controller
    path = c.history.path
    errors, notices = [], []
    c.sig_error.connect(lambda message, _lower: errors.append(message))
    c.sig_notice.connect(notices.append)
    assert c.history.db.execute("PRAGMA busy_timeout").fetchone()[0] <= 500  # not SQLite's 5 s on the GUI thread

    # sent while the file is held: refused in one line, the text stays in the box, nothing stored
    with HeldLock(path, kind):
        w.input.setPlainText("What is 2 + 2?")
        w.send()
        assert w.input.toPlainText() == "What is 2 + 2?"
        assert errors and BUSY in errors[-1] and "stays in the box" in errors[-1]
    assert not stored_rows(path)["messages"]

    # a reply streams, then the lock is taken: its saves wait (the persist ticks), the reply goes on
    w.input.clear()
    reply, controls = hold(qtbot, w, gate, "Quick", at=3)
    cid, mid = c.chats.current, reply.message_id
    lock = HeldLock(path, kind)
    qtbot.waitUntil(lambda: mid in c.saves.pending, timeout=LONG)
    assert BUSY in errors[-1] and "saves them by itself when the file is free" in errors[-1]

    # a message queued behind it comes back to the box when its turn comes; the reply ends, shown
    w.input.setPlainText("And 2 + 2?")
    w.send()
    gate.at = None
    done = finish(qtbot, w, controls)
    assert done.content and done.complete
    qtbot.waitUntil(lambda: w.input.toPlainText() == "And 2 + 2?", timeout=LONG)
    assert c.replies.reply_in(cid) is None
    assert c.saves.pending[mid].complete and c.saves.pending[mid].content == done.content

    # renaming and deleting the chat are refused in one line; the chat stays as it was
    errors.clear()
    assert c.chats.rename(cid, "Sums") is False and c.chats.delete(cid) is False
    assert len(errors) == 2 and all(BUSY in e and "\n" not in e for e in errors)
    assert [x.id for x in c.history.conversations()] == [cid]
    stored = stored_rows(path)["messages"][mid]
    assert stored[2] == 0  # the file still has the reply as it streamed

    # the lock goes: the reply's final state is written by the retry, and the banner says it was saved
    lock.release()
    qtbot.waitUntil(lambda: not c.saves.pending, timeout=LONG)
    assert any(n.startswith("Saved: history.sqlite3 is free again") for n in notices)
    rows = stored_rows(path)
    assert rows["messages"][mid] == ("assistant", done.content, 1, done.finished)
    assert [m[:2] for m in rows["messages"].values()] == [("user", "What is 45 + 23 - 17 + 9?"),
                                                         ("assistant", done.content)]
    assert c.chats.rename(cid, "Sums") is not False and stored_rows(path)["chats"][cid][0] == "Sums"

    # a quit with a save still waiting tries once more, says so in the log and does not hang
    reply, controls = hold(qtbot, w, gate, "Quick", at=3, question="What is 1 + 1?")
    last = reply.message_id
    with HeldLock(path, kind):
        gate.at = None
        finish(qtbot, w, controls)
        assert last in c.saves.pending
        with caplog.at_level(logging.WARNING, logger="app.pending_saves"):
            w.close()
    assert any("not saved" in r.getMessage() and str(last) in r.getMessage() for r in caplog.records)
    assert stored_rows(path)["messages"][last][2] == 0  # kept as its last save; marked interrupted at next start


@pytest.mark.parametrize("chats", ["none", "one interrupted"])
def test_a_window_started_while_another_program_holds_the_history_opens_and_sends_once_it_is_free(qtbot, tmp_path,
                                                                                               chats):
    """Start-up writes too (a first chat, marking a reply a crash left open): they raised into the window's
    construction. Now they wait for a later start, or for the user's next send."""
    from app.state.history import History

    path = tmp_path / "data" / "history.sqlite3"
    path.parent.mkdir()
    h = History(path)
    if chats != "none":
        cid = h.new_conversation("earlier").id
        h.add_message(cid, "user", "question")
        h.add_message(cid, "assistant", "half a repl", complete=False)
    h.close()
    with HeldLock(path, "EXCLUSIVE"):
        w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=24))
        c = w.controller
        assert c.interrupted == 0 and c.history.read_only == ""
        assert c.chats.current is (None if chats == "none" else cid)
        w.input.setPlainText("What is 2 + 2?")
        w.send()
        assert w.input.toPlainText() == "What is 2 + 2?"
    with qtbot.waitSignal(c.sig_reply_done, timeout=LONG) as done:
        w.send()
    assert w.input.toPlainText() == "" and done.args[1].complete
    w.close()
    rows = stored_rows(path)["messages"]
    assert [m[1] for m in rows.values() if m[0] == "user"][-1] == "What is 2 + 2?"
    assert all(m[2] == 1 for m in rows.values() if m[1] != "half a repl")


def test_a_lock_taken_between_the_question_and_its_reply_keeps_the_question_and_clears_the_box(qtbot, tmp_path,
                                                                                              monkeypatch):
    """The question's save went through, the reply's empty message did not: the question was saved and
    left in the box too (sent twice on the next Enter). Now it is shown, and Regenerate answers it."""
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=24))
    c = w.controller
    errors, locks = [], []
    c.sig_error.connect(lambda message, _lower: errors.append(message))
    add = c.history.add_message

    def lock_before_the_reply(cid, role, *args, **kwargs):
        if role == "assistant" and not locks:
            locks.append(HeldLock(c.history.path))
        return add(cid, role, *args, **kwargs)
    monkeypatch.setattr(c.history, "add_message", lock_before_the_reply)
    w.input.setPlainText("What is 2 + 2?")
    w.send()
    assert w.input.toPlainText() == "" and c.replies.reply_in(c.chats.current) is None
    assert "your message is saved, but its reply was not started" in errors[-1]
    assert [m.content for m in c.history.messages(c.chats.current)] == ["What is 2 + 2?"]
    locks[0].release()
    with qtbot.waitSignal(c.sig_reply_done, timeout=60000) as done:
        c.chats.regenerate()
    assert done.args[1].complete
    assert [m[:2] for m in stored_rows(c.history.path)["messages"].values()] == [
        ("user", "What is 2 + 2?"), ("assistant", done.args[1].content)]
    w.close()


def test_a_message_too_long_for_the_context_while_the_history_is_held_ends_in_its_offer(qtbot, tmp_path):
    """The empty reply of a message that does not fit is deleted when the worker says so: a held file
    raised that delete into Qt, and the question, never marked as not sent, made every later message
    overflow too. Now both wait for the file, and the next message sent writes them first."""
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16, context=192, context_overflow="refuse"))
    c = w.controller
    w.input.setPlainText("word " * 300)
    with qtbot.waitSignal(c.sig_overflow, timeout=60000) as refused:
        w.send()
        lock = HeldLock(c.history.path)  # before the worker's answer reaches the window
    qtbot.waitUntil(lambda: not c.replies.busy, timeout=60000)
    assert "Nothing was sent" in refused.args[0]
    question, reply = 1, 2
    assert list(c.saves.pending) == [reply, question]  # its removal and the question's "not sent" wait
    lock.release()
    w.input.setPlainText("What is 2 + 3?")  # sent before the retry's tick: what waits is written first
    with qtbot.waitSignal(c.sig_reply_done, timeout=120000) as done:
        w.send()
    assert done.args[1].complete and not c.saves.pending
    rows = stored_rows(c.history.path)["messages"]
    # no empty reply left (its id is the new question's now); the long question is no turn of the reply
    assert [(m[0], m[2]) for m in rows.values()] == [("user", 0), ("user", 1), ("assistant", 1)]
    assert rows[question][1].startswith("word ") and rows[reply][1] == "What is 2 + 3?"
    w.close()
