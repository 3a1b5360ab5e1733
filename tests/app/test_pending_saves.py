"""app/pending_saves.py on its own (no model): while another program holds the history, each reply's latest
state waits, in order, and is written whole once the file is free; the banner says so once."""

import pytest
from PySide6.QtCore import QObject, Signal

from app.pending_saves import PendingSaves
from app.state.history import History, HistoryBusy, HistoryFull
from tests.history_support import HeldLock, stored_rows


class Front(QObject):
    sig_error = Signal(str, str)
    sig_error_withdrawn = Signal(str)
    sig_notice = Signal(str)

    def __init__(self, history):
        super().__init__()
        self.history = history
        self.said: list[str] = []
        self.sig_error.connect(lambda message, _lower: self.said.append(message))
        self.sig_notice.connect(self.said.append)


@pytest.fixture
def saves(qtbot, tmp_path):
    h = History(tmp_path / "history.sqlite3")
    cid = h.new_conversation("chat").id
    for text in ("first", "second"):
        h.add_message(cid, "user", text)
        h.add_message(cid, "assistant", "", complete=False)
    front = Front(h)
    yield PendingSaves(front), front, h
    h.close()


@pytest.mark.parametrize("kind", ["IMMEDIATE", "EXCLUSIVE"])
def test_the_latest_state_of_each_reply_waits_in_order_and_is_written_when_the_file_is_free(saves, kind):
    s, front, h = saves
    with HeldLock(h.path, kind):
        assert s.update_message(2, "so", "", {"n": 1}) is None
        ended = s.update_message(2, "so far, the end", "thought", {"n": 2}, complete=True)
        assert s.update_message(4, "other", "", None) is None
        assert list(s.pending) == [2, 4] and s.pending[2].content == "so far, the end" and s.timer.isActive()
        assert len(front.said) == 1 and "in use by another program" in front.said[0]  # said once
        assert s.retry() is False
    assert stored_rows(h.path)["messages"][2] == ("assistant", "", 0, None)  # nothing written while held
    s.update_message(4, "other, later", "", None)  # a save behind one waiting waits too: the order holds
    assert stored_rows(h.path)["messages"][4][1] == ""
    assert s.retry() is True and not s.pending and not s.timer.isActive()
    rows = stored_rows(h.path)["messages"]
    assert rows[2] == ("assistant", "so far, the end", 1, ended) and rows[4] == ("assistant", "other, later", 0, None)
    assert front.said[-1].startswith("Saved: history.sqlite3 is free again")
    assert s.update_message(2, "direct", "", None) is None and stored_rows(h.path)["messages"][2][1] == "direct"


@pytest.mark.parametrize("others", [0, 1])
def test_a_reply_removed_while_its_save_waits_is_removed_once_the_file_is_free_and_never_written(saves, others):
    s, front, h = saves
    with HeldLock(h.path):
        s.update_message(4, "gone", "", {})
        if others:
            s.update_message(2, "stays", "", {})
        s.delete_message(1, 4)
        assert list(s.pending)[-1] == 4 and len(s.pending) == 1 + others
    assert s.retry() is True
    rows = stored_rows(h.path)["messages"]
    assert 4 not in rows and rows[2][1] == ("stays" if others else "")


def test_a_message_sent_while_saves_wait_writes_them_first_or_is_refused(saves):
    s, _, h = saves
    with HeldLock(h.path):
        s.update_message(4, "the end", "", {}, complete=True)
        with pytest.raises(HistoryBusy):
            s.write_waiting()
        assert 4 in s.pending
    s.write_waiting()
    assert not s.pending and stored_rows(h.path)["messages"][4][1:3] == ("the end", 1)


def test_a_full_disk_at_a_retry_is_said_once_and_the_save_keeps_waiting(saves, monkeypatch):
    s, front, h = saves
    with HeldLock(h.path):
        s.update_message(2, "kept", "", {}, complete=True)

    def full(*args, **kwargs):
        raise HistoryFull()
    monkeypatch.setattr(h, "update_message", full)
    assert s.retry() is False and s.retry() is False
    assert sum("disk is full" in line for line in front.said) == 1 and 2 in s.pending
    monkeypatch.undo()
    assert s.retry() is True and stored_rows(h.path)["messages"][2][1:3] == ("kept", 1)


def test_a_quit_while_the_file_is_held_does_not_wait_and_says_what_was_not_saved(saves, caplog):
    s, _, h = saves
    with HeldLock(h.path, "EXCLUSIVE"):
        s.update_message(4, "unsaved", "", {}, complete=True)
        s.save_at_exit()
        assert not s.timer.isActive()
    assert "1 reply not saved" in caplog.text and "message ids 4" in caplog.text
