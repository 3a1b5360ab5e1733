"""A growing thought costs what it adds (issue 38, item 1: the window at its engine's pace). The thought was
a word-wrapping QLabel set whole at every frame: a 6,500-character thought took 25-43 ms of the GUI thread
per frame, time the engine's worker waited for the GIL. It is now app/widgets/streamed_text.py
`StreamedText`: a text that extends the one shown gets only its new characters inserted at the end; a
replaced one is set whole. What the user sees stays the reply's contract: the streamed text equals the
final text, after growth, replacement and the reply's end, and it still selects, copies and folds."""

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QWheelEvent
from PySide6.QtWidgets import QApplication

from app.state.history import Message
from app.widgets.chat_view import ChatView, MessageWidget
from app.widgets.streamed_text import StreamedText

LINE = "so the tens column carries one and the units give seven, then we add the next number: "
GROWTHS = {  # per variant, the thought as successive frames show it
    "words": [LINE[:n] for n in (5, 17, 40, 41, len(LINE))],
    "lines": ["First,", "First, the units.\n", "First, the units.\nThen", "First, the units.\nThen\n\nthe tens."],
    "long run": ["hash: ", "hash: " + "a" * 50, "hash: " + "a" * 200, "hash: " + "a" * 200 + " done"],
    "non-ascii": ["Σ = 3 ", "Σ = 3 × 4 ", "Σ = 3 × 4 → 12 😀", "Σ = 3 × 4 → 12 😀 ✓\n≤ 20"],
    "long thought": [(LINE * 80)[:n] for n in range(40, 6500, 410)],
}
REPLACED = {  # a text shown, then one that does not extend it
    "shorter": ("First, the units. Then", "First"),
    "another start": ("First, the units.", "Second, the tens."),
    "edited middle": ("one two three four", "one 2 three four five"),
    "emptied": ("something", ""),
    "from empty": ("", "a whole thought\nat once"),
}


def changes(text: StreamedText) -> list[tuple[int, int, int]]:
    """The document's changes from now on: (position, characters removed, characters added)."""
    seen = []
    text.document().contentsChange.connect(lambda at, removed, added: seen.append((at, removed, added)))
    return seen


def shown(text: StreamedText) -> str:
    return text.document().toPlainText()


@pytest.mark.parametrize("variant", list(GROWTHS))
def test_a_growing_thought_gets_only_its_new_end_inserted(qtbot, variant):
    w = MessageWidget(2, "assistant", streaming=True)
    qtbot.addWidget(w)
    frames = GROWTHS[variant]
    w.update_stream("", frames[0], "0.5M", True)
    body = w.thinking.body
    seen = changes(body)
    for frame in frames[1:]:
        w.update_stream("", frame, "0.5M", True)
        assert body.text() == frame and shown(body) == frame
    assert seen and all(removed == 0 for _, removed, _ in seen), seen  # nothing laid out again from the start
    start = len(frames[0].encode("utf-16-le")) // 2  # (the document counts UTF-16 units)
    assert seen[0][0] == start and all(a[0] + a[2] == b[0] for a, b in zip(seen, seen[1:])), seen  # at the end


@pytest.mark.parametrize("variant", list(REPLACED))
def test_a_replaced_thought_is_shown_whole(qtbot, variant):
    before, after = REPLACED[variant]
    text = StreamedText()
    qtbot.addWidget(text)
    text.setText(before)
    text.setText(after)
    assert text.text() == after and shown(text) == after


@pytest.mark.parametrize("final", ["the same", "longer", "another"])
def test_the_streamed_thought_equals_the_final_one_at_the_replys_end(qtbot, final):
    """Done's text is the one kept; it is what the streamed text ends as, whatever the last frame showed."""
    w = MessageWidget(2, "assistant", streaming=True)
    qtbot.addWidget(w)
    for frame in GROWTHS["lines"]:
        w.update_stream("", frame, "0.5M", True)
    last = GROWTHS["lines"][-1]
    thinking = {"the same": last, "longer": last + " So 68.", "another": "A thought of another reply."}[final]
    w.update_stream("The answer is 68.", thinking, "1.5M", False)
    w.finish("The answer is 68.", thinking, {"think_submodel": "0.5M", "thinking_tokens": 9, "thinking_ms": 900})
    assert w.thinking.body.text() == thinking and shown(w.thinking.body) == thinking
    assert w.thinking.toggle.text().startswith("Thought for 0.9 s on 0.5M")


