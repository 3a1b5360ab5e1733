"""A stand-in for the Hugging Face hub on 127.0.0.1, with fault injection.

It serves one folder per repo with the endpoints huggingface_hub and the download manager use:
model info (with file sizes, git blob ids and LFS SHA-256), the file tree, and
`/{repo}/resolve/{rev}/{path}` with HEAD, Range (206) and the hub's headers. Faults are set
per file path on `HubStub.faults`:

    drop_after=N     close the connection after N body bytes (once)
    corrupt=True     flip one byte in the first full serve of the file (once)
    stall=S          send half the requested bytes, then go silent for S seconds (once)
    status=CODE      answer CODE instead of the file (every time, or `times` times)
    throttle=S       sleep S seconds after every 64 KiB (slow link; lifting the fault speeds it up)
    hold=True        send all but the last piece, then nothing more until the test lifts the fault (a
                     download in progress for as long as a test needs one, however slow the machine)

Hostile modes, for the downloader's input classes:

    extra=N          send N junk bytes after the file, with a Content-Length that declares them
    endless=True     no Content-Length: the file, then junk until the client hangs up
    trickle=S        one byte every S seconds (every time): a connection that never quite stalls
    silent=S         headers, then nothing for S seconds (once)
    wrong_range=True answer a Range request with 206 and a Content-Range that starts elsewhere (once)
    redirect=URL     answer 302 to URL (once); `{path}` in it is replaced by the file's path
    redirects=N      answer 302 to the same file N times (a loop, or a long chain)
    no_range=True    ignore Range: answer 200 with the whole file (with drop_after: every time)
    drop_every=N     close the connection after N body bytes, every time (Range honoured)

Faults of the model-info answer (`/api/models/...`) are set on `HubStub.api_faults`:

    gzip_bomb=N      a gzip body that inflates to N bytes (a multiple of 1 MiB) of spaces; about
                     N / 1000 bytes on the wire, built from one compressed MiB repeated
    pad=N            the real answer followed by N spaces (valid JSON, just huge)
    trickle=S        the real answer, one byte every S seconds
    slow_headers=S   the status line, then the headers one byte every S seconds
    silent=S         headers, then nothing for S seconds, then the answer
    redirect=URL     answer 302 to URL (once)

`virtual={repo: {name: bytes}}` adds files that exist only in memory, under any name at all (a
traversal, an absolute path, a NUL...): they are listed with correct sizes and hashes and served
as they are, so the downloader's own checks are what stands between them and the disk. The stub
itself never serves a path outside its repo folder. `raw_siblings[repo] = [...]` replaces the
file list with arbitrary JSON (wrong types, missing fields).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors",)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubStub:
    def __init__(self, repos: dict[str, Path], gated: set[str] = frozenset(),
                 virtual: dict[str, dict[str, bytes]] | None = None):
        self.repos = {name: Path(folder) for name, folder in repos.items()}
        self.virtual = {repo: dict(files) for repo, files in (virtual or {}).items()}
        self.raw_siblings: dict[str, list] = {}
        self.headers_seen: list[dict] = []  # every file request: path, Host, Authorization
        self.api_faults: dict = {}
        self.api_requests: list[dict] = []  # every model-info request: path, Host, Authorization
        self.gated = set(gated)
        self.faults: dict[str, dict] = {}
        self.requests: list[dict] = []  # every file request: path, range start, bytes sent, status
        self._hashes: dict[tuple, tuple[str, str]] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo: str) -> list[dict]:
        if repo in self.raw_siblings:
            return self.raw_siblings[repo]
        folder, out = self.repos[repo], []
        for name, data in self.virtual.get(repo, {}).items():
            entry = {"rfilename": name, "size": len(data),
                     "blobId": hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()}
            if name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            out.append(entry)
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = (str(f), f.stat().st_mtime_ns, f.stat().st_size)
            if key not in self._hashes:  # hashed in chunks: the stub shares the interpreter with the app
                sha1, sha256 = hashlib.sha1(f"blob {key[2]}\0".encode()), hashlib.sha256()
                with open(f, "rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        sha1.update(block)
                        sha256.update(block)
                self._hashes[key] = (sha1.hexdigest(), sha256.hexdigest())
            blob, sha = self._hashes[key]
            entry = {"rfilename": f.relative_to(folder).as_posix(), "size": key[2], "blobId": blob}
            if f.suffix in LFS_SUFFIXES:
                entry["lfs"] = {"sha256": sha, "size": key[2], "pointerSize": 134}
            out.append(entry)
        return out

    def _handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self._serve(head=True)

            def do_GET(self):
                self._serve(head=False)

            def _error(self, code: int, error_code: str = "", message: str = "error"):
                body = json.dumps({"error": message}).encode()
                self.send_response(code)
                if error_code:
                    self.send_header("X-Error-Code", error_code)
                    self.send_header("X-Error-Message", message)
                if code == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _serve(self, head: bool):
                url = urlparse(self.path)
                parts = [unquote(p) for p in url.path.strip("/").split("/")]
                if parts[:2] == ["api", "models"]:
                    return self._api(parts[2:])
                if "resolve" in parts:
                    k = parts.index("resolve")
                    return self._file("/".join(parts[:k]), "/".join(parts[k + 2:]), head)
                self._error(404, "RepoNotFound", "not found")

            def _api(self, rest):
                with stub.lock:
                    stub.api_requests.append({"path": self.path, "host": self.headers.get("Host"),
                                              "auth": self.headers.get("Authorization")})
                fault = stub.api_faults
                if fault.get("redirect"):
                    self.send_response(302)
                    self.send_header("Location", fault.pop("redirect"))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                repo = "/".join(rest[:2])
                if repo not in stub.repos:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if repo in stub.gated:
                    return self._error(403, "GatedRepo", "Access to model is restricted")
                if repo in stub.raw_siblings:
                    body = {"id": repo, "modelId": repo, "sha": COMMIT, "siblings": stub.raw_siblings[repo]}
                elif len(rest) > 2 and rest[2] == "tree":
                    body = [{"type": "file", "path": f["rfilename"], "size": f["size"], "oid": f["blobId"],
                             **({"lfs": {"oid": f["lfs"]["sha256"], "size": f["size"]}} if "lfs" in f else {})}
                            for f in stub.files(repo)]
                else:
                    body = {"id": repo, "modelId": repo, "sha": COMMIT, "siblings": stub.files(repo),
                            "private": False, "gated": False, "disabled": False, "tags": [], "downloads": 0}
                data = json.dumps(body).encode() + b" " * fault.get("pad", 0)
                headers = {"Content-Type": "application/json"}
                if fault.get("gzip_bomb"):
                    data, headers["Content-Encoding"] = _gzip_bomb(fault["gzip_bomb"]), "gzip"
                headers["Content-Length"] = str(len(data))
                try:
                    if fault.get("slow_headers"):
                        head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                        self.wfile.write(head[:17].encode())
                        for c in (head[17:] + "\r\n").encode():
                            self.wfile.write(bytes([c]))
                            self.wfile.flush()
                            time.sleep(fault["slow_headers"])
                    else:
                        self.send_response(200)
                        for k, v in headers.items():
                            self.send_header(k, v)
                        self.end_headers()
                    if fault.get("silent"):
                        self.wfile.flush()
                        time.sleep(fault["silent"])
                    if fault.get("trickle"):
                        for c in data:
                            self.wfile.write(bytes([c]))
                            self.wfile.flush()
                            time.sleep(fault["trickle"])
                    else:
                        self.wfile.write(data)
                except OSError:  # the client hung up
                    self.close_connection = True

            def _file(self, repo: str, path: str, head: bool):
                if repo not in stub.repos:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if repo in stub.gated:
                    return self._error(403, "GatedRepo", "Access to model is restricted")
                fault = stub.faults.get(path, {})
                with stub.lock:
                    stub.headers_seen.append({"path": path, "host": self.headers.get("Host"),
                                              "auth": self.headers.get("Authorization")})
                if fault.get("redirects"):
                    fault["redirects"] -= 1
                    self.send_response(302)
                    self.send_header("Location", self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fault.get("redirect"):
                    self.send_response(302)
                    self.send_header("Location", fault.pop("redirect").replace("{path}", path))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fault.get("status") and fault.get("times", 1) > 0:
                    if "times" in fault:
                        fault["times"] -= 1
                    return self._error(fault["status"], "", f"injected {fault['status']}")
                data = stub.virtual.get(repo, {}).get(path)
                if data is None:
                    root = stub.repos[repo].resolve()
                    f = (root / path).resolve()
                    if not f.is_relative_to(root) or not f.is_file():
                        return self._error(404, "EntryNotFound", "Entry not found")
                    data = f.read_bytes()
                size = len(data)
                start, end = 0, size - 1
                rng = None if fault.get("no_range") else self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    first, _, last = rng[6:].partition("-")
                    start = int(first)
                    end = min(int(last), size - 1) if last else size - 1
                length = end - start + 1
                corrupt_at = length // 2 if fault.pop("corrupt", False) and start == 0 and length else None
                extra = fault.get("extra", 0)
                endless = fault.get("endless", False)
                self.send_response(206 if rng else 200)
                if endless:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(length + extra))
                if rng:
                    shown = start + 7 if fault.pop("wrong_range", False) else start
                    self.send_header("Content-Range", f"bytes {shown}-{end}/{size}")
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{COMMIT}-{size}"')
                self.end_headers()
                record = {"path": path, "start": start, "sent": 0, "status": 206 if rng else 200}
                with stub.lock:
                    stub.requests.append(record)
                if head:
                    return
                drop_after = fault.get("drop_after") if fault.get("no_range") else fault.pop("drop_after", None)
                stall = fault.pop("stall", None)
                silent = fault.pop("silent", None)
                limit = length if drop_after is None else min(drop_after, length)
                if fault.get("drop_every"):
                    limit = min(fault["drop_every"], limit)
                if stall is not None:
                    limit = length // 2
                sent = 0
                try:
                    if silent is not None:
                        time.sleep(silent)
                    while sent < limit:
                        live = stub.faults.get(path, {})  # read per piece: a test may lift a slow link
                        throttle, trickle = live.get("throttle", 0), live.get("trickle", 0)
                        step = 1 if trickle else min(65536, limit - sent)
                        while sent + step >= length and stub.faults.get(path, {}).get("hold"):
                            time.sleep(0.02)
                        piece = data[start + sent:start + sent + step]
                        if corrupt_at is not None and sent <= corrupt_at < sent + len(piece):
                            i = corrupt_at - sent
                            piece = piece[:i] + bytes([piece[i] ^ 0xFF]) + piece[i + 1:]
                        self.wfile.write(piece)
                        self.wfile.flush()
                        sent += len(piece)
                        record["sent"] = sent
                        if throttle:
                            time.sleep(throttle)
                        if trickle:
                            time.sleep(trickle)
                    if stall is not None:
                        time.sleep(stall)
                    junk = b"\xee" * 65536
                    # more than the file: the client must stop at the listed size
                    while sent == length and (extra > 0 or endless):
                        piece = junk[:extra] if not endless else junk
                        self.wfile.write(piece)
                        self.wfile.flush()
                        extra -= len(piece)
                        record["extra_sent"] = record.get("extra_sent", 0) + len(piece)
                        if endless and record["extra_sent"] > 1 << 30:
                            break
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass
                if sent < length:
                    self.close_connection = True

        return Handler


_BOMBS: dict[int, bytes] = {}


def _gzip_bomb(size: int) -> bytes:
    """A gzip stream of `size` bytes of spaces: one MiB compressed with a full flush repeats byte for
    byte, so the stream is built without compressing it all (its trailer is not valid; a client
    that stops at a bound never reads it)."""
    if size not in _BOMBS:
        import zlib

        block, c = b" " * (1 << 20), zlib.compressobj(9, zlib.DEFLATED, 31)
        first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
        again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
        assert again == c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
        _BOMBS[size] = first + again * (size // len(block) - 1) + c.flush()
    return _BOMBS[size]
