"""The server's log of recent requests (runtime/server/request_log.py): real requests to a running
server show up newest first with their method, route, status and client, and never what was asked."""

import threading

import requests

from runtime.engine_queue import EngineQueue
from runtime.server.request_log import RequestEntry, RequestLog
from runtime.server.runner import ServerThread


def wait_for(condition, timeout_s: float = 60.0) -> None:
    """Waits until `condition()` holds, checking every 50 ms; fails after `timeout_s`."""
    event = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        event.wait(0.05)
    assert condition()


def test_real_requests_are_logged_newest_first_with_their_status(demo_engine):
    queue = EngineQueue()
    queue.set_engine(demo_engine)
    log = RequestLog()
    srv = ServerThread(queue, "127.0.0.1", 0, requests=log).start()
    root = srv.address.removesuffix("/v1")
    try:
        ok = requests.get(f"{root}/v1/models?secret=query-text", timeout=60)
        bad = requests.post(f"{root}/v1/chat/completions", json={"messages": "not a list, secret prompt"},
                            timeout=60)
        missing = requests.get(f"{root}/v1/nowhere", timeout=60)
        unknown_model = requests.get(f"{root}/v1/models/no-such-model", timeout=60)
        refused = requests.post(f"{root}/v1/chat/completions", data="secret", timeout=60,
                                headers={"Content-Type": "text/plain"})  # the gate's refusal (415)
        assert [r.status_code for r in (ok, bad, missing, unknown_model, refused)] == [200, 400, 404, 404, 415]
    finally:
        srv.stop()
    entries = log.newest_first()
    assert [(e.method, e.route, e.status) for e in entries] == [
        ("POST", "/v1/chat/completions", 415),
        ("GET", "/v1/models/no-such-model", 404),
        ("GET", "/v1/nowhere", 404),
        ("POST", "/v1/chat/completions", 400),
        ("GET", "/v1/models", 200),
    ]
    assert log.total == 5
    assert {e.client for e in entries} == {"127.0.0.1"}
    assert all(e.duration_ms >= 0 for e in entries)
    assert "secret" not in repr(entries)  # no query string, no body


def test_a_streamed_reply_is_logged_once_when_it_ends(demo_server):
    log = demo_server.requests
    before = log.total
    body = {"model": demo_server.app.state.queue.engine.model.folder.name, "stream": True, "max_tokens": 4,
            "reasoning_effort": "none", "messages": [{"role": "user", "content": "What is 1 + 2?"}]}
    with requests.post(demo_server.address + "/chat/completions", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200
        assert b"[DONE]" in b"".join(r.iter_content(None))
    wait_for(lambda: log.total > before)  # logged just after the last byte left
    assert log.total == before + 1  # once for the whole stream
    newest = log.newest_first()[0]
    assert (newest.method, newest.route, newest.status) == ("POST", "/v1/chat/completions", 200)


def test_the_log_keeps_only_the_newest():
    log = RequestLog(keep=3)
    for i in range(5):
        log.add(RequestEntry(float(i), "GET", f"/r{i}", 200, 1.0, "127.0.0.1"))
    assert [e.route for e in log.newest_first()] == ["/r4", "/r3", "/r2"]
    assert log.total == 5
