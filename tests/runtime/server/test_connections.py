"""What one client may hold (issue 24): a request that does not arrive whole in time gets 408 and its
connection closes (headers that dribble, a body that dribbles, a connection that sends nothing, the
next request on a kept-alive one), an idle connection closes, one connection more than the limit gets
503 at once, and the key is compared in constant time in the one form the server reads.

Raw sockets throughout. No test measures time: each gives the server a short limit and the client a
far longer bound, and checks what the server did.
"""

import select
import socket
import threading

import pytest
import requests

from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.errors import UsageError
from runtime.server import access_rules
from runtime.server.runner import ServerThread
from tests.engine_support import held_engine
from tests.paths import DEMO_NVFP4

CLIENT_BOUND_S = 30  # how long a client here waits for the server to act; its limits are far shorter
QUICK = {"request_timeout": 0.5, "keep_alive_timeout": 0.5}


@pytest.fixture(scope="module")
def engine():
    return Engine.load(DEMO_NVFP4, device="cpu", max_context=256)


def serve(engine=None, api_key=None, **limits) -> ServerThread:
    queue = EngineQueue()
    if engine is None:
        queue.set_loading()
    else:
        queue.set_engine(engine)
    return ServerThread(queue, "127.0.0.1", 0, api_key=api_key, limits=limits).start()


@pytest.fixture
def quick():
    srv = serve(**QUICK)
    yield srv
    srv.stop()


def connect(srv) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=CLIENT_BOUND_S)
    return s


def read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes (socket.timeout, and the test fails, if it never does)."""
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:  # it closed with a piece of ours unread: what it sent before still counts
        pass
    return data


def read_one(s: socket.socket) -> bytes:
    """One whole response (its headers, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = int(next(line.split(b":")[1] for line in lines if line.startswith(b"content-length")))
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def dribble(s: socket.socket, pieces) -> bytes:
    """Sends `pieces` one at a time, a little apart, until the server answers or closes; returns what it
    sent back (b"" when it let every piece through without a word: the test then fails)."""
    for piece in pieces:
        readable, _, _ = select.select([s], [], [], 0.05)
        if readable:
            return read_until_closed(s)
        try:
            s.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            return read_until_closed(s)
    return b""


def status(data: bytes) -> int | None:
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else None


ENOUGH = int(CLIENT_BOUND_S / 0.05)  # pieces: far more time than the server's limit


def test_headers_that_dribble_get_408_and_the_connection_closes(quick):
    with connect(quick) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        data = dribble(s, (b"X-Slow: %d\r\n" % i for i in range(ENOUGH)))
    assert status(data) == 408 and b"request_timeout" in data


def test_a_request_line_that_dribbles_byte_by_byte_gets_408(quick):
    line = b"GET /health HTTP/1.1\r\n" * ENOUGH
    with connect(quick) as s:
        data = dribble(s, (line[i:i + 1] for i in range(len(line))))
    assert status(data) == 408


def test_a_body_that_dribbles_gets_408(quick):
    with connect(quick) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{")
        data = dribble(s, (b" " for _ in range(ENOUGH)))
    assert status(data) == 408


def test_a_connection_that_sends_nothing_is_closed(quick):
    with connect(quick) as s:
        data = read_until_closed(s)
    assert status(data) == 408


def test_an_idle_kept_alive_connection_is_closed_and_the_next_request_is_bounded_too(quick):
    with connect(quick) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status(read_one(s)) == 503  # loading: the answer came, the connection stays
        read_until_closed(s)  # ...until it has been idle too long
    with connect(quick) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status(read_one(s)) == 503
        s.sendall(b"GET /health HTTP/1.1\r\n")  # the next request begins, then dribbles
        data = dribble(s, (b"X-Slow: %d\r\n" % i for i in range(ENOUGH)))
    assert status(data) == 408


def test_headers_too_large_are_refused_whether_they_come_at_once_or_in_pieces():
    srv = serve(request_timeout=600)
    big = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"a" * 99)
                                                                  for i in range(200))
    try:
        with connect(srv) as s:
            s.sendall(big + b"\r\n")
            assert status(read_until_closed(s)) == 431
        with connect(srv) as s:
            assert status(dribble(s, (big[i:i + 1000] for i in range(0, len(big), 1000)))) == 400
    finally:
        srv.stop()


