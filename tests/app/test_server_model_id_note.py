"""Settings → Server names the model id the running server answers to. It said "the model's name as
model id", but the id is the checkpoint's folder name: a copy of the demo imported as "demo-2" (its
name in the picker, the manager and the status bar) is served as "demo", and a client that sent
"demo-2" got 404 model_not_found (found in a real-window session)."""

import shutil

import pytest
import requests

from app.server_control import ServerStatus
from app.state.settings import Settings
from app.widgets.server_settings import ServerSettingsBox
from app.widgets.settings_dialog import SettingsDialog
from tests.app.test_app_server import free_port
from tests.app_support import warmed_up
from tests.paths import DEMO_NVFP4

URL = "http://127.0.0.1:8760/v1"


def box(qtbot, port: int = 8760) -> ServerSettingsBox:
    b = ServerSettingsBox(True, "127.0.0.1", port, "", URL)
    qtbot.addWidget(b)
    return b


@pytest.mark.parametrize("model_id", ["demo", "demo-nvfp4", "my sums (copy)"])
def test_the_note_names_the_id_the_server_answers_to(qtbot, model_id):
    b = box(qtbot)
    b.show_status(ServerStatus(True, URL, None, 0, model=model_id))
    assert f"“{model_id}” as model id" in b.note.text() and "model's name" not in b.note.text()
    assert model_id in b.requests.curl.toPlainText()  # the command to try it says the same id


@pytest.mark.parametrize("status", [ServerStatus(False, "", None, 0),  # not running
                                    ServerStatus(True, URL, None, 0, model="")])  # running, no model loaded
def test_without_a_served_model_the_note_says_where_to_find_the_id(qtbot, status):
    b = box(qtbot)
    b.show_status(status)
    assert "GET /v1/models" in b.note.text() and "“" not in b.note.text()


def test_a_moved_port_does_not_name_the_id_of_the_server_elsewhere(qtbot):
    b = box(qtbot)
    b.show_status(ServerStatus(True, URL, None, 0, model="demo"))
    b.port.setValue(8761)  # not serving there yet: the id is for after OK
    assert b.note.text().startswith("Clients use base URL http://127.0.0.1:8761/v1") and "“demo”" not in b.note.text()
    b.port.setValue(8760)
    assert "“demo” as model id" in b.note.text()


@pytest.mark.slow
def test_the_window_names_the_id_its_server_lists(qtbot, tmp_path, monkeypatch):
    """A checkpoint in a folder of its own name: what Settings says is what /v1/models lists, and a
    request with that id is answered."""
    folder = tmp_path / "my-sums"
    shutil.copytree(DEMO_NVFP4, folder)
    data = tmp_path / "data"
    data.mkdir()
    from app.main_window import MainWindow

    port = free_port()
    w = MainWindow(data, Settings(max_new_tokens=40, server_enabled=True, server_port=port),
                   data / "settings.json", checkpoint=str(folder))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: getattr(w, "loaded", None) is not None, timeout=180000)
    warmed_up(qtbot, w)
    server = w.controller.server
    qtbot.waitUntil(lambda: bool(server.status().running and server.status().model), timeout=60000)
    listed = [m["id"] for m in requests.get(f"{server.status().address}/models", timeout=60).json()["data"]]
    notes = []

    def exec_(dialog):
        notes.append(dialog.server_box.note.text())
        dialog.reject()
        return dialog.result()

    monkeypatch.setattr(SettingsDialog, "exec", exec_)
    w.dialogs.open_settings(tab=2)
    assert listed[0] == "my-sums" and f"“{listed[0]}” as model id" in notes[0], (listed, notes)
    body = {"model": listed[0], "max_tokens": 40, "messages": [{"role": "user", "content": "2 + 3"}]}
    answer = requests.post(f"{server.status().address}/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200
    w.close()
