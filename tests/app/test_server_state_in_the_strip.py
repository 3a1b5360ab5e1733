"""The live strip's server text, squeezed, still says the server's state: a server that could not start
shows "Server off: port 8000 is taken", then "Server off", never "Server" alone (a real-window session: a
taken port read "Server"), and hovering it shows the whole line."""

import pytest

from app.server_control import ServerStatus
from app.widgets.live_strip import LiveStrip, server_forms

TAKEN = "port 8000 is taken (used by another program on 127.0.0.1)"
ERRORS = [TAKEN, "serving on 0.0.0.0 needs an API key: set one in Settings → Server",
          "OSError: [Errno 99] Cannot assign requested address", "no model"]


@pytest.mark.parametrize("error", ERRORS)
def test_every_shorter_form_of_a_failure_says_the_server_is_off(error):
    line = ServerStatus(False, "", None, 0, error=error).summary
    forms = server_forms(line)
    assert line.startswith("Server off: ") and forms[-1] == "Server off"
    assert all(f.startswith("Server off") for f in forms) and "Server" not in forms


def test_a_taken_port_keeps_its_gist_before_the_bare_state():
    line = ServerStatus(False, "", None, 0, error=TAKEN).summary
    assert server_forms(line) == ["Server off: port 8000 is taken", "Server off"]


def test_a_running_server_shortens_as_before():
    line = ServerStatus(True, "http://127.0.0.1:8000/v1", "chat: 12 tokens", 2).summary
    assert server_forms(line) == ["Serving http://127.0.0.1:8000/v1 · chat: 12 tokens",
                                  "Serving http://127.0.0.1:8000/v1"]


@pytest.mark.parametrize("error", ERRORS)
def test_the_squeezed_strip_shows_the_state_and_the_tooltip_the_whole_line(qtbot, error):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    line = ServerStatus(False, "", None, 0, error=error).summary
    strip.set_server(line)
    strip.show()
    label = strip.server
    fm = label.fontMetrics()
    for room in (fm.horizontalAdvance(line) // 2, fm.horizontalAdvance("Server off: port 8000 is taken") + 4,
                 fm.horizontalAdvance("Server off") + 4):
        label.resize(room + 2 * label.margin() + label.contentsMargins().left() + label.contentsMargins().right(),
                     label.height())
        assert label.shown().startswith("Server off") and label.shown() != "Server"
        if room < fm.horizontalAdvance(line):
            assert label.is_elided() and line in label.toolTip()


def test_a_running_server_with_nothing_to_serve_says_so():
    """With a model on another server in use (or none loaded) the strip read "Serving … · idle" while the
    server answered every request 503 "no model is loaded" (a real-window session)."""
    idle = ServerStatus(True, "http://127.0.0.1:8000/v1", None, 0, model="").summary
    assert idle == "Serving http://127.0.0.1:8000/v1 · no local model: requests get 503"
    serving = ServerStatus(True, "http://127.0.0.1:8000/v1", None, 0, model="demo-nvfp4").summary
    assert serving == "Serving http://127.0.0.1:8000/v1 · idle"
