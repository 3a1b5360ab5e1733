"""No web page can drive the server (issue 24): a request addressed by a name the server was not given
(DNS rebinding) gets 421, a page whose origin was not allowed gets 403, a body not declared JSON gets
415, all before the body is read and before the engine's line; allowed pages get correct CORS answers.

Requests are written by hand on raw sockets, so every header (or its absence) is exactly what a
browser or an attacker's client would send.
"""

import json
import socket

import pytest

from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.errors import UsageError
from runtime.server.runner import ServerThread
from runtime.server.web_rules import WebRules
from tests.paths import DEMO_NVFP4
from tests.server_records import records_since, snapshot

MODEL = DEMO_NVFP4.name
CHAT = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                   "reasoning_effort": "none"}).encode()


@pytest.fixture(scope="module")
def engine():
    return Engine.load(DEMO_NVFP4, device="cpu", max_context=256)


def serve(engine=None, host="127.0.0.1", **kw) -> ServerThread:
    queue = EngineQueue()
    if engine is None:
        queue.set_loading()
    else:
        queue.set_engine(engine)
    return ServerThread(queue, host, 0, **kw).start()


@pytest.fixture(scope="module")
def server(engine):
    srv = serve(engine)
    yield srv
    srv.stop()


class Reply:
    def __init__(self, data: bytes):
        head, _, self.body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else None
        self.headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers.setdefault(name.strip().lower(), []).append(value.strip())

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[-1] if values else None

    @property
    def code(self) -> str | None:
        return json.loads(self.body)["error"]["code"]


