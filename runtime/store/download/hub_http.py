"""The one way this program talks to a hub: every request (the file list, file bytes, the nesting
check's range reads) goes through `HubCall.open`, and every answer is read as hostile.

Principles:

- One opener, one redirect policy. A redirect is followed only to http(s), never from https down
  to http, at most `MAX_REDIRECTS` times, and only to the hub's own host and port or to a host of
  the hub's CDN pattern (`CDN_DOMAINS`: the public hub sends file bytes from hosts under hf.co,
  as its /.well-known/meta.json lists; another endpoint only from its own subdomains), on the
  hub's port or the scheme's default one. A redirect target outside the hub itself must be at a
  public address, unless the hub itself is at a loopback or private one (a stand-in, a mirror on
  the LAN): the address is checked on the socket being connected, so a name that changes its
  answer between the check and the connection gains nothing. Through a proxy the proxy resolves
  names and only the host rules apply.
- The token goes only where it came from: Authorization is dropped on any redirect to another
  origin (scheme, host or port) and never comes back on a later hop.
- Every call is bounded in time as a whole, not only per read: an optional overall deadline, and
  a `stop` predicate (pause, cancel, the nesting check's stop) that a watcher thread polls; either
  shuts the call's socket at once, while connecting, while waiting for headers or mid-body.
- Every body is bounded in size after decompression (`read_bounded`); file bytes are never
  decoded (a byte range of a compressed body is meaningless), so an encoded answer is refused.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import os
import socket
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from typing import Self
from urllib.parse import urljoin, urlsplit

from ...errors import ElasticError
from ..remote_names import show

MAX_REDIRECTS = 5
POLL_S = 0.05  # how often the watcher looks at deadlines and stop predicates
READ = 64 * 1024
# The hosts a hub may send us to besides itself, as domains whose subdomains count too. From
# https://huggingface.co/.well-known/meta.json: its lfsDomains and cdnDomains all lie under hf.co,
# its hubDomains are huggingface.co and hf.co (and regional names that do not serve files).
CDN_DOMAINS = {"huggingface.co": ("huggingface.co", "hf.co"), "hf.co": ("huggingface.co", "hf.co")}
DEFAULT_PORTS = {"http": 80, "https": 443}


class DownloadError(ElasticError):
    """A download problem, with a message that says what to do."""


class HubRefused(DownloadError):
    """The hub sent us somewhere it may not (a redirect or an address): never retried."""


class _AddressRefused(OSError):
    """Raised inside a connection (urllib wraps it in URLError); becomes HubRefused."""


# ----------------------------------------------------------------------------- where a hub may send us

def redirect_problem(hub: str, current: str, target: str) -> str | None:
    """Why a redirect from `current` to `target` may not be followed for the hub at `hub` (an
    endpoint URL), in a few words; None when it may."""
    h, cur, new = urlsplit(hub), urlsplit(current), urlsplit(target)
    if new.scheme not in DEFAULT_PORTS:
        return "which is not an http(s) address it may follow"
    if cur.scheme == "https" and new.scheme == "http":
        return "which would leave https for plain http"
    try:
        port = new.port or DEFAULT_PORTS[new.scheme]
        hub_port = h.port or DEFAULT_PORTS.get(h.scheme, 443)
    except ValueError:
        return "whose port is not a number"
    host, hub_host = (new.hostname or "").lower(), (h.hostname or "").lower()
    if not host:
        return "which names no host"
    if host != hub_host and not _in_cdn(hub_host, host):
        return "another host, outside the hub's own domains"
    if port not in (hub_port, DEFAULT_PORTS[new.scheme]):
        return f"another port ({port}) than the hub's"
    return None


def _in_cdn(hub_host: str, host: str) -> bool:
    domains = CDN_DOMAINS.get(hub_host, () if _is_ip(hub_host) else (hub_host,))  # an address has no subdomains
    return any(host == d or host.endswith("." + d) for d in domains)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def is_public(address: str) -> bool:
    """A connected or resolved address is on the public internet (not loopback, private, link-local,
    shared or reserved); an IPv4 address written as IPv6 is judged as IPv4."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _origin(url: str) -> tuple:
    u = urlsplit(url)
    return u.scheme, (u.hostname or "").lower(), u.port or DEFAULT_PORTS.get(u.scheme)


