"""The request gate: an ASGI middleware in front of every route that refuses what a web page could send
before any work is done (before the body is read, before a request enters the engine's line).

In order, each refusal in OpenAI's error shape, with `Connection: close`:

0. 431 `headers_too_large`: the request's headers are over MAX_HEAD_BYTES (connections.py bounds a
   head still arriving; one that came in a single piece is caught here).
1. 421 `host_not_allowed`: the request is not addressed to this server by a name it accepts
   (web_rules.py: DNS rebinding); a missing Host, several, or an absolute-form target naming another
   host, too. An absolute-form target naming this server is routed by its path.
2. 403 `origin_not_allowed`: it comes from a web page (an `Origin` header, or `Sec-Fetch-Site`
   cross-site or same-site) whose origin the user did not allow.
3. A CORS preflight (OPTIONS with `Access-Control-Request-Method`) from an allowed origin is answered
   here: 204 with the methods, the headers asked for, `Max-Age` and `Vary`; a method the server does
   not have gets 403.
4. 415 `unsupported_media_type`: a POST whose body is not declared `application/json` (a page can
   send text/plain, form or multipart bodies without a preflight; JSON it cannot).

Responses to an allowed origin carry `Access-Control-Allow-Origin` (the origin itself, or `*` when the
user allowed every origin) and `Vary: Origin`; never `Access-Control-Allow-Credentials`.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

from .serving import error_body
from .web_rules import WebRules

MAX_HEAD_BYTES = 16 * 1024  # the request line and headers; a client's are well under 2 KiB
METHODS = ("GET", "POST")  # the methods a route here answers (OPTIONS is the preflight's)
PREFLIGHT_MAX_AGE_S = 600
SIMPLE_HEADERS = "authorization, content-type"
_TOKEN = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class RequestGate:
    def __init__(self, app, rules: WebRules):
        self.app, self.rules = app, rules

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if sum(len(name) + len(value) for name, value in scope.get("headers", [])) > MAX_HEAD_BYTES:
            return await _refuse(send, 431, f"the request's headers are over {MAX_HEAD_BYTES} bytes",
                                 "headers_too_large")
        headers = _headers(scope)
        refusal = self._host_refusal(scope, headers)
        if refusal is not None:
            return await _refuse(send, 421, refusal, "host_not_allowed")
        origin = headers.get("origin", [None])[-1]
        refusal = self._origin_refusal(origin, headers)
        if refusal is not None:
            return await _refuse(send, 403, refusal, "origin_not_allowed")
        cors = self._cors_headers(origin)
        if scope["method"] == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            return await self._preflight(send, headers, cors)
        if scope["method"] == "POST" and not _is_json(headers.get("content-type", [])):
            return await _refuse(send, 415, "send the body as JSON with 'Content-Type: application/json'",
                                 "unsupported_media_type", cors)
        if not cors:
            return await self.app(scope, receive, send)

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    # ------------------------------------------------------------------ the rules

    def _host_refusal(self, scope, headers: dict) -> str | None:
        names = ", ".join(sorted(self.rules.hosts))
        hint = (f"this server answers requests addressed to {names} (port {self.rules.port}); to reach it by "
                "another name, add the name with --allow-host NAME or in the app's server settings")
        hosts = headers.get("host", [])
        if len(hosts) != 1 or not self.rules.host_allowed(hosts[0]):
            return "the request's Host is not this server's: " + hint
        target = scope.get("raw_path") or scope["path"].encode("latin-1", "replace")
        if not target.startswith(b"/"):  # absolute form (http://host/path): its host must be this server too
            scheme, sep, rest = target.decode("latin-1").partition("://")
            authority, _, path = rest.partition("/")
            if not sep or scheme.lower() not in ("http", "https") or not self.rules.host_allowed(authority):
                return "the request's target names another host: " + hint
            scope["raw_path"], scope["path"] = ("/" + path).encode("latin-1"), unquote("/" + path)
        return None

    def _origin_refusal(self, origin: str | None, headers: dict) -> str | None:
        hint = ("to let a web page call this server, add its origin (such as http://localhost:3000) with "
                "--allow-origin ORIGIN or in the app's server settings")
        if origin is not None:
            if len(headers["origin"]) > 1 or not self.rules.origin_allowed(origin):
                return f"web pages at {origin[:100]} may not call this server; {hint}"
            return None
        site = headers.get("sec-fetch-site", [""])[-1].lower()
        if site in ("cross-site", "same-site"):
            return f"a web page on another site may not call this server; {hint}"
        return None

    def _cors_headers(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        if origin is None:  # with CORS on, an answer still varies by Origin (a cache must not mix them)
            return [(b"vary", b"Origin")] if self.rules.origins else []
        allow = b"*" if self.rules.any_origin else origin.encode("latin-1")
        return [(b"access-control-allow-origin", allow), (b"vary", b"Origin")]  # the preflight takes the first

    async def _preflight(self, send, headers: dict, cors: list) -> None:
        method = headers["access-control-request-method"][-1]
        if method not in METHODS:
            return await _refuse(send, 403, f"this server has no {method[:20]} routes; it answers "
                                 f"{', '.join(METHODS)}", "method_not_allowed", cors)
        asked = ",".join(headers.get("access-control-request-headers", []))
        names = [h.strip().lower() for h in asked.split(",") if h.strip()]
        allowed = ", ".join(names) if names and all(set(h) <= _TOKEN for h in names) else SIMPLE_HEADERS
        await _send(send, 204, None, [
            *cors[:1], (b"access-control-allow-methods", ", ".join(METHODS).encode()),
            (b"access-control-allow-headers", allowed.encode("latin-1")),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
            (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers")])


def _headers(scope) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in scope.get("headers", []):
        out.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return out


def _is_json(values: list[str]) -> bool:
    return len(values) == 1 and values[0].split(";")[0].strip().lower() == "application/json"


async def _refuse(send, status: int, message: str, code: str, extra=()) -> None:
    body = json.dumps(error_body(status, message, None, code)).encode()
    await _send(send, status, body, [(b"content-type", b"application/json"), *extra])


async def _send(send, status: int, body: bytes | None, headers) -> None:
    """A response the gate makes itself; one with a body (a refusal) also closes the connection."""
    if body is not None:
        headers = [*headers, (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body or b""})
