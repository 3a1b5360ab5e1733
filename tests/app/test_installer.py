"""The launcher, single-instance behaviour, crash reporting and the set-up scripts."""

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.launcher import DESKTOP_FILE, install, uninstall
from app.single_instance import ask_running_instance
from runtime.paths import socket_path
from tests.paths import ROOT

EXECUTABLE = Path(sys.executable).with_name("elastic-chat")


@pytest.fixture
def entry(tmp_path):
    apps, desktop = tmp_path / "applications", tmp_path / "Desktop"
    desktop.mkdir()
    written = install(EXECUTABLE, apps, desktop)
    assert written == [apps / DESKTOP_FILE, desktop / DESKTOP_FILE]
    return apps / DESKTOP_FILE


def test_the_desktop_entry_passes_desktop_file_validate(entry):
    tool = shutil.which("desktop-file-validate")
    if tool is None:
        pytest.skip("desktop-file-validate (Debian's desktop-file-utils) is not installed")
    out = subprocess.run([tool, str(entry)], capture_output=True, text=True)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr
    text = entry.read_text()
    assert "Icon=" + str(ROOT / "assets" / "icon.png") in text and (ROOT / "assets" / "icon.png").exists()


def test_uninstall_removes_the_launchers(entry, tmp_path):
    removed = uninstall(tmp_path / "applications", tmp_path / "Desktop")
    assert len(removed) == 2 and not entry.exists()


def exec_command(entry: Path) -> list[str]:
    line = next(x for x in entry.read_text().splitlines() if x.startswith("Exec="))
    return shlex.split(line[len("Exec="):])


def wait_for(name: str, message: str = "status", seconds: float = 60) -> str | None:
    end = time.time() + seconds
    while time.time() < end:
        reply = ask_running_instance(name, message, 300)
        if reply:
            return reply
        time.sleep(0.1)
    return None


@pytest.fixture
def app_env(tmp_path):
    if not EXECUTABLE.exists():
        pytest.skip("the elastic-chat entry point is not installed in this environment (run installer/setup.sh)")
    home = tmp_path / "home"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "ELASTIC_CHAT_HOME": str(home)}
    return env, home


@pytest.mark.slow
def test_the_launcher_starts_the_app_and_a_second_launch_raises_it(qapp, entry, app_env):
    env, home = app_env
    command = exec_command(entry)
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        name = socket_path(home)
        status = wait_for(name)
        assert status is not None and "visible=True" in status and "title=Elastic Chat" in status
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and "already running" in second.stdout
        assert "raised=1" in wait_for(name)
        assert first.poll() is None  # the first one is still there
    finally:
        first.terminate()
        first.wait(timeout=30)


