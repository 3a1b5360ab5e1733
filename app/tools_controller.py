"""The app's tools: the MCP servers the user configured and approved, the per-chat tools switch, and
the consent asked on the GUI thread for a call the engine thread's reply is waiting on.

Owned by the ChatController (it outlives every view). The servers' file is `mcp.json` in the data
folder and the approvals `mcp_approvals.json` beside it (runtime/mcp/). Nothing starts unapproved: a
server starts, off the GUI thread, when the user approves it in Settings (to show its tools), when the
app opens and it is approved already (so its tools are listed and counted before the first reply), or
when a reply in a chat with tools on needs it, and only while it is approved as defined now.

A reply with tools is a `ToolJob` handed to the engine worker where a plain reply is a `PlainReply`: in
the engine thread it starts what it needs, offers the chat's tools and runs runtime/tool_loop.py. When a
call needs consent, the loop's `consent` (engine thread) posts the call here and waits; the dialog
(app/widgets/tool_consent.py) answers through a `Mailbox`. The wait ends on the answer, on the reply's
Stop, or when the dialog is closed, so no thread waits for ever and the window never blocks.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from PySide6.QtCore import QObject, Signal, Slot

from runtime.api import (
    APPROVALS_FILE,
    CONFIG_FILE,
    DECLINE,
    MAX_TOOL_CALLS,
    TOOL_TIMEOUT,
    Approvals,
    ChatTools,
    ConfigError,
    McpConfig,
    McpError,
    McpManager,
    PendingCall,
    ServerConfig,
    consent_key,
    merge_imported,
    read_config,
    run_tool_loop,
    write_config,
)

from .workers import PlainReply, ReplyJob, TaskRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolsReady:
    """The tools a reply offers (after starting its servers), and the servers that could not start."""
    offered: tuple[str, ...]
    problems: tuple[str, ...]
    type: str = "tools_ready"
    progress: object = None


class StartFailure(NamedTuple):
    """A server that could not start, as it was defined then; `said`: a reply has told the user."""
    server: ServerConfig
    message: str
    said: bool


def chat_tool_settings(settings: dict) -> tuple[bool, set[str]]:
    """A chat's tools switch from its saved settings (outside input): (tools on, tools left out)."""
    tools = settings.get("tools") if isinstance(settings.get("tools"), dict) else {}
    off = tools.get("off") if isinstance(tools.get("off"), list) else []
    return tools.get("on", True) is not False, {t for t in off if isinstance(t, str)}


class Mailbox:
    """One answer, handed from the GUI thread to the engine thread that waits for it."""

    def __init__(self):
        self._answer, self._ready = DECLINE, threading.Event()

    def put(self, answer: str) -> None:
        self._answer = answer
        self._ready.set()

    def wait(self, stopped) -> str:
        while not self._ready.wait(0.05):
            if stopped():
                return DECLINE
        return self._answer


@dataclass
class ToolJob:
    """A reply with tools, run by the engine worker (EngineWorker.generate calls `run`): a
    workers.ReplyJob, as a PlainReply is."""
    request: object  # runtime.generate.ChatRequest
    manager: McpManager
    servers: tuple[ServerConfig, ...]
    chat_tools: ChatTools
    off: set[str] = field(default_factory=set)
    ask: object = None  # (PendingCall, Controls) -> answer, called in the engine thread
    max_calls: int = MAX_TOOL_CALLS.default
    timeout_s: float = TOOL_TIMEOUT.default
    # server name -> StartFailure: not tried again by every reply (a server that hangs at start would hold
    # each one up); approving it again in Settings tries again
    failed: dict = field(default_factory=dict)
    always: object = None  # () -> the consent keys allowed always, once the servers have started

    def prepare(self) -> ToolsReady:
        """Starts the approved servers not running yet (in the engine thread, never the GUI's) and puts
        their tools, less those this chat switched off, into the request: what the prompt renders, so the
        context is fitted and counted with them."""
        problems = []
        for server in self.servers:
            failed = self.failed.get(server.name)
            if failed is None or failed.server != server:
                try:
                    self.manager.start(server)
                    continue
                except McpError as e:
                    failed = StartFailure(server, str(e), False)
            if not failed.said:  # said once, by the first reply it leaves out (a start at launch has no reply)
                problems.append(f"{failed.message} (it is left out; approve it again in Settings to retry)")
            self.failed[server.name] = failed._replace(said=True)
        approved = {s.name for s in self.servers}  # not a server revoked and still stopping
        offered = [t for t in self.manager.tools() if t.server in approved and t.name not in self.off]
        self.request = replace(self.request, tools=tuple(t.as_tool() for t in offered) or None)
        if self.always is not None:  # the tools now running, as allowed for the server and definition they have
            self.chat_tools.always_allowed = self.always()
        return ToolsReady(tuple(t.name for t in offered), tuple(problems))

    def run(self, stream, controls):
        """The reply's rounds, once prepared (and its request fitted to the context)."""
        yield from run_tool_loop(stream, self.request, self.manager, lambda call: self.ask(call, controls), controls,
                                 self.chat_tools, self.max_calls, self.timeout_s)


