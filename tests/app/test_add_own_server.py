"""Add server… refuses this app's own server (the address Settings → Server shows): it serves the model
loaded here, so as the model to chat with it has nothing to answer. Use of it unloaded the local model and
failed with a 503 quoted three times and "try again" (found in a real-window session)."""

import pytest

from app.models_controller import same_server
from app.state.settings import Settings
from app.widgets.remote_source import RemoteSourceDialog
from tests.app.test_app_server import free_port
from tests.app_support import make_window

OWN = "http://127.0.0.1:8760/v1"


@pytest.mark.parametrize("url, own, same", [
    (OWN, OWN, True),
    ("http://localhost:8760", OWN, True),  # another name of this PC, no /v1
    ("http://[::1]:8760/v1", OWN, True),
    ("http://127.0.0.1:8760/v1", "http://0.0.0.0:8760/v1", True),  # a server bound to every address
    ("http://127.0.0.1:8761/v1", OWN, False),  # another port: another server
    ("http://gpu-box:8760/v1", OWN, False),  # another machine
    ("not an address", OWN, False),  # the probe says why
])
def test_same_server(url, own, same):
    assert same_server(url, own) is same


@pytest.fixture
def serving(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12, server_enabled=True,
                                                         server_port=free_port()))
    qtbot.waitUntil(lambda: w.controller.server.status().running, timeout=60000)
    yield w
    w.close()


def listed(qtbot, w, url: str) -> RemoteSourceDialog:
    dialog = RemoteSourceDialog(w, w.models)
    qtbot.addWidget(dialog)
    dialog.url.setText(url)
    dialog.probe()
    qtbot.waitUntil(lambda: dialog.list_button.isEnabled(), timeout=60000)  # the answer came
    return dialog


@pytest.mark.parametrize("how", ["as shown", "as localhost"])
def test_the_apps_own_server_is_refused_with_what_to_do(qtbot, serving, how):
    own = serving.controller.server.status().address
    url = own if how == "as shown" else own.replace("127.0.0.1", "localhost").removesuffix("/v1")
    dialog = listed(qtbot, serving, url)
    assert "this app's own server" in dialog.message.text() and "another machine" in dialog.message.text()
    assert not dialog.add_button.isEnabled() and dialog.model.count() == 0
    assert serving.controller.loaded is not None  # nothing was unloaded


def test_another_server_is_still_asked(qtbot, serving):
    dialog = listed(qtbot, serving, f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    assert "own server" not in dialog.message.text() and dialog.message.text()
