"""The live strip's badge reads "idle" when no reply runs (docs/using-the-app.md), after a load too: it read
the loaded parent ("1.5M", in its colour) at every launch and after every load, as if it were producing a
token, until the first reply (found in a real-window session)."""

import pytest

from app.state.settings import Settings
from tests.app_support import ask, make_window
from tests.paths import DEMO, DEMO_NVFP4


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    yield w
    w.close()


def load(qtbot, w, folder) -> None:
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=120000):
        w.controller.load_model(str(folder))


IDLE_LOOK = "background:#888888"  # the idle badge's grey pill (LiveStrip.set_badge)


def test_the_badge_is_idle_at_launch(window):
    assert window.strip.badge.text() == "idle" and window.strip.ttft.text() == "TTFT –"
    assert IDLE_LOOK in window.strip.badge.styleSheet()  # a pill, not plain text


def test_a_new_strip_is_an_idle_pill_before_and_after_clear(qtbot):
    from app.widgets.live_strip import LiveStrip

    strip = LiveStrip()
    qtbot.addWidget(strip)
    assert strip.badge.text() == "idle" and IDLE_LOOK in strip.badge.styleSheet()
    strip.clear()
    assert strip.badge.text() == "idle" and IDLE_LOOK in strip.badge.styleSheet()


@pytest.mark.parametrize("folder", [DEMO, DEMO_NVFP4])
def test_the_badge_is_idle_after_a_load_that_follows_a_reply(qtbot, window, folder):
    ask(qtbot, window, "What is 2 + 3?", "Quick")
    assert window.strip.badge.text() != "idle"  # the reply's submodel and how it ended
    load(qtbot, window, folder)
    assert window.strip.badge.text() == "idle" and IDLE_LOOK in window.strip.badge.styleSheet()


def test_the_badge_is_idle_after_unload_and_load(qtbot, window):
    window.controller.unload_model()
    load(qtbot, window, DEMO_NVFP4)
    assert window.strip.badge.text() == "idle"
