"""The single-instance lock and socket (app/single_instance.py): two launches at the same instant
never both stay, the folder is the user's alone (what another user planted is skipped, what is in
the way is moved aside), and every message on the socket is hostile."""

import logging
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from app.single_instance import MAX_MESSAGE, InstanceLock, InstanceServer, private_folder
from runtime import paths
from tests.paths import ROOT

# One launch's decision, as app.main makes it: take the lock; the holder serves `status` until asked
# (or 20 s), the other asks the holder. Both start when the file `go` appears.
RACER = r"""
import os, sys, time
sys.path.insert(0, os.environ["ELASTIC_TEST_ROOT"])
from pathlib import Path
from PySide6.QtCore import QCoreApplication, QTimer
data, go = Path(sys.argv[1]), Path(sys.argv[2])
app = QCoreApplication([])
from app.single_instance import InstanceLock, InstanceServer, ask_until_answered
while not go.exists():
    time.sleep(0.002)
lock = InstanceLock(data)
if not lock.held:
    print("second", ask_until_answered(lock.socket, "status", 20), flush=True)
    sys.exit(0)
asked = []
server = InstanceServer(lock, lambda: asked.append(1) or "ok first")
QTimer.singleShot(20000, app.quit)
timer = QTimer(); timer.timeout.connect(lambda: asked and QTimer.singleShot(200, app.quit)); timer.start(50)
app.exec()
print("first", flush=True)
"""


def _racers(data: Path, go: Path, env: dict) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", RACER, str(data), str(go)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("runtime_dir", [False, True], ids=["data-folder", "xdg-runtime-dir"])
def test_two_launches_at_the_same_instant_never_both_stay(tmp_path, runtime_dir):
    """Before the lock, both asked for a running instance, both found none and both stayed."""
    env = {**os.environ, "ELASTIC_TEST_ROOT": str(ROOT)}
    if runtime_dir:
        run = tmp_path / "xdg"
        run.mkdir(mode=0o700)
        env["XDG_RUNTIME_DIR"] = str(run)
    for i in range(6):
        data, go = tmp_path / f"data{i}", tmp_path / f"go{i}"
        data.mkdir()
        procs = _racers(data, go, env)
        time.sleep(1.5)  # both are waiting at the line with Qt imported
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        words = sorted(out.split()[0] for out, _ in outs)
        assert words == ["first", "second"], outs
        assert any(out.strip() == "second ok first" for out, _ in outs), outs


def test_the_lock_is_released_with_its_process(tmp_path):
    """A crash leaves no lock behind: the kernel drops it with the process (no stale-lock guessing)."""
    first = InstanceLock(tmp_path)
    assert first.held and not InstanceLock(tmp_path).held
    first.release()
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\nfrom app.single_instance import InstanceLock\n"
              f"from pathlib import Path\nl = InstanceLock(Path({str(tmp_path)!r}))\n"
              "assert l.held\nimport os; os._exit(9)")
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 9
    again = InstanceLock(tmp_path)
    assert again.held
    again.release()


def test_the_folder_is_private_and_what_others_planted_is_skipped(tmp_path, monkeypatch):
    data = tmp_path / "data"
    run = tmp_path / "xdg"
    run.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    mine = run / "elastic-chat"
    mine.mkdir(mode=0o777)
    os.chmod(mine, 0o777)
    assert private_folder(data)[0] == mine and stat.S_IMODE(mine.stat().st_mode) == 0o700  # made private
    mine.rmdir()
    mine.symlink_to(tmp_path)  # a link to a folder elsewhere: never used
    assert private_folder(data)[0] == data / "run"
    assert stat.S_IMODE((data / "run").stat().st_mode) == 0o700
    mine.unlink()
    if os.getuid() == 0:  # root can make a folder that belongs to another user, as that user would
        mine.mkdir(mode=0o700)
        os.chown(mine, 4242, 4242)
        assert private_folder(data)[0] == data / "run"
        os.chown(data / "run", 4242, 4242)
        assert private_folder(data)[0] == Path(tempfile.gettempdir()) / f"elastic-chat-{os.getuid()}"


