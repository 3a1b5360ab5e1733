"""The rules for the server's address and its API key, one owner for `serve`'s options, the app's
server settings (app/state/settings.py asks these same functions) and the requests' keys: it listens
on loopback unless a key guards it, a key is at least 8 printable characters, and a request's key is
compared in constant time. Which Host names and web pages may call it is web_rules.py's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import string

from ..errors import UsageError
from ..options import ALLOW_HOSTS, ALLOW_ORIGINS, PORT, OptionError
from .web_rules import host_entry

KEY_CHARS = set(string.ascii_letters + string.digits + string.punctuation)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def valid_api_key(api_key: str) -> bool:
    """At least 8 printable characters, no spaces (the app's settings check keys with this too)."""
    return len(api_key) >= 8 and set(api_key) <= KEY_CHARS


def check_listen(host: str, port: int, api_key: str | None, allow_hosts=(), allow_origins=()) -> None:
    """Refuses an address that is not safe or not valid, in one line that says what to do; also the
    names and origins the user allows (web_rules.py)."""
    for option, values in ((ALLOW_HOSTS, allow_hosts), (ALLOW_ORIGINS, allow_origins)):
        try:
            option.parse(values)
        except OptionError as e:
            raise UsageError(str(e)) from None
    try:
        PORT.parse(port, "--port")
    except OptionError as e:
        raise UsageError(str(e)) from None
    try:
        host_entry(host)
    except ValueError as e:
        raise UsageError(f"--host {host} is not {e}") from None
    if api_key is not None and not valid_api_key(api_key):
        raise UsageError("--api-key must be at least 8 printable characters with no spaces")
    if not is_loopback(host) and not api_key:
        raise UsageError(f"--host {host} lets other computers reach the model; add --api-key KEY "
                         "(clients send it as 'Authorization: Bearer KEY'), or leave --host at 127.0.0.1")


def key_matches(given: str, key: str) -> bool:
    """Whether `given` is the key, in the same time whatever `given` holds: both are hashed first, so
    not even their lengths decide how long the comparison takes (compare_digest's own caveat)."""
    digest = [hashlib.sha256(k.encode("utf-8", "surrogatepass")).digest() for k in (given, key)]
    return hmac.compare_digest(*digest)
