"""An attachment chip draws every mark it shows (issue 38, item 8): no character its font lacks (which
shows as an empty box, "tofu"), and its icons are real pixmaps."""

from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel, QToolButton

from app.widgets.attachment_row import AttachmentRow


def missing_characters(widget) -> list[str]:
    """The characters of `widget`'s text that its font has no glyph for."""
    metrics = QFontMetrics(widget.font())
    return [ch for ch in widget.text() if not metrics.inFontUcs4(ord(ch))]


def test_an_attachment_chip_shows_no_character_its_font_lacks(qtbot):
    row = AttachmentRow()
    qtbot.addWidget(row)
    row.show_files([("notes.txt", 1234, ""), ("paper.pdf", -1, "read from its text layer")])
    assert len(row.items) == 2
    for chip in row.items:
        texts = [w for w in chip.findChildren(QLabel) + chip.findChildren(QToolButton) if w.text()]
        assert texts, "a chip names its file"
        for widget in texts:
            assert missing_characters(widget) == [], (widget.text(), missing_characters(widget))
        marks = [w.pixmap() for w in chip.findChildren(QLabel) if not w.text()]
        assert marks and all(not p.isNull() for p in marks)
        remove = chip.findChild(QToolButton)
        assert not remove.icon().isNull() and remove.toolTip().startswith("Remove ")
    assert "notes.txt · 1,234 tokens" in [w.text() for w in row.items[0].findChildren(QLabel)]


def test_the_remove_button_asks_to_remove_its_file(qtbot):
    row = AttachmentRow()
    qtbot.addWidget(row)
    row.show_files([("a.txt", 3, ""), ("b.txt", 4, "")])
    with qtbot.waitSignal(row.sig_remove, timeout=60000) as removed:
        row.items[1].findChild(QToolButton).click()
    assert removed.args == [1]
