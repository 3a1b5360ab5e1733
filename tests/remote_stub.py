"""A stand-in OpenAI-compatible server for the remote client's tests: it lists the models it is given
and answers chat completions with a script (a list of steps), so a test can make it slow, drop the
connection mid-stream, lie about sizes, send junk or answer with an error status. It records every
request body it reads."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chunk(content=None, reasoning=None, finish=None, **extra) -> dict:
    delta = {}
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if content is not None:
        delta["content"] = content
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}], **extra}


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


class RemoteStub:
    """`script(body) -> list of steps`: bytes (sent as they are), ("sleep", s), ("status", code, body),
    ("drop",) (the socket closes mid-answer), ("length", n) (a Content-Length header of n), ("close",)
    (no length, no chunks: `Connection: close` and the body ends when the socket does), ("forever", bytes,
    s) (the bytes again and again, `s` apart, until the client hangs up: a server that never stops).

    `models_drip` (s): the model list's answer is sent a byte at a time, that far apart; with
    `drip_headers` its status line and headers are too (a server that never trips a wait between reads).
    `hangups` is set when the client hung up on an answer still being sent."""

    def __init__(self, models: list[dict], script=None, models_raw: bytes | None = None, models_delay: float = 0.0,
                 models_drip: float = 0.0, drip_headers: bool = False, pages: dict[str, dict] | None = None,
                 port: int = 0):
        self.models, self.script, self.models_raw, self.models_delay = models, script, models_raw, models_delay
        self.models_drip, self.drip_headers = models_drip, drip_headers
        self.pages = pages or {}  # other GET paths it answers (llama.cpp's /props, vLLM's /version)
        self.gets: list[str] = []  # every GET path asked
        self.bodies: list[dict] = []
        self.posts: list[str] = []  # the path of each POST, in the order of `bodies`
        self.hangups = threading.Event()
        self.on_headers = None  # called with each request's headers
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._seen()
                stub.gets.append(self.path)
                if self.path in stub.pages:
                    return self._send(200, json.dumps(stub.pages[self.path]).encode())
                if self.path != "/v1/models":
                    return self._send(404, b'{"error": {"message": "no such route"}}')
                time.sleep(stub.models_delay)
                raw = stub.models_raw or json.dumps({"object": "list", "data": stub.models}).encode()
                if stub.models_drip:
                    return self._drip(raw)
                self._send(200, raw)

            def _drip(self, raw: bytes):
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                        "\r\n").encode()
                try:
                    if not stub.drip_headers:
                        self.wfile.write(head)
                        head = b""
                    for i in range(len(head + raw)):
                        self.wfile.write((head + raw)[i:i + 1])
                        self.wfile.flush()
                        time.sleep(stub.models_drip)
                except (BrokenPipeError, ConnectionResetError):
                    stub.hangups.set()
                self.close_connection = True

            def _seen(self):
                if stub.on_headers is not None:
                    stub.on_headers(dict(self.headers))

            def do_POST(self):
                self._seen()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.bodies.append(body)
                stub.posts.append(self.path)
                steps = stub.script(body) if stub.script else []
                status = next((s for s in steps if isinstance(s, tuple) and s[0] == "status"), None)
                if status is not None:
                    return self._send(status[1], status[2], extra=status[3] if len(status) > 3 else {})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                length = next((s[1] for s in steps if isinstance(s, tuple) and s[0] == "length"), None)
                if ("close",) in steps:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                    length = -1  # raw writes, no final chunk
                elif length is not None:
                    self.send_header("Content-Length", str(length))
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for step in steps:
                        if isinstance(step, bytes):
                            self._write(step, chunked=length is None)
                        elif step[0] == "sleep":
                            time.sleep(step[1])
                        elif step[0] == "forever":
                            while True:
                                self._write(step[1], chunked=length is None)
                                time.sleep(step[2])
                        elif step[0] in ("close", "length", "status"):
                            continue
                        elif step[0] == "drop":
                            self.wfile.flush()
                            self.connection.shutdown(2)
                            return
                    if length is None:
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    stub.hangups.set()

            def _write(self, data: bytes, chunked: bool):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
                self.wfile.flush()

            def _send(self, status, raw, extra=None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)  # port: a dead server's, back again
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "RemoteStub":
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
