"""Shared fixtures. Tests never reach the network: the hub is switched off, Qt draws offscreen."""

import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest
import torch

from tests.checkpoints import SPECS, make_checkpoint
from tests.hub_stub import HubStub

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """Every tiny checkpoint kind, built once per session: {kind: folder}."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: make_checkpoint(kind, root / kind, seed=i) for i, kind in enumerate(SPECS)}


@pytest.fixture
def hybrid_copy(checkpoints, tmp_path):
    """A private copy of the 'hybrid' checkpoint that a test may damage."""
    return shutil.copytree(checkpoints["hybrid"], tmp_path / "hybrid")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The app's and the store's folders under tmp_path/home (ELASTIC_CHAT_HOME), no models folder
    chosen elsewhere (ELASTIC_CHAT_MODELS unset). The folder itself is not made."""
    monkeypatch.setenv("ELASTIC_CHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ELASTIC_CHAT_MODELS", raising=False)
    return tmp_path / "home"


@pytest.fixture
def hub_online(monkeypatch):
    """The hub library switched back on, for a stand-in on 127.0.0.1 only. This file switches it off
    for the whole session (no test may reach the real hub), and the library reads that once at import,
    so its constant is patched as well as the variable."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def serve_hub(home, hub_online, monkeypatch):
    """Starts hub stand-ins: `serve_hub(repos, **HubStub options)` returns a running stub and points
    HF_ENDPOINT at it (the newest one served); every stub stops when the test ends."""
    stubs = []

    def serve(repos, **options) -> HubStub:
        stub = HubStub(repos, **options).__enter__()
        stubs.append(stub)
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        return stub

    yield serve
    for stub in reversed(stubs):
        stub.__exit__(None, None, None)