@pytest.mark.slow
def test_a_stale_lock_from_a_crash_does_not_block_the_next_start(qapp, app_env):
    env, home = app_env
    name = socket_path(home)
    stale = Path(name)
    stale.parent.mkdir(parents=True, mode=0o700)
    with socket.socket(socket.AF_UNIX) as s:  # what a crashed instance leaves: a socket nobody listens on
        s.bind(str(stale))
    assert stale.exists() and ask_running_instance(name, "status", 300) is None
    proc = subprocess.Popen([str(EXECUTABLE)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status = wait_for(name)
        assert status is not None and "visible=True" in status
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_uncaught_exceptions_are_logged_and_the_message_names_the_file(tmp_path):
    import logging

    from app import crash

    log_path = tmp_path / "elastic-chat.log"
    handler = logging.FileHandler(log_path)
    logging.getLogger("elastic-chat").addHandler(handler)
    try:
        raise ValueError("boom")
    except ValueError:
        message = crash.report(*sys.exc_info(), log_path)
    finally:
        handler.close()
        logging.getLogger("elastic-chat").removeHandler(handler)
    assert str(log_path) in message and "ValueError: boom" in message
    assert "Traceback" in log_path.read_text() and "boom" in log_path.read_text()


def installer_copy(tmp_path: Path, python: str | None = None) -> Path:
    """A copy of the installer and the file it asks for the app's folders, with a fake .venv (its
    `python`, when given, is that script; else there is none, as after a broken install)."""
    root = tmp_path / "repo"
    (root / "installer").mkdir(parents=True)
    (root / "runtime").mkdir()
    shutil.copy(ROOT / "installer" / "setup.sh", root / "installer" / "setup.sh")
    shutil.copy(ROOT / "runtime" / "paths.py", root / "runtime" / "paths.py")
    (root / ".venv" / "bin").mkdir(parents=True)
    if python is not None:
        (root / ".venv" / "bin" / "python").write_text(python)
        (root / ".venv" / "bin" / "python").chmod(0o755)
    return root


def run_uninstall(root: Path, env: dict, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash"), str(root / "installer" / "setup.sh"), "--uninstall", *flags], env=env,
                          capture_output=True, text=True, timeout=120)


def test_setup_sh_uninstall_keeps_user_data_unless_asked(tmp_path):
    """Runs the real script against a copy of the installer; the .venv is gone, so a Python on the PATH answers."""
    root = installer_copy(tmp_path)
    home, data = tmp_path / "home", tmp_path / "data"
    (home / ".local" / "share" / "applications").mkdir(parents=True)
    (home / ".local" / "share" / "applications" / DESKTOP_FILE).write_text("[Desktop Entry]\n")
    data.mkdir()
    (data / "history.sqlite3").write_text("chats")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ELASTIC_CHAT_HOME": str(data)}
    out = run_uninstall(root, env)
    assert out.returncode == 0, out.stderr
    assert not (root / ".venv").exists() and not (home / ".local/share/applications" / DESKTOP_FILE).exists()
    assert (data / "history.sqlite3").exists() and f"kept your chats, settings and downloaded models in {data}" \
        in out.stderr
    out = run_uninstall(root, env, "--purge")
    assert out.returncode == 0 and not data.exists(), out.stderr
    assert f"removed your chats, settings and downloaded models in {data}" in out.stderr


# The app's Python as it runs on a Mac: the installer must delete the folder the app uses there.
AS_ON_A_MAC = f"""#!/bin/sh
shift
exec {sys.executable} -I -c 'import runpy, sys; sys.platform = "darwin"; sys.argv = sys.argv[1:]; \
runpy.run_path(sys.argv[0], run_name="__main__")' "$@"
"""


def test_setup_sh_purge_deletes_the_folder_the_app_uses_on_a_mac(tmp_path):
    """It used to delete ~/.local/share/elastic-chat on a Mac while saying it removed the chats."""
    root = installer_copy(tmp_path, AS_ON_A_MAC)
    home = tmp_path / "home"
    mac = home / "Library" / "Application Support" / "Elastic Chat"
    linux = home / ".local" / "share" / "elastic-chat"
    for folder in (mac, linux):
        folder.mkdir(parents=True)
        (folder / "history.sqlite3").write_text("chats")
    out = run_uninstall(root, {"PATH": os.environ["PATH"], "HOME": str(home)}, "--purge")
    assert out.returncode == 0, out.stderr
    assert not mac.exists() and f"removed your chats, settings and downloaded models in {mac}" in out.stderr
    assert (linux / "history.sqlite3").exists() and str(linux) not in out.stderr


def test_setup_sh_purge_never_deletes_a_folder_it_was_not_told(tmp_path):
    home = tmp_path / "home"
    (home / "precious").mkdir(parents=True)
    (home / "precious" / "thesis.tex").write_text("years of work")
    # ELASTIC_CHAT_HOME pointing at the home folder: the app may keep chats there, the uninstaller must not purge it
    root = installer_copy(tmp_path / "a")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ELASTIC_CHAT_HOME": str(home)}
    out = run_uninstall(root, env, "--purge")
    assert out.returncode == 0 and (home / "precious" / "thesis.tex").exists(), out.stderr
    assert f"kept {home}: it is the home folder" in out.stderr
    # No Python at all to ask (the .venv is gone and none is on the PATH): nothing of the user's goes
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("dirname", "rm"):
        (tools / tool).symlink_to(shutil.which(tool))
    data = home / ".local" / "share" / "elastic-chat"
    data.mkdir(parents=True)
    (data / "history.sqlite3").write_text("chats")
    root = installer_copy(tmp_path / "b")
    out = run_uninstall(root, {"PATH": str(tools), "HOME": str(home)}, "--purge")
    assert out.returncode == 0, out.stderr
    assert (data / "history.sqlite3").exists() and "nothing of yours was removed" in out.stderr
    assert not (root / ".venv").exists()


def test_setup_ps1_as_far_as_this_machine_allows():
    """No PowerShell here: check the script's structure and the choices it must make."""
    text = (ROOT / "installer" / "setup.ps1").read_text()
    code = re.sub(r"#.*", "", re.sub(r'"[^"\n]*"', '""', text))
    assert code.count("{") == code.count("}") and code.count("(") == code.count(")")
    assert "download.pytorch.org/whl/cu" in text  # Windows CUDA torch comes from PyTorch's index
    assert "pythonw.exe" in text and "-m app.main" in text  # shortcuts open no console window
    assert "[switch]$Uninstall" in text and "[switch]$Purge" in text and "kept your chats" in text
    assert 'GetFolderPath("Programs")' in text and 'GetFolderPath("Desktop")' in text
    assert "$LASTEXITCODE" in text and "torch==$TorchVersion" in text
    # -Purge deletes what the app names (runtime/paths.py), never a folder of the script's own making
    assert '"runtime\\paths.py"' in text and "--purgeable" in text
    assert "LOCALAPPDATA" not in text and "ELASTIC_CHAT_HOME" not in text
