"""What a streaming reply costs the GUI thread (issue 38, item 1: the window at the CLI's speed): the
strip's labels keep their measures until their text, font or style changes (a row lays itself out at
every frame and asks each label several times), and the running speed's text changes at most every
SPEED_EVERY_S. Speed itself is measured by benchmarks/bench_window_speed.py, not here."""

from PySide6.QtGui import QFont
from PySide6.QtWidgets import QLabel

import app.widgets.live_strip as live_strip
from app.reply import TokenBatch
from app.widgets.elided_label import ElidedLabel
from app.widgets.live_strip import SPEED_EVERY_S, LiveStrip


def test_a_labels_kept_measures_follow_its_text_font_and_style(qtbot):
    label = ElidedLabel("RAM 1 MB", shorter=lambda t: [t.split()[0]])
    qtbot.addWidget(label)
    near = lambda a, b: abs(a - b) <= 2  # noqa: E731 (Qt's label hint and the text's advance round apart)
    short, least = label.sizeHint().width(), label.minimumSizeHint().width()
    label.setText("RAM 123456 MB · VRAM 99 GB")
    assert label.sizeHint().width() > short + 40 and near(label.minimumSizeHint().width(), least)
    label.setText("RAM 1 MB")
    assert near(label.sizeHint().width(), short)
    font = QFont(label.font())
    font.setPointSizeF(font.pointSizeF() * 2)
    label.setFont(font)
    assert label.sizeHint().width() > short + 20 and label.minimumSizeHint().width() > least + 10
    label.setStyleSheet("padding: 0 40px;")  # under an app's style sheet this also resets the label's font
    assert label.shown() == "RAM 1 MB"
    assert label.sizeHint().width() >= label.fontMetrics().horizontalAdvance("RAM 1 MB") + 80
    assert near(label.sizeHint().width(), QLabel.sizeHint(label).width())  # measured again, not kept


def batch(speed: float) -> TokenBatch:
    return TokenBatch(((20.0, "1.5M"),), "1.5M", "answer", 40.0, speed)


def test_the_running_speed_changes_at_most_every_quarter_second(qtbot, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(live_strip.time, "monotonic", lambda: now[0])
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.reset("1.5M", "answer")
    strip.on_tokens(batch(10.0))
    assert strip.speed.text() == "10.0 tok/s"  # a reply's first speed at once
    now[0] += SPEED_EVERY_S / 2
    strip.on_tokens(batch(11.0))
    assert strip.speed.text() == "10.0 tok/s"  # not at every frame
    now[0] += SPEED_EVERY_S / 2
    strip.on_tokens(batch(12.0))
    assert strip.speed.text() == "12.0 tok/s"
    strip.reset("0.5M", "thinking")  # the next reply shows its first speed at once too
    strip.on_tokens(batch(30.0))
    assert strip.speed.text() == "30.0 tok/s"
