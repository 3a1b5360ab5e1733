"""A calculator MCP server that ships with the app, so tool use can be tried offline on the demo:

    python -m runtime.mcp.calculator          # stdio, as an mcp.json entry starts it

It offers one tool, `calculate(expression)`, the name and parameter of the popular
`mcp-server-calculator`: whole numbers joined by + and - (any size, negative results fine), which is
what the demo model is trained to hand over when a sum is beyond it. Anything else is refused with
a reason the model reads; nothing is evaluated as code. Written with the official MCP SDK.
"""

from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ..errors import show

MAX_TERMS, MAX_DIGITS = 64, 60
SUM = re.compile(rf"[+-]?\d{{1,{MAX_DIGITS}}}(?:[+-]\d{{1,{MAX_DIGITS}}}){{0,{MAX_TERMS - 1}}}", re.ASCII)

server = MCPServer("calculator")


def evaluate(expression: str) -> int:
    """The value of "145 + 23 - 7"; ValueError (saying what it takes) for anything else."""
    text = re.sub(r"\s+", "", str(expression))
    if not SUM.fullmatch(text):
        raise ValueError(f"not a sum of whole numbers joined by + and -: {show(expression, 80)}")
    return sum(int(term) for term in re.findall(r"[+-]?\d+", text, re.ASCII))


@server.tool()
def calculate(expression: str) -> str:
    """Calculates additions and subtractions of whole numbers of any size, like 1200 - 45 + 7."""
    try:
        return str(evaluate(expression))
    except ValueError as e:
        raise ToolError(str(e)) from None


if __name__ == "__main__":
    server.run()
