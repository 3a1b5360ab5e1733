"""A growing answer costs the GUI thread what it adds (issue 38, item 1: the window at its engine's pace).
Measured with benchmarks/bench_stream_frame.py, a 6,500-character answer took 13-26 ms per frame: the block
being written (the tail) was a label set whole at every frame, and every finished block's label laid its
text out again each time the layout asked its height (about five times per block per frame, whenever the
tail moved). The tail is now a StreamedText (only the new characters are inserted) and the finished blocks
are BlockLabels, which keep their height for a width until their text, font or style changes."""

import pytest
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QLabel

from app.markdown_blocks import split_blocks
from app.widgets.block_label import BlockLabel
from app.widgets.chat_view import MessageWidget

SHAPES = {  # per shape, a finished block and then frames of the block being written after it
    "paragraph": ("Intro.\n\n", ["The tens", "The tens carry one", "The tens carry one, so the sum is 68"]),
    "code": ("Intro.\n\n", ["```python\nx", "```python\nx = 45 + 23\n", "```python\nx = 45 + 23\nprint(x)"]),
    "list": ("Intro.\n\n", ["- add the units", "- add the units\n- carry", "- add the units\n- carry the one"]),
    "non-ascii": ("Σ.\n\n", ["Σ = 3 ×", "Σ = 3 × 4 → 12", "Σ = 3 × 4 → 12 😀 ✓"]),
}


def tail_changes(w: MessageWidget) -> list[tuple[int, int, int]]:
    seen = []
    w.tail.document().contentsChange.connect(lambda at, removed, added: seen.append((at, removed, added)))
    return seen


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_block_being_written_gets_only_its_new_end_inserted(qtbot, shape):
    """A frame whose tail extends the last one's inserts only the new end; a tail that begins anew (a block
    became final above it) is shown whole."""
    head, frames = SHAPES[shape]
    w = MessageWidget(2, "assistant", streaming=True)
    qtbot.addWidget(w)
    seen = tail_changes(w)
    extended = 0
    for frame in frames:
        before, answer = w.tail.text(), head + frame
        seen.clear()
        w.update_stream(answer, "", "1.5M", False)
        tail = split_blocks(answer, w.rendered[-1].end if w.rendered else 0)[1]
        assert w.tail.text() == tail and w.tail.document().toPlainText() == tail and w.text == answer
        if before and tail.startswith(before) and tail != before:
            extended += 1
            assert seen and all(removed == 0 for _, removed, _ in seen), (frame, seen)
    assert extended >= 1  # (the frames do extend the tail)


@pytest.mark.parametrize("final", ["the same", "longer", "another"])
def test_the_streamed_answer_ends_as_the_final_one(qtbot, final):
    head, frames = SHAPES["paragraph"]
    w = MessageWidget(2, "assistant", streaming=True)
    qtbot.addWidget(w)
    for frame in frames:
        w.update_stream(head + frame, "", "1.5M", False)
    last = head + frames[-1]
    answer = {"the same": last, "longer": last + ".\n\nDone.", "another": "Another reply, whole."}[final]
    w.finish(answer, "", {"answer_submodel": "1.5M"})
    assert w.text == answer and w.tail.isHidden()
    shown = [w.content.itemAt(i).widget().text() for i in range(w.content.count())]
    assert "\n\n".join(shown).replace("\u200b", "") == answer.strip()  # every block, once, in order


def heights_asked(monkeypatch) -> list[tuple[int, int]]:
    """(label, width) for each time QLabel itself was asked to measure a block's label, from now on."""
    asked = []
    measure = QLabel.heightForWidth

    def counted(self, width):
        if isinstance(self, BlockLabel):  # (with QLabel's method replaced, every label of the window comes here)
            asked.append((id(self), width))
        return measure(self, width)
    monkeypatch.setattr(QLabel, "heightForWidth", counted)
    return asked


def test_finished_blocks_are_measured_once_per_width_while_the_tail_grows(qtbot, monkeypatch):
    w = MessageWidget(2, "assistant", streaming=True)
    qtbot.addWidget(w)
    w.resize(500, 400)
    w.show()
    answer = "".join(f"Paragraph {i} says something long enough to wrap at least once in the chat.\n\n"
                     for i in range(12)) + "The tail"
    w.update_stream(answer, "", "1.5M", False)
    qtbot.waitUntil(lambda: w.tail.isVisible(), timeout=5000)
    asked = heights_asked(monkeypatch)
    for _ in range(10):
        answer += " grows"
        w.update_stream(answer, "", "1.5M", False)
        qtbot.wait(1)  # the layout the frame asked for
    assert len(w.rendered) == 11  # (the twelfth waits for a block after it: it may go on)
    assert len(asked) == len(set(asked)), asked  # each block measured once at a width, not at every frame


@pytest.mark.parametrize("change", ["text", "font", "style", "width"])
def test_a_kept_height_is_the_one_qlabel_gives(qtbot, change):
    label = BlockLabel()
    qtbot.addWidget(label)
    label.setWordWrap(True)
    label.setText("A paragraph long enough to wrap over a few lines at a narrow width, as answers do. " * 3)
    label.heightForWidth(200)
    if change == "text":
        label.setText("Short.")
    elif change == "font":
        font = QFont(label.font())
        font.setPointSizeF(font.pointSizeF() * 2)
        label.setFont(font)
    elif change == "style":
        label.setStyleSheet("padding: 0 30px;")
    for width in (200, 120, 480):
        assert label.heightForWidth(width) == QLabel.heightForWidth(label, width), (change, width)
