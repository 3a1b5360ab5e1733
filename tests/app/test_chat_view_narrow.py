"""The chat in a narrow window: at 700 px with the chat list shown (Ctrl+B) the chat view is about 450 px
wide. A message's header (its time, its details, its buttons) and a long thought's summary used to set a
minimum width wider than that, so the column was cut at the view's right edge: Edit, Regenerate and the end
of the summary could not be seen or clicked (found using the window, session 11). Now the details and the
summary shorten with "…" (the whole text in their tooltips), and a row that still cannot fit scrolls
sideways rather than hide its buttons.

A message's time widens its header when it is not today's ("3 Dec 18:20", "3 Dec 2025, 18:20"): the
test first passed on the day it was written and failed the next, so every kind of time is checked."""

import time
from types import SimpleNamespace

import pytest
from PySide6.QtWidgets import QApplication, QPushButton

from app.state.settings import Settings
from app.theme import apply_theme
from app.widgets.chat_view import ChatView, shorter_times

VIEW_WIDTH = 450  # the chat view in a 700 px window with the chat list shown
# today's, one of 40 days ago (this year's or last year's), and one certainly of another year (Jan 2025)
TIMES = {"today": lambda: time.time(), "40 days ago": lambda: time.time() - 40 * 86400,
         "another year": lambda: 1736332200.0}

LONG_THOUGHT = {"thinking_path": [["0.5M", 23], ["1.0M", 70], ["1.5M", 12]], "thinking_tokens": 105,
                "thinking_ms": 2500.0, "budget_hit": True, "think_submodel": "0.5M"}
LONG_INFO = {"answer_submodel": "1.5M", "finish_reason": "end_of_turn", "context_dropped": 12,
             "tokens_per_s": 38.1}


@pytest.fixture(autouse=True)
def themed():
    """The app's look at its default font size (the stylesheet pads the buttons), put back after."""
    app = QApplication.instance()
    font, palette, sheet, style = app.font(), app.palette(), app.styleSheet(), app.style().name()
    apply_theme(app, "light", Settings().font_size)
    yield
    app.setStyle(style)
    app.setPalette(palette)
    app.setFont(font)
    app.setStyleSheet(sheet)


def message(mid: int, role: str, text: str, meta=None, thinking: str = "", versions=(), when=None):
    return SimpleNamespace(id=mid, role=role, content=text, thinking=thinking, meta=meta or {},
                           versions=versions, time=time.time() if when is None else when)


def open_view(qtbot, messages) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(VIEW_WIDTH, 600)
    view.show()
    qtbot.waitExposed(view)
    view.show_chat(1, messages, None)
    settle(qtbot, view)
    return view


def settle(qtbot, view: ChatView) -> None:
    """Waits until the messages are laid out at the view's width."""
    qtbot.waitUntil(lambda: all(w.isVisible() and w.width() > 0 for w in view.widgets), timeout=60000)
    for _ in range(3):
        view.widget().layout().activate()
        QApplication.processEvents()


def cut_buttons(view: ChatView) -> list[str]:
    """The shown buttons of the messages that lie not wholly inside the view's visible part."""
    QApplication.processEvents()
    seen = view.viewport().rect()
    bad = []
    for w in view.widgets:
        for b in w.findChildren(QPushButton):
            if b.isVisible():
                box = b.rect().translated(b.mapTo(view.viewport(), b.rect().topLeft()))
                if not seen.contains(box):
                    bad.append(f"{w.role} {b.text()} at {box.getRect()} in {seen.getRect()}")
    return bad


@pytest.mark.parametrize("when", TIMES)
def test_a_long_reply_header_and_thought_summary_fit_a_narrow_chat_view(qtbot, when):
    at = TIMES[when]()
    view = open_view(qtbot, [
        message(1, "user", "77 + 18 - 29 + 34", versions=(1, 3), when=at),
        message(2, "assistant", "77 + 18 - 29 + 34 = 100.", {**LONG_INFO, **LONG_THOUGHT}, thinking="77+18: 95",
                when=at),
    ])
    reply = view.widgets[-1]
    assert view.widget().minimumSizeHint().width() <= view.viewport().width()  # the column may be this narrow
    assert view.widget().width() <= view.viewport().width()  # so nothing is cut at the right edge
    assert cut_buttons(view) == []
    assert not view.horizontalScrollBar().isVisible()
    summary = reply.thinking.toggle
    assert summary.text().startswith("Thought for 2.5 s · 23 tokens on 0.5M, then 70 on 1.0M")  # whole, as a value
    if summary.is_elided():
        assert summary.toolTip() == summary.text() and summary.shown().endswith("…")
    assert "12 earliest messages left out" in reply.info.text()
    if reply.info.is_elided():
        assert reply.info.text() in reply.info.toolTip()
    for shown in view.widgets:  # the time: whole, or a shorter form of it, never cut mid-letter
        label = shown.when_label
        assert label.shown() in [label.text(), *shorter_times(label.text())]
        assert label.text() in label.toolTip() or not label.is_elided()


@pytest.mark.parametrize("width", [VIEW_WIDTH, 300])
def test_buttons_that_cannot_fit_scroll_into_view_never_hide(qtbot, width):
    """A cut reply with versions shows ‹ 2/2 › Copy Regenerate Continue: too many for a very narrow view.
    The column then scrolls sideways, and every button can be reached."""
    cut = {**LONG_INFO, "finish_reason": "length"}
    view = open_view(qtbot, [message(1, "user", "a question"),
                             message(4, "assistant", "a cut answer, again", cut, versions=(2, 4))])
    view.resize(width, 600)
    settle(qtbot, view)
    reply = view.widgets[-1]
    assert reply.buttons["Continue"].isVisible()
    bar = view.horizontalScrollBar()
    if view.widget().width() > view.viewport().width():
        assert bar.isVisible() and bar.maximum() >= view.widget().width() - view.viewport().width()
    for name in ("Continue", "Regenerate", "Copy", "Next"):  # each, scrolled to, is seen whole
        b = reply.buttons[name]
        view.ensureWidgetVisible(b, 0, 0)
        QApplication.processEvents()
        box = b.rect().translated(b.mapTo(view.viewport(), b.rect().topLeft()))
        assert view.viewport().rect().contains(box), (name, box.getRect(), view.viewport().rect().getRect())
