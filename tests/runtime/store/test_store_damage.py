"""The model store with damaged inputs: one damaged checkpoint folder, download record or
imported.json (entry or whole file) shows up as one entry with one line, and never stops the
others from being listed, verified or deleted. `verify` runs what loading runs."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import UsageError
from runtime.store.download.transfer import record_path
from runtime.store.model_store import delete, import_folder, list_models, verify
from tests.paths import ROOT


@pytest.fixture
def home(home):
    """conftest's store home, with its models folder made (the damaged folders are put there)."""
    (home / "models").mkdir(parents=True)
    return home


def good(home: Path, name: str = "nvidia--Good") -> Path:
    return shutil.copytree(ROOT / "assets" / "demo", home / "models" / name)


def edit_json(path: Path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_header(path: Path, change):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    change(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def first_tensor(header: dict) -> dict:
    return header[next(k for k in header if k != "__metadata__")]


def write_record(folder: Path, data) -> None:
    record_path(folder).parent.mkdir(exist_ok=True)
    record_path(folder).write_text(data if isinstance(data, str) else json.dumps(data))


DAMAGE = {
    "config-not-json": lambda f: (f / "config.json").write_text("{ not json"),
    "config-a-list": lambda f: (f / "config.json").write_text("[1, 2]"),
    "config-wrong-type": lambda f: edit_json(f / "config.json", lambda d: d.update(hidden_size="big")),
    "config-zero-width": lambda f: edit_json(f / "config.json", lambda d: d.update(hidden_size=0)),
    "config-nan": lambda f: (f / "config.json").write_text(
        (f / "config.json").read_text().replace('"hidden_size": ', '"hidden_size": NaN, "x": ')),
    "config-deep-nesting": lambda f: (f / "config.json").write_text("[" * 200_000 + "]" * 200_000),
    "config-a-folder": lambda f: ((f / "config.json").unlink(), (f / "config.json").mkdir()),
    "config-binary": lambda f: (f / "config.json").write_bytes(b"\xff\xfe\x00garbage"),
    "weights-truncated": lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:-99]),
    "weights-huge-header": lambda f: (f / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 60) + b"{}"),
    "weights-dtype-number": lambda f: edit_header(f / "model.safetensors",
                                                  lambda h: first_tensor(h).update(dtype=5)),
    "weights-offsets-text": lambda f: edit_header(f / "model.safetensors",
                                                  lambda h: first_tensor(h).update(data_offsets=["0", "x"])),
    "weights-shape-negative": lambda f: edit_header(f / "model.safetensors",
                                                    lambda h: first_tensor(h).update(shape=[-1, 4])),
    "elastic-wrong-type": lambda f: (f / "elastic.json").write_text('{"format": 5, "submodels": "all"}'),
    "quant-wrong-type": lambda f: (f / "hf_quant_config.json").write_text('{"quantization": 5}'),
    "record-not-json": lambda f: write_record(f, "{"),
    "record-wrong-types": lambda f: write_record(f, {"repo": 1, "revision": [], "files": [], "complete": "yes"}),
    "record-traversal": lambda f: write_record(f, {"repo": "a/b", "revision": "x", "complete": True,
                                                   "files": {"../../../etc/hostname": {"size": 1}}}),
    "record-escape-name": lambda f: write_record(f, {"repo": "a/b", "revision": "x", "complete": True,
                                                     "files": {"\x1b[2Jx": {"size": 1}}}),
    "record-deep-nesting": lambda f: write_record(f, "[" * 200_000 + "]" * 200_000),
    "record-bad-repo": lambda f: write_record(f, {"repo": "../../x", "revision": "x", "complete": True, "files": {}}),
    "record-link": lambda f: (record_path(f).parent.mkdir(), record_path(f).symlink_to("/etc/hostname")),
    "legacy-record-damaged": lambda f: (f / ".elastic-chat-download.json").write_text('{"files": 7}'),
    "name-with-escape": lambda f: None,  # the folder's own name holds a terminal escape (below)
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_one_damaged_folder_never_breaks_the_others(home, kind):
    ok = good(home)
    name = "bad\x1b[31m" if kind == "name-with-escape" else "nvidia--Bad"
    bad = good(home, name)
    DAMAGE[kind](bad)
    if kind == "name-with-escape":
        (bad / "config.json").write_text("{")
    models = {m.name: m for m in list_models()}
    shown = next(m for m in models.values() if m.path == bad)
    assert shown.problem and "\n" not in shown.problem and "\x1b" not in shown.problem + shown.name
    assert models["nvidia--Good"].problem == "" and models["demo"].problem == ""
    report = verify(bad)
    assert not report.ok and all("\n" not in p and "\x1b" not in p for p in report.problems)
    assert "hostname" not in " ".join(report.problems) or "not a plain" in " ".join(report.problems) or \
        "unsafe" in " ".join(report.problems) or "damaged" in " ".join(report.problems)
    assert "deleted nvidia--Good" in delete("nvidia--Good") and not ok.exists()