# ----------------------------------------------------------------------------- one call

class HubCall:
    """One request to the hub and its answer, bounded in time and stoppable from another thread.

    Use as a context manager around `open` and the reading of the body. `deadline_s` bounds the
    whole call (connect, redirects, headers, body); `stop()` is polled every POLL_S. When either
    fires the call's sockets are shut, the blocked read returns, and `interrupted` says why
    ("stopped" or "deadline")."""

    def __init__(self, deadline_s: float | None = None, stop: Callable[[], bool] | None = None):
        self.deadline_s = deadline_s
        self.deadline = time.monotonic() + deadline_s if deadline_s else None
        self.stop = stop
        self._why: str | None = None
        self.hub_public: bool | None = None  # learned on the first connection (always to the hub)
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        _WATCHER.add(self)
        return self

    def __exit__(self, *exc) -> None:
        _WATCHER.discard(self)
        with self._lock:
            self._socks.clear()

    def open(self, url: str, headers: dict, timeout: float):
        """The response to GET `url` (after the redirects the policy allows). Raises HubRefused for
        a refused redirect or address, urllib's HTTPError for an error status, and OSError-like
        errors for the network (the caller looks at `interrupted` first)."""
        request = urllib.request.Request(url, headers=headers)
        request.hub_call, request.hub_hops = self, 0
        timeout = min(timeout, self.time_left()) if self.deadline else timeout
        try:
            return _OPENER.open(request, timeout=max(timeout, 0.001))
        except urllib.error.HTTPError as e:
            if 300 <= e.code < 400:  # a redirect urllib itself refuses (file:, a loop)
                raise HubRefused(f"the hub redirected to {show(str(e.filename or ''))}, which is not an "
                                 "http(s) address it may follow; refusing it") from None
            raise
        except urllib.error.URLError as e:
            if isinstance(e.reason, _AddressRefused):
                raise HubRefused(str(e.reason)) from None
            raise

    @property
    def interrupted(self) -> str | None:
        """Why the call was cut short ("stopped" or "deadline"), None while it is not. A read that timed
        out on its socket at the deadline, before the watcher looked, counts as the deadline too."""
        if self._why is None and self.time_left() <= 0:
            return "deadline"
        return self._why

    def time_left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    # the watcher's side
    def _poll(self) -> None:
        if self._why is None:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self._abort("deadline")
            elif self.stop is not None and self.stop():
                self._abort("stopped")

    def _abort(self, why: str) -> None:
        with self._lock:
            self._why = self._why or why
            socks = list(self._socks)
        for s in socks:
            _shut(s)

    def _attach(self, sock: socket.socket) -> None:
        """Registers a socket of this call; OSError when the call was already cut short."""
        with self._lock:
            self._socks.append(sock)
            why = self._why
        if why is not None:  # cut short before this socket existed (or while it was connecting)
            raise OSError(f"the request was {why}")


def _shut(sock: socket.socket) -> None:
    """Shuts a socket another thread may be blocked on. Through a duplicate of its descriptor, so a
    TLS socket's state is left to its owner (shutdown acts on the connection, not the descriptor)."""
    try:
        fd = sock.fileno()
        if fd < 0:
            return
        dup = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        dup.close()


class _Watcher:
    """One daemon thread for every call in flight; it sleeps when there are none."""

    def __init__(self):
        self._calls: set[HubCall] = set()
        self._cond = threading.Condition()
        self._running = False

    def add(self, call: HubCall) -> None:
        with self._cond:
            self._calls.add(call)
            if not self._running:
                self._running = True
                threading.Thread(target=self._loop, name="hub-call-watcher", daemon=True).start()
            self._cond.notify()

    def discard(self, call: HubCall) -> None:
        with self._cond:
            self._calls.discard(call)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._calls:
                    self._cond.wait(timeout=2.0)
                    if not self._calls:
                        self._running = False
                        return
                calls = list(self._calls)
            for call in calls:
                call._poll()
            time.sleep(POLL_S)


_WATCHER = _Watcher()


# ----------------------------------------------------------------------------- the opener

