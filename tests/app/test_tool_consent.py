"""The per-call consent dialog and the reply's tool-call view, driven with pytest-qt."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.widgets.tool_call_view import ToolRoundsView, call_summary
from app.widgets.tool_consent import ToolConsentDialog
from runtime.tool_loop import ALLOW_IN_CHAT, ALLOW_ONCE, DECLINE, PendingCall

CALL = PendingCall("call_1", "write_file", "files", {"path": "/tmp/notes.txt", "text": "x" * 5000},
                   "Writes a file.")


def dialog(qtbot, call=CALL):
    d = ToolConsentDialog(None, call)
    qtbot.addWidget(d)
    d.open()
    qtbot.waitExposed(d)
    return d


@pytest.mark.parametrize("how, answer", [
    (lambda qtbot, d: qtbot.mouseClick(d.once, Qt.MouseButton.LeftButton), ALLOW_ONCE),
    (lambda qtbot, d: qtbot.mouseClick(d.in_chat, Qt.MouseButton.LeftButton), ALLOW_IN_CHAT),
    (lambda qtbot, d: qtbot.mouseClick(d.decline, Qt.MouseButton.LeftButton), DECLINE),
    (lambda qtbot, d: qtbot.keyClick(d, Qt.Key.Key_Escape), DECLINE),
    (lambda qtbot, d: qtbot.keyClick(d, Qt.Key.Key_Return), DECLINE),  # Enter never allows
    (lambda qtbot, d: d.close(), DECLINE),
])
def test_every_way_out_gives_one_answer(qtbot, how, answer):
    d = dialog(qtbot)
    with qtbot.waitSignal(d.sig_decided) as said:
        how(qtbot, d)
    assert said.args == [answer] and d.answer == answer
    with qtbot.assertNotEmitted(d.sig_decided):
        d.reject()  # (closing again answers nothing more)


def test_it_shows_the_call_with_long_values_folded(qtbot):
    d = dialog(qtbot)
    assert "“write_file”" in d.title.text() and "“files”" in d.title.text()
    shown = d.arguments.toPlainText()
    assert '"path": "/tmp/notes.txt"' in shown and "(5,000 characters)" in shown and "x" * 300 not in shown
    assert d.show_whole.isVisible()
    d.show_whole.setChecked(True)
    assert "x" * 5000 in d.arguments.toPlainText()


def test_what_came_from_outside_is_plain_text(qtbot):
    d = dialog(qtbot, PendingCall("c", "<b>evil</b>", "<a href='x'>s</a>", {"k": "\x1b[31mred"}, "<img src=x>"))
    for label in d.findChildren(QLabel):
        assert label.textFormat() == Qt.TextFormat.PlainText
    assert "<b>evil</b>" in d.title.text() and "\x1b" not in d.arguments.toPlainText()  # (JSON escapes it)


ROUNDS = [{"thinking": "I need the sum.", "answer": "Let me add.", "calls": [
    {"id": "a", "name": "add_numbers", "server": "calc", "arguments": {"a": 1, "b": 2}, "content": "3",
     "is_error": False, "status": "ok", "ms": 12.0, "truncated": False},
    {"id": "b", "name": "fetch", "server": "web", "arguments": {}, "content": "the tool 'fetch' did not answer",
     "is_error": True, "status": "error", "ms": 60000.0, "truncated": False},
    {"id": "c", "name": "rm", "server": "files", "arguments": {}, "content": "declined", "is_error": True,
     "status": "declined", "ms": 0, "truncated": False}]}]


def test_calls_show_status_duration_and_errors_and_open(qtbot):
    view = ToolRoundsView()
    qtbot.addWidget(view)
    view.set_rounds(ROUNDS)
    view.show()
    assert [c.toggle.text() for c in view.calls] == [
        "✓ add_numbers · calc · 12 ms", "✗ fetch · web · 60.0 s · failed: the tool 'fetch' did not answer",
        "⊘ rm · files · declined by you"]
    first = view.calls[0]
    assert not first.body.isVisible()
    first.toggle.click()
    assert first.body.isVisible()
    assert call_summary({"name": "x", "status": "asking"}) == "? x · waiting for your consent…"