@pytest.mark.slow
def test_the_cli_lists_and_verifies_next_to_many_damaged_folders(home):
    good(home)
    for i, damage in enumerate(DAMAGE.values()):
        damage(good(home, f"bad-{i}"))
    env = {**os.environ, "ELASTIC_CHAT_HOME": str(home)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "runtime", "models", *args], capture_output=True, text=True,
                              cwd=ROOT, env=env)

    listing = run("list")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr and "\x1b" not in listing.stdout
    rows = {line.split()[0]: line for line in listing.stdout.splitlines() if line.startswith("  ")}
    assert rows["nvidia--Good"].endswith("ready") and all(not rows[f"bad-{i}"].endswith("ready")
                                                          for i in range(len(DAMAGE) - 1))
    for i in (0, 4, 9, 16):
        out = run("verify", str(home / "models" / f"bad-{i}"))
        assert out.returncode == 1 and out.stdout.splitlines()[-1].startswith("FAILED") and not out.stderr
    assert run("delete", "nvidia--Good").returncode == 0


IMPORTED = {
    "not-json": "{",
    "an-object": "{}",
    "a-string": '"x"',
    "deep-nesting": "[" * 200_000 + "]" * 200_000,
    "binary": "\udcff",
    "huge-number": "[1e999999]",
}


@pytest.mark.parametrize("kind", IMPORTED)
def test_a_damaged_imported_json_is_one_line_and_kept(home, kind):
    good(home)
    path = home / "models" / "imported.json"
    path.write_text(IMPORTED[kind], errors="surrogateescape")
    before = path.read_bytes()
    models = {m.name: m for m in list_models()}
    assert models["nvidia--Good"].problem == "" and "demo" in models
    if kind == "huge-number":  # valid JSON: a list holding a number, so one damaged entry
        assert "entry 1" in models["imported-entry-1"].problem
        assert "forgot" in delete("imported-entry-1") and json.loads(path.read_text()) == []
        return
    damaged = models["imported.json"]
    assert "is damaged" in damaged.problem and "\n" not in damaged.problem
    with pytest.raises(UsageError, match="is damaged"):
        import_folder(shutil.copytree(ROOT / "assets" / "demo", home / "elsewhere"))
    with pytest.raises(UsageError, match="fix or remove it yourself"):
        delete("imported.json")
    assert "deleted nvidia--Good" in delete("nvidia--Good")
    assert path.read_bytes() == before  # never overwritten: it may hold the user's only list


