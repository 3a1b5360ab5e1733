"""Ctrl+N then a click on another chat left an empty "New chat" in the list and the history, one per time
(a real-window session). A chat left without a message now goes, unless it holds something of the user's:
a draft, its own system prompt, a name; a chat with messages stays, and delete and undo are unchanged."""

import pytest

from app.state.settings import Settings
from tests.app_support import make_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    h = w.controller.history
    w.older = h.new_conversation("Older chat").id
    h.add_message(w.older, "user", "an older question")
    w.controller.chats.refresh()
    yield w
    w.close()


def listed(w) -> list[int]:
    return [w.sidebar.list.item(i).data(256) for i in range(w.sidebar.list.count())]


def click(w, cid: int) -> None:
    w.sidebar.list.setCurrentRow(listed(w).index(cid))


def test_new_chats_left_empty_go(qtbot, window):
    w, c = window, window.controller
    before = {conv.id for conv in c.history.conversations()} - {c.chats.current}
    for _ in range(3):
        w.new_chat()
        empty = c.chats.current
        click(w, w.older)
        assert c.chats.current == w.older and empty not in listed(w)
        with pytest.raises(KeyError):
            c.history.conversation(empty)  # gone from the history too, not only hidden
    assert {conv.id for conv in c.history.conversations()} <= before | {w.older}


@pytest.mark.parametrize("kept_by", ["draft", "system prompt", "name", "message"])
def test_a_chat_holding_something_of_yours_stays(qtbot, window, kept_by):
    w, c = window, window.controller
    w.new_chat()
    cid = c.chats.current
    if kept_by == "draft":
        w.input.setPlainText("half a thought")
    elif kept_by == "system prompt":
        c.chats.set_system_prompt("Answer in French.")
    elif kept_by == "name":
        c.chats.rename(cid, "Kept for later")
    else:
        c.history.add_message(cid, "user", "a question")
    click(w, w.older)
    assert cid in listed(w) and c.history.conversation(cid).id == cid
    click(w, cid)
    if kept_by == "draft":
        assert w.input.toPlainText() == "half a thought"


def test_delete_and_undo_are_unchanged(qtbot, window):
    w, c = window, window.controller
    click(w, w.older)
    c.chats.delete(w.older)
    assert w.older not in listed(w)
    c.chats.undelete(w.older)
    assert w.older in listed(w) and c.chats.current == w.older
    assert [m.content for m in c.history.messages(w.older)] == ["an older question"]


def test_the_history_drops_only_an_unnamed_chat_without_messages(tmp_path):
    from app.state.history import History

    h = History(tmp_path / "h.sqlite3")
    try:
        empty, named, used = (h.new_conversation().id for _ in range(3))
        h.rename(named, "Mine")
        h.add_message(used, "user", "hello")
        assert [h.drop_if_empty(cid) for cid in (empty, named, used)] == [True, False, False]
        assert sorted(c.id for c in h.conversations()) == sorted([named, used])
    finally:
        h.close()