def test_a_thought_selects_and_copies_as_a_label_did(qtbot):
    text = StreamedText()
    qtbot.addWidget(text)
    text.setText("First, the units.\n")
    text.setText("First, the units.\nThen the tens: 68.")
    assert text.isReadOnly() and text.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse
    assert text.focusPolicy() == Qt.FocusPolicy.ClickFocus  # not a Tab stop, as the label was not
    text.selectAll()
    text.copy()
    assert QGuiApplication.clipboard().text() == "First, the units.\nThen the tens: 68."
    QGuiApplication.clipboard().setText("")
    qtbot.keyClick(text, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)  # the keys copy too
    assert QGuiApplication.clipboard().text() == "First, the units.\nThen the tens: 68."


def test_the_mouse_selects_a_thoughts_words(qtbot):
    text = StreamedText()
    qtbot.addWidget(text)
    text.resize(300, 100)
    text.show()
    text.setText("First, the units.\n")
    text.setText("First, the units.\nThen the tens: 68.")
    qtbot.waitUntil(text.isVisible, timeout=5000)
    word = text.cursorRect(text.cursorForPosition(text.viewport().rect().topLeft())).center()
    qtbot.mouseDClick(text.viewport(), Qt.MouseButton.LeftButton, pos=word + QPoint(8, 0))
    assert text.textCursor().selectedText() == "First"


@pytest.mark.parametrize("width", [200, 450, 900])
def test_its_height_is_its_texts_at_every_width_and_it_never_scrolls(qtbot, width):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(width, 400)
    view.show()
    view.show_chat(1, [Message(1, 1, "user", "Sum?", "", {}, True), Message(2, 1, "assistant", "", "", {}, False)], 2)
    body = view.widgets[-1].thinking.body
    heights = []
    for n in (10, 400, 2000):
        view.stream(1, 2, "", (LINE * 40)[:n], "0.5M", True)
        qtbot.waitUntil(lambda: body.height() == round(body.document().size().height()), timeout=5000)
        assert body.verticalScrollBar().maximum() == 0  # all of it shows: none hidden behind a scroll
        heights.append(body.height())
    assert heights[0] < heights[1] < heights[2]
    fm = body.fontMetrics()  # at least as many lines as its width takes to hold the text end to end
    assert heights[2] >= fm.lineSpacing() * (fm.horizontalAdvance((LINE * 40)[:2000]) // body.width())


def test_a_folded_thought_unfolds_whole(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(500, 400)
    view.show()
    thought = LINE * 30
    view.show_chat(1, [Message(1, 1, "user", "Sum?", "", {}, True),
                       Message(2, 1, "assistant", "68.", thought, {"think_submodel": "0.5M"}, True)], None)
    block = view.widgets[-1].thinking
    assert not block.toggle.isChecked() and block.body.isHidden()  # a finished thought is folded
    block.toggle.click()
    assert not block.body.isHidden() and block.body.text() == thought
    qtbot.waitUntil(lambda: block.body.height() == round(block.body.document().size().height()), timeout=5000)
    assert block.body.height() > 5 * block.body.fontMetrics().lineSpacing()
    block.toggle.click()
    assert block.body.isHidden()


@pytest.mark.parametrize("delta", [120, -120, -960])
def test_the_wheel_over_a_thought_is_left_to_the_chat_around_it(qtbot, delta):
    """Not taken (Qt then hands a real wheel event to the chat's scroll area), and the text never moves
    inside its frame."""
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(500, 300)
    view.show()
    view.show_chat(1, [Message(1, 1, "user", "Sum?", "", {}, True), Message(2, 1, "assistant", "", "", {}, False)], 2)
    view.stream(1, 2, "", LINE * 30, "0.5M", True)
    body = view.widgets[-1].thinking.body
    qtbot.waitUntil(lambda: body.isVisible() and body.height() == round(body.document().size().height()),
                    timeout=5000)
    at = body.viewport().rect().center()
    wheel = QWheelEvent(QPointF(at), QPointF(body.viewport().mapToGlobal(at)), QPoint(0, 0), QPoint(0, delta),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(body.viewport(), wheel)
    assert not wheel.isAccepted() and body.verticalScrollBar().value() == 0
