"""Another program holding the history's write lock (DB Browser with unsaved edits, `BEGIN IMMEDIATE` left
open, a sync tool): every write is one line (HistoryBusy), waits only a fraction of a second on the GUI
thread, and leaves the file writable; it raised sqlite3.OperationalError into the crash dialog after
freezing the window for SQLite's default 5 s."""

import pytest

from app.state.history import History, HistoryBusy, HistoryReadOnly
from tests.history_support import HeldLock, stored_rows

WRITES = {
    "new chat": lambda h, cid: h.new_conversation("another"),
    "add": lambda h, cid: h.add_message(cid, "user", "while locked"),
    "update": lambda h, cid: h.update_message(2, "the reply", "", {}, complete=True),
    "finish": lambda h, cid: h.finish_message(2, {"finish_reason": "stop"}),
    "rename": lambda h, cid: h.rename(cid, "renamed"),
    "auto title": lambda h, cid: h.title_automatically(cid, "auto"),
    "settings": lambda h, cid: h.update_settings(cid, "be brief", {}),
    "delete": lambda h, cid: h.delete(cid),
    "leaf": lambda h, cid: h.set_leaf(cid, 1),
    "delete from": lambda h, cid: h.delete_messages_from(cid, 2),
    "import": lambda h, cid: h.import_chat("imported", "", {}, [(1, 0, "user", "hi", "", {}, True, None, None)], 1),
    "purge": lambda h, cid: h.purge_deleted(),
}


@pytest.fixture
def history(tmp_path):
    h = History(tmp_path / "history.sqlite3")
    cid = h.new_conversation("chat").id
    h.add_message(cid, "user", "question")
    h.add_message(cid, "assistant", "so far", complete=False)
    yield h, cid
    h.close()


@pytest.mark.parametrize("kind", ["IMMEDIATE", "EXCLUSIVE"])
@pytest.mark.parametrize("write", list(WRITES))
def test_every_write_under_another_programs_lock_is_one_line_and_the_file_stays_writable(history, kind, write):
    h, cid = history
    before = stored_rows(h.path)
    with HeldLock(h.path, kind):
        with pytest.raises(HistoryBusy) as e:
            WRITES[write](h, cid)
        assert isinstance(e.value, HistoryReadOnly)  # the controller's guard shows it as one line
        line = str(e.value)
        assert "\n" not in line and "history.sqlite3 is in use by another program" in line
        assert "Close that program" in line
        assert not h.db.in_transaction and h.read_only == ""
        assert [m.content for m in h.messages(cid)] == ["question", "so far"]  # reads go on meanwhile
    assert stored_rows(h.path) == before  # nothing half written, the other program's edit rolled back
    WRITES[write](h, cid)  # the lock gone, the same write goes through


def test_the_window_waits_a_fraction_of_a_second_for_a_lock_not_five(history):
    """The busy timeout, read back from SQLite (not timed): a held lock costs a write at most this."""
    h, _ = history
    assert 0 < h.db.execute("PRAGMA busy_timeout").fetchone()[0] <= 500


@pytest.mark.parametrize("kind", ["IMMEDIATE", "EXCLUSIVE"])
def test_a_history_opened_while_another_program_holds_it_is_writable_once_it_lets_go(tmp_path, kind):
    h = History(tmp_path / "history.sqlite3")
    cid = h.new_conversation("chat").id
    h.add_message(cid, "user", "kept")
    h.close()
    with HeldLock(tmp_path / "history.sqlite3", kind) as lock:
        h = History(tmp_path / "history.sqlite3")
        try:
            assert h.read_only == "" and not h.notices
            assert [m.content for m in h.messages(cid)] == ["kept"]
            with pytest.raises(HistoryBusy):
                h.add_message(cid, "user", "refused")
            lock.release()
            h.add_message(cid, "user", "saved")
            assert [m[1] for m in stored_rows(h.path)["messages"].values()] == ["kept", "saved"]
        finally:
            h.close()


def test_a_save_kept_waiting_keeps_the_time_the_reply_ended(history):
    h, _ = history
    assert h.update_message(2, "the end", "", {}, complete=True, finished=1234.5) == 1234.5
    assert stored_rows(h.path)["messages"][2] == ("assistant", "the end", 1, 1234.5)