def test_a_name_taken_in_the_old_shared_folder_no_longer_matters(qapp, tmp_path):
    """Another user could create /tmp/elastic-chat-<user>-<key> and the app then said it was running."""
    data = tmp_path / "data"
    old = Path(tempfile.gettempdir()) / paths.instance_name(data)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(old))
        s.listen()  # even a listening socket there: it is not where the app looks any more
        lock = InstanceLock(data)
        try:
            assert lock.held and Path(lock.socket).parent != old.parent
            server = InstanceServer(lock)
            server.close()
        finally:
            lock.release()
    old.unlink()


@pytest.mark.parametrize("in_the_way", ["stale-socket", "file", "folder", "fifo", "link"])
def test_whatever_is_at_the_socket_name_does_not_stop_the_start(qapp, tmp_path, in_the_way):
    """An object the app could not remove there made it fail at start."""
    lock = InstanceLock(tmp_path)
    try:
        name = Path(lock.socket)
        if in_the_way == "stale-socket":
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(str(name))
        elif in_the_way == "file":
            name.write_text("x")
        elif in_the_way == "folder":
            (name / "inside").mkdir(parents=True)
        elif in_the_way == "fifo":
            os.mkfifo(name)
        else:
            name.symlink_to(tmp_path / "elsewhere")
        server = InstanceServer(lock)
        assert stat.S_ISSOCK(os.lstat(name).st_mode)
        server.close()
    finally:
        lock.release()


JUNK = [b"", b"\n", b"RAISE\n", b"raise now\n", b"raise\x00\n", b"\xff\xfe\xfa\n", b"status" * 20,
        b"x" * 10000, b"a\nb\nc\n" * 30, b"\r\n\r\n"]


def _send(path: str, payload: bytes, replies: list, read: bool = True) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        try:
            s.sendall(payload)
            replies.append(s.recv(4096) if read else b"")
        except OSError as e:  # the server closed it on us: that is an answer too
            replies.append(repr(e).encode())


def test_junk_on_the_socket_is_one_log_line_and_changes_nothing(qapp, qtbot, tmp_path, caplog):
    lock = InstanceLock(tmp_path)
    raised = []
    server = InstanceServer(lock, lambda: "ok")
    server.sig_raise.connect(lambda: raised.append(1))
    try:
        for payload in JUNK:
            caplog.clear()
            replies: list = []
            t = threading.Thread(target=_send, args=(lock.socket, payload, replies))
            t.start()
            qtbot.waitUntil(lambda t=t: not t.is_alive(), timeout=15000)
            assert replies and b"raised" not in replies[0] and b"ok" not in replies[0], (payload, replies)
            assert "Traceback" not in caplog.text
            assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 1, caplog.text
        assert not raised
        replies = []
        t = threading.Thread(target=_send, args=(lock.socket, b"status\n", replies))
        t.start()
        qtbot.waitUntil(lambda: not t.is_alive(), timeout=15000)
        assert replies == [b"ok\n"]  # still answering
        t = threading.Thread(target=_send, args=(lock.socket, b"raise\n", replies))
        t.start()
        qtbot.waitUntil(lambda: not t.is_alive(), timeout=15000)
        assert replies[-1] == b"raised\n" and raised == [1]
    finally:
        server.close()
        lock.release()


def test_a_silent_connection_is_closed(qapp, qtbot, tmp_path):
    lock = InstanceLock(tmp_path)
    server = InstanceServer(lock)
    try:
        replies: list = []
        t = threading.Thread(target=_send, args=(lock.socket, b"rai", replies))  # never finishes its line
        t.start()
        qtbot.waitUntil(lambda: not t.is_alive(), timeout=15000)
        assert replies in ([b""], [b"ConnectionResetError(104, 'Connection reset by peer')"]), replies
    finally:
        server.close()
        lock.release()
    assert MAX_MESSAGE < 100


