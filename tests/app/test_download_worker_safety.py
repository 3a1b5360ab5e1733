"""The app's download path obeys the store's rules: a destination that is not the user's to fill is
refused before the hub is asked, and pause or cancel act while the hub is still saying what a repo
holds (there was no download to pause yet, so the click did nothing until the hub answered)."""

import socket
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.workers import DownloadWorker
from tests.hub_stub import HubStub

REPO = "nvidia/Worker"


@pytest.fixture
def hub(tmp_path, monkeypatch, qtbot):
    (tmp_path / "repo").mkdir()
    monkeypatch.setenv("ELASTIC_CHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ELASTIC_CHAT_MODELS", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with HubStub({REPO: tmp_path / "repo"}, virtual={REPO: {"config.json": b"{}"}}) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        yield stub


def run_worker(worker: DownloadWorker, during=None) -> tuple:
    """Runs the worker's slot in a thread of its own (as its QThread would) and returns what it emitted."""
    finished = []
    worker.sig_finished.connect(lambda *a: finished.append(a), Qt.ConnectionType.DirectConnection)
    thread = threading.Thread(target=worker.run)
    thread.start()
    if during is not None:
        during()
    thread.join(120)
    assert finished, "the worker never finished"
    return finished[0]


@pytest.mark.parametrize("dest", ["/etc", "project"])
def test_the_app_refuses_a_destination_that_is_not_the_users(hub, tmp_path, monkeypatch, dest):
    if dest == "/etc":  # nowhere to download from: should the rule ever break, nothing can land in /etc
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
    folder = Path(dest) if dest.startswith("/") else tmp_path / dest
    if dest == "project":
        folder.mkdir()
        (folder / "notes.txt").write_text("the user's")
    before = sorted(p.name for p in folder.iterdir())
    final, error = run_worker(DownloadWorker(REPO, folder))
    assert final is None and "already holds files" in error and "\n" not in error
    assert not hub.api_requests and sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.parametrize("how", ["pause", "cancel"])
def test_pause_and_cancel_act_while_the_hub_is_answering(hub, tmp_path, how):
    from runtime.store.model_store import download_dir

    hub.api_faults["silent"] = 60  # the file list never comes in time
    worker = DownloadWorker(REPO, download_dir(REPO))
    asked = threading.Event()
    final, error = run_worker(worker, lambda: (asked.wait(0.5), getattr(worker, how)()))
    assert error == "" and final.state == ("paused" if how == "pause" else "cancelled")
    assert "before the download began" in final.message
    assert not hub.requests and not (download_dir(REPO) / "config.json").exists()
