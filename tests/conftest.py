"""Shared fixtures. Tests never reach the network: the hub is switched off, Qt draws offscreen."""

import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.checkpoints import SPECS, make_checkpoint  # noqa: E402

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
