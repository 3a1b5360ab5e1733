"""Loading or unloading a model while a reply runs says it stopped that reply (issue 38, a real-window
session: choosing another model in the picker stopped the reply in flight without a word). With nothing
running, a load says nothing of the kind."""

import pytest

from app.state.settings import Settings
from tests.app_support import LONG, hold, make_window
from tests.paths import DEMO


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    yield w
    w.close()


@pytest.mark.parametrize("how", ["load", "unload"])
def test_a_load_or_unload_says_it_stopped_the_reply_in_flight(qtbot, window, gate, how):
    c = window.controller
    notices = []
    c.sig_notice.connect(notices.append)
    reply, controls = hold(qtbot, window, gate, "Quick", 3)
    if how == "load":
        c.load_model(str(DEMO))
    else:
        c.unload_model()
    assert reply.stopping
    said = [n for n in notices if "stopped 1 reply in progress" in n]
    assert said and said[0].startswith("Loading a model" if how == "load" else "Unloading the model")
    gate.release_all()
    qtbot.waitUntil(lambda: not c.replies.busy, timeout=LONG)
    saved = c.history.messages(c.chats.current)[-1]
    assert saved.meta["finish_reason"] == "stopped"


def test_a_load_with_nothing_running_says_nothing_of_it(qtbot, window):
    c = window.controller
    notices = []
    c.sig_notice.connect(notices.append)
    with qtbot.waitSignal(c.sig_model_loaded, timeout=LONG):
        c.load_model(str(DEMO))
    assert not [n for n in notices if "stopped" in n]
