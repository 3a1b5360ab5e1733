"""The manager over real MCP servers written with the SDK (tests/runtime/mcp/calc_server.py): stdio and
Streamable HTTP, and servers that fail, hang, crash or answer too much. Every failure is one line."""

import logging
import sys
import threading
import time

import pytest

from runtime.mcp.client import McpError, McpManager, NotApproved, check_tool
from runtime.mcp.config import ServerConfig

pytestmark = pytest.mark.slow  # each test spawns a Python server process (about a second here)


def test_stdio_server_lists_and_calls_its_tools(manager, calc_stdio, caplog):
    with caplog.at_level(logging.INFO, logger="runtime.mcp.client"):
        tools = manager.start(calc_stdio)
        assert {t.name for t in tools} == {"add_numbers", "evaluate_arithmetic", "fail", "huge", "hang", "crash"}
        add = manager.tool("add_numbers")
        assert add.server == "calc" and add.input_schema["required"] == ["a", "b"]
        assert add.as_tool()["function"]["parameters"]["properties"]["a"]["type"] == "integer"
        outcome = manager.call("add_numbers", {"a": 145, "b": -223})
        assert (outcome.content, outcome.is_error, outcome.truncated) == ("-78", False, False)
        assert outcome.ms > 0
    assert any("[mcp calc] calc: starting" in r.getMessage() for r in caplog.records)  # stderr in the log


def test_http_server_lists_and_calls_its_tools(manager, calc_http):
    assert "add_numbers" in {t.name for t in manager.start(calc_http)}
    assert manager.call("add_numbers", {"a": 2, "b": 3}).content == "5"
    assert manager.call("evaluate_arithmetic", {"arithmetic_expression": "145+223-1000"}).content == "-632"


def test_an_error_result_and_an_unknown_tool(manager, calc_stdio):
    manager.start(calc_stdio)
    failed = manager.call("fail", {"reason": "the disk is full"})
    assert failed.is_error and failed.content == "Error executing tool fail: the disk is full"
    missing = manager.call("nope", {})
    assert missing.is_error and "no running MCP server offers the tool 'nope'" in missing.content


def test_huge_output_is_cut_and_says_so(calc_stdio):
    manager = McpManager(lambda s: True, call_timeout_s=10, max_result_chars=1000)
    try:
        manager.start(calc_stdio)
        outcome = manager.call("huge", {"size": 2_000_000})
        assert outcome.truncated and not outcome.is_error
        assert outcome.content.startswith("x" * 1000)
        assert outcome.content.endswith("[cut: the tool returned 2,000,000 characters; the first 1,000 are kept]")
    finally:
        manager.close()


def test_a_hanging_tool_times_out_and_the_server_stays_usable(calc_stdio):
    manager = McpManager(lambda s: True, call_timeout_s=60)  # the other calls get time on a busy PC
    try:
        manager.start(calc_stdio)
        outcome = manager.call("hang", {}, timeout_s=1)
        assert outcome.is_error and outcome.content == "the tool 'hang' of 'calc' did not answer within 1 s"
        assert manager.call("add_numbers", {"a": 1, "b": 1}).content == "2"
    finally:
        manager.close()


def test_stop_abandons_a_call_in_flight(manager, calc_stdio):
    manager.start(calc_stdio)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    outcome = manager.call("hang", {}, cancelled=stop.is_set, timeout_s=600)
    # the Stop ended it, not the timeout (which says "did not answer within")
    assert outcome.stopped and outcome.is_error and "stopped by the user" in outcome.content
    assert manager.call("add_numbers", {"a": 1, "b": 2}).content == "3"


def test_a_crashing_server_is_one_line_and_quoted(manager, calc_stdio):
    manager.start(calc_stdio)
    outcome = manager.call("crash", {})
    assert outcome.is_error and "\n" not in outcome.content
    assert outcome.content.startswith("the MCP server 'calc' stopped during the call")
    assert "crashing on purpose" in outcome.content
    after = manager.call("add_numbers", {"a": 1, "b": 2})
    assert after.is_error and after.content.startswith("the MCP server 'calc' has stopped")
    assert manager.start(calc_stdio)  # starting it again works
    assert manager.call("add_numbers", {"a": 1, "b": 2}).content == "3"


def test_a_server_that_cannot_start(manager):
    with pytest.raises(McpError, match=r"could not start: no such program") as e:
        manager.start(ServerConfig("ghost", command="/no/such/program-xyz"))
    assert "\n" not in str(e.value)
    with pytest.raises(McpError, match="could not start"):  # exits at once: says what it printed
        manager.start(ServerConfig("quitter", command=sys.executable,
                                   args=("-c", "import sys; print('bad config', file=sys.stderr); sys.exit(2)")))


def test_a_server_that_never_starts_times_out():
    manager = McpManager(lambda s: True, start_timeout_s=1)
    try:
        with pytest.raises(McpError, match=r"did not start within \d+ s"):
            manager.start(ServerConfig("mute", command=sys.executable, args=("-c", "import time; time.sleep(60)")))
    finally:
        manager.close()


def test_nothing_starts_without_approval(tmp_path):
    marker = tmp_path / "ran"
    server = ServerConfig("sneaky", command=sys.executable, args=("-c", f"open({str(marker)!r}, 'w')"))
    manager = McpManager(is_approved=lambda s: False)
    try:
        with pytest.raises(NotApproved, match="not approved"):
            manager.start(server)
        time.sleep(0.3)
        assert not marker.exists()
    finally:
        manager.close()


class _Raw:
    def __init__(self, name, schema=None, description=""):
        self.name, self.input_schema, self.description = name, schema, description


def test_tool_lists_are_checked():
    ok, problem = check_tool(_Raw("add", {"type": "object"}, "Adds.\nReally."), "s", set())
    assert ok.description == "Adds. / Really." and not problem
    deep = {"type": "object"}
    for _ in range(20):
        deep = {"type": "object", "properties": {"x": deep}}
    for raw, says in [(_Raw("bad name<"), "names are"), (_Raw("x" * 129), "names are"),
                      (_Raw("add", {"type": "object"}), "another server"),
                      (_Raw("big", {"type": "object", "description": "x" * 40000}), "larger than"),
                      (_Raw("deep", deep), "deeper than"), (_Raw("arr", {"type": "array"}), "not describe an object")]:
        tool, problem = check_tool(raw, "s", {"add"})
        assert tool is None and says in problem, problem