def test_one_connection_more_than_the_limit_gets_503_at_once_and_a_freed_one_serves_again():
    srv = serve(max_connections=4, request_timeout=600)  # held connections stay for the whole test
    held = [connect(srv) for _ in range(4)]
    try:
        for s in held:
            s.sendall(b"GET /hea")  # each has begun a request
        with connect(srv) as extra:
            data = read_until_closed(extra)
        assert status(data) == 503 and b"too_many_connections" in data
        held.pop().close()
        for _ in range(200):  # the server sees the close a moment later; until then one more is still refused
            with connect(srv) as s:
                try:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                data = read_until_closed(s)
            if b"too_many_connections" not in data:
                break
        assert status(data) == 503 and b'"loading"' in data  # the route's own answer: past the limit
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_a_reply_longer_than_the_request_deadline_is_not_cut(engine):
    srv = serve(engine, request_timeout=0.5)
    try:
        with held_engine(engine) as valve:
            out = {}

            def ask():
                out["r"] = requests.post(f"http://127.0.0.1:{srv.port}/v1/chat/completions", timeout=CLIENT_BOUND_S,
                                         json={"model": DEMO_NVFP4.name, "stream": True, "max_tokens": 3,
                                               "reasoning_effort": "none",
                                               "messages": [{"role": "user", "content": "Hi"}]})

            asker = threading.Thread(target=ask)
            asker.start()
            with connect(srv) as idle:  # opened after the reply began: once it is closed, the deadline passed
                assert status(read_until_closed(idle)) == 408
            valve.open()
            asker.join(CLIENT_BOUND_S)
        assert out["r"].status_code == 200 and out["r"].text.rstrip().endswith("data: [DONE]")
    finally:
        srv.stop()


@pytest.mark.parametrize("limits", [{"request_timeout": 0}, {"keep_alive_timeout": -1}, {"max_connections": 0},
                                    {"max_connections": 1.5}, {"request_timeout": float("nan")}])
def test_bad_limits_are_refused_in_one_line(limits):
    with pytest.raises(UsageError) as e:
        ServerThread(EngineQueue(), "127.0.0.1", 0, limits=limits)
    assert str(e.value).startswith("--" + next(iter(limits)).replace("_", "-") + " is ")


# ---------------------------------------------------------------------- the key


def test_the_key_is_compared_in_constant_time_in_every_form_read(engine, monkeypatch):
    """Every comparison goes through compare_digest, on digests of one length whatever was sent, for
    both forms read: `Authorization: Bearer KEY` and Anthropic's `x-api-key: KEY`."""
    compared = []

    def spy(a, b):
        compared.append((len(a), len(b)))
        return a == b

    monkeypatch.setattr(access_rules.hmac, "compare_digest", spy)
    srv = serve(engine, api_key="s3cret-key")
    url = f"http://127.0.0.1:{srv.port}/v1/models"
    try:
        for header, ok in (("Bearer s3cret-key", True), ("bearer s3cret-key", True), ("BEARER  s3cret-key ", True),
                           ("Bearer s3cret-kez", False), ("Bearer s3cret", False), ("Bearer " + "s" * 5000, False),
                           ("Bearer s3cret-key-and-more", False), ("Bearer", False), ("Bearer ", False),
                           ("x-api-key s3cret-key", True), ("x-api-key s3cret-kez", False),
                           ("x-api-key " + "s" * 5000, False)):
            before = len(compared)
            name, _, value = header.partition(" ") if header.startswith("x-api-key") else ("Authorization", "", header)
            r = requests.get(url, headers={name: value}, timeout=CLIENT_BOUND_S)
            assert (r.status_code == 200) == ok, header
            assert len(compared) == before + 1 and compared[-1] == (32, 32), header
        for headers in ({"Authorization": "Basic czNjcmV0LWtleQ=="}, {"Authorization": "s3cret-key"},
                        {"api-key": "s3cret-key"}, {}):
            assert requests.get(url, headers=headers, timeout=CLIENT_BOUND_S).status_code == 401, headers
    finally:
        srv.stop()
    matches = access_rules.key_matches
    assert matches("s3cret-key", "s3cret-key") and not matches("s3cret-kez", "s3cret-key")