def raw(srv: ServerThread, head: str, body: bytes = b"", port: int | None = None) -> Reply:
    """Sends `head` (request line and headers; {port} filled in) and `body`, reads one response: up to
    its Content-Length, or until the server closes. A server that waits for more of the body than was
    sent times the socket out instead, and the test fails."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as s:
        s.sendall(head.format(port=port or srv.port).replace("\n", "\r\n").encode("latin-1") + b"\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            data += chunk
            head_end = data.find(b"\r\n\r\n")
            if not chunk:
                break
            if head_end >= 0:
                reply = Reply(data)
                length = reply.header("content-length")
                if length is not None and len(reply.body) >= int(length):
                    break
                if reply.status in (204, 304):
                    break
    return Reply(data)


def get(srv, path="/health", **headers) -> Reply:
    lines = "".join(f"{k.replace('_', '-')}: {v}\n" for k, v in headers.items())
    return raw(srv, f"GET {path} HTTP/1.1\n{lines}")


def post(srv, body=CHAT, content_type="application/json", **headers) -> Reply:
    lines = "".join(f"{k.replace('_', '-')}: {v}\n" for k, v in headers.items())
    typed = f"Content-Type: {content_type}\n" if content_type else ""
    return raw(srv, f"POST /v1/chat/completions HTTP/1.1\n{lines}{typed}Content-Length: {len(body)}\n", body)


# ---------------------------------------------------------------------- Host: DNS rebinding

FOREIGN_HOSTS = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "localhost.", "localhost.:{port}",
                 "127.0.0.1.", "127.1", "0x7f.1", "0x7f000001", "2130706433", "0177.0.0.1", "127.0.0.01",
                 "[::ffff:127.0.0.1]", "[0:0:0:0:0:0:0:1]", "::1", "127.0.0.2", "localhost:1", "127.0.0.1:{port}0",
                 "127.0.0.1:+{port}", "user@127.0.0.1", "127.0.0.1:{port}@evil.example", "127.0.0.1 evil", ""]


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
def test_a_request_addressed_to_another_name_is_refused_even_a_chat(server, host):
    host = host.format(port=server.port)
    before = snapshot(server)
    for reply in (get(server, Host=host), get(server, "/v1/models", Host=host), post(server, Host=host)):
        assert reply.status == 421 and reply.code == "host_not_allowed", (host, reply.status, reply.body)
        assert "--allow-host" in json.loads(reply.body)["error"]["message"]
        assert reply.header("connection").lower() == "close"
    assert not records_since(server, before) and not server.app.state.jobs  # nothing entered the engine's line


@pytest.mark.parametrize("host", ["localhost", "LocalHost:{port}", "127.0.0.1", "127.0.0.1:{port}", "[::1]",
                                  "[::1]:{port}"])
def test_the_servers_own_names_are_answered_with_or_without_the_port(server, host):
    reply = post(server, Host=host.format(port=server.port))
    assert reply.status == 200 and json.loads(reply.body)["usage"]["completion_tokens"] == 2


def test_no_host_or_two_hosts_are_refused(server):
    assert raw(server, "GET /health HTTP/1.0\n").status == 421  # HTTP/1.0 may leave Host out; refused anyway
    assert raw(server, "GET /health HTTP/1.0\nHost: 127.0.0.1\n").status == 200
    assert raw(server, "GET /health HTTP/1.1\nHost: 127.0.0.1\nHost: evil.example\n").status in (400, 421)
    assert raw(server, "GET /health HTTP/1.1\nHost: evil.example\nHost: 127.0.0.1\n").status in (400, 421)


def test_an_absolute_target_must_name_this_server_too(server):
    refused = raw(server, "GET http://evil.example/health HTTP/1.1\nHost: 127.0.0.1:{port}\n")
    assert refused.status == 421 and refused.code == "host_not_allowed"
    refused = raw(server, "GET http://evil.example:{port}/v1/models HTTP/1.1\nHost: 127.0.0.1:{port}\n")
    assert refused.status == 421
    assert raw(server, "GET http://127.0.0.1:{port}/health HTTP/1.1\nHost: evil.example\n").status == 421
    answered = raw(server, "GET http://127.0.0.1:{port}/health HTTP/1.1\nHost: 127.0.0.1:{port}\n")
    assert answered.status == 200 and json.loads(answered.body)["status"] == "ok"


def test_a_refused_chat_is_answered_before_its_body_arrives(server):
    """The body is announced but never sent: a server that read it first would wait, and `raw` times out."""
    for head in ("Host: evil.example\nContent-Type: application/json\n",
                 "Host: 127.0.0.1\nOrigin: http://evil.example\nContent-Type: application/json\n",
                 "Host: 127.0.0.1\nContent-Type: text/plain\n"):
        reply = raw(server, f"POST /v1/chat/completions HTTP/1.1\n{head}Content-Length: 100000\n")
        assert reply.status in (421, 403, 415)


def test_names_the_user_adds_are_answered_and_only_those(engine):
    srv = serve(engine, allow_hosts=["Elastic.Home.Arpa", "192.0.2.7"])
    try:
        for host in ("elastic.home.arpa", "elastic.home.arpa:{port}", "192.0.2.7:{port}", "localhost"):
            assert get(srv, Host=host.format(port=srv.port)).status == 200, host
        for host in ("home.arpa", "x.elastic.home.arpa", "elastic.home.arpa.", "192.0.2.8", "evil.example"):
            assert get(srv, Host=host).status == 421, host
    finally:
        srv.stop()


def test_on_every_interface_ip_addresses_are_answered_but_names_only_when_added():
    srv = serve(host="0.0.0.0", api_key="s3cret-key")
    try:
        for host in ("192.0.2.7:{port}", "10.1.2.3", "127.0.0.1", "localhost"):
            assert get(srv, Host=host.format(port=srv.port)).status == 503, host  # past the gate: loading
        for host in ("evil.example", "0.0.0.0.", "2130706433", "127.1", "my-laptop"):
            assert get(srv, Host=host).status == 421, host
    finally:
        srv.stop()


@pytest.mark.parametrize("names,origins", [(["bad name"], []), (["localhost."], []), (["*"], []),
                                           (["http://x.example"], []), (["x"] * 65, []), ([], ["null"]),
                                           ([], ["http://x.example/path"]), ([], ["ftp://x.example"]),
                                           ([], ["x.example"]), ([], ["http://*.example"]), ([], [5])])
def test_bad_names_and_origins_are_refused_in_one_line(names, origins):
    with pytest.raises(UsageError) as e:
        ServerThread(EngineQueue(), "127.0.0.1", 0, allow_hosts=names, allow_origins=origins)
    assert "\n" not in str(e.value) and ("--allow-host" in str(e.value) or "--allow-origin" in str(e.value))


def test_the_rules_spell_each_name_one_way():
    rules = WebRules.serving("::1", 8000, ["Box.LAN", "::1", "0:0::2"], ["HTTP://LocalHost:80", "https://a.example:443",
                                                                     "http://a.example:8080"])
    assert rules.hosts == {"localhost", "127.0.0.1", "[::1]", "box.lan", "[::2]"}
    assert rules.origins == {"http://localhost", "https://a.example", "http://a.example:8080"}
    assert rules.host_allowed("[::2]:8000") and not rules.host_allowed("[::2]:8001")


# ---------------------------------------------------------------------- Origin: cross-site requests


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/json"])
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost:3000",
                                    "http://127.0.0.1:{port}", "HTTP://EVIL.EXAMPLE"])
def test_a_page_from_another_origin_cannot_post_whatever_its_body(server, content_type, origin):
    before = snapshot(server)
    reply = post(server, content_type=content_type, Host="127.0.0.1", Origin=origin.format(port=server.port))
    assert reply.status == 403 and reply.code == "origin_not_allowed"
    assert "access-control-allow-origin" not in reply.headers
    assert not records_since(server, before)


@pytest.mark.parametrize("site", ["cross-site", "same-site", "Cross-Site"])
def test_a_page_on_another_site_is_refused_without_an_origin_too(server, site):
    assert get(server, "/v1/models", Host="127.0.0.1", Sec_Fetch_Site=site).status == 403
    assert post(server, Host="127.0.0.1", Sec_Fetch_Site=site).status == 403


@pytest.mark.parametrize("site", ["same-origin", "none"])
def test_what_the_user_opens_themselves_is_answered(server, site):
    assert get(server, "/v1/models", Host="127.0.0.1", Sec_Fetch_Site=site).status == 200


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain; charset=utf-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "application/json-seq", "", "json",
                                          "application/jsonx"])
def test_a_body_not_declared_json_is_415(server, content_type):
    reply = post(server, content_type=content_type, Host="127.0.0.1")
    assert reply.status == 415 and reply.code == "unsupported_media_type"


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=utf-8"])
def test_a_body_declared_json_is_answered(server, content_type):
    assert post(server, content_type=content_type, Host="127.0.0.1").status == 200


def test_cors_is_off_by_default_preflights_are_refused(server):
    reply = raw(server, "OPTIONS /v1/chat/completions HTTP/1.1\nHost: 127.0.0.1\nOrigin: http://localhost:3000\n"
                        "Access-Control-Request-Method: POST\nAccess-Control-Request-Headers: content-type\n")
    assert reply.status == 403 and "access-control-allow-origin" not in reply.headers


PREFLIGHT = ("OPTIONS /v1/chat/completions HTTP/1.1\nHost: 127.0.0.1:{port}\nOrigin: %s\n"
             "Access-Control-Request-Method: %s\nAccess-Control-Request-Headers: %s\n")


def test_an_allowed_origin_gets_correct_preflight_and_response_headers(engine):
    srv = serve(engine, allow_origins=["http://localhost:3000"])
    try:
        pre = raw(srv, PREFLIGHT % ("http://localhost:3000", "POST", "authorization, content-type, x-stainless-os"))
        assert pre.status == 204
        assert pre.header("access-control-allow-origin") == "http://localhost:3000"
        assert set(pre.header("access-control-allow-methods").split(", ")) == {"GET", "POST"}
        assert pre.header("access-control-allow-headers") == "authorization, content-type, x-stainless-os"
        assert int(pre.header("access-control-max-age")) > 0 and "Origin" in pre.header("vary")
        assert "access-control-allow-credentials" not in pre.headers
        assert raw(srv, PREFLIGHT % ("http://localhost:3000", "DELETE", "content-type")).status == 403
        for other in ("http://localhost:3001", "https://localhost:3000", "http://localhost", "null"):
            assert raw(srv, PREFLIGHT % (other, "POST", "content-type")).status == 403, other
        reply = post(srv, Host="127.0.0.1", Origin="http://localhost:3000")
        assert reply.status == 200 and reply.header("access-control-allow-origin") == "http://localhost:3000"
        assert "Origin" in reply.header("vary") and "access-control-allow-credentials" not in reply.headers
        plain = post(srv, content_type="text/plain", Host="127.0.0.1", Origin="http://localhost:3000")
        assert plain.status == 415  # an allowed page still sends JSON
        assert get(srv, "/v1/models", Host="127.0.0.1", Origin="http://localhost:3001").status == 403
        program = get(srv, "/v1/models", Host="127.0.0.1")  # no Origin: a program, answered as it varies
        assert program.status == 200 and program.header("vary") == "Origin"
        assert "access-control-allow-origin" not in program.headers
    finally:
        srv.stop()


def test_star_allows_every_page_but_never_with_credentials(engine):
    srv = serve(engine, allow_origins=["*"])
    try:
        for origin in ("http://anything.example", "null"):
            pre = raw(srv, PREFLIGHT % (origin, "POST", "content-type"))
            assert pre.status == 204 and pre.header("access-control-allow-origin") == "*"
            reply = post(srv, Host="127.0.0.1", Origin=origin)
            assert reply.status == 200 and reply.header("access-control-allow-origin") == "*"
            assert "access-control-allow-credentials" not in reply.headers | pre.headers
        assert get(srv, Host="evil.example", Origin="http://anything.example").status == 421  # the Host rule stays
    finally:
        srv.stop()


@pytest.mark.parametrize("flags", [["--allow-host", "bad."], ["--allow-host", "box.lan", "--allow-host", "a b"],
                                   ["--allow-origin", "null"], ["--allow-origin", "http://x.example/"]])
def test_serve_refuses_a_bad_name_or_origin_in_one_line(capsys, flags):
    from runtime.cli import main

    assert main(["serve", "--checkpoint", str(DEMO_NVFP4), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {flags[-2]} is {flags[-1]!r}; it must be")
