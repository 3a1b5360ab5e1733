"""With a model on another server in use, the local server has nothing to serve: every request gets 503
"no model is loaded". The strip still read "Serving … · idle" and Settings → Server named the remote
model's id as the one to use, with a curl command that could only fail (a real-window session, issue 38).
What the window says must be what a request gets: no local model, 503, and why.
The remote server is the stand-in of tests/remote_stub.py on 127.0.0.1; the local server is the app's own."""

import pytest
import requests

from app.server_control import ServerStatus, curl_example
from app.state.settings import Settings
from app.widgets.live_strip import server_forms
from app.widgets.settings_dialog import SettingsDialog
from runtime.store.remote_sources import add_source
from tests.app.test_app_server import free_port
from tests.app.test_remote_truths import LISTING, answers, use
from tests.app_support import make_window
from tests.remote_stub import RemoteStub


@pytest.mark.slow
def test_the_window_says_what_a_request_gets_while_a_remote_model_is_in_use(qtbot, home, monkeypatch):
    port = free_port()
    w = make_window(qtbot, home, Settings(max_new_tokens=40, server_enabled=True, server_port=port))
    server = w.controller.server
    qtbot.waitUntil(lambda: bool(server.status().running and server.status().model), timeout=60000)
    with RemoteStub(LISTING, answers) as stub:
        use(qtbot, w, add_source(stub.url, "star", None))
        qtbot.waitUntil(lambda: server.status().remote, timeout=10000)
        status = server.status()
        assert status.model == "" and status.remote, status
        body = {"model": "star", "max_tokens": 20, "messages": [{"role": "user", "content": "2 + 3"}]}
        answer = requests.post(f"{status.address}/chat/completions", json=body, timeout=60)
        assert answer.status_code == 503  # what the window must say
        qtbot.waitUntil(lambda: "no local model: requests get 503" in w.strip.server.text(), timeout=5000)
        assert "idle" not in w.strip.server.text()
        notes, commands = [], []

        def exec_(dialog):
            notes.append(dialog.server_box.note.text())
            commands.append(dialog.server_box.requests.curl.toPlainText())
            dialog.reject()
            return dialog.result()

        monkeypatch.setattr(SettingsDialog, "exec", exec_)
        w.dialogs.open_settings(tab=2)
        assert "another server" in notes[0] and "503" in notes[0] and "“star”" not in notes[0], notes
        assert commands == [""]  # no command that can only fail
    w.close()


@pytest.mark.parametrize("remote", [False, True])
def test_the_curl_command_needs_a_served_model(remote):
    url = "http://127.0.0.1:8000/v1"
    assert '"model": "demo"' in curl_example(ServerStatus(True, url, None, 0, model="demo"))
    assert curl_example(ServerStatus(True, url, None, 0, model="", remote=remote)) == ""


@pytest.mark.parametrize("address", ["http://127.0.0.1:8000/v1", "http://[::1]:8123/v1"])
def test_the_strips_shorter_forms_keep_no_local_model(address):
    """Squeezed, the strip dropped "no local model" first and kept the address, which reads as serving."""
    text = ServerStatus(True, address, None, 0, model="").summary
    forms = server_forms(text)
    assert forms and all("no local model" in f or f.startswith("Server: no model") for f in forms), forms
    assert all(len(b) < len(a) for a, b in zip([text, *forms], forms)), forms
