"""A time per message: stored when a message is sent and when a reply ends, kept across a restart, in the
Markdown and JSON exports and through an import, and shown small in the chat view in local time."""

import json
import time

import pytest

from app.state.chat_files import chat_json, chat_markdown, import_chat
from app.state.history import History
from tests.history_support import version_3_history

NOON = time.mktime((2026, 12, 3, 12, 5, 0, 0, 0, -1))  # local time


def _sent_and_answered(h: History, monkeypatch) -> tuple[int, int, int]:
    cid = h.new_conversation("Sums").id
    monkeypatch.setattr(time, "time", lambda: NOON)
    q = h.add_message(cid, "user", "What is 2 + 3?")
    a = h.add_message(cid, "assistant", "", complete=False)
    assert q.time == NOON and a.time is None  # a reply streaming has no time yet
    h.update_message(a.id, "5", "", {}, complete=False)
    monkeypatch.setattr(time, "time", lambda: NOON + 90)
    assert h.update_message(a.id, "5", "", {}, complete=True) == NOON + 90
    monkeypatch.undo()
    return cid, q.id, a.id


def test_times_are_stored_at_send_and_finish_and_survive_a_restart(tmp_path, monkeypatch):
    h = History(tmp_path / "h.sqlite3")
    cid, _, _ = _sent_and_answered(h, monkeypatch)
    h.close()
    h = History(tmp_path / "h.sqlite3")
    try:
        assert [m.time for m in h.messages(cid)] == [NOON, NOON + 90]
    finally:
        h.close()


def test_the_exports_carry_the_times_and_an_import_keeps_them(tmp_path, monkeypatch):
    h = History(tmp_path / "h.sqlite3")
    try:
        cid, _, _ = _sent_and_answered(h, monkeypatch)
        md = chat_markdown(h, cid)
        assert "## You · 2026-12-03 12:05" in md and "## Assistant · 2026-12-03 12:06" in md
        data = chat_json(h, cid)
        assert [(m.get("created"), m.get("finished")) for m in data["messages"]] == [(NOON, None),
                                                                                    (NOON, NOON + 90)]
        path = tmp_path / "chat.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        copy, _ = import_chat(h, path)
        assert [m.time for m in h.messages(copy)] == [NOON, NOON + 90]
        for m in data["messages"]:  # a file without times (or with nonsense ones): the import's time
            m.pop("finished", None)
            m["created"] = "yesterday" if m["role"] == "user" else -5
        path.write_text(json.dumps(data), encoding="utf-8")
        before = time.time()
        third, _ = import_chat(h, path)
        assert all(m.time >= before for m in h.messages(third))
    finally:
        h.close()


def test_a_version_3_history_shows_each_message_at_its_creation(tmp_path):
    path = tmp_path / "history.sqlite3"
    db = version_3_history(path)
    db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created, parent_id)"
               " VALUES (1, 'user', 'q', ?, 0)", (NOON,))
    db.execute("INSERT INTO messages (conversation_id, role, content, created, parent_id)"
               " VALUES (1, 'assistant', 'a', ?, 1)", (NOON + 1,))
    db.execute("INSERT INTO messages (conversation_id, role, content, created, parent_id, complete)"
               " VALUES (1, 'assistant', '', 'not a time', 2, 0)")
    db.commit()
    db.close()
    h = History(path)
    try:
        assert [m.time for m in h.messages(1)] == [NOON, NOON + 1, None]
        assert "## Assistant · 2026-12-03 12:05" in chat_markdown(h, 1)
    finally:
        h.close()


@pytest.mark.parametrize("when, now, shown", [
    ((2026, 12, 3, 9, 7), (2026, 12, 3, 23, 59), "09:07"),  # today: the time alone
    ((2026, 12, 2, 23, 59), (2026, 12, 3, 0, 1), "2 Dec 23:59"),  # yesterday: the date too
    ((2025, 12, 3, 9, 7), (2026, 12, 3, 9, 7), "3 Dec 2025, 09:07"),  # another year: the year too
])
def test_the_view_shows_local_time_and_the_date_when_not_today(when, now, shown):
    from app.widgets.chat_view import shown_time

    def epoch(t):
        return time.mktime((*t, 0, 0, 0, -1))
    assert shown_time(epoch(when), epoch(now)) == shown


def test_each_message_widget_shows_its_time(qtbot, tmp_path, monkeypatch):
    from app.widgets.chat_view import ChatView, shown_time

    h = History(tmp_path / "h.sqlite3")
    try:
        cid, q, a = _sent_and_answered(h, monkeypatch)
        view = ChatView()
        qtbot.addWidget(view)
        messages = h.messages(cid)
        view.show_chat(cid, messages, None)
        shown = {w.message_id: w.when_label for w in view.widgets}
        assert shown[q].text() == shown_time(NOON) and "12:05" in shown[q].text()
        assert "2026" in shown[a].toolTip() and not shown[a].isHidden()
        streaming = h.add_message(cid, "assistant", "", complete=False)
        view.append(cid, [streaming], streaming.id)
        label = view.message_widget(streaming.id).when_label
        assert label.isHidden()  # no time while it streams
        finished = h.update_message(streaming.id, "done", "", {}, complete=True)
        view.finish(cid, h.messages(cid)[-1])
        assert not label.isHidden() and label.toolTip() == time.strftime("%A %d %B %Y, %H:%M:%S",
                                                                          time.localtime(finished))
    finally:
        h.close()


def test_a_message_with_a_time_opens_no_window_of_its_own(qtbot):
    """Its time's label was shown before it had a parent: a window flashed up and took the focus from
    the main window (Ctrl+N, Esc and the input's focus stopped working after a reply)."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication, QWidget

    from app.widgets.chat_view import MessageWidget

    class Windows(QObject):
        def __init__(self):
            super().__init__()
            self.shown = []

        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Show and isinstance(obj, QWidget) and obj.isWindow():
                self.shown.append(obj)
            return False
    spy = Windows()
    QApplication.instance().installEventFilter(spy)
    try:
        for role in ("user", "assistant"):
            w = MessageWidget(1, role, "hi", meta={}, when=NOON)
            qtbot.addWidget(w)
    finally:
        QApplication.instance().removeEventFilter(spy)
    assert spy.shown == []