def _checked_connect(call: HubCall, req, address, timeout, source_address=None):
    """socket.create_connection, with the call's socket registered before it connects (so a stop
    acts during the connect) and the address rule applied to the very address connected to."""
    host, port = address
    proxied = req.has_proxy() or bool(getattr(req, "_tunnel_host", None))
    to_hub = _origin(req.full_url)[1] == _origin(_hub_of(req))[1]
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        if not proxied:
            public = is_public(sockaddr[0])
            if to_hub and call.hub_public is None:
                call.hub_public = public
            if not to_hub and not public and call.hub_public is not False:  # a public hub, a local target
                error = _AddressRefused(f"the hub redirected to {show(host)}, which is at the private or local "
                                        f"address {sockaddr[0]}; refusing it")
                continue
        sock = socket.socket(family, kind, proto)
        try:
            call._attach(sock)  # before connecting, so a stop can shut a connect that hangs
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            call._attach(sock)  # a stop that came while connecting (a shutdown cannot reach that) acts now
            return sock
        except OSError as e:
            error = error if isinstance(error, _AddressRefused) else e
            sock.close()
    raise error or OSError(f"{host} has no address")


def _hub_of(req) -> str:
    return getattr(req, "hub_origin", None) or req.full_url


class _Connection(http.client.HTTPConnection):
    def __init__(self, *args, hub_request, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = functools.partial(_checked_connect, hub_request.hub_call, hub_request)


class _TLSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, hub_request, **kwargs):
        super().__init__(*args, **kwargs)
        self._hub_call = hub_request.hub_call
        self._create_connection = functools.partial(_checked_connect, hub_request.hub_call, hub_request)

    def connect(self):
        super().connect()
        self._hub_call._attach(self.sock)  # the TLS socket that wraps the one registered while connecting


class _HTTP(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(functools.partial(_Connection, hub_request=req), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(functools.partial(_TLSConnection, hub_request=req), req, context=self._context)


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_repeats = max_redirections = MAX_REDIRECTS + 1  # ours below speaks first

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        newurl = urljoin(req.full_url, newurl)
        hub = _hub_of(req)
        hops = getattr(req, "hub_hops", 0) + 1
        problem = redirect_problem(hub, req.full_url, newurl)
        if hops > MAX_REDIRECTS or problem:
            fp.close()
            too_many = f"the hub redirected more than {MAX_REDIRECTS} times in a row; refusing to follow"
            raise HubRefused(too_many if hops > MAX_REDIRECTS
                             else f"the hub redirected to {show(newurl)}, {problem}; refusing it")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        new.hub_call, new.hub_hops, new.hub_origin = req.hub_call, hops, hub
        if _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_HTTP, _HTTPS, _Redirects)


# ----------------------------------------------------------------------------- bounded bodies

def read_bounded(response, limit: int, decode: bool = True, cut: bool = False) -> bytes:
    """The whole body of `response`, at most `limit` bytes after decompression (gzip or deflate
    when `decode`; any encoding is refused otherwise). A larger body raises DownloadError, or with
    `cut` is cut at `limit` (the rest is never read)."""
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", "deflate") or (encoding != "identity" and not decode):
        raise DownloadError(f"the hub answered in an encoding this program does not read ({show(encoding)})")
    inflate = zlib.decompressobj(wbits=47 if "gzip" in encoding else 15) if encoding != "identity" else None
    out = bytearray()
    while True:
        chunk = response.read1(min(READ, limit + 1 - len(out)) if cut and inflate is None else READ)
        if not chunk:
            break
        if inflate is not None:
            try:
                chunk = inflate.decompress(chunk, limit + 1 - len(out))
            except zlib.error:
                raise DownloadError("the hub's compressed answer is damaged") from None
            if inflate.unconsumed_tail:  # the output cap was reached with input left over
                raise DownloadError(f"the hub's answer is larger than {limit >> 20} MB once decompressed; refusing it")
        out += chunk
        if len(out) > limit and cut:
            return bytes(out[:limit])
        if len(out) > limit:
            raise DownloadError(f"the hub's answer is larger than {limit >> 20} MB; refusing it")
    return bytes(out)
