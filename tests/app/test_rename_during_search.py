"""Renaming a chat while a search is shown: F2 and the Rename button edit the selected result's title
(its title alone, not the words around its match), a new name is saved and the search stays; Esc or the
same name puts the result back as it was listed."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QLineEdit

from app.state.settings import Settings
from tests.app_support import make_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    h = w.controller.history
    for title, text in (("Trip", "Pack the tent and the wool socks"), ("Sums", "What is 45 + 23?"),
                        ("Tents", "Which tent for two?")):
        cid = h.new_conversation(title).id
        h.add_message(cid, "user", text)
    w.resize(1280, 720)  # the chat list shown (a narrow window folds it away)
    qtbot.waitUntil(w.sidebar.list.isVisible, timeout=5000)
    w.activateWindow()
    yield w
    w.close()


def search(qtbot, w, query: str) -> None:
    w.sidebar.search.setText(query)
    qtbot.waitUntil(lambda: w.controller.chats.search == query, timeout=10000)


def select(w, title: str) -> int:
    bar = w.sidebar
    row = next(i for i in range(bar.list.count()) if bar.list.item(i).text().split("\n")[0] == title)
    bar.list.setCurrentRow(row)
    return bar.current_id()


def editor(qtbot, w) -> QLineEdit:
    qtbot.waitUntil(lambda: w.sidebar.list.state() == QAbstractItemView.State.EditingState, timeout=5000)
    return w.sidebar.list.findChild(QLineEdit)


@pytest.mark.parametrize("how", ["F2", "button"])
@pytest.mark.parametrize("query, title", [("socks", "Trip"), ("45", "Sums"), ("two tent", "Tents")])
def test_a_search_result_is_renamed(qtbot, window, how, query, title):
    w = window
    search(qtbot, w, query)
    cid = select(w, title)
    assert "\n" in w.sidebar.list.currentItem().text()  # a result: its title and where it matches
    if how == "F2":
        qtbot.keyClick(w.sidebar.list, Qt.Key.Key_F2)
    else:
        w.sidebar.rename_button.click()
    box = editor(qtbot, w)
    assert box.text() == title  # the title alone is edited
    box.setText("Renamed in a search")
    qtbot.keyClick(box, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.controller.history.conversation(cid).title == "Renamed in a search", timeout=5000)
    assert w.sidebar.search.text() == query and w.controller.chats.search == query  # the search stays


@pytest.mark.parametrize("finish", ["escape", "same name"])
def test_a_result_not_renamed_is_listed_as_before(qtbot, window, finish):
    w = window
    search(qtbot, w, "socks")
    cid = select(w, "Trip")
    listed = w.sidebar.list.currentItem().text()
    qtbot.keyClick(w.sidebar.list, Qt.Key.Key_F2)
    box = editor(qtbot, w)
    qtbot.keyClick(box, Qt.Key.Key_Escape if finish == "escape" else Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.sidebar.list.state() != QAbstractItemView.State.EditingState, timeout=5000)
    item = w.sidebar.list.currentItem()
    assert item.text() == listed and not item.flags() & Qt.ItemFlag.ItemIsEditable
    assert w.controller.history.conversation(cid).title == "Trip"
