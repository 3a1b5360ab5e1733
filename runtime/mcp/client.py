"""Runs the user's MCP servers and calls their tools, with the official `mcp` SDK, off the caller's thread.

    manager = McpManager(is_approved=approvals.is_approved)
    tools = manager.start(server)                 # blocks (at most start_timeout_s); McpError if it fails
    outcome = manager.call("add_numbers", {"a": 1, "b": 2}, cancelled=controls.stop_requested_fn)
    manager.close()

The SDK is asyncio; the manager owns one event loop in one daemon thread, and every server lives
there as one task holding its session open until it is stopped. The sync methods are called from a
worker thread (never the GUI's): they hand work to the loop and wait, with a timeout on everything,
so a server that hangs or dies is one line of error, never a blocked caller:

- `start` refuses a server `is_approved` does not approve (NotApproved: nothing is spawned), then
  spawns (stdio) or connects (Streamable HTTP), initialises and lists the tools. A stdio server's
  stderr goes to the log, line by line, and its last lines are quoted when it dies.
- Tool lists are outside input: a tool with a bad name, an oversized or too deep schema, or a name
  another server already offers is left out (`problems` says which and why).
- `call` never raises for the server's faults: a timeout, a crash, an error result or a result too
  large to keep comes back as a `ToolOutcome` (errors one line, huge text cut with a note saying so).
  `cancelled`, polled while waiting, abandons the call (the user's Stop).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import hashlib
import json
import logging
import os
import re
import threading
import time
import weakref
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import Callable

from ..errors import ElasticError, one_line
from ..options import TOOL_TIMEOUT
from . import process_group
from .config import ServerConfig

log = logging.getLogger(__name__)
MAX_TOOLS_PER_SERVER = 128
MAX_SCHEMA_CHARS = 32 * 1024
MAX_SCHEMA_DEPTH = 16
MAX_DESCRIPTION = 2000
MAX_RESULT_CHARS = 16_000  # what one result may add to the conversation
MAX_RESULT_BLOCKS = 1_000  # content blocks of one result read; a tool's answer is rarely more than a few
MAX_LIST_PAGES = 8
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LAST_WORDS_S = 5.0  # the longest wait for a dead server's last stderr line (it is there within milliseconds)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # the MCP spec's tool names
_POLL_S = 0.05


class McpError(ElasticError):
    """A server that cannot be started or used; the message is one line for the user."""


class NotApproved(McpError):
    """A server the user has not approved (as it is defined now): it is never started."""


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str
    description: str
    input_schema: dict
    origin: str = ""  # the fingerprint of the server's definition it was listed by (ServerConfig.fingerprint)

    @property
    def definition(self) -> str:
        """A digest of what the user consents to besides the name: the description and the schema. A server
        that changes them after a consent (MCP's "rug pull") is asked about again (runtime/tool_loop.py)."""
        text = json.dumps({"description": self.description, "input_schema": self.input_schema}, sort_keys=True,
                          ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def as_tool(self) -> dict:
        """The tool as offered to the model (OpenAI's function form, which the chat template renders)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.input_schema}}


@dataclass(frozen=True)
class ToolOutcome:
    content: str  # what goes back to the model (and is shown): the tool's text, or one line of error
    is_error: bool
    ms: float = 0.0
    truncated: bool = False
    stopped: bool = False  # abandoned by the caller's Stop


@dataclass
class _Running:
    server: ServerConfig
    stop: asyncio.Event
    task: asyncio.Task | None = None
    session: object = None
    tools: tuple[McpTool, ...] = ()
    problems: list[str] = field(default_factory=list)
    stderr_tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=5))
    stderr_done: threading.Event = field(default_factory=threading.Event)  # its stderr reached its end
    dead: str = ""  # why it stopped, once it has
    pid: int | None = None  # a stdio server's process, which leads a process group of its own

    def last_words(self, wait_s: float = 0.0) -> str:
        """Its last line on stderr, quoted; after waiting up to `wait_s` for the stderr of a server that
        died to end (it is read by another thread: the line may not have arrived yet)."""
        if wait_s:
            self.stderr_done.wait(wait_s)
        return _quote(self.stderr_tail)


class McpManager:
    def __init__(self, is_approved: Callable[[ServerConfig], bool], call_timeout_s: float = TOOL_TIMEOUT.default,
                 start_timeout_s: float = START_TIMEOUT_S, max_result_chars: int = MAX_RESULT_CHARS):
        self.is_approved = is_approved
        self.call_timeout_s, self.start_timeout_s = call_timeout_s, start_timeout_s
        self.max_result_chars = max_result_chars
        self._lock, self._starting = threading.Lock(), threading.Lock()
        self._running: dict[str, _Running] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        manager = weakref.ref(self)
        atexit.register(lambda: (m := manager()) is not None and m._end_all())  # even without close()

    # ------------------------------------------------------------------ the loop thread

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="mcp", daemon=True)
                self._thread.start()
            return self._loop

    def _submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())

    # ------------------------------------------------------------------ servers

    def start(self, server: ServerConfig) -> tuple[McpTool, ...]:
        """Starts `server` (if it is not running) and returns its tools; McpError when it cannot."""
        if not self.is_approved(server):
            raise NotApproved(f"the MCP server {server.name!r} is not approved to start; approve it in "
                              "Settings > MCP servers first")
        with self._starting:  # one start at a time (Settings' thread and a reply's may ask at once)
            return self._start(server)

    def _start(self, server: ServerConfig) -> tuple[McpTool, ...]:
        running = self._running.get(server.name)
        if running is not None and not running.dead and running.server == server:
            return running.tools
        if running is not None:
            self.stop(server.name)
        asked = time.monotonic()
        running = _Running(server, asyncio.Event())
        self._running[server.name] = running  # before its process exists: stop() and close() find it
        ready = self._submit(self._launch(running))
        while True:
            try:
                return ready.result(_POLL_S).tools
            except TimeoutError:
                pass
            if self._running.get(server.name) is not running:  # stop() or close() took it while it started
                ready.cancel()
                raise McpError(f"the MCP server {server.name!r} was stopped before it finished starting")
            if time.monotonic() - asked > self.start_timeout_s:  # a wait on another program: wall clock
                ready.cancel()
                said = self._last_words(server.name)
                self.stop(server.name)  # its whole process group ends: a hung server is never left running
                raise McpError(f"the MCP server {server.name!r} did not start within "
                               f"{time.monotonic() - asked:.0f} s{said}") from None

    async def _launch(self, running: _Running) -> _Running:
        started = asyncio.get_running_loop().create_future()
        running.task = asyncio.ensure_future(self._serve(running, started))
        return await started

    async def _serve(self, running: _Running, started: asyncio.Future) -> None:
        """One server's life: open it, list its tools, then hold its session until told to stop."""
        server = running.server
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._open(stack, running)
                from mcp import ClientSession

                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools, running.problems = await _list_tools(session, server.name, self._taken(server.name))
                running.tools = tuple(replace(t, origin=server.fingerprint()) for t in tools)
                for problem in running.problems:
                    log.warning("MCP server %s: %s", server.name, problem)
                running.session = session
                started.set_result(running)
                await running.stop.wait()
        except BaseException as e:  # noqa: B036 (the SDK's task groups raise groups; cancellation ends it too)
            why = _reason(e)
            running.dead = why
            if not started.done():
                if not isinstance(e, asyncio.CancelledError):  # it died: its last line may be on its way
                    await asyncio.to_thread(running.stderr_done.wait, LAST_WORDS_S)
                started.set_exception(McpError(f"the MCP server {server.name!r} could not start: {why}"
                                               f"{_quote(running.stderr_tail)}"))
            elif not running.stop.is_set():
                log.warning("MCP server %s stopped: %s", server.name, why)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            running.dead = running.dead or "stopped"
            running.session = None

    async def _open(self, stack: AsyncExitStack, running: _Running):
        server = running.server
        if server.kind == "http":
            from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

            client = create_mcp_http_client(headers=dict(server.headers))
            await stack.enter_async_context(client)
            streams = await stack.enter_async_context(streamable_http_client(server.url, http_client=client))
            return streams[0], streams[1]
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        errlog = _stderr_to_log(server.name, running.stderr_tail, running.stderr_done)
        stack.callback(errlog.close)
        params = StdioServerParameters(command=server.command, args=list(server.args), env=dict(server.env) or None)
        before = process_group.children()
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        running.pid = process_group.spawned_since(before)
        if os.name == "posix":  # the server has its own copy: its stderr ends when it (and its group) does
            errlog.close()
        return streams[0], streams[1]

    def _taken(self, name: str) -> set[str]:
        """Tool names other running servers offer (a second server's tool of the same name is left out)."""
        return {t.name for n, r in list(self._running.items()) if n != name and not r.dead for t in r.tools}

    def stop(self, name: str) -> None:
        """Stops one server: a running one is asked to end (the SDK closes its stdin, then ends its
        process tree; waits at most STOP_TIMEOUT_S); one that never finished starting has its process
        group ended at once (it would never reach the SDK's end); either way its group is ended after."""
        running = self._running.pop(name, None)
        if running is None:
            return
        if running.session is None:
            process_group.end_group(running.pid)
        if self._loop is not None:
            self._stop_task(running)
        process_group.end_group(running.pid)  # whatever outlived the SDK's end (a child that ignored it)

    def _stop_task(self, running: _Running) -> None:
        name = running.server.name

        async def stop():
            running.stop.set()
            task = running.task
            if task is None:
                return
            if running.session is None:  # still starting: it would never look at `stop`
                task.cancel()
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:
                pass
        try:
            self._submit(stop()).result(STOP_TIMEOUT_S + 2)
        except Exception:
            log.warning("MCP server %s did not stop cleanly", name)

    def _end_all(self) -> None:
        """At the interpreter's exit: every server's process group ends, whatever state it is in."""
        for running in list(self._running.values()):
            process_group.end_group(running.pid, grace_s=0.5)

    def close(self) -> None:
        """Stops every server and the loop thread."""
        for name in list(self._running):
            self.stop(name)
        with self._lock:
            loop, thread, self._loop = self._loop, self._thread, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()

    # ------------------------------------------------------------------ tools

    def tools(self) -> list[McpTool]:
        """Every running server's tools."""
        return [t for r in list(self._running.values()) if not r.dead for t in r.tools]

    def problems(self, name: str) -> list[str]:
        running = self._running.get(name)
        return list(running.problems) if running else []

    def tool(self, name: str) -> McpTool | None:
        """The tool `name` of a started server, running or stopped since (a call then says it stopped)."""
        found = [t for r in list(self._running.values()) for t in r.tools if t.name == name]
        return next((t for t in found if not getattr(self._running.get(t.server), "dead", "gone")),
                    found[0] if found else None)

    def call(self, name: str, arguments: dict, cancelled: Callable[[], bool] = lambda: False,
             timeout_s: float | None = None) -> ToolOutcome:
        """Runs the tool `name` with `arguments`; every failure is an error outcome of one line."""
        started = time.perf_counter()

        def outcome(text: str, is_error: bool = True, **kw) -> ToolOutcome:
            return ToolOutcome(text, is_error, round((time.perf_counter() - started) * 1000, 1), **kw)

        tool = self.tool(name)
        running = self._running.get(tool.server) if tool else None
        if tool is None or running is None:
            return outcome(f"no running MCP server offers the tool {name!r}")
        if running.dead or running.session is None:
            return outcome(f"the MCP server {tool.server!r} has stopped{self._last_words(tool.server)}")
        timeout = timeout_s or self.call_timeout_s
        future = self._submit(running.session.call_tool(name, arguments, read_timeout_seconds=timeout))
        deadline = time.monotonic() + timeout + 2  # the SDK's own timeout comes first; this one is the backstop
        while True:
            try:
                result = future.result(_POLL_S)
                break
            except TimeoutError:
                if cancelled():
                    future.cancel()
                    return outcome("stopped by the user before the tool answered", stopped=True)
                if time.monotonic() > deadline:
                    future.cancel()
                    return outcome(f"the tool {name!r} of {tool.server!r} did not answer within {timeout:g} s")
            except Exception as e:
                return outcome(self._call_failure(tool, timeout, e))
        text, truncated = _result_text(result, self.max_result_chars)
        return outcome(text, bool(getattr(result, "is_error", False)), truncated=truncated)

    def _call_failure(self, tool: McpTool, timeout: float, e: Exception) -> str:
        reason = _reason(e)
        if "timed out" in reason.lower():
            return f"the tool {tool.name!r} of {tool.server!r} did not answer within {timeout:g} s"
        if "connection closed" in reason.lower():
            running = self._running.get(tool.server)
            if running is not None:
                running.dead = "connection closed"
            said = self._last_words(tool.server, LAST_WORDS_S)
            return f"the MCP server {tool.server!r} stopped during the call{said}"
        return f"the tool {tool.name!r} of {tool.server!r} failed: {reason}"

    def _last_words(self, name: str, wait_s: float = 0.0) -> str:
        running = self._running.get(name)
        return running.last_words(wait_s) if running else ""


# ----------------------------------------------------------------------------- helpers

def _stderr_to_log(name: str, tail: collections.deque, done: threading.Event):
    """A file the server's stderr is written to; a thread logs each line (and keeps the last few), and
    sets `done` at its end."""
    read_fd, write_fd = os.pipe()

    def pump():
        try:
            with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as src:
                for line in src:
                    line = one_line(line.rstrip("\n"), 500)
                    if line:
                        tail.append(line)
                        log.info("[mcp %s] %s", name, line)
        finally:
            done.set()
    threading.Thread(target=pump, name=f"mcp-stderr-{name}", daemon=True).start()
    return os.fdopen(write_fd, "w", encoding="utf-8")


def _quote(tail) -> str:
    return f" (it said: {one_line(tail[-1], 200)})" if tail else ""


def _reason(e: BaseException) -> str:
    """One line for an exception, unwrapping the SDK's exception groups to the first real one."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, asyncio.CancelledError):
        return "stopped"
    if isinstance(e, FileNotFoundError):
        return f"no such program ({one_line(e.filename or e, 120)})"
    text = one_line(str(e), 300)
    return f"{type(e).__name__}: {text}" if text and type(e).__name__ not in ("MCPError",) else text or type(e).__name__


def _depth(value, limit: int, level: int = 0) -> bool:
    """Whether `value` nests no deeper than `limit`."""
    if level > limit:
        return False
    if isinstance(value, dict):
        return all(_depth(v, limit, level + 1) for v in value.values())
    if isinstance(value, list):
        return all(_depth(v, limit, level + 1) for v in value)
    return True


def check_tool(raw, server: str, taken: set[str]) -> tuple[McpTool | None, str]:
    """A listed tool, checked: (the tool, "") or (None, why it is left out)."""
    name = getattr(raw, "name", None)
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        return None, f"a tool named {one_line(repr(name), 60)} is left out (names are 1-128 letters, digits, _ . -)"
    if name in taken:
        return None, f"the tool {name!r} is left out: another server already offers a tool of that name"
    schema = getattr(raw, "input_schema", None) or {"type": "object", "properties": {}}
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return None, f"the tool {name!r} is left out: its schema is not JSON"
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None, f"the tool {name!r} is left out: its schema does not describe an object of arguments"
    if size > MAX_SCHEMA_CHARS or not _depth(schema, MAX_SCHEMA_DEPTH):
        return None, f"the tool {name!r} is left out: its schema is larger than {MAX_SCHEMA_CHARS // 1024} KiB " \
                     f"or deeper than {MAX_SCHEMA_DEPTH} levels"
    description = getattr(raw, "description", None) or ""
    description = one_line(description, MAX_DESCRIPTION) if isinstance(description, str) else ""
    return McpTool(server, name, description, schema), ""


async def _list_tools(session, server: str, taken: set[str]) -> tuple[tuple[McpTool, ...], list[str]]:
    tools, problems, cursor = [], [], None
    from mcp.types import PaginatedRequestParams

    for _ in range(MAX_LIST_PAGES):
        listing = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        for raw in listing.tools:
            if len(tools) >= MAX_TOOLS_PER_SERVER:
                problems.append(f"only the first {MAX_TOOLS_PER_SERVER} tools are offered")
                return tuple(tools), problems
            tool, problem = check_tool(raw, server, taken | {t.name for t in tools})
            if tool:
                tools.append(tool)
            else:
                problems.append(problem)
        cursor = listing.next_cursor
        if not cursor:
            break
    return tuple(tools), problems


def _result_text(result, limit: int) -> tuple[str, bool]:
    """A CallToolResult's content as text for the model, at most `limit` characters (cut with a note).
    Linear in the result: a running total, and at most MAX_RESULT_BLOCKS blocks read (40,000 empty
    blocks took 50 s when each block summed the text kept so far)."""
    blocks = getattr(result, "content", None) or []
    parts, kept, total = [], 0, 0
    for block in blocks[:MAX_RESULT_BLOCKS]:
        text = _block_text(block)
        total += len(text)
        if kept < limit:
            parts.append(text)
            kept += len(text) + 1
    if not parts and getattr(result, "structured_content", None) is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
        parts, total = [text], len(text)
    text = "\n".join(parts)
    notes = []
    if len(text) > limit:
        text = text[:limit]
        notes.append(f"[cut: the tool returned {total:,} characters; the first {limit:,} are kept]")
    if len(blocks) > MAX_RESULT_BLOCKS:
        notes.append(f"[cut: the tool returned {len(blocks):,} content blocks; the first {MAX_RESULT_BLOCKS:,} "
                     "are read]")
    return "\n".join([text, *notes]) if notes else text, bool(notes)


def _block_text(block) -> str:
    """One content block as text (what is not text is named, not shown)."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text if isinstance(block.text, str) else ""
    if kind == "resource":
        resource = block.resource
        return getattr(resource, "text", None) or f"[a resource {one_line(resource.uri, 200)}, not text]"
    if kind == "resource_link":
        return f"[a link to {one_line(block.uri, 200)}]"
    return f"[{kind or 'unknown'} content ({one_line(getattr(block, 'mime_type', '') or '', 40)}), not shown]"
