"""The downloader against a hostile hub: remote names, file-list metadata, symbolic links planted in
the destination, bodies longer than listed, trickling and silent servers, and the legitimate repos
(subfolders, empty files) that must still work. Each class is tried with several variants; a held
back variant of the same class must behave the same way (refused before anything touches the disk,
one line)."""

import os
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest

from runtime.errors import ElasticError
from runtime.store.download.transfer import (
    DONE,
    PAUSED,
    STALLED,
    Download,
    DownloadError,
    record_path,
    resolve,
    sha256_of,
)
from runtime.store.model_store import verify
from tests.paths import ROOT
from tests.store_support import part_of

REPO = "nvidia/Hostile"
GOOD = {"config.json": b'{"a": 1}\n', "model.safetensors": os.urandom(300_000)}


@pytest.fixture
def hub(tmp_path, serve_hub):
    (tmp_path / "empty-repo").mkdir()
    return serve_hub({REPO: tmp_path / "empty-repo"}, virtual={REPO: dict(GOOD)})


def outside_untouched(tmp_path: Path) -> None:
    """Nothing new next to the destination, nothing in the stub's folder, nothing at the absolute path."""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt", "empty-repo"]
    assert not list((tmp_path / "empty-repo").iterdir()) and not Path("/tmp/abs-evil.txt").exists()


def user_files(dest: Path) -> list[Path]:
    return [p for p in dest.rglob("*") if ".elastic-chat" not in p.relative_to(dest).parts] if dest.exists() else []


# ----------------------------------------------------------------------------- remote names

UNSAFE_NAMES = [
    "../../evil.txt", "../evil.txt", "sub/../../evil.txt", "sub/..", "/tmp/abs-evil.txt", "//server/share/x",
    "C:/evil.txt", "C:evil.txt", "..\\..\\evil.txt", "sub\\evil.txt", "evil\x00.txt", "evil\x1b[2J.txt",
    "line\nbreak", "", ".", "sub/./x", "a//b", "trailing/", ".elastic-chat/download.json", ".elastic-chat/lock",
    ".Elastic-Chat/parts/x.part", ".elastic-chat-download.json", "imported.json", "CON", "sub/nul.txt", "com1.json",
    "x" * 300, "a/" * 40 + "x", "file.txt:stream", "dot.", "space ", "\u202eevil.txt", "zero\u200bwidth",
]


@pytest.mark.parametrize("name", UNSAFE_NAMES, ids=range(len(UNSAFE_NAMES)))
def test_an_unsafe_remote_name_is_refused_before_any_byte(hub, tmp_path, name):
    (tmp_path / "canary.txt").write_text("keep me")
    hub.virtual[REPO][name] = b"evil"
    with pytest.raises(DownloadError) as e:
        Download(resolve(REPO), tmp_path / "dl").run()
    message = str(e.value)
    assert "\n" not in message and "\x1b" not in message and "\x00" not in message
    assert "cannot be used" in message and "Nothing was written" in message
    assert not hub.requests and not (tmp_path / "dl").exists()
    assert (tmp_path / "canary.txt").read_text() == "keep me" and not list(tmp_path.rglob("evil*"))
    outside_untouched(tmp_path)


DUPLICATES = [
    ["Config.json", "config.json"],
    [unicodedata.normalize("NFC", "café.json"), unicodedata.normalize("NFD", "café.json")],
    ["sub", "sub/file.json"],
    ["SUB/a.json", "sub"],
    ["a.json", "a.json"],
]


@pytest.mark.parametrize("names", DUPLICATES, ids=range(len(DUPLICATES)))
def test_names_that_are_one_file_somewhere_are_refused(hub, tmp_path, names):
    for n in names:
        hub.virtual[REPO][n] = b"x"
    if names[0] == names[1]:  # the stub's dict cannot hold one name twice: list it twice by hand
        hub.raw_siblings[REPO] = [{"rfilename": n, "size": 1, "blobId": "0" * 40} for n in names]
    with pytest.raises(DownloadError, match="cannot be used"):
        Download(resolve(REPO), tmp_path / "dl").run()
    assert not hub.requests and not (tmp_path / "dl").exists()


