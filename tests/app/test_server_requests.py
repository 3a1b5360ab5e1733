"""The Settings' view of the local server's recent requests (app/widgets/server_requests.py): real
requests to the window's running server show up live, newest first, with their status, while the
dialog is open; the curl command it offers runs as copied and shows up too."""

import shutil
import socket
import subprocess

import pytest
import requests
from PySide6.QtGui import QGuiApplication

from app.state.settings import Settings
from app.widgets.server_requests import COLUMNS
from app.widgets.settings_dialog import SettingsDialog
from tests.app_support import make_window

TIMEOUT_MS = 120000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(view) -> list[tuple[str, ...]]:
    table = view.table
    return [tuple(table.item(r, c).text() for c in range(len(COLUMNS))) for r in range(table.rowCount())]


def cell(row: tuple[str, ...], column: str) -> str:
    return row[COLUMNS.index(column)]


@pytest.mark.slow
def test_requests_to_the_running_server_show_up_live_in_settings(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=40, server_enabled=True,
                                                         server_port=free_port()))
    server = w.controller.server
    qtbot.waitUntil(lambda: bool(server.status().running and server.status().model), timeout=TIMEOUT_MS)
    root = server.status().address.removesuffix("/v1")
    requests.get(f"{root}/v1/models", timeout=60)  # before the dialog opens: shown when it opens
    seen = {}

    def exec_(dialog):  # the dialog, open (its own event loop stands in for qtbot's), then closed
        view = seen["view"] = dialog.server_box.requests
        assert [(cell(r, "Route"), cell(r, "Status")) for r in rows(view)] == [("/v1/models", "200")]
        bad = requests.post(f"{root}/v1/chat/completions", json={"messages": "not a list"}, timeout=60)
        missing = requests.get(f"{root}/v1/no-such-route", timeout=60)
        assert (bad.status_code, missing.status_code) == (400, 404)
        qtbot.waitUntil(lambda: len(rows(view)) == 3, timeout=TIMEOUT_MS)  # live, while open
        assert [(cell(r, "Method"), cell(r, "Route"), cell(r, "Status")) for r in rows(view)] == [
            ("GET", "/v1/no-such-route", "404"), ("POST", "/v1/chat/completions", "400"),
            ("GET", "/v1/models", "200")]
        assert {cell(r, "Client") for r in rows(view)} == {"127.0.0.1"}
        command = view.curl.toPlainText()
        assert server.status().address in command and w.loaded.name in command
        view.copy.click()
        assert QGuiApplication.clipboard().text() == command
        if shutil.which("curl") and shutil.which("sh"):  # the command as the user pastes it
            ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=600)
            assert ran.returncode == 0 and '"chat.completion"' in ran.stdout, ran.stderr
            qtbot.waitUntil(lambda: len(rows(view)) == 4, timeout=TIMEOUT_MS)
            assert (cell(rows(view)[0], "Route"), cell(rows(view)[0], "Status")) == ("/v1/chat/completions", "200")
        dialog.reject()
        return dialog.result()

    monkeypatch.setattr(SettingsDialog, "exec", exec_)
    w.dialogs.open_settings(tab=2)
    assert seen["view"] is not None
    w.close()
