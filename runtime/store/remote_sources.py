"""The OpenAI-compatible servers the user added as model sources, next to downloads and imported
folders: `remote_servers.json` in the data folder lists each one's address and model id, and its API
key is kept in the OS keyring (the `keyring` package: Keychain, Windows Credential Locker, the Secret
Service) when one is available, else in that file, readable by the user's account only; each source
says where its key is (`key_store`), and the model manager says it to the user.

    spec = add_source(url, model, key)   # "remote+http://gpu-box:8000/v1#star": what "Use" loads
    url, model = parse_spec(spec); key = read_key(url)
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError, one_line, show
from ..json_file import JsonFileError, read_json_file
from ..paths import data_dir
from ..remote.client import RemoteError, RemoteServer

log = logging.getLogger(__name__)
FILE = "remote_servers.json"
MAX_BYTES = 1024 * 1024
MAX_SOURCES = 100
PREFIX = "remote+"  # a source's spec: PREFIX + url + "#" + model id (a url here never holds '#')
SERVICE = "elastic-chat"  # the keyring's service name; the entry's name is the server's url
KEYRING, FILE_STORE, NO_KEY = "keyring", "file", ""


@dataclass(frozen=True)
class RemoteSource:
    url: str  # normalised: scheme://host:port/.../v1
    model: str
    key_store: str = NO_KEY  # KEYRING, FILE_STORE, or NO_KEY (the server takes none)

    @property
    def spec(self) -> str:
        return f"{PREFIX}{self.url}#{self.model}"

    @property
    def address(self) -> str:
        return RemoteServer(self.url).address


def is_spec(text) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def parse_spec(spec: str) -> tuple[str, str]:
    """(url, model id) of a source's spec; UsageError for one that is not."""
    url, sep, model = spec[len(PREFIX):].partition("#") if is_spec(spec) else ("", "", "")
    if not sep or not model:
        raise UsageError(f"{show(spec)} does not name a server and a model")
    return RemoteServer(url).url, model


def _file() -> Path:
    return data_dir() / FILE


def load_sources() -> list[RemoteSource]:
    """The sources in the file ([] when there is none); a damaged entry is left out with a warning."""
    path = _file()
    try:
        entries = read_json_file(path, MAX_BYTES, kind=list)
    except FileNotFoundError:
        return []
    except JsonFileError as e:
        raise UsageError(f"{path} is damaged ({one_line(str(e), 120)}); fix or remove it: it only lists the "
                         "servers added in the model manager") from None
    out = []
    for i, e in enumerate(entries[:MAX_SOURCES]):
        try:
            url = RemoteServer(e["url"]).url
            model = e["model"]
            if not isinstance(model, str) or not 0 < len(model) <= 256 or not model.isprintable():
                raise UsageError("no usable model id")
            store = e.get("key_store", NO_KEY)
            out.append(RemoteSource(url, model, store if store in (KEYRING, FILE_STORE) else NO_KEY))
        except (KeyError, TypeError, RemoteError, UsageError) as problem:
            log.warning("entry %d of %s is damaged (%s); it is left out", i + 1, path, one_line(problem, 120))
    return out


def _raw_entries() -> list:
    try:
        entries = read_json_file(_file(), MAX_BYTES, kind=list)
    except (FileNotFoundError, JsonFileError):
        return []
    return [e for e in entries if isinstance(e, dict)]


def _save(entries: list) -> None:
    path = _file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(FILE + ".tmp")
    tmp.unlink(missing_ok=True)  # never write through a link left under that name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # a key may be in it: the user's eyes only
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(entries, indent=2) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------- keys


def keyring_name() -> str | None:
    """The OS keyring's name when one is usable here, else None (no backend: the file keeps keys)."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:  # a broken backend configuration: as if there were none
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 0) <= 0:
        return None
    return getattr(backend, "name", type(backend).__name__)


def where_keys_go() -> str:
    """One line for the dialog: where a key entered now would be kept."""
    name = keyring_name()
    if name:
        return f"The API key is kept in the system keyring ({name})."
    return (f"No system keyring is available here: the API key is kept in {_file()}, readable only by your "
            "user account.")


def _put_key(url: str, key: str) -> str:
    name = keyring_name()
    if name:
        import keyring

        try:
            keyring.set_password(SERVICE, url, key)
            return KEYRING
        except Exception as e:  # a locked or refusing keyring: the file, and the dialog says so
            log.warning("the keyring refused the key for %s (%s); it is kept in %s", url, one_line(e, 120), _file())
    return FILE_STORE


def read_key(url: str) -> str | None:
    """The key for the server at `url`, from wherever its source keeps it; None when it has none."""
    url = RemoteServer(url).url
    entry = next((e for e in _raw_entries() if e.get("url") == url), None)
    if entry is None:
        return None
    if entry.get("key_store") == KEYRING:
        try:
            import keyring

            return keyring.get_password(SERVICE, url)
        except Exception as e:
            raise UsageError(f"the system keyring did not give the API key for {url} ({one_line(e, 120)}); "
                             "unlock it, or add the server again") from None
    key = entry.get("api_key") if entry.get("key_store") == FILE_STORE else None
    return key if isinstance(key, str) and key else None


def add_source(url: str, model: str, api_key: str | None) -> RemoteSource:
    """Adds (or replaces) the source for `model` on the server at `url`; the key goes to the keyring
    where one is usable. One key per server: every model there shares it."""
    server = RemoteServer(url, api_key)  # checks the address and the key's characters
    url = server.url
    store = _put_key(url, api_key) if api_key else NO_KEY
    entries = [e for e in _raw_entries() if not (e.get("url") == url and e.get("model") == model)]
    for e in entries:  # the server's other models share its key, wherever it is now
        if e.get("url") == url:
            e.pop("api_key", None)
            e["key_store"] = store
            if store == FILE_STORE:
                e["api_key"] = api_key
    entry = {"url": url, "model": model, "key_store": store}
    if store == FILE_STORE:
        entry["api_key"] = api_key
    if len(entries) >= MAX_SOURCES:
        raise UsageError(f"at most {MAX_SOURCES} servers can be added; remove one first")
    _save(entries + [entry])
    return RemoteSource(url, model, store)


def remove_source(spec: str) -> str:
    """Forgets a source (and its key, when no other model of that server is left)."""
    url, model = parse_spec(spec)
    entries = _raw_entries()
    left = [e for e in entries if not (e.get("url") == url and e.get("model") == model)]
    if len(left) == len(entries):
        raise UsageError(f"{show(model)} on {url} is not an added server")
    if not any(e.get("url") == url for e in left) and any(e.get("key_store") == KEYRING for e in entries
                                                           if e.get("url") == url):
        try:
            import keyring

            keyring.delete_password(SERVICE, url)
        except Exception as e:
            log.warning("the keyring kept the key for %s (%s)", url, one_line(e, 120))
    _save(left)
    return f"removed {model} on {url}"
