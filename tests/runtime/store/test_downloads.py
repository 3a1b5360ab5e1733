"""The download manager against a hub stand-in on 127.0.0.1, with faults injected."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.store.download import transfer as downloads
from runtime.store.download.transfer import (
    CANCELLED,
    DONE,
    PAUSED,
    STALLED,
    Download,
    DownloadError,
    resolve,
    sha256_of,
)
from tests.paths import ROOT
from tests.store_support import part_of

REPO = "nvidia/Tiny-Elastic-Demo-NVFP4"
WEIGHTS = "model.safetensors"


@pytest.fixture
def hub(tmp_path, serve_hub):
    source = shutil.copytree(ROOT / "assets" / "demo-nvfp4", tmp_path / "repo")
    stub = serve_hub({REPO: source, "nvidia/Gated": source}, gated={"nvidia/Gated"})
    stub.source = source
    return stub


def same_files(a: Path, b: Path) -> bool:
    names = [p.name for p in a.iterdir() if p.is_file()]
    return all((b / n).exists() and sha256_of(a / n) == sha256_of(b / n) for n in names)


def run_download(dest, **kw):
    states = []
    job = Download(resolve(REPO), dest, lambda p: states.append(p), **kw)
    return job, job.run(), states


def test_resolve_reads_sizes_hashes_and_commit(hub):
    remote = resolve(REPO)
    assert remote.revision == "0123456789abcdef0123456789abcdef01234567"
    weights = next(f for f in remote.files if f.path == WEIGHTS)
    assert weights.sha256 == sha256_of(hub.source / WEIGHTS) and weights.size == (hub.source / WEIGHTS).stat().st_size
    config = next(f for f in remote.files if f.path == "config.json")
    assert config.sha256 is None and config.git_sha1


@pytest.mark.slow
def test_cli_download_completes_and_verifies(hub, tmp_path):
    dest = tmp_path / "dl"
    out = subprocess.run([sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest)],
                         capture_output=True, text=True, env={**os.environ}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "done" in out.stdout and "%" in out.stdout
    assert same_files(hub.source, dest)
    manifest = json.loads(downloads.record_path(dest).read_text())
    assert manifest["complete"] and manifest["files"][WEIGHTS]["sha256"] == sha256_of(dest / WEIGHTS)
    assert not list(dest.rglob("*.part"))
    verify = subprocess.run([sys.executable, "-m", "runtime", "models", "verify", str(dest)],
                            capture_output=True, text=True, cwd=ROOT)
    assert verify.returncode == 0 and verify.stdout.startswith("ok")


@pytest.mark.slow
def test_killed_download_resumes_in_a_new_process_without_refetching(hub, tmp_path):
    dest = tmp_path / "dl"
    hub.faults[WEIGHTS] = {"throttle": 0.05}
    cmd = [sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest)]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    part = part_of(dest, WEIGHTS)
    deadline = time.time() + 60
    while time.time() < deadline and (not part.exists() or part.stat().st_size < 300_000):
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)  # the app crashed or was closed mid-file
    first.wait()
    had = part.stat().st_size
    total = (hub.source / WEIGHTS).stat().st_size
    assert 300_000 <= had < total
    hub.faults.pop(WEIGHTS)
    before = len(hub.requests)
    second = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert second.returncode == 0, second.stderr
    weights_requests = [r for r in hub.requests[before:] if r["path"] == WEIGHTS]
    assert len(weights_requests) == 1
    assert weights_requests[0]["start"] == had and weights_requests[0]["status"] == 206
    assert weights_requests[0]["sent"] == total - had  # nothing fetched twice
    assert same_files(hub.source, dest)


def test_dropped_connection_is_resumed_with_a_range(hub, tmp_path):
    hub.faults[WEIGHTS] = {"drop_after": 200_000}
    _, final, states = run_download(tmp_path / "dl", backoff=(0.05,))
    assert final.state == DONE and same_files(hub.source, tmp_path / "dl")
    reqs = [r for r in hub.requests if r["path"] == WEIGHTS]
    assert [r["start"] for r in reqs] == [0, 200_000]
    assert any("network connection lost" in s.message or "closed early" in s.message for s in states)


def test_corrupted_bytes_are_detected_and_the_file_refetched(hub, tmp_path):
    hub.faults[WEIGHTS] = {"corrupt": True}
    _, final, states = run_download(tmp_path / "dl", backoff=(0.05,))
    assert final.state == DONE and same_files(hub.source, tmp_path / "dl")
    assert len([r for r in hub.requests if r["path"] == WEIGHTS]) == 2
    assert any("SHA-256" in s.message and "downloaded again" in s.message for s in states)


def test_a_stall_is_reported_and_retried(hub, tmp_path):
    hub.faults[WEIGHTS] = {"stall": 3}
    _, final, states = run_download(tmp_path / "dl", stall_seconds=0.5, backoff=(0.05,))
    assert final.state == DONE and same_files(hub.source, tmp_path / "dl")
    stalled = [s for s in states if s.state == STALLED]
    assert stalled and stalled[0].speed_bps == 0 and "no data for" in stalled[0].message


@pytest.mark.slow
def test_429_waits_and_retries_then_gives_a_clear_message(hub, tmp_path):
    hub.faults[WEIGHTS] = {"status": 429, "times": 1}
    _, final, states = run_download(tmp_path / "a", backoff=(0.05,))
    assert final.state == DONE and any("rate limited" in s.message for s in states)
    hub.faults[WEIGHTS] = {"status": 429}
    with pytest.raises(DownloadError, match="rate limited by the hub"):
        run_download(tmp_path / "b", max_failures=2)


def test_gated_and_missing_repos_say_what_to_do(hub, tmp_path):
    with pytest.raises(DownloadError, match="gated: accept its licence on .*nvidia/Gated"):
        resolve("nvidia/Gated")
    with pytest.raises(DownloadError, match="not found"):
        resolve("nvidia/Nope")
    hub.faults[WEIGHTS] = {"status": 403}
    with pytest.raises(DownloadError, match="gated; accept its licence"):
        run_download(tmp_path / "dl")
    hub.faults[WEIGHTS] = {"status": 401}
    with pytest.raises(DownloadError, match="log in"):
        run_download(tmp_path / "dl2")


def test_too_small_a_disk_is_refused_before_any_byte(hub, tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(downloads.shutil, "disk_usage", lambda p: real(p)._replace(free=10_000_000))
    dest = tmp_path / "dl"
    with pytest.raises(DownloadError, match="not enough disk space"):
        run_download(dest)
    assert not hub.requests and not [p for p in dest.iterdir() if p.name != ".elastic-chat"]
    assert not list((dest / ".elastic-chat" / "parts").iterdir())


def test_offline_mode_fails_fast(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="offline mode"):
        resolve(REPO)
    assert not hub.api_requests and not hub.requests  # it asked nobody, so it waited for nobody


def test_pause_resume_and_cancel(hub, tmp_path):
    hub.faults[WEIGHTS] = {"throttle": 0.02}
    dest = tmp_path / "dl"
    job = Download(resolve(REPO), dest, lambda p: job.pause() if p.done_bytes > 300_000 else None)
    assert job.run().state == PAUSED
    had = part_of(dest, WEIGHTS).stat().st_size
    assert had >= 300_000
    job.on_progress = lambda p: None
    assert job.run().state == DONE and same_files(hub.source, dest)
    assert [r["start"] for r in hub.requests if r["path"] == WEIGHTS][-1] == had

    other = tmp_path / "dl2"
    job = Download(resolve(REPO), other, lambda p: job.cancel() if p.done_bytes > 300_000 else None)
    assert job.run().state == CANCELLED
    assert not list(other.rglob("*.part"))


def test_speed_and_eta_are_reported(hub, tmp_path):
    hub.faults[WEIGHTS] = {"throttle": 0.01}
    _, final, states = run_download(tmp_path / "dl")
    moving = [s for s in states if s.state == "downloading" and s.speed_bps > 0]
    assert moving and all(s.eta_s is not None and s.eta_s >= 0 for s in moving)
    assert states[-1].done_bytes == states[-1].total_bytes
