"""The download record: linear in the number of files (a snapshot written once at the start of a new
record and once at the end, one journal line per verified file between), and crash safe (a killed
download resumes, trusts the files whose line it finished, and hashes or refuses the others)."""

import json
import signal
import subprocess
import sys
import time

import pytest

from runtime.errors import ElasticError
from runtime.store.download import record, transfer
from runtime.store.download.record import journal_path, read_manifest, record_path
from runtime.store.download.transfer import DONE, VERIFYING, Download, DownloadError, resolve
from tests.hub_stub import HubStub
from tests.paths import ROOT

REPO = "nvidia/Many"
MANY = {f"shard-{i:03d}.json": bytes([65 + i % 26]) for i in range(60)}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    (tmp_path / "repo").mkdir()
    with HubStub({REPO: tmp_path / "repo"}, virtual={REPO: dict(MANY)}) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("ELASTIC_CHAT_HOME", str(tmp_path / "home"))
        yield stub


def test_the_snapshot_is_written_twice_whatever_the_file_count(hub, tmp_path, monkeypatch):
    """It was rewritten after every file: 2,000 one-byte files took 15 s, 6,000 took 116 s."""
    writes = []
    real = transfer.write_record
    monkeypatch.setattr(transfer, "write_record", lambda folder, m: (writes.append(len(m["files"])), real(folder, m)))
    dest = tmp_path / "dl"
    assert Download(resolve(REPO), dest).run().state == DONE
    assert writes == [0, len(MANY)]  # the new record, then the whole one at the end
    assert not journal_path(dest).exists()  # folded into the snapshot
    snapshot = json.loads(record_path(dest).read_text())
    assert snapshot["complete"] and set(snapshot["files"]) == set(MANY)
    writes.clear()
    assert Download(resolve(REPO), dest).run().state == DONE and writes == [len(MANY)]  # nothing new: one write


def test_while_a_download_runs_the_record_is_the_snapshot_and_its_journal(hub, tmp_path):
    dest = tmp_path / "dl"
    seen = []

    def look(p):
        if p.file == "shard-030.json" and not seen:
            seen.append(read_manifest(dest))

    assert Download(resolve(REPO), dest, look).run().state == DONE
    during = seen[0]
    assert not during["complete"] and 25 <= len(during["files"]) <= 31
    assert set(during["files"]) <= set(MANY) and not journal_path(dest).exists()  # folded in at the end


def test_a_killed_download_resumes_from_its_journal(hub, tmp_path):
    for name in MANY:
        hub.faults[name] = {"throttle": 0.05}
    dest = tmp_path / "dl"
    cmd = [sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest)]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.time() + 120
    while time.time() < deadline and len([p for p in dest.glob("shard-*")]) < 12:
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    in_place = {p.name for p in dest.glob("shard-*")}
    recorded = read_manifest(dest)["files"]
    assert len(in_place) >= 12 and set(recorded) <= in_place and len(recorded) >= len(in_place) - 1
    hub.faults.clear()
    before = len(hub.requests)
    second = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    assert second.returncode == 0, second.stderr
    fetched = {r["path"] for r in hub.requests[before:]}
    assert not fetched & set(recorded)  # what the journal vouched for was not fetched again
    assert all((dest / n).read_bytes() == data for n, data in MANY.items())
    assert read_manifest(dest)["complete"]


def crash_state(dest, torn: str) -> dict:
    """The record as a kill leaves it: a snapshot without files, a journal whose line for `torn` was
    never finished. Returns the complete entries (from a finished download) it was made from."""
    entries = json.loads(record_path(dest).read_text())["files"]
    head = json.loads(record_path(dest).read_text())
    record_path(dest).write_text(json.dumps({**head, "files": {}, "complete": False}))
    lines = [json.dumps({"repo": head["repo"], "revision": head["revision"]})]
    lines += [json.dumps({"path": n, **e}) for n, e in entries.items() if n != torn]
    cut = json.dumps({"path": torn, **entries[torn]})
    journal_path(dest).write_text("\n".join(lines) + "\n" + cut[:len(cut) // 2])
    return entries


def test_a_file_whose_journal_line_was_cut_short_is_hashed_again(hub, tmp_path):
    dest = tmp_path / "dl"
    assert Download(resolve(REPO), dest).run().state == DONE
    crash_state(dest, "shard-007.json")
    assert set(read_manifest(dest)["files"]) == set(MANY) - {"shard-007.json"}
    states, before = [], len(hub.requests)
    assert Download(resolve(REPO), dest, states.append).run().state == DONE
    assert [s.file for s in states if s.state == VERIFYING] == ["shard-007.json"]  # hashed, not trusted
    assert len(hub.requests) == before  # and found right: nothing fetched


def test_a_file_changed_whose_line_was_cut_short_is_not_trusted(hub, tmp_path):
    dest = tmp_path / "dl"
    assert Download(resolve(REPO), dest).run().state == DONE
    crash_state(dest, "shard-007.json")
    (dest / "shard-007.json").write_bytes(b"?")  # same size, other byte: not the file we finished
    with pytest.raises(DownloadError, match="already exists and is not the hub's 'shard-007.json'"):
        Download(resolve(REPO), dest).run()
    assert (dest / "shard-007.json").read_bytes() == b"?"  # left alone: nothing says we wrote it


@pytest.mark.parametrize("journal", ['{"repo": "nvidia/Many", "revision": "' + "1" * 40 + '"}\n{"path": "x"}\n',
                                     "not json\n"], ids=["another-revision", "damaged"])
def test_a_stale_or_damaged_journal_is_never_trusted(hub, tmp_path, journal):
    dest = tmp_path / "dl"
    assert Download(resolve(REPO), dest).run().state == DONE
    record_path(dest).write_text(json.dumps({**json.loads(record_path(dest).read_text()), "complete": False}))
    journal_path(dest).write_text(journal)
    if journal.startswith("not"):
        with pytest.raises(DownloadError, match="is damaged"):
            read_manifest(dest)
    else:
        assert set(read_manifest(dest)["files"]) == set(MANY)  # the stale lines change nothing
    assert Download(resolve(REPO), dest).run().state == DONE and not journal_path(dest).exists()


def test_a_journal_planted_as_a_link_is_not_written_through(hub, tmp_path):
    dest, victim = tmp_path / "dl", tmp_path / "victim.txt"
    victim.write_text("the user's")
    (dest / ".elastic-chat").mkdir(parents=True)
    journal_path(dest).symlink_to(victim)
    with pytest.raises(ElasticError) as e:
        Download(resolve(REPO), dest).run()
    assert "\n" not in str(e.value) and victim.read_text() == "the user's"
    assert record.JOURNAL == journal_path(dest).name
