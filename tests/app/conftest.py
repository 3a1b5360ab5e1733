"""Fixtures of the window tests."""

import pytest
from PySide6.QtWidgets import QApplication

from app.theme import apply_theme
from tests.app_support import Gate


@pytest.fixture
def gate(monkeypatch):
    """Holds the replies the window starts before a chosen token (see tests.app_support.Gate)."""
    g = Gate(monkeypatch)
    yield g
    g.release_all()  # before the window closes (fixtures end in reverse order)


@pytest.fixture
def themed():
    """Applies a theme and font size to the app, and puts the test session's look back after."""
    app = QApplication.instance()
    font, palette, sheet, style = app.font(), app.palette(), app.styleSheet(), app.style().name()
    yield lambda theme, size: apply_theme(app, theme, size)
    app.setStyle(style)
    app.setPalette(palette)
    app.setFont(font)
    app.setStyleSheet(sheet)