class ToolsController(QObject):
    sig_servers = Signal()  # the configuration, an approval or a server's status changed
    sig_consent = Signal(int, object, object)  # request id, PendingCall, Mailbox: ask the user (GUI thread)
    sig_consent_ended = Signal(int)  # request id: its reply ended or stopped; a dialog still open goes
    _sig_ask = Signal(int, object, object)  # the same, posted from the engine thread

    def __init__(self, data_dir: Path, parent=None):
        super().__init__(parent)
        self.config_path = Path(data_dir) / CONFIG_FILE
        self.approvals = Approvals(Path(data_dir) / APPROVALS_FILE)
        self.problem = self.approvals.notice
        try:
            self.config = read_config(self.config_path, missing_ok=True)
        except ConfigError as e:
            self.config, self.problem = McpConfig(), f"The MCP servers could not be read: {e}"
            log.warning("%s", self.problem)
        self.manager = McpManager(is_approved=self.approvals.is_approved)
        self.status: dict[str, str] = {}  # server name -> one line ("running: 5 tools", an error)
        self.chats: dict[int, ChatTools] = {}
        self.failed: dict[str, StartFailure] = {}  # servers that could not start (ToolJob.failed)
        self.waiting: dict[int, list[Mailbox]] = {}  # request id -> its unanswered consents
        self.tasks = TaskRunner(self)
        self._sig_ask.connect(self._ask)

    # ------------------------------------------------------------------ servers (Settings)

    def _save(self, config: McpConfig) -> None:
        write_config(self.config_path, config)
        self.config = config
        self.sig_servers.emit()

    def add(self, server: ServerConfig) -> None:
        """Adds (or redefines) a server: it is not approved until the user approves it as defined now."""
        self._save(self.config.with_server(server))

    def import_file(self, path: str) -> tuple[list[str], list[str]]:
        """Adds another app's servers (never replacing one); ConfigError when the file cannot be used."""
        merged, added, skipped = merge_imported(self.config, read_config(path))
        self._save(merged)
        return added, skipped

    def remove(self, name: str) -> None:
        self.revoke(name)
        self._save(self.config.without(name))

    def approve(self, name: str) -> None:
        """Approves the server as defined now and starts it (off the GUI thread) to list its tools."""
        server = self.config.server(name)
        if server is None:
            return
        self.approvals.approve(server)
        self.failed.pop(name, None)
        self._start(server, told=True)  # its status line in Settings says how it went

    def start_approved(self) -> None:
        """Starts the servers approved already (at launch, off the GUI thread): their tools are then in the
        Tools menu and the context meter before the first reply, which no longer waits for them. One that
        cannot start is said by the first reply that leaves it out, and in Settings."""
        for server in self.approved_servers():
            if server.name not in self.status and server.name not in self.failed:
                self._start(server, told=False)

    def _start(self, server: ServerConfig, told: bool) -> None:
        name = server.name
        self.status[name] = "starting…"
        self.sig_servers.emit()
        self.tasks.run(self.manager.start, (server,), lambda tools: self._started(name, tools),
                       lambda message: self._failed(name, message, told))

    def _started(self, name: str, tools) -> None:
        problems = self.manager.problems(name)
        self.status[name] = f"running: {len(tools)} tool{'' if len(tools) == 1 else 's'}" + (
            f" ({len(problems)} left out: {problems[0]})" if problems else "")
        self.sig_servers.emit()

    def _failed(self, name: str, message: str, told: bool) -> None:
        self.status[name] = message
        server = self.config.server(name)
        if server is not None:  # (a reply that meanwhile tried it itself may have said so already)
            earlier = self.failed.get(name)
            said = told or (earlier is not None and earlier.server == server and earlier.said)
            self.failed[name] = StartFailure(server, message, said)
        self.sig_servers.emit()

    def revoke(self, name: str) -> None:
        """Revokes the approval and stops the server (off the GUI thread)."""
        self.approvals.revoke(name)
        self.status.pop(name, None)
        self.tasks.run(self.manager.stop, (name,), self._stopped, self._stopped)
        self.sig_servers.emit()

    def _stopped(self, _) -> None:
        self.sig_servers.emit()  # the waiting lines and the Settings box see it gone

    def approved_servers(self) -> tuple[ServerConfig, ...]:
        return tuple(s for s in self.config.servers if self.approvals.is_approved(s))

    def known_tools(self):
        """The approved running servers' tools (the per-chat switch's menu, the context meter): a revoked
        server's are left out at once, while it stops off the GUI thread."""
        approved = {s.name for s in self.approved_servers()}
        return [t for t in self.manager.tools() if t.server in approved]

    def waiting_servers(self) -> list[str]:
        """One line for each approved server with no tools running: starting, or why it is not."""
        running = {t.server for t in self.known_tools()}
        return [f"{s.name}: {self.status.get(s.name, 'starts with the next reply')}"
                for s in self.approved_servers() if s.name not in running]

    # ------------------------------------------------------------------ replies

    def offered_tools(self, chat_settings: dict) -> list[dict] | None:
        """The tools a reply in a chat with these settings is offered now (the running servers', less those
        switched off), as the template renders them: for the context meter. None when there are none."""
        on, off = chat_tool_settings(chat_settings)
        if not on or not self.approved_servers():
            return None
        return [t.as_tool() for t in self.known_tools() if t.name not in off] or None

    def job(self, request_id: int, cid: int, request, chat_settings: dict, max_calls: int | None = None) -> ReplyJob:
        """The reply as the engine worker runs it: a ToolJob, or a PlainReply when this chat offers no tools
        (switched off, none approved)."""
        on, off = chat_tool_settings(chat_settings)
        servers = self.approved_servers()
        if not on or not servers:
            return PlainReply(request)
        chat = self.chats.setdefault(cid, ChatTools())
        chat.always_allowed = frozenset()  # set once the servers run (ToolJob.prepare): keyed on their tools

        def ask(call: PendingCall, controls) -> str:
            box = Mailbox()
            self._sig_ask.emit(request_id, call, box)  # queued to the GUI thread
            return box.wait(lambda: controls.stop_requested)
        return ToolJob(request, self.manager, servers, chat, off, ask, max_calls or MAX_TOOL_CALLS.default,
                       failed=self.failed, always=lambda: self.always_allowed_keys(servers))

    def always_allowed_keys(self, servers) -> frozenset:
        """The consent keys (runtime/tool_loop.py) of the running tools the user allowed always: each for its
        own server as approved now and its own definition, never another server's tool of the same name."""
        keys = set()
        for server in servers:
            for tool in self.manager.tools():
                if (tool.server == server.name and tool.origin == server.fingerprint()
                        and self.approvals.is_always_allowed(server, tool)):
                    keys.add(consent_key(tool))
        return frozenset(keys)

    @Slot(int, object, object)
    def _ask(self, request_id: int, call: PendingCall, box: Mailbox) -> None:
        self.waiting.setdefault(request_id, []).append(box)
        self.sig_consent.emit(request_id, call, box)

    def answered(self, request_id: int, box: Mailbox, answer: str) -> None:
        """The dialog's answer (every dialog answers once: a button, Esc, or its closing)."""
        box.put(answer)
        boxes = self.waiting.get(request_id, [])
        if box in boxes:
            boxes.remove(box)

    def reply_ended(self, request_id: int) -> None:
        """A reply ended or was stopped: whatever it still waits for is declined."""
        boxes = self.waiting.pop(request_id, [])
        for box in boxes:
            box.put(DECLINE)
        if boxes:
            self.sig_consent_ended.emit(request_id)

    def shutdown(self) -> None:
        for request_id in list(self.waiting):
            self.reply_ended(request_id)
        self.tasks.shutdown()
        self.manager.close()
