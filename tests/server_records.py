"""The local server's request records a test caused. The records are a deque of the last 256, and a
request's record may land after its response reached the client (an earlier test's too), so a test
compares records by identity against a snapshot, never by length or by position."""

import time


def snapshot(server) -> list:
    """The records now, kept alive so that their ids stay theirs."""
    return list(server.records)


def records_since(server, before: list) -> list:
    seen = {id(r) for r in before}
    return [r for r in list(server.records) if id(r) not in seen]


def wait_for_record(server, before: list, matches, limit_s: float = 120.0):
    """The first record since `before` that `matches`; waits for it (a wait on the server's threads)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = [r for r in records_since(server, before) if matches(r)]
        if found:
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"no such record; the newest: {list(server.records)[-3:]}")
