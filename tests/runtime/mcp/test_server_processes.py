"""A stdio MCP server's processes end with it (issue 37, item 8), and a dead server's last words are
quoted however late its stderr is read (item 3).

Before: a server that hung at start was reported ("did not start within 10 s", after 20) but lived on
with parent pid 1, one more at each retry. Each server here writes its process group to a file first;
after the start fails, is given up, or the manager closes, no process of that group may remain."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from runtime.mcp import client
from runtime.mcp.client import McpError, McpManager
from runtime.mcp.config import ServerConfig
from tests.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="process groups (POSIX)")]

HANGS = {
    "sleeps": "time.sleep(600)",
    "ignores SIGTERM": "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
    "leaves a child": "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)",
    "a child that ignores SIGTERM": "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
                                    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']); "
                                    "time.sleep(600)",
    "reads and never answers": "sys.stdin.read(); time.sleep(600)",
}


def hanging(tmp_path, how: str) -> tuple[ServerConfig, object]:
    """A server that never answers `initialize`; returns it and a function giving its process group."""
    group_file = tmp_path / "group"
    code = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        open({str(group_file)!r}, "w").write(str(os.getpgrp()))
        print("hanging now", file=sys.stderr, flush=True)
        {HANGS[how]}
    """)

    def group() -> int:
        for _ in range(600):  # the server writes it first thing; a guard, not a measure
            if group_file.exists() and group_file.read_text():
                return int(group_file.read_text())
            time.sleep(0.05)
        raise AssertionError("the server never started")
    return ServerConfig("stuck", command=sys.executable, args=("-c", code)), group


def group_gone(pgid: int) -> bool:
    """Whether no process of the group is left (waiting a little for the kernel and init to reap)."""
    for _ in range(200):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def kill_group(pgid: int) -> None:  # the test's own cleanup, should the code under test leave one
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("how", HANGS)
def test_a_server_that_hangs_at_start_is_ended_whole_when_the_start_times_out(tmp_path, how):
    server, group = hanging(tmp_path, how)
    manager = McpManager(lambda s: True, start_timeout_s=4)
    pgid = None
    try:
        asked = time.monotonic()
        with pytest.raises(McpError) as e:
            manager.start(server)
        waited = time.monotonic() - asked
        pgid = group()
        assert group_gone(pgid), f"its process group {pgid} is still there"
        said = re.fullmatch(r"the MCP server 'stuck' did not start within (\d+) s \(it said: hanging now\)",
                            str(e.value))
        assert said, str(e.value)
        assert 4 <= int(said.group(1)) <= round(waited) + 1  # the time it really waited, not the setting
    finally:
        manager.close()
        if pgid is not None:
            kill_group(pgid)


@pytest.mark.parametrize("how", ["sleeps", "a child that ignores SIGTERM"])
def test_closing_the_manager_during_a_start_ends_the_server_whole(tmp_path, how):
    """The app quits while "Approve and start" waits: the start fails at once, nothing is left."""
    server, group = hanging(tmp_path, how)
    manager = McpManager(lambda s: True, start_timeout_s=600)
    errors = []
    starting = threading.Thread(target=lambda: errors.append(_start_error(manager, server)))
    starting.start()
    pgid = group()
    try:
        manager.close()
        starting.join(120)
        assert not starting.is_alive() and errors and errors[0] is not None
        assert group_gone(pgid), f"its process group {pgid} is still there"
    finally:
        kill_group(pgid)


def _start_error(manager, server):
    try:
        manager.start(server)
    except McpError as e:
        return e
    return None


def test_a_running_servers_child_that_ignores_the_end_is_killed_at_close(tmp_path):
    """The SDK ends a server's tree when its session closes; a child that ignores SIGTERM is killed too."""
    group_file = tmp_path / "group"
    code = textwrap.dedent(f"""
        import os, runpy, subprocess, sys
        open({str(group_file)!r}, "w").write(str(os.getpgrp()))
        subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
        sys.argv = [{str(ROOT / "tests" / "runtime" / "mcp" / "calc_server.py")!r}]
        runpy.run_path(sys.argv[0], run_name="__main__")
    """)
    manager = McpManager(lambda s: True, start_timeout_s=60)
    manager.start(ServerConfig("calc", command=sys.executable, args=("-c", code)))
    pgid = int(group_file.read_text())
    try:
        assert manager.call("add_numbers", {"a": 1, "b": 2}).content == "3"
        manager.close()
        assert group_gone(pgid), f"its process group {pgid} is still there"
    finally:
        kill_group(pgid)


EXITS_WITHOUT_CLOSE = """
import sys, threading, time
sys.path.insert(0, {root!r})
from runtime.mcp.client import McpManager
from runtime.mcp.config import ServerConfig
manager = McpManager(lambda s: True, start_timeout_s=600)
server = ServerConfig("stuck", command=sys.executable, args=("-c", {code!r}))
threading.Thread(target=manager.start, args=(server,), daemon=True).start()
while True:
    try:
        if open({group!r}).read():
            break
    except OSError:
        pass
    time.sleep(0.05)
sys.exit(0)  # no close(): the interpreter's exit must end the server
"""


def test_the_interpreters_exit_ends_a_server_still_starting(tmp_path):
    group_file = tmp_path / "group"
    code = (f"import os, signal, time; open({str(group_file)!r}, 'w').write(str(os.getpgrp())); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)")
    script = EXITS_WITHOUT_CLOSE.format(root=str(ROOT), code=code, group=str(group_file))
    subprocess.run([sys.executable, "-c", script], timeout=300, check=True, capture_output=True)
    pgid = int(group_file.read_text())
    try:
        assert group_gone(pgid), f"its process group {pgid} is still there"
    finally:
        kill_group(pgid)


# ----------------------------------------------------------------------------- last words, read late

@pytest.fixture
def slow_stderr(monkeypatch):
    """The thread that reads a server's stderr is slow (a busy PC): each line arrives 0.5 s late."""
    real = client.one_line

    def late(text, *args, **kwargs):
        if threading.current_thread().name.startswith("mcp-stderr-"):
            time.sleep(0.5)
        return real(text, *args, **kwargs)
    monkeypatch.setattr(client, "one_line", late)


CALC = ROOT / "tests" / "runtime" / "mcp" / "calc_server.py"


def test_a_crash_mid_call_is_quoted_however_late_its_stderr_is_read(slow_stderr):
    manager = McpManager(lambda s: True, call_timeout_s=60, start_timeout_s=60)
    try:
        manager.start(ServerConfig("calc", command=sys.executable, args=(str(CALC),)))
        outcome = manager.call("crash", {})
        assert outcome.is_error and "\n" not in outcome.content
        assert outcome.content == "the MCP server 'calc' stopped during the call (it said: calc: crashing on purpose)"
    finally:
        manager.close()


@pytest.mark.parametrize("lines", [["bad config"], ["starting", "reading config.toml", "no key 'token' in it"]])
def test_a_server_that_exits_at_start_is_quoted_however_late_its_stderr_is_read(slow_stderr, lines):
    code = "import sys\n" + "".join(f"print({line!r}, file=sys.stderr, flush=True)\n" for line in lines) + \
        "sys.exit(2)"
    manager = McpManager(lambda s: True, start_timeout_s=60)
    try:
        with pytest.raises(McpError) as e:
            manager.start(ServerConfig("quitter", command=sys.executable, args=("-c", code)))
        assert str(e.value).startswith("the MCP server 'quitter' could not start")
        assert str(e.value).endswith(f"(it said: {lines[-1]})")
    finally:
        manager.close()
