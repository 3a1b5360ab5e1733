"""A download's destination must be the user's to fill: inside the models folder, new, empty and the
user's, or a folder this program already downloads into. `download --dest /etc` was accepted and wrote
there. The rule (runtime/store/download/destination.py) is asked by the CLI and by the app."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.store.download.destination import check_destination
from runtime.store.download.transfer import DownloadError
from tests.hub_stub import HubStub
from tests.paths import ROOT

REPO = "nvidia/Dest"


@pytest.fixture
def models(tmp_path):
    (tmp_path / "models").mkdir()
    return tmp_path / "models"


def with_a_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("the user's")
    return folder


def written(path: Path) -> Path:
    path.write_text("{}")
    return path


ACCEPTED = {
    "new": lambda t: t / "new" / "deeper",
    "empty": lambda t: (t / "empty").mkdir() or t / "empty",
    "inside-models-with-files": lambda t: with_a_file(t / "models" / "nvidia--Dest"),
    "a-download-of-ours": lambda t: (with_a_file(t / "ours") / ".elastic-chat").mkdir() or t / "ours",
    "an-old-download-of-ours": lambda t: written(with_a_file(t / "old") / ".elastic-chat-download.json").parent,
    "a-link-to-an-empty-folder": lambda t: ((t / "real").mkdir(), (t / "link").symlink_to(t / "real")) and t / "link",
}


@pytest.mark.parametrize("make", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_a_folder_that_is_the_users_to_fill_is_accepted(tmp_path, models, make):
    dest = make(tmp_path)
    assert check_destination(dest, models) == Path(os.path.abspath(dest))


REFUSED = {
    "etc": (lambda t: Path("/etc"), "already holds files"),
    "a-project": (lambda t: with_a_file(t / "project"), "already holds files"),
    "a-link-to-etc": (lambda t: (t / "link").symlink_to("/etc") or t / "link", "already holds files"),
    "a-link-inside-models-to-elsewhere": (lambda t: (t / "models" / "x").symlink_to(with_a_file(t / "p"))
                                          or t / "models" / "x", "already holds files"),
    "our-folder-name-as-a-link": (lambda t: (with_a_file(t / "p") / ".elastic-chat").symlink_to(t) or t / "p",
                                  "already holds files"),
    "a-file": (lambda t: written(t / "f"), "is a file, not a folder"),
}


@pytest.mark.parametrize(("make", "why"), REFUSED.values(), ids=REFUSED.keys())
def test_a_folder_that_is_not_the_users_to_fill_is_refused(tmp_path, models, make, why):
    with pytest.raises(DownloadError, match=why) as e:
        check_destination(make(tmp_path), models)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("where", ["empty", "inside-models"])
def test_another_users_folder_is_refused(tmp_path, models, where):
    folder = tmp_path / "empty" if where == "empty" else models / "theirs"
    folder.mkdir()
    with pytest.raises(DownloadError, match="belongs to another user"):
        check_destination(folder, models, uid=os.stat(folder).st_uid + 1)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    (tmp_path / "repo").mkdir()
    with HubStub({REPO: tmp_path / "repo"}, virtual={REPO: {"config.json": b"{}"}}) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("ELASTIC_CHAT_HOME", str(tmp_path / "home"))
        yield stub


def download(dest) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest)],
                          capture_output=True, text=True, cwd=ROOT, check=False)


def closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("dest", ["/etc", "project"])
def test_the_cli_refuses_a_foreign_destination_before_asking_the_hub(hub, tmp_path, monkeypatch, dest):
    if dest == "/etc":  # no hub to download from: should the rule ever break, nothing can land in /etc
        monkeypatch.setenv("HF_ENDPOINT", closed_port())
    dest = Path(dest) if dest.startswith("/") else with_a_file(tmp_path / dest)
    before = sorted(p.name for p in dest.iterdir())
    out = download(dest)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    assert "already holds files" in out.stderr and not hub.api_requests and not hub.requests
    assert sorted(p.name for p in dest.iterdir()) == before


def test_the_cli_still_downloads_into_a_new_folder_and_resumes_there(hub, tmp_path):
    dest = tmp_path / "new"
    assert download(dest).returncode == 0 and (dest / "config.json").read_bytes() == b"{}"
    assert download(dest).returncode == 0  # the same folder again: a download of ours