def test_damaged_imported_entries_are_one_line_each_and_removable(home, tmp_path):
    keep = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "mine")
    entries = [1, "x", {"name": 5, "path": "/x"}, {"name": "no-path"}, {"name": "list-path", "path": ["x"]},
               {"name": "relative", "path": "relative/path"}, {"name": "\x1b[31mred", "path": "/x"},
               {"name": "nul", "path": "/x\x00y"}, {"name": " spaced ", "path": "/x"},
               {"name": "gone", "path": "/nope"},
               {"name": "mine", "path": str(keep)}]
    path = home / "models" / "imported.json"
    path.write_text(json.dumps(entries))
    models = {m.name: m for m in list_models()}
    assert models["mine"].problem == "" and models["mine"].submodels == ("1.5M", "1.0M", "0.5M")
    damaged = [m for m in models.values() if m.source == "imported" and m.name != "mine"]
    assert len(damaged) == len(entries) - 1
    assert all(m.problem and "\n" not in m.problem and "\x1b" not in m.name + m.problem for m in damaged)
    assert "no longer exists" in models["gone"].problem
    assert "forgot" in delete("imported-entry-1")
    assert "forgot" in delete("relative")
    left = json.loads(path.read_text())
    assert len(left) == len(entries) - 2 and left[-1] == {"name": "mine", "path": str(keep)}  # the rest kept as is
    assert "left untouched" in delete("mine") and keep.exists()


@pytest.mark.slow
def test_verify_without_a_record_says_what_it_checked(home, tmp_path):
    folder = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "plain")
    report = verify(folder)
    assert report.ok and report.checked == 0 and report.recorded == 0
    assert "no file hashes were recorded" in report.summary and "loader's checks" in report.summary
    out = subprocess.run([sys.executable, "-m", "runtime", "models", "verify", str(folder)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("ok: ") and "no file hashes were recorded" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args, expected", [
    (["verify", "/no/such/folder"], "is not a folder"),
    (["probe", "--context", "0"], "--context is 0; it must be"),
    (["probe", "--context", "999999999999"], "--context is 999999999999; it must be"),
    (["download", "nvidia/x", "--stall-seconds", "nan"], "--stall-seconds is nan; it must be a finite number"),
    (["download", "nvidia/x", "--stall-seconds", "-1"], "--stall-seconds is -1.0; it must be"),
    (["import", str(ROOT / "assets" / "demo"), "--name", "\x1b[2Jx"], "choose a short plain name"),
    (["import", str(ROOT / "README.md")], "is not a folder"),
    (["delete", "\x1b[2J"], "no model called"),
])
def test_cli_values_get_one_line_and_exit_2(home, args, expected):
    out = subprocess.run([sys.executable, "-m", "runtime", "models", *args], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "ELASTIC_CHAT_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2 and out.stderr.startswith("error: ") and expected in out.stderr
    assert out.stderr.count("\n") == 1 and "\x1b" not in out.stderr


@pytest.mark.slow
def test_download_into_the_models_folder_itself_is_refused(home):
    out = subprocess.run([sys.executable, "-m", "runtime", "models", "download", "nvidia/x", "--dest",
                          str(home / "models")], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "ELASTIC_CHAT_HOME": str(home)})
    assert out.returncode == 2 and "--dest is the models folder itself" in out.stderr


def _in_time(fn, seconds: float = 30.0):
    """fn() in a thread: a read that blocks (a FIFO) fails the test instead of hanging the suite."""
    import threading

    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "it hung"
    return out[0]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_imported_json_that_is_not_a_plain_file_never_hangs_list_or_delete(home, kind):
    """A FIFO as imported.json hung `models list` and `models delete`."""
    good(home)
    path = home / "models" / "imported.json"
    {"fifo": lambda: os.mkfifo(path), "dev-zero": lambda: path.symlink_to("/dev/zero"),
     "folder": lambda: path.mkdir()}[kind]()
    models = {m.name: m for m in _in_time(list_models)}
    assert "is damaged" in models["imported.json"].problem and models["nvidia--Good"].problem == ""
    assert "deleted nvidia--Good" in _in_time(lambda: delete("nvidia--Good"))


@pytest.mark.parametrize("part", ["download.json", "download.journal"])
def test_a_download_record_that_is_a_fifo_never_hangs_list_or_delete(home, part):
    folder = good(home)
    record = record_path(folder)
    record.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(record.parent / part)
    models = {m.name: m for m in _in_time(list_models)}
    assert "\n" not in models["nvidia--Good"].problem
    assert "deleted nvidia--Good" in _in_time(lambda: delete("nvidia--Good"))
