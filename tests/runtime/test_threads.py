"""The engine's CPU thread count (runtime/threads.py): one fewer than the physical cores, at least
one, unless ELASTIC_CHAT_THREADS (or a user's OMP_NUM_THREADS) says otherwise; a bad value refused in
one line; the commands that start an engine apply it; OpenMP told to sleep at barriers."""

import os
import subprocess
import sys

import pytest
import torch

from runtime import cli, threads
from runtime.errors import UsageError


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("cores, want", [(1, 1), (2, 1), (4, 3), (16, 15)])
def test_one_core_is_left_to_the_rest_of_the_machine(monkeypatch, restore_threads, cores, want):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "physical_cores", lambda: cores)
    assert threads.default_threads() == want
    torch.set_num_threads(want + 1)
    assert threads.apply() == want == torch.get_num_threads()


def test_the_user_chooses(monkeypatch, restore_threads):
    monkeypatch.setenv(threads.ENV, "3")
    assert threads.apply() == 3
    monkeypatch.delenv(threads.ENV)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert threads.apply() == 2  # a user's OpenMP setting is left alone


def test_score_applies_the_rule(checkpoints, monkeypatch, restore_threads, capsys):
    monkeypatch.setenv(threads.ENV, "1")
    torch.set_num_threads(2)
    assert cli.main(["score", "--checkpoint", str(checkpoints["hybrid"]), "--token-ids", "1,2,3"]) == 0
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_count_is_refused(monkeypatch, value):
    monkeypatch.setenv(threads.ENV, value)
    with pytest.raises(UsageError, match="ELASTIC_CHAT_THREADS must be a whole number"):
        threads.apply()


def test_openmp_sleeps_at_barriers_unless_the_user_chose():
    code = "import os, runtime; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "PASSIVE"
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "ACTIVE"
