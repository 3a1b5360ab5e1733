"""The app's folders on each OS (runtime/paths.py), which the app, the store and the installers all ask."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import paths
from tests.paths import ROOT


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """No override set: each OS's own rule applies."""
    for name in ("ELASTIC_CHAT_HOME", "ELASTIC_CHAT_MODELS", "XDG_DATA_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("platform,env,expected", [
    ("linux", {}, ".local/share/elastic-chat"),
    ("linux", {"XDG_DATA_HOME": "{home}/xdg"}, "xdg/elastic-chat"),
    ("linux", {"XDG_DATA_HOME": ""}, ".local/share/elastic-chat"),  # empty means unset (XDG spec)
    ("darwin", {}, "Library/Application Support/Elastic Chat"),
    ("win32", {"LOCALAPPDATA": "{home}/AppData/Local"}, "AppData/Local/ElasticChat"),
    ("win32", {}, "AppData/Local/ElasticChat"),
    ("darwin", {"ELASTIC_CHAT_HOME": "{home}/mine"}, "mine"),
])
def test_the_data_folder_on_each_os(bare, monkeypatch, platform, env, expected):
    monkeypatch.setattr(sys, "platform", platform)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(home=bare))
    assert paths.data_dir() == bare / expected
    assert paths.models_dir() == paths.default_models_dir() == bare / expected / "models"
    assert paths.log_file(paths.data_dir()) == bare / expected / "elastic-chat.log"
    monkeypatch.setenv("ELASTIC_CHAT_MODELS", str(bare / "big-disk"))
    assert paths.models_dir() == bare / "big-disk" and paths.default_models_dir() == bare / expected / "models"


def test_one_instance_name_per_data_folder(tmp_path):
    a, b = paths.instance_name(tmp_path / "a"), paths.instance_name(tmp_path / "b")
    assert a != b and a == paths.instance_name(tmp_path / "a" / ".." / "a")
    assert paths.socket_path(tmp_path / "a").endswith(paths.socket_file_name(tmp_path / "a"))
    assert paths.socket_path(tmp_path / "a") != paths.socket_path(tmp_path / "b")


def test_the_socket_lives_in_a_folder_of_the_users(tmp_path, monkeypatch):
    """Not in the shared temporary folder, where another user could take its name first."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert Path(paths.socket_path(tmp_path)).parent == tmp_path / "run"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    assert Path(paths.socket_path(tmp_path)).parent == tmp_path / "xdg" / "elastic-chat"
    deep = tmp_path / ("d" * 120)  # too long for a socket's address: the user's folder in the temporary one
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert Path(paths.socket_path(deep)).parent.name == f"elastic-chat-{os.getuid()}"


def test_purge_refuses_what_is_not_the_apps_own(tmp_path):
    home = Path.home()
    for folder in (home, home.parent, Path(home.anchor), ROOT, ROOT / "runtime" / ".."):
        assert paths.purge_problem(folder), folder
    assert paths.purge_problem(Path("relative/data"))
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert "link" in paths.purge_problem(link)
    assert paths.purge_problem(tmp_path / "elastic-chat") == ""


def run_paths(env, *args):
    """The file as the installers run it: any Python, isolated, without the package."""
    return subprocess.run([sys.executable, "-I", str(ROOT / "runtime" / "paths.py"), *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_the_installers_answer(tmp_path):
    data, models = tmp_path / "data", tmp_path / "models"
    env = {"HOME": str(tmp_path), "ELASTIC_CHAT_HOME": str(data)}
    out = run_paths(env)
    assert out.returncode == 0 and f"data\t{data}\n" in out.stdout and f"models\t{data / 'models'}\n" in out.stdout
    assert run_paths(env, "--purgeable").stdout == ""  # nothing there yet: nothing to remove
    data.mkdir()
    models.mkdir()
    assert run_paths(env, "--purgeable").stdout == f"remove\t{data}\n"
    out = run_paths({**env, "ELASTIC_CHAT_MODELS": str(models)}, "--purgeable").stdout.splitlines()
    assert out[0] == f"remove\t{data}" and out[1].startswith(f"keep\t{models}\t")
    home_itself = run_paths({**env, "ELASTIC_CHAT_HOME": str(tmp_path)}, "--purgeable").stdout
    assert home_itself.startswith(f"keep\t{tmp_path}\t")
    assert run_paths(env, "--frobnicate").returncode == 2


def test_the_apps_models_folder_is_this_process_alone(bare, monkeypatch, tmp_path):
    """The app's setting reaches the store in-process: no environment variable, so nothing the app
    starts (an MCP server, a download helper) inherits it; empty goes back to the default."""
    monkeypatch.setenv("ELASTIC_CHAT_MODELS", str(bare / "from-the-shell"))
    before = dict(os.environ)
    try:
        paths.use_models_dir(str(tmp_path / "chosen"))
        assert paths.models_dir() == tmp_path / "chosen" and dict(os.environ) == before
        child = subprocess.run([sys.executable, "-I", str(ROOT / "runtime" / "paths.py")], capture_output=True,
                               text=True, env=os.environ.copy(), check=True)
        assert f"models\t{bare / 'from-the-shell'}" in child.stdout  # a child sees the shell's, not the app's
        paths.use_models_dir("")
        assert paths.models_dir() == bare / "from-the-shell"
    finally:
        paths.use_models_dir(None)
