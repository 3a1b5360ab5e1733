"""`python -m runtime generate ... --mcp-config FILE [--allow-tools]`: a reply with the tools of the
servers in an mcp.json, for scripts and checks (docs/tools.md).

The servers named in the file given on the command line are started (naming the file is the consent
to start them; each one's exact command line is printed on stderr first). Calls are another matter:
with `--allow-tools` every call runs (consent given for all, for scripts); without it each call is
declined, said so on stderr, and goes back to the model as declined. With `--json` the calls and
their results are lines of their own:

    {"event": "tool_call", "type": "tool_call", "id": "call_...", "name": "add_numbers", "arguments": {...}, ...}
    {"event": "tool_result", "type": "tool_result", "id": "call_...", "content": "368", "is_error": false, ...}
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ..errors import UsageError, for_approval, printable
from ..tool_loop import ALLOW_ONCE, DECLINE, PendingCall, run_tool_loop
from .client import McpManager
from .config import McpConfig, read_config


def read_servers(path: str) -> McpConfig:
    """The --mcp-config file, checked (before the model loads: a bad file fails fast)."""
    config = read_config(path)
    if not config.servers:
        raise UsageError(f"--mcp-config {printable(path)} configures no server (\"mcpServers\" is empty)")
    return config


def _consent(allow: bool):
    def consent(call: PendingCall) -> str:
        if allow:
            return ALLOW_ONCE
        print(f"declined the tool call {for_approval(call.name)} (run with --allow-tools to allow tool calls)",
              file=sys.stderr, flush=True)
        return DECLINE
    return consent


def generate_with_tools(stream, request, config: McpConfig, args, printer) -> int:
    """Starts the servers, runs the tool loop, prints its events; the exit status of `generate`."""
    manager = McpManager(is_approved=lambda server: True, call_timeout_s=args.tool_timeout)
    try:
        for server in config.servers:
            print(f"starting MCP server {for_approval(server.name)}: {for_approval(server.command_line())}",
                  file=sys.stderr, flush=True)
            manager.start(server)
            for problem in manager.problems(server.name):
                print(f"MCP server {for_approval(server.name)}: {for_approval(problem)}", file=sys.stderr, flush=True)
        offered = (*(request.tools or ()), *(t.as_tool() for t in manager.tools()))
        request = replace(request, tools=offered or None)
        events = run_tool_loop(stream, request, manager, _consent(args.allow_tools), max_calls=args.max_tool_calls,
                               timeout_s=args.tool_timeout)
        for event in events:
            kind = event.type
            if kind == "token":
                printer.token(event)
            elif kind == "switch":
                printer.switch(event)
            elif kind in ("tool_call", "invalid_tool_call"):
                printer.tool_call(event)
            elif kind == "tool_result":
                printer.tool_result(event)
            elif kind == "done":
                printer.done(event)
                return 0 if event.finish_reason != "error" else 1
        return 1
    finally:
        manager.close()
