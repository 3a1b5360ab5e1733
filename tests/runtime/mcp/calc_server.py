"""A small MCP server for the tests, written with the official SDK: `python calc_server.py` serves stdio,
`python calc_server.py --http PORT` Streamable HTTP on 127.0.0.1:PORT/mcp. Its tools misbehave on purpose."""

from __future__ import annotations

import os
import re
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("calc")


@server.tool()
def add_numbers(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


@server.tool()
def evaluate_arithmetic(arithmetic_expression: str) -> str:
    """Evaluates additions and subtractions of whole numbers and returns the value."""
    text = arithmetic_expression.replace(" ", "")
    if not re.fullmatch(r"[+-]?\d{1,30}([+-]\d{1,30}){0,30}", text):
        raise ToolError(f"not a sum of whole numbers: {arithmetic_expression[:60]!r}")
    return str(sum(int(n) for n in re.findall(r"[+-]?\d+", text)))


@server.tool()
def fail(reason: str) -> str:
    """Always fails with `reason`."""
    raise ToolError(reason)


@server.tool()
def huge(size: int) -> str:
    """Returns `size` characters."""
    return "x" * size


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return ""


@server.tool()
def crash() -> str:
    """Kills the server mid-call."""
    print("calc: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


if __name__ == "__main__":
    print("calc: starting", file=sys.stderr, flush=True)
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
