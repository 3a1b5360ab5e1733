"""Fixtures of the window tests."""

import pytest

from tests.app_support import Gate


@pytest.fixture
def gate(monkeypatch):
    """Holds the replies the window starts before a chosen token (see tests.app_support.Gate)."""
    g = Gate(monkeypatch)
    yield g
    g.release_all()  # before the window closes (fixtures end in reverse order)
