"""Names in the window's questions and banners are text, never markup (a real-window session: a chat
renamed "Costs <b>$5</b> & $10 *now*" was asked about as "Delete “Costs **$5** & $10 *now*”?" with the tag
eaten and $5 bold, and "vector<int> sort" would read "vector sort"). Names come from the user, a
checkpoint, a catalog or a server."""

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app.widgets.banner import Banner
from app.widgets.questions import ask

NAMES = ["Costs <b>$5</b> & $10 *now*", "vector<int> sort", "<img src='x.png'> a <a href='x'>link</a>",
         "&amp; &lt;tag&gt;"]


def answer_when_asked(seen: list, yes: bool) -> None:
    box = QApplication.activeModalWidget()
    if not isinstance(box, QMessageBox):
        QTimer.singleShot(20, lambda: answer_when_asked(seen, yes))
        return
    seen.append((box.textFormat(), box.text()))
    box.button(QMessageBox.StandardButton.Yes if yes else QMessageBox.StandardButton.No).click()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("yes", [True, False])
def test_a_question_shows_the_name_as_written(qtbot, name, yes):
    seen = []
    QTimer.singleShot(0, lambda: answer_when_asked(seen, yes))
    assert ask(None, "Delete chat", f"Delete “{name}”?") is yes
    assert seen == [(Qt.TextFormat.PlainText, f"Delete “{name}”?")]


@pytest.mark.parametrize("name", NAMES)
def test_a_banner_shows_the_name_as_written(qtbot, name):
    banner = Banner("banner")
    qtbot.addWidget(banner)
    banner.setText(f"Deleted “{name}”.")
    assert banner.label.textFormat() == Qt.TextFormat.PlainText and banner.text() == f"Deleted “{name}”."


def test_deleting_a_chat_named_like_markup_asks_with_its_name(qtbot, tmp_path):
    from app.state.settings import Settings
    from tests.app_support import make_window

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=8))
    try:
        c = w.controller
        cid = c.history.new_conversation(NAMES[0]).id
        c.history.add_message(cid, "user", "hi")
        seen = []
        QTimer.singleShot(0, lambda: answer_when_asked(seen, True))
        w.dialogs.confirm_delete(cid)
        assert seen and seen[0][0] == Qt.TextFormat.PlainText and NAMES[0] in seen[0][1]
        assert cid not in [x.id for x in c.history.conversations()]
        assert NAMES[0] in w.notes.error.text() and w.notes.error.label.textFormat() == Qt.TextFormat.PlainText
    finally:
        w.close()
