"""The MCP servers a user configured, in the `mcp.json` format Claude Desktop and LM Studio use:

    {"mcpServers": {"calc": {"command": "uvx", "args": ["mcp-calc"], "env": {"KEY": "..."}},
                    "web":  {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A file is outside input (another app wrote it, or anyone): `parse_config` checks every type, size and
name and refuses the whole file with one line naming the server and the field; keys it does not know
(`disabled`, `timeout`, another app's settings) are ignored. `ServerConfig.fingerprint` is what an
approval is keyed on (the name and every byte of what would run), `command_line` what the user is
shown before approving. `merge_imported` adds another app's servers to this one's file.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import UsageError, show
from ..json_file import JsonFileError, read_json_file
from ..private_files import write_private

CONFIG_FILE = "mcp.json"  # in the data folder (runtime/paths.py)
MAX_CONFIG_BYTES = 1 << 20
MAX_SERVERS = 64
MAX_ARGS, MAX_ENV, MAX_HEADERS = 256, 256, 64
MAX_TEXT = 8192  # a command, an argument, a value, a URL
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9 _.-]{0,62}[A-Za-z0-9_.-])?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")  # an HTTP token
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH|COOKIE|CREDENTIAL", re.IGNORECASE)
HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")


class ConfigError(UsageError):
    """An MCP configuration that cannot be used; the message names the server and the field."""


@dataclass(frozen=True)
class ServerConfig:
    """One server: a program to start (stdio) or an address to connect to (Streamable HTTP)."""
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # sorted by key
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()  # sorted by name

    @property
    def kind(self) -> str:
        return "http" if self.url else "stdio"

    def to_dict(self) -> dict:
        """The server's `mcp.json` entry."""
        if self.url:
            return {"url": self.url, **({"headers": dict(self.headers)} if self.headers else {})}
        out = {"command": self.command, "args": list(self.args)}
        return {**out, "env": dict(self.env)} if self.env else out

    def fingerprint(self) -> str:
        """A digest of the name and of exactly what would run: any change needs a new approval."""
        canonical = json.dumps([self.name, self.to_dict()], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def command_line(self, reveal: bool = False) -> str:
        """What the user approves, on one line: `KEY=value program arg...` (as a shell would take it) or
        the URL and its headers. Values of secret-looking variables and headers (a token, a key) show
        as their length unless `reveal`."""
        def value(key: str, v: str) -> str:
            return v if reveal or not _SECRET.search(key) else f"<hidden, {len(v)} characters>"
        if self.url:
            headers = "".join(f" [{k}: {value(k, v)}]" for k, v in self.headers)
            return f"{self.url}{headers}"
        env = [f"{k}={shlex.quote(value(k, v))}" for k, v in self.env]
        return " ".join([*env, shlex.join([self.command, *self.args])])


@dataclass(frozen=True)
class McpConfig:
    servers: tuple[ServerConfig, ...] = ()

    def server(self, name: str) -> ServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    def with_server(self, server: ServerConfig) -> McpConfig:
        """This configuration with `server` added, or replacing the one of its name."""
        if len(self.servers) >= MAX_SERVERS and self.server(server.name) is None:
            raise ConfigError(f"at most {MAX_SERVERS} MCP servers can be configured; remove one first")
        kept = [s for s in self.servers if s.name != server.name]
        return McpConfig(tuple(sorted([*kept, server], key=lambda s: s.name.lower())))

    def without(self, name: str) -> McpConfig:
        return McpConfig(tuple(s for s in self.servers if s.name != name))

    def to_dict(self) -> dict:
        return {"mcpServers": {s.name: s.to_dict() for s in self.servers}}


# ----------------------------------------------------------------------------- checking

def _text(value, where: str, limit: int = MAX_TEXT, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be text, not {show(value, 40)}")
    if not value and not empty:
        raise ConfigError(f"{where} is empty")
    if len(value) > limit:
        raise ConfigError(f"{where} is longer than {limit:,} characters")
    if "\x00" in value:
        raise ConfigError(f"{where} holds a NUL character")
    return value


def _mapping(value, where: str, limit: int, key_pattern: re.Pattern, key_kind: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be an object of text values")
    if len(value) > limit:
        raise ConfigError(f"{where} has more than {limit} entries")
    out = []
    for key, v in value.items():
        if not key_pattern.fullmatch(key):
            raise ConfigError(f"{where} has {show(key, 40)}, which is not a valid {key_kind}")
        text = _text(v, f"{where}[{key!r}]", empty=True)
        if key_kind == "header name" and ("\r" in text or "\n" in text):
            raise ConfigError(f"{where}[{key!r}] holds a line break")
        out.append((key, text))
    return tuple(sorted(out))


def check_name(name) -> str:
    """A server's name: 1-64 letters, digits, spaces, `_`, `.` or `-`, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"the MCP server name {show(name, 40)} is not valid: use 1-64 letters, digits, spaces, "
                          "'_', '.' or '-', starting with a letter or digit")
    return name


def parse_server(name, entry) -> ServerConfig:
    """One `mcpServers` entry, checked."""
    name = check_name(name)
    where = f"MCP server {name!r}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object with a \"command\" or a \"url\"")
    kind = entry.get("type", entry.get("transport"))
    if kind is not None and kind not in ("stdio", *HTTP_TYPES):
        raise ConfigError(f"{where}: the transport {show(kind, 30)} is not supported (use stdio or Streamable HTTP)")
    if "command" in entry and "url" in entry:
        raise ConfigError(f"{where} has both a \"command\" and a \"url\"; keep one")
    if "url" in entry:
        url = _text(entry["url"], f"{where}: the url", 2048)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{where}: the url must be an http:// or https:// address, not {show(url, 60)}")
        if any(c.isspace() for c in url):
            raise ConfigError(f"{where}: the url holds a space or a line break")
        headers = _mapping(entry.get("headers"), f"{where}: the headers", MAX_HEADERS, _HEADER, "header name")
        return ServerConfig(name, url=url, headers=headers)
    if "command" not in entry:
        raise ConfigError(f"{where} has neither a \"command\" nor a \"url\"")
    command = _text(entry["command"], f"{where}: the command")
    args = entry.get("args", [])
    if args is None:
        args = []
    if not isinstance(args, list):
        raise ConfigError(f"{where}: the args must be a list of text")
    if len(args) > MAX_ARGS:
        raise ConfigError(f"{where} has more than {MAX_ARGS} args")
    args = tuple(_text(a, f"{where}: argument {i + 1}", empty=True) for i, a in enumerate(args))
    env = _mapping(entry.get("env"), f"{where}: the env", MAX_ENV, _ENV_KEY, "variable name")
    return ServerConfig(name, command=command, args=args, env=env)


def parse_config(data) -> McpConfig:
    """A whole `mcp.json` value -> the servers, every one checked (ConfigError on the first problem)."""
    if not isinstance(data, dict):
        raise ConfigError("an MCP configuration must be a JSON object with \"mcpServers\"")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError("\"mcpServers\" must be an object of servers by name")
    if len(servers) > MAX_SERVERS:
        raise ConfigError(f"more than {MAX_SERVERS} MCP servers are configured")
    parsed = [parse_server(name, entry) for name, entry in servers.items()]
    return McpConfig(tuple(sorted(parsed, key=lambda s: s.name.lower())))


def read_config(path: Path | str, missing_ok: bool = False) -> McpConfig:
    """The servers in `path`; ConfigError (naming the file) when it cannot be used."""
    try:
        data = read_json_file(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        if missing_ok:
            return McpConfig()
        raise ConfigError(f"{path}: no such file; give the path of an mcp.json") from None
    except JsonFileError as e:
        raise ConfigError(f"{path}: {e}") from None
    try:
        return parse_config(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def bundled_calculator() -> ServerConfig:
    """The calculator server that ships with the app (runtime/mcp/calculator.py), run by this Python:
    tool use works offline on the demo. Like any server, it starts only once approved."""
    return ServerConfig("calculator", command=sys.executable, args=("-m", "runtime.mcp.calculator"))


def write_config(path: Path | str, config: McpConfig) -> None:
    write_private_json(path, config.to_dict())


def merge_imported(current: McpConfig, imported: McpConfig) -> tuple[McpConfig, list[str], list[str]]:
    """`imported`'s servers added to `current`: a name already used with another definition is added as
    `name-2` (never replacing the user's), an identical one is skipped. Returns the configuration, the
    names added and the names skipped. An added server starts only once approved, like any other."""
    added, skipped, out = [], [], current
    for server in imported.servers:
        existing = out.server(server.name)
        if existing is not None and existing.to_dict() == server.to_dict():
            skipped.append(server.name)
            continue
        name, n = server.name, 2
        while out.server(name) is not None:
            name, n = f"{server.name[:60]}-{n}", n + 1
        out = out.with_server(ServerConfig(check_name(name), server.command, server.args, server.env, server.url,
                                           server.headers))
        added.append(name)
    return out, added, skipped


def write_private_json(path: Path | str, data) -> None:
    """`data` as JSON in `path`, readable by this user only, written whole or not at all and never
    through a link (runtime/private_files.py, as the app writes its settings)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))

