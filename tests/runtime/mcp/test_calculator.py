"""The calculator MCP server that ships with the app (runtime/mcp/calculator.py): sums of whole numbers
only, anything else refused with a reason; started as an mcp.json entry would start it."""

import sys

import pytest

from runtime.mcp.calculator import evaluate
from runtime.mcp.config import ServerConfig


@pytest.mark.parametrize("text, value", [("145+23-7", 161), (" 1200 - 45 + 7 ", 1162), ("25-54", -29), ("-5+3", -2),
                                         ("99999999999999999999+1", 100000000000000000000), ("7", 7)])
def test_sums_of_whole_numbers(text, value):
    assert evaluate(text) == value


@pytest.mark.parametrize("text", ["", "2*3", "2**99999", "1e5", "__import__('os').system('id')", "1+", "+", "1--2",
                                  "١٢+1", "1.5+2", "0x10", "1+" * 64 + "1", "9" * 61, "(1+2)", "1;2", None])
def test_anything_else_is_refused_with_what_it_takes(text):
    with pytest.raises(ValueError, match="not a sum of whole numbers"):
        evaluate(text)


@pytest.mark.slow
def test_it_serves_calculate_over_stdio(manager):
    server = ServerConfig("calculator", command=sys.executable, args=("-m", "runtime.mcp.calculator"))
    tools = manager.start(server)
    assert [t.name for t in tools] == ["calculate"]
    assert manager.tool("calculate").input_schema["required"] == ["expression"]
    assert manager.call("calculate", {"expression": "971 + 48"}).content == "1019"
    refused = manager.call("calculate", {"expression": "2*3"})
    assert refused.is_error and "not a sum of whole numbers" in refused.content