BAD_METADATA = [
    {"rfilename": "a.json", "size": "12", "blobId": "0" * 40},
    {"rfilename": "a.json", "size": -1, "blobId": "0" * 40},
    {"rfilename": "a.json", "size": 1e30, "blobId": "0" * 40},
    {"rfilename": "a.json", "size": True, "blobId": "0" * 40},
    {"rfilename": "a.json", "size": 10, "blobId": "not-a-hash"},
    {"rfilename": "a.safetensors", "size": 10, "lfs": {"sha256": "zz", "size": 10, "pointerSize": 1}},
    {"rfilename": "a.safetensors", "size": 10, "lfs": "yes"},
    {"rfilename": 123, "size": 1, "blobId": "0" * 40},
    {"size": 1},
    "just a string",
]


@pytest.mark.parametrize("sibling", BAD_METADATA, ids=range(len(BAD_METADATA)))
def test_a_file_list_with_wrong_types_is_one_line(hub, tmp_path, sibling):
    hub.raw_siblings[REPO] = [{"rfilename": "ok.json", "size": 1, "blobId": "0" * 40}, sibling]
    with pytest.raises(DownloadError) as e:
        Download(resolve(REPO), tmp_path / "dl").run()
    assert "\n" not in str(e.value) and ("cannot be used" in str(e.value) or "could not be read" in str(e.value))
    assert not hub.requests and not (tmp_path / "dl").exists()


