"""A search's result opens its chat at the first message that matches, not at its last (a real-window
session: "123" opened a long chat at its end); a match in the earlier messages a long chat hides is built
and shown ("Show earlier" then holds only the ones above it). Without a search a chat opens at its end."""

import pytest

from app.state.history_search import first_matching_message
from app.state.settings import Settings
from tests.app_support import make_window

COUNT = 100  # messages: more than a page (ChatView.PAGE), so the first ones are hidden at first


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    w.resize(1280, 720)
    qtbot.waitUntil(w.sidebar.list.isVisible, timeout=5000)
    h = w.controller.history
    w.long = h.new_conversation("Long chat").id
    for i in range(COUNT):
        text = {5: "the early order number 123", 70: "a later zebra note", 71: "zebra again"}.get(i, f"message {i}")
        thinking = "a quiet thought" if i == 40 else ""
        h.add_message(w.long, "user" if i % 2 == 0 else "assistant", text, thinking=thinking)
    w.other = h.new_conversation("Other chat").id
    h.add_message(w.other, "user", "nothing here")
    w.controller.chats.select(w.other)
    yield w
    w.close()


def open_result(qtbot, w, query: str) -> None:
    w.sidebar.search.setText(query)
    qtbot.waitUntil(lambda: w.controller.chats.search == query, timeout=10000)
    ids = [w.sidebar.list.item(i).data(256) for i in range(w.sidebar.list.count())]
    w.sidebar.list.setCurrentRow(ids.index(w.long))


def laid_out(w) -> bool:
    """The chat's messages have their places (before, each is at the top)."""
    return w.chat.verticalScrollBar().maximum() > 0 and w.chat.widgets[-1].y() > w.chat.widgets[0].y()


def in_view(w, index: int) -> bool:
    mid = w.controller.history.messages(w.long)[index].id
    widget = w.chat.message_widget(mid)
    if widget is None:
        return False
    top = widget.mapTo(w.chat.widget(), widget.rect().topLeft()).y() - w.chat.verticalScrollBar().value()
    return 0 <= top < w.chat.viewport().height()


@pytest.mark.parametrize("query, index", [("123", 5), ("ZEBRA", 70), ("quiet thought", 40), ('"order number"', 5)])
def test_a_result_opens_at_its_first_match(qtbot, window, query, index):
    w = window
    open_result(qtbot, w, query)
    qtbot.waitUntil(lambda: laid_out(w) and in_view(w, index) and not in_view(w, COUNT - 1), timeout=5000)
    shown = [m.id for m in w.controller.history.messages(w.long)]
    assert shown.index(w.chat.widgets[0].message_id) <= index  # built from above it


def test_without_a_search_a_chat_opens_at_its_end(qtbot, window):
    w = window
    ids = [w.sidebar.list.item(i).data(256) for i in range(w.sidebar.list.count())]
    w.sidebar.list.setCurrentRow(ids.index(w.long))
    qtbot.waitUntil(lambda: laid_out(w) and in_view(w, COUNT - 1) and not in_view(w, COUNT - 30), timeout=5000)
    assert w.chat.hidden  # the earlier page stays unbuilt


def test_the_first_matching_message_is_the_one_the_result_shows():
    from app.state.history_rows import Message

    msgs = [Message(i, 1, "user", text, thinking=thinking) for i, (text, thinking) in
            enumerate([("hello", ""), ("ПРИВЕТ there", ""), ("x", "Straße"), ("hello again", "")], 1)]
    assert first_matching_message(msgs, "hello") == 1 and first_matching_message(msgs, "привет") == 2
    assert first_matching_message(msgs, "STRASSE") == 3 and first_matching_message(msgs, "absent") is None
    assert first_matching_message(msgs, "") is None and first_matching_message(msgs, "   ") is None
