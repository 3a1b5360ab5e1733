"""Which MCP servers the user approved to start, and which of their tools may run without asking.

No server starts until the user approved it with its exact definition shown: an approval is keyed
on the server's name and fingerprint (config.ServerConfig.fingerprint: every byte of the command,
its arguments and environment, or the URL and headers), so a changed command needs a new approval.
Approvals are remembered in the data folder (`mcp_approvals.json`, private, written whole) and
revoked from Settings. The file keeps digests only, never a command's secrets.

A tool may also be allowed always (per tool, never globally): that too belongs to the approval, so
it goes when the server's definition changes or its approval is revoked.

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
            tools = entry.get("always_allow", [])
            tools = [t for t in tools if isinstance(t, str) and len(t) <= 128][:MAX_TOOLS] \
                if isinstance(tools, list) else []
            when = entry.get("approved_at")
            self._servers[name] = {"fingerprint": entry["fingerprint"], "always_allow": sorted(set(tools)),
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
            keep = old["always_allow"] if old and old["fingerprint"] == server.fingerprint() else []
            self._servers[server.name] = {"fingerprint": server.fingerprint(), "always_allow": keep,
                                          "approved_at": time.time()}
            self._save()

    def revoke(self, name: str) -> None:
        with self._lock:
            if self._servers.pop(name, None) is not None:
                self._save()

    def always_allowed(self, server: ServerConfig) -> frozenset[str]:
        """The tools of `server` that run without asking (none unless it is approved as defined now)."""
        with self._lock:
            entry = self._servers.get(server.name)
            if entry is None or entry["fingerprint"] != server.fingerprint():
                return frozenset()
            return frozenset(entry["always_allow"])

    def set_always_allowed(self, server: ServerConfig, tool: str, allowed: bool) -> None:
        with self._lock:
            entry = self._servers.get(server.name)
            if entry is None or entry["fingerprint"] != server.fingerprint():
                raise ValueError(f"the MCP server {server.name!r} is not approved")
            tools = set(entry["always_allow"])
            tools = tools | {tool} if allowed else tools - {tool}
            entry["always_allow"] = sorted(tools)[:MAX_TOOLS]
            self._save()