@pytest.mark.slow
def test_cli_refuses_a_traversal_with_one_line_and_exit_2(hub, tmp_path):
    hub.virtual[REPO]["../../evil.txt"] = b"evil"
    dest = tmp_path / "a" / "b" / "dl"
    out = subprocess.run([sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr and not list(tmp_path.rglob("evil.txt"))


@pytest.mark.slow
@pytest.mark.parametrize("repo", ["../../x", "a/b/c", "..", "a--b/c", "owner/na me", "owner/\x1b[31m", "owner/.hidden"])
def test_a_hostile_repo_id_is_refused(hub, tmp_path, repo):
    out = subprocess.run([sys.executable, "-m", "runtime", "models", "download", repo], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "ELASTIC_CHAT_HOME": str(tmp_path / "home")})
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "not a hub repo id" in out.stderr
    assert "\x1b" not in out.stderr and not (tmp_path / "home").exists()


TOOL_NAMES = [
    ".git/config", "sub/.git/config", ".GIT/config", ".git", "Git~1/config", ".hg/hgrc", ".svn/wc.db",
    ".bzr/branch/branch.conf", "CVS/Root", "_darcs/prefs/defaults", ".jj/repo/config.toml", ".pijul/config",
    ".sl/config", ".fslckout", "_FOSSIL_", ".envrc", "sub/.envrc", ".env", ".direnv/x.sh", "mise.toml",
    ".vscode/tasks.json", ".idea/workspace.xml", ".devcontainer/devcontainer.json", ".helix/languages.toml",
    ".dir-locals.el", ".exrc", ".nvim.lua", ".hooks/post-checkout", ".husky/pre-commit", "desktop.ini",
    "Desktop.INI", "autorun.inf", "x.scf", "sub/evil.url", "shortcut.LNK", "a.library-ms",
]


@pytest.mark.parametrize("name", TOOL_NAMES, ids=range(len(TOOL_NAMES)))
def test_a_name_a_tool_acts_on_is_refused_before_any_byte(hub, tmp_path, name):
    """A `.git/config` with core.fsmonitor in a model folder runs the hub's command at the next
    `git status` there; every name of that class (version control, shell environment, editor,
    Explorer), at any depth and in any case, is refused like a traversal."""
    hub.virtual[REPO][name] = b"[core]\n\tfsmonitor = touch /tmp/owned\n"
    with pytest.raises(DownloadError) as e:
        Download(resolve(REPO), tmp_path / "dl").run()
    assert "cannot be used" in str(e.value) and "\n" not in str(e.value)
    assert not hub.requests and not (tmp_path / "dl").exists()


BARE_REPOS = [["HEAD", "config", "objects/ab/cdef", "refs/heads/main"],
              ["sub/HEAD", "sub/config", "sub/objects/x", "sub/refs/x"],
              ["head", "Objects/x", "REFS/x"]]


@pytest.mark.parametrize("names", BARE_REPOS, ids=["top", "nested", "any-case"])
def test_a_folder_shaped_like_a_bare_git_repository_is_refused(hub, tmp_path, names):
    for n in names:
        hub.virtual[REPO][n] = b"ref: refs/heads/main\n" if n.lower().endswith("head") else b"x"
    with pytest.raises(DownloadError, match="git takes for a repository"):
        Download(resolve(REPO), tmp_path / "dl").run()
    assert not hub.requests


def test_names_near_the_tool_names_still_download(hub, tmp_path):
    near = [".gitattributes", ".gitignore", ".github/workflows/ci.yml", "HEAD", "objects/x.json", "refs.json",
            ".DS_Store", "env.json", "git/readme.md", "vscode.md", "environment.yml", "url.txt", "GIT~.md"]
    for n in near:
        hub.virtual[REPO][n] = n.encode()
    assert Download(resolve(REPO), tmp_path / "dl").run().state == DONE
    assert all((tmp_path / "dl" / n).read_bytes() == n.encode() for n in near)


# ----------------------------------------------------------------------------- the destination

def plant_link_to_file(dest: Path, outside: Path):
    (dest / "config.json").symlink_to(outside / "victim.txt")


def plant_link_to_folder(dest: Path, outside: Path):
    (dest / "sub").symlink_to(outside, target_is_directory=True)


def plant_bookkeeping_link(dest: Path, outside: Path):
    (dest / ".elastic-chat").symlink_to(outside, target_is_directory=True)


def plant_parts_link(dest: Path, outside: Path):
    (dest / ".elastic-chat").mkdir()
    (dest / ".elastic-chat" / "parts").symlink_to(outside, target_is_directory=True)


def plant_part_link(dest: Path, outside: Path):
    part_of(dest, "model.safetensors").parent.mkdir(parents=True)
    part_of(dest, "model.safetensors").symlink_to(outside / "victim.txt")


def plant_part_hardlink(dest: Path, outside: Path):
    part_of(dest, "model.safetensors").parent.mkdir(parents=True)
    os.link(outside / "victim.txt", part_of(dest, "model.safetensors"))


def plant_foreign_file(dest: Path, outside: Path):
    (dest / "config.json").write_text("the user's own file")


def plant_folder_where_a_file_goes(dest: Path, outside: Path):
    (dest / "config.json").mkdir()


PLANTS = [plant_link_to_file, plant_link_to_folder, plant_bookkeeping_link, plant_parts_link, plant_part_link,
          plant_part_hardlink, plant_foreign_file, plant_folder_where_a_file_goes]


@pytest.mark.parametrize("plant", PLANTS, ids=[p.__name__ for p in PLANTS])
def test_what_is_planted_in_the_destination_is_never_followed_or_overwritten(hub, tmp_path, plant):
    hub.virtual[REPO]["sub/x.json"] = b"{}"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("the user's data")
    dest = tmp_path / "dl"
    dest.mkdir()
    plant(dest, outside)
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink()}
    with pytest.raises(ElasticError) as e:
        Download(resolve(REPO), dest).run()
    assert "\n" not in str(e.value)
    assert (outside / "victim.txt").read_text() == "the user's data"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    for p, data in before.items():
        assert p.read_bytes() == data


def test_a_destination_that_is_itself_a_link_is_the_users_choice(hub, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "dl").symlink_to(real, target_is_directory=True)
    assert Download(resolve(REPO), tmp_path / "dl").run().state == DONE
    assert (real / "config.json").read_bytes() == GOOD["config.json"]


@pytest.mark.parametrize("where", ["home", "root"])
def test_the_home_folder_or_above_is_not_a_destination(hub, tmp_path, monkeypatch, where):
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    (tmp_path / "me").mkdir()
    with pytest.raises(DownloadError, match="holds your home folder"):
        Download(resolve(REPO), tmp_path / "me" if where == "home" else Path("/")).run()
    assert not hub.requests and list((tmp_path / "me").iterdir()) == []