@pytest.mark.slow
def test_two_real_launches_at_once_leave_one_app(qapp, tmp_path):
    """The entry point itself, twice at the same instant, three times: one window stays, the other
    launch says the app is running and exits 0."""
    from app.single_instance import ask_running_instance

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    # A launch that finds the other still starting (slower than ANSWER_S under load) says so in a window:
    # here a line instead, as no one is there to close it (the window itself: the test below).
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "from PySide6.QtWidgets import QMessageBox\n"
              "QMessageBox.information = staticmethod(lambda parent, title, text, *a: print('BOX:', text))\n"
              "from app.main import main\nsys.exit(main(sys.argv[1:]))")
    for i in range(3):
        data = tmp_path / f"data{i}"
        procs = [subprocess.Popen([sys.executable, "-c", script, "--data-dir", str(data)], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for _ in range(2)]
        try:
            deadline = time.monotonic() + 300
            while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.2)
            gone = [p for p in procs if p.poll() is not None]
            assert len(gone) == 1, "neither launch gave way"
            assert gone[0].returncode == 0 and "already running" in gone[0].stdout.read()
            stays = next(p for p in procs if p is not gone[0])
            status = None
            while time.monotonic() < deadline and not (status or "").startswith("ok"):
                status = ask_running_instance(paths.socket_path(data), "status", 500)
                time.sleep(0.2)
            assert status and "visible=True" in status and stays.poll() is None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=60)


# A holder of the lock: it serves the socket and runs its event loop ("answers"), or serves it from an
# event loop that does not run ("busy": an app quitting, its GUI thread in its teardown).
HOLDER = r"""
import os, sys, time
sys.path.insert(0, os.environ["ELASTIC_TEST_ROOT"])
from pathlib import Path
from PySide6.QtCore import QCoreApplication, QTimer
from app.single_instance import InstanceLock, InstanceServer
app = QCoreApplication([])
lock = InstanceLock(Path(sys.argv[1]))
assert lock.held
server = InstanceServer(lock)
print("holding", flush=True)
if sys.argv[2] == "busy":
    time.sleep(120)
QTimer.singleShot(120000, app.quit)
app.exec()
"""

SECOND = r"""
import os, sys
sys.path.insert(0, os.environ["ELASTIC_TEST_ROOT"])
from PySide6.QtWidgets import QApplication, QMessageBox
QMessageBox.information = staticmethod(lambda parent, title, text, *a: print("BOX:", text, flush=True))
app = QApplication([])
from app.main import main
sys.exit(main(["--data-dir", sys.argv[1]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("holder", ["answers", "busy", "no socket"])
def test_a_refused_launch_tells_the_user_in_a_window_unless_the_app_was_raised(tmp_path, holder):
    """From a desktop launcher a line on stderr is nothing: a launch the running app does not answer
    (it is quitting, or has no socket) says so in a window; one it answers raises its window."""
    data = tmp_path / "data"
    data.mkdir()
    env = {**os.environ, "ELASTIC_TEST_ROOT": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    lock, proc = None, None
    if holder == "no socket":
        lock = InstanceLock(data)
        assert lock.held
    else:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data), holder], env=env, text=True,
                                stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == "holding"
    try:
        second = subprocess.run([sys.executable, "-c", SECOND, str(data)], env=env, text=True,
                                capture_output=True, timeout=240)
    finally:
        if lock is not None:
            lock.release()
        if proc is not None:
            proc.kill()
            proc.wait()
    assert second.returncode == 0, second.stderr[-2000:]
    if holder == "answers":
        assert "its window was raised" in second.stdout and "BOX:" not in second.stdout
    else:
        box = [line for line in second.stdout.splitlines() if line.startswith("BOX:")]
        assert len(box) == 1 and "already running, but it did not answer" in box[0], second.stdout
