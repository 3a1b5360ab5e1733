"""Which MCP servers the user approved to start, and which of their tools may run without asking.

No server starts until the user approved it with its exact definition shown: an approval is keyed
on the server's name and fingerprint (config.ServerConfig.fingerprint: every byte of the command,
its arguments and environment, or the URL and headers), so a changed command needs a new approval.
Approvals are remembered in the data folder (`mcp_approvals.json`, private, written whole) and
revoked from Settings. The file keeps digests only, never a command's secrets.

A tool may also be allowed always (per tool, never globally): that too belongs to the approval, so
it goes when the server's definition changes or its approval is revoked; and it is kept with a digest
of the tool's own definition (its description and schema: McpTool.definition), so a server that changes
a tool after it was allowed is asked about again. (An allowance written before digests were kept has
none, and asks once more.)

The file is outside input: an unreadable or damaged one counts as no approvals (`notice` says so),
and an entry of wrong types is dropped.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

from ..json_file import JsonFileError, read_json_file
from .config import ServerConfig, write_private_json

log = logging.getLogger(__name__)
APPROVALS_FILE = "mcp_approvals.json"
MAX_BYTES = 1 << 20
MAX_TOOLS = 512
_DIGEST = re.compile(r"[0-9a-f]{64}")


class Approvals:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.notice = ""  # one line when the file could not be used
        self._lock = threading.Lock()
        self._servers: dict[str, dict] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = read_json_file(self.path, MAX_BYTES)
        except FileNotFoundError:
            return
        except JsonFileError as e:
            self.notice = (f"The MCP approvals in {self.path} could not be read ({e}); "
                           "every server needs approving again.")
            log.warning("%s", self.notice)
            return
        servers = data.get("servers") if isinstance(data.get("servers"), dict) else {}
        for name, entry in servers.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("fingerprint"), str)
                    and _DIGEST.fullmatch(entry["fingerprint"])):
                continue
            tools = entry.get("always_allow", {})
            if isinstance(tools, list):  # written before definitions were kept: none matches, so it asks
                tools = {t: "" for t in tools if isinstance(t, str)}
            tools = dict(list((t, d) for t, d in tools.items() if isinstance(t, str) and len(t) <= 128
                              and isinstance(d, str) and (d == "" or _DIGEST.fullmatch(d)))[:MAX_TOOLS]) \
                if isinstance(tools, dict) else {}
            when = entry.get("approved_at")
            self._servers[name] = {"fingerprint": entry["fingerprint"], "always_allow": tools,
                                   "approved_at": when if isinstance(when, (int, float)) else 0}

    def _save(self) -> None:
        write_private_json(self.path, {"version": 1, "servers": self._servers})

    def is_approved(self, server: ServerConfig) -> bool:
        with self._lock:
            entry = self._servers.get(server.name)
            return entry is not None and entry["fingerprint"] == server.fingerprint()

    def approve(self, server: ServerConfig) -> None:
        """Approves `server` as it is now defined (a new definition starts with no tool always allowed)."""
        with self._lock:
            old = self._servers.get(server.name)
            keep = old["always_allow"] if old and old["fingerprint"] == server.fingerprint() else {}
            self._servers[server.name] = {"fingerprint": server.fingerprint(), "always_allow": keep,
                                          "approved_at": time.time()}
            self._save()

    def revoke(self, name: str) -> None:
        with self._lock:
            if self._servers.pop(name, None) is not None:
                self._save()

    def always_allowed(self, server: ServerConfig) -> dict[str, str]:
        """The tools of `server` that run without asking, each with the definition it was allowed as
        (McpTool.definition; "" for one allowed before definitions were kept): none unless the server is
        approved as defined now."""
        with self._lock:
            entry = self._servers.get(server.name)
            if entry is None or entry["fingerprint"] != server.fingerprint():
                return {}
            return dict(entry["always_allow"])

    def is_always_allowed(self, server: ServerConfig, tool) -> bool:
        """Whether `tool` (an McpTool) runs without asking: allowed for this server as defined now, and the
        tool as defined now."""
        return bool(tool.definition) and self.always_allowed(server).get(tool.name) == tool.definition

    def set_always_allowed(self, server: ServerConfig, tool, allowed: bool) -> None:
        """Allows `tool` (an McpTool of `server`: its name and its definition now) to run without asking,
        or not."""
        with self._lock:
            entry = self._servers.get(server.name)
            if entry is None or entry["fingerprint"] != server.fingerprint():
                raise ValueError(f"the MCP server {server.name!r} is not approved")
            tools = dict(entry["always_allow"])
            if allowed:
                tools[tool.name] = tool.definition
            else:
                tools.pop(tool.name, None)
            entry["always_allow"] = dict(sorted(tools.items())[:MAX_TOOLS])
            self._save()