def test_a_destination_that_is_a_file_is_one_line(hub, tmp_path):
    (tmp_path / "dl").write_text("x")
    with pytest.raises(DownloadError, match="is a file, not a folder"):
        Download(resolve(REPO), tmp_path / "dl").run()


# ----------------------------------------------------------------------------- legitimate repos

def test_subfolders_and_empty_files_download_and_verify(hub, tmp_path):
    extra = {".gitkeep": b"", "empty/.gitkeep": b"", "sub/deeper/tokenizer_extra.json": b'{"x": 2}',
             "sub/empty.safetensors": b"", "sub/weights.safetensors": os.urandom(100_000)}
    hub.virtual[REPO].update(extra)
    hub.faults["sub/weights.safetensors"] = {"drop_after": 30_000}
    dest = tmp_path / "dl"
    final = Download(resolve(REPO), dest, backoff=(0.05,)).run()
    assert final.state == DONE and final.done_bytes == final.total_bytes
    for name, data in {**GOOD, **extra}.items():
        assert (dest / name).read_bytes() == data
    report = verify(dest)
    assert report.checked == report.recorded == len(GOOD) + len(extra)
    assert not any("SHA-256" in p or "git hash" in p or "missing" in p for p in report.problems)
    again = Download(resolve(REPO), dest).run()  # a second run trusts its record: nothing fetched
    assert again.state == DONE and len([r for r in hub.requests if r["path"] == "config.json"]) == 1


# ----------------------------------------------------------------------------- bodies and timing

BODIES = [{"extra": 5_000_000}, {"endless": True}, {"extra": 1, "drop_after": 100_000}, {"wrong_range": True,
                                                                                           "drop_after": 100_000}]


@pytest.mark.parametrize("fault", BODIES, ids=["declared-extra", "endless", "extra-after-resume", "wrong-range"])
def test_a_body_longer_than_listed_stops_at_the_listed_size(hub, tmp_path, fault):
    hub.faults["model.safetensors"] = dict(fault)
    states = []
    dest = tmp_path / "dl"
    final = Download(resolve(REPO), dest, states.append, backoff=(0.05,)).run()
    assert final.state == DONE
    assert (dest / "model.safetensors").read_bytes() == GOOD["model.safetensors"]
    assert all(s.done_bytes <= s.total_bytes and s.fraction <= 1.0 for s in states)
    on_disk = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert on_disk < sum(map(len, GOOD.values())) + 100_000  # the junk never reached the disk


@pytest.mark.slow
def test_a_trickle_counts_as_stalled_and_gives_up(hub, tmp_path):
    hub.faults["model.safetensors"] = {"trickle": 0.02}
    states = []
    with pytest.raises(DownloadError, match="stalled: only .* bytes/s.*gave up after 2 tries"):
        Download(resolve(REPO), tmp_path / "dl", states.append, stall_seconds=0.5, max_failures=2,
                 backoff=(0.05,)).run()
    stalled = [s for s in states if s.state == STALLED]
    assert stalled and "bytes/s" in stalled[0].message
    assert part_of(tmp_path / "dl", "model.safetensors").stat().st_size > 0  # what arrived is kept for a resume


@pytest.mark.parametrize(("fault", "blocked"), [({"silent": 60}, True), ({"trickle": 0.5}, False)],
                         ids=["silent", "trickle"])
def test_pause_acts_during_a_blocked_read(hub, tmp_path, fault, blocked, monkeypatch):
    """Without closing the socket under the read, these would wait out stall_seconds (60 s) to pause, and
    report a stall first: the pause shuts the socket a silent server's read is blocked on (the hub call's
    watcher); a trickle's reads return between bytes, and the flag is seen there."""
    import threading

    from runtime.store.download import hub_http

    cut, real = [], hub_http.HubCall._abort
    monkeypatch.setattr(hub_http.HubCall, "_abort", lambda call, why: (cut.append(why), real(call, why))[1])
    hub.faults["model.safetensors"] = fault
    states = []
    job = Download(resolve(REPO), tmp_path / "dl", states.append, stall_seconds=60)
    timer = threading.Timer(1.0, job.pause)
    timer.start()
    assert job.run().state == PAUSED
    assert not [s for s in states if s.state == STALLED]
    assert "stopped" in cut or not blocked


