"""Ending a stdio MCP server whole: the server and every process it started.

The SDK starts each stdio server in a session of its own (start_new_session: its process group id is
its pid) and ends that group when a session closes normally. A server that hangs before it answers
`initialize` never gets there: cancelling the start left it running with parent pid 1, one more at each
"Approve and start" (issue 37). So the manager notes the server's pid when it is spawned and ends its
group itself when a start times out or is given up, when the server is stopped, and when it closes:
SIGTERM to the group, a grace period for the leader to exit, then SIGKILL to whatever is left.
Windows has no process groups here: the server and its descendants are ended one by one.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import psutil

log = logging.getLogger(__name__)
GRACE_S = 2.0  # between the polite signal and the kill: a wait on the server, so the wall clock is right


def children() -> set[int]:
    """The pids of this process's children now."""
    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def spawned_since(before: set[int]) -> int | None:
    """The server spawned since `before` (children()): a new child leading a process group of its own
    (the SDK's start_new_session), on Windows the only new child; None when that is not clear."""
    new = [pid for pid in children() - before if os.name == "nt" or _leads_own_group(pid)]
    if len(new) != 1:
        log.warning("could not tell which process is the MCP server (%d candidates)", len(new))
        return None
    return new[0]


def _leads_own_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


def end_group(pid: int | None, grace_s: float = GRACE_S) -> None:
    """Ends the process group that `pid` leads (a server and everything it started): terminate, wait up
    to `grace_s` for the leader, then kill what is left. Never raises."""
    if pid is None:
        return
    if os.name == "nt":
        _end_tree(pid, grace_s)
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return  # the whole group is gone (or the pid is no longer a group of ours)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and _running(pid):
        time.sleep(0.02)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever is left of it, a child that ignored SIGTERM included
    except (ProcessLookupError, PermissionError):
        pass


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _end_tree(pid: int, grace_s: float) -> None:
    try:
        leader = psutil.Process(pid)
        tree = [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return
    for p in tree:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
