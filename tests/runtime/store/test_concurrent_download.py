"""One writer per download folder: two downloads (processes, or threads of one app) never share a
folder; the second says who holds it; a lock left by a killed process is free again; delete and
verify see a download in progress."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runtime import UsageError
from runtime.store.download.transfer import DONE, Download, resolve
from runtime.store.folder_lock import FolderBusy, FolderLock, holder
from runtime.store.model_store import delete, list_models, verify
from tests.paths import ROOT
from tests.store_support import part_of

REPO = "nvidia/Concurrent"
FILES = {"config.json": b'{"a": 1}\n', "model.safetensors": os.urandom(1_500_000)}


@pytest.fixture
def hub(tmp_path, serve_hub):
    (tmp_path / "repo").mkdir()
    return serve_hub({REPO: tmp_path / "repo"}, virtual={REPO: dict(FILES)})


def cli(dest: Path, *flags: str, **kw):
    return subprocess.Popen([sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, **kw)


PATIENT = ("--stall-seconds", "3600")  # a download held by the hub (`hold`) waits rather than retries


def wait_for_bytes(hub, at_least: int = 1, timeout: float = 60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(r["path"] == "model.safetensors" and r["sent"] >= at_least for r in hub.requests):
            return
        time.sleep(0.02)
    raise AssertionError("the download never started")


def intact(dest: Path) -> bool:
    return all((dest / n).read_bytes() == data for n, data in FILES.items())


@pytest.mark.slow
def test_a_second_process_is_refused_and_says_who_holds_the_folder(hub, tmp_path):
    """The first download is held short of its end until the second has been refused: before, a 1 s
    throttle let it finish first when the second's start-up took longer on a busy machine."""
    hub.faults["model.safetensors"] = {"hold": True}
    dest = tmp_path / "dl"
    first = cli(dest, *PATIENT)
    wait_for_bytes(hub)
    second = cli(dest)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 2 and err.count("\n") == 1
    assert err.startswith(f"error: another download (pid {first.pid} on ") and "since" in err
    hub.faults.pop("model.safetensors")
    first.communicate(timeout=120)
    assert first.returncode == 0 and intact(dest)
    assert not list(dest.rglob("*.part"))


@pytest.mark.slow
def test_two_processes_started_together_leave_one_complete_verified_copy(hub, tmp_path):
    hub.faults["model.safetensors"] = {"hold": True}  # held until one has been refused, however slow its start
    dest = tmp_path / "dl"
    procs = [cli(dest, *PATIENT), cli(dest, *PATIENT)]
    wait_for_bytes(hub)
    deadline = time.time() + 300  # a guard against a hang, not a measure
    while time.time() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    hub.faults.pop("model.safetensors")
    results = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], results
    refused = next(err for p, (_, err) in zip(procs, results) if p.returncode == 2)
    assert "another download" in refused and "Traceback" not in refused
    assert intact(dest) and verify(dest).checked == len(FILES)


@pytest.mark.slow
def test_a_lock_left_by_a_killed_process_is_recovered(hub, tmp_path):
    hub.faults["model.safetensors"] = {"throttle": 0.2}
    dest = tmp_path / "dl"
    first = cli(dest)
    wait_for_bytes(hub, 200_000)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert holder(dest) is None  # the OS dropped the lock with the process
    hub.faults.pop("model.safetensors")
    before = len(hub.requests)
    second = cli(dest)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert intact(dest)
    resumed = [r for r in hub.requests[before:] if r["path"] == "model.safetensors"]
    assert resumed[0]["start"] > 0  # its partial file was kept and resumed, not fetched again


@pytest.mark.slow
def test_two_downloads_in_one_process_exclude_each_other(hub, tmp_path):
    hub.faults["model.safetensors"] = {"throttle": 0.05}
    dest = tmp_path / "dl"
    job = Download(resolve(REPO), dest)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("final", job.run()))
    worker.start()
    try:
        wait_for_bytes(hub)
        with pytest.raises(FolderBusy, match=f"pid {os.getpid()}"):
            Download(resolve(REPO), dest).run()
        report = verify(dest)  # while it runs, verify says so
        assert not report.ok and any("is writing to it" in p for p in report.problems)
    finally:
        job.pause()
        worker.join(60)
    assert result["final"].state == "paused"
    hub.faults.pop("model.safetensors")
    assert Download(resolve(REPO), dest).run().state == DONE and intact(dest)
    assert part_of(dest, "model.safetensors").exists() is False


def test_list_shows_a_folder_being_downloaded(hub, tmp_path):
    hub.faults["model.safetensors"] = {"throttle": 0.05}
    dest = tmp_path / "home" / "models" / "nvidia--Concurrent"
    job = Download(resolve(REPO), dest)
    worker = threading.Thread(target=job.run)
    worker.start()
    try:
        wait_for_bytes(hub)
        m = next(x for x in list_models() if x.name == "nvidia--Concurrent")
        assert m.problem.startswith("a download (pid ") and "is writing to it" in m.problem
    finally:
        job.pause()
        worker.join(60)


def test_delete_waits_for_no_one_and_refuses_a_folder_being_written(hub, tmp_path):
    inside = tmp_path / "home" / "models" / "nvidia--Concurrent"
    inside.mkdir(parents=True)
    (inside / "config.json").write_text("{}")
    with FolderLock(inside, "download"):
        with pytest.raises(UsageError, match="cannot be deleted now: another download .pid"):
            delete("nvidia--Concurrent")
    assert inside.exists()
    assert "deleted nvidia--Concurrent" in delete("nvidia--Concurrent") and not inside.exists()