@pytest.mark.slow
def test_ctrl_c_pauses_a_trickling_download_at_once(hub, tmp_path):
    hub.faults["model.safetensors"] = {"trickle": 0.5}
    dest = tmp_path / "dl"
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "models", "download", REPO, "--dest", str(dest),
                             "--stall-seconds", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    deadline = time.time() + 60
    while time.time() < deadline and not any(r["path"] == "model.safetensors" and r["sent"] for r in hub.requests):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)  # a full-MiB read would have waited for minutes
    assert proc.returncode == 1 and "paused" in out and err.startswith("error: download paused")
    assert record_path(dest).parent.exists()


def weights_part(dest: Path) -> Path:
    import hashlib

    return dest / ".elastic-chat" / "parts" / (hashlib.sha256(b"model.safetensors").hexdigest()[:40] + ".part")


def cancel_after(hub, job_box: list, requests: int):
    """A progress callback that cancels after `requests` tries of the weights: the bound that a loop that
    never gives up runs into (the test then fails on the state, it does not hang)."""
    def watch(p):
        if len([r for r in hub.requests if r["path"] == "model.safetensors"]) > requests:
            job_box[0].cancel()
    return watch


RETRIES = [({"no_range": True, "drop_after": 65_536}, "does not resume .* none got past 70,000 bytes"),
           ({"drop_every": 1_000}, "closed early"),
           ({"status": 500}, "server error")]


@pytest.mark.parametrize(("fault", "why"), RETRIES, ids=["ignores-range-and-drops", "drops-each-try-early", "500"])
def test_tries_without_progress_are_bounded(hub, tmp_path, fault, why):
    """A server that answers a resume with the whole file and drops at 64 KB once looped forever (47 tries
    in 45 s, 0 -> 22% -> 0): progress is the furthest point reached, not bytes received."""
    hub.faults["model.safetensors"] = dict(fault)
    weights_part(tmp_path / "dl").parent.mkdir(parents=True)
    weights_part(tmp_path / "dl").write_bytes(GOOD["model.safetensors"][:70_000])  # a resume asks for a range
    box, states = [], []
    box.append(Download(resolve(REPO), tmp_path / "dl", lambda p: (states.append(p), watch(p)), max_failures=4,
                        backoff=(0.01,)))
    watch = cancel_after(hub, box, 30)
    with pytest.raises(DownloadError, match=f"{why}.*gave up after 4 tries without progress") as e:
        box[0].run()
    assert "\n" not in str(e.value)
    assert all(0 <= s.done_bytes <= s.total_bytes for s in states)


def test_a_resume_answered_with_the_whole_file_starts_the_count_over(hub, tmp_path):
    hub.faults["model.safetensors"] = {"no_range": True}
    weights_part(tmp_path / "dl").parent.mkdir(parents=True)
    weights_part(tmp_path / "dl").write_bytes(GOOD["model.safetensors"][:70_000])
    states = []
    assert Download(resolve(REPO), tmp_path / "dl", states.append).run().state == DONE
    assert (tmp_path / "dl" / "model.safetensors").read_bytes() == GOOD["model.safetensors"]
    done = [s.done_bytes for s in states if s.file == "model.safetensors"]
    assert min(done) < 70_000 and max(done) == GOOD["model.safetensors"].__len__() + len(GOOD["config.json"])
    assert all(s.done_bytes <= s.total_bytes for s in states)


def test_tries_that_each_move_the_file_on_are_progress(hub, tmp_path):
    hub.faults["model.safetensors"] = {"drop_every": 65_536}  # five tries for 300 KB, each one further
    final = Download(resolve(REPO), tmp_path / "dl", max_failures=2, backoff=(0.01,)).run()
    assert final.state == DONE and len([r for r in hub.requests if r["path"] == "model.safetensors"]) == 5


def rewrite_in_place(path: Path):
    path.write_bytes(b'{"a": 2}\n')  # same size, other bytes; the clock may not have ticked, so move it
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def replace_by_rename(path: Path):
    path.with_name("tmp").write_bytes(b'{"a": 2}\n')
    os.utime(path.with_name("tmp"), ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))  # even the same mtime
    os.replace(path.with_name("tmp"), path)


