"""Who may talk to the server from a web browser: the names a request may be addressed to (its `Host`)
and the web pages (their `Origin`) that may call it. Plain data and checks, no HTTP library: the
settings file and the command line check the user's entries with the same functions (runtime/options.py).

Any page the user visits can make the browser send requests to 127.0.0.1. Two rules stop it:

- A request is answered only when it is addressed to this server by a name the user chose: the
  loopback names (localhost, 127.0.0.1, [::1]), the address it listens on, and the names added with
  `--allow-host` (or the setting). A DNS rebinding attack points a name the attacker owns at 127.0.0.1,
  so its requests carry that name as `Host`; they are refused. Names are compared exactly (case aside):
  other spellings of an address (127.1, 0x7f.1, 2130706433, a trailing dot) are refused, since no
  browser sends them. Listening on every interface (0.0.0.0, ::), an IP address written the standard
  way is accepted too: a rebinding needs a name, and a page at an address is that server's own.
- A browser says which page sent a request in `Origin` (and `Sec-Fetch-Site`). A request from a page
  is refused unless its origin was added with `--allow-origin` (or the setting); `*` allows every page,
  never with credentials. A request without either header comes from a program, not a page.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
ANY_ORIGIN = "*"
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_SCHEMES = {"http": 80, "https": 443}


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`text` as an IP address when it is one written the standard way (127.0.0.1, [::1]); else None."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ip = ipaddress.ip_address(inner)
    except ValueError:
        return None
    if ip.version == 6 and inner == text:  # an IPv6 address in a Host header has brackets
        return None
    return ip if str(ip) == inner else None


def host_entry(text: str) -> str:
    """The name as a request's Host spells it (`[::1]` for an IPv6 address, lower case), for a name
    the user allows; ValueError(what a valid one is) otherwise. Used for the server's own address too."""
    rule = "a host name or an IP address (without a port, a scheme or a wildcard)"
    if not isinstance(text, str):
        raise ValueError(rule)
    name = text.strip().lower()
    if not name or len(name) > 253:
        raise ValueError(rule)
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        ip = None
    if ip is not None:
        return f"[{ip}]" if ip.version == 6 else str(ip)
    if all(_LABEL.fullmatch(label) for label in name.split(".")):  # 127.1 too: no browser sends it, but
        return name  # it names an address to listen on (as the app's settings accept it), and only itself
    raise ValueError(rule)


def origin_entry(text: str) -> str:
    """An origin as browsers send it (`http://localhost:3000`, `https://example.com`: a scheme, a host
    and a port only when it is not the scheme's default), or `*`; ValueError(rule) otherwise."""
    rule = "an origin such as http://localhost:3000 (scheme, host and port only), or *"
    if not isinstance(text, str):
        raise ValueError(rule)
    value = text.strip().lower()
    if value == ANY_ORIGIN:
        return value
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in _SCHEMES or not rest or any(c in rest for c in "/?#@\\ "):
        raise ValueError(rule)
    host, port = split_host_port(rest)
    if host is None or port == 0:
        raise ValueError(rule)
    host = host_entry(host)
    return f"{scheme}://{host}" + (f":{port}" if port not in (None, _SCHEMES[scheme]) else "")


def split_host_port(value: str) -> tuple[str | None, int | None]:
    """`name`, `name:port`, `[v6]` or `[v6]:port` as (name, port or None); (None, None) when it is
    none of those (userinfo, several colons, a port that is not 1 to 5 digits)."""
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[:end + 1], value[end + 1:]
        if end < 0 or (rest and not rest.startswith(":")):
            return None, None
        port = rest[1:] if rest else None
    else:
        host, sep, port = value.partition(":")
        port = port if sep else None
        if ":" in (port or ""):
            return None, None
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= len(port) <= 5):
        return None, None
    if not host:
        return None, None
    return host, (int(port) if port is not None else None)


@dataclass(frozen=True)
class WebRules:
    """The names and pages a server accepts. `hosts`: Host names, as `host_entry` spells them;
    `port`: the port it listens on; `any_ip`: it listens on every interface; `origins`: allowed
    origins as `origin_entry` spells them (empty: none, CORS off)."""
    hosts: frozenset[str]
    port: int
    any_ip: bool = False
    origins: frozenset[str] = frozenset()

    @classmethod
    def serving(cls, address: str, port: int, allow_hosts=(), allow_origins=()) -> WebRules:
        """The rules for a server listening on `address`:`port` with the user's added names and origins."""
        own = host_entry(address)
        any_ip = own in ("0.0.0.0", "[::]")
        hosts = frozenset((*LOOPBACK_NAMES, *([] if any_ip else [own]), *map(host_entry, allow_hosts)))
        return cls(hosts, port, any_ip, frozenset(map(origin_entry, allow_origins)))

    def host_allowed(self, value: str | None) -> bool:
        """Whether a request addressed to `value` (its Host, `name[:port]`) is for this server."""
        if not value:
            return False
        host, port = split_host_port(value.lower())
        if host is None or (port is not None and port != self.port):
            return False
        return host in self.hosts or (self.any_ip and _ip(host) is not None)

    @property
    def any_origin(self) -> bool:
        return ANY_ORIGIN in self.origins

    def origin_allowed(self, origin: str) -> bool:
        """Whether a page at `origin` (the Origin header, as sent; "null" for a sandboxed page or a file)
        may call this server."""
        return self.any_origin or origin.lower() in self.origins