@pytest.mark.parametrize("change", [rewrite_in_place, replace_by_rename])
def test_the_file_in_place_is_what_was_hashed(hub, tmp_path, change):
    """A file changed behind the download's back after its check is caught by the final check."""
    dest = tmp_path / "dl"
    done = []

    def tamper(p):
        if p.file == "model.safetensors" and (dest / "config.json").exists() and not done:
            done.append(change(dest / "config.json"))

    with pytest.raises(DownloadError, match="changed after it was verified"):
        Download(resolve(REPO), dest, tamper).run()
    assert Download(resolve(REPO), dest).run().state == DONE  # ours to replace: fetched again
    assert (dest / "config.json").read_bytes() == GOOD["config.json"]
    assert sha256_of(dest / "model.safetensors") == sha256_of_bytes(GOOD["model.safetensors"])


def sha256_of_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_a_download_of_an_older_version_keeps_going(hub, tmp_path):
    """Folders from before the bookkeeping folder: the old record and partial files are adopted."""
    import json

    dest = tmp_path / "dl"
    dest.mkdir()
    (dest / "model.safetensors.part").write_bytes(GOOD["model.safetensors"][:100_000])
    (dest / "config.json").write_bytes(b"old config")
    (dest / ".elastic-chat-download.json").write_text(json.dumps(
        {"repo": REPO, "revision": "1" * 40, "files": {"config.json": {"size": 10, "sha256": None,
                                                                        "git_sha1": None}}, "complete": False}))
    assert Download(resolve(REPO), dest).run().state == DONE
    req = [r for r in hub.requests if r["path"] == "model.safetensors"]
    assert req[0]["start"] == 100_000
    assert (dest / "config.json").read_bytes() == GOOD["config.json"]
    assert not (dest / ".elastic-chat-download.json").exists()
    shutil.rmtree(dest)


@pytest.mark.parametrize("target", ["file:///etc/hostname", "ftp://127.0.0.1/x", "gopher://x/y"])
def test_a_redirect_to_a_non_http_address_is_refused(hub, tmp_path, target):
    hub.faults["model.safetensors"] = {"redirect": target}
    with pytest.raises(DownloadError, match="not an http.s. address it may follow; refusing it"):
        Download(resolve(REPO), tmp_path / "dl").run()
    assert not (tmp_path / "dl" / "model.safetensors").exists()


def test_the_token_does_not_follow_a_redirect_to_another_host(hub, tmp_path, monkeypatch):
    from runtime.store.download import hub_http

    monkeypatch.setitem(hub_http.CDN_DOMAINS, "127.0.0.1", ("localhost",))  # the stand-in's "CDN"
    port = hub.url.rsplit(":", 1)[1]
    hub.faults["model.safetensors"] = {"redirect": f"http://localhost:{port}/{REPO}/resolve/x/{{path}}"}
    assert Download(resolve(REPO), tmp_path / "dl", token="secret").run().state == DONE
    seen = [h for h in hub.headers_seen if h["path"] == "model.safetensors"]
    assert seen[0]["auth"] == "Bearer secret" and seen[0]["host"].startswith("127.0.0.1")
    assert seen[1]["host"].startswith("localhost") and seen[1]["auth"] is None


@pytest.mark.parametrize("record", ["{", "[" * 100_000 + "]" * 100_000, '{"repo": 5}',
                                    '{"repo": "o/r", "revision": "x", '
                                    '"complete": false, "files": {"../../x": {"size": 1}}}'])
def test_a_damaged_record_in_the_destination_starts_a_new_one(hub, tmp_path, record):
    dest = tmp_path / "dl"
    (dest / ".elastic-chat").mkdir(parents=True)
    (dest / ".elastic-chat" / "download.json").write_text(record)
    states = []
    assert Download(resolve(REPO), dest, states.append).run().state == DONE
    assert any("is damaged" in s.message and "starting a new record" in s.message for s in states)
    assert all((dest / n).read_bytes() == data for n, data in GOOD.items())
