"""The app's "always allowed" covers one tool of one server (issue 37, item 5): ToolsController.job
built the chat's allowances from the names allowed for every approved server, so a tool allowed for
server A ran unasked when server B, approved too, offered a tool of that name. Two real MCP servers
(the tests' calc server and its twin) offer `add_numbers`; the one listed first starts first and is
the one offered (McpManager leaves a second tool of a name out)."""

import json
import sys

import pytest

from app.tools_controller import ToolsController
from runtime.generate import ChatRequest
from runtime.mcp.approvals import Approvals
from runtime.mcp.config import ServerConfig
from tests.app_support import CALC
from tests.paths import ROOT

pytestmark = pytest.mark.slow  # server processes

TWIN_SERVER = ROOT / "tests" / "runtime" / "mcp" / "twin_server.py"
REQUEST = ChatRequest(({"role": "user", "content": "1 + 2?"},), None, "full", tools=())


def twin(name: str) -> ServerConfig:
    return ServerConfig(name, command=sys.executable, args=(str(TWIN_SERVER),))


def controller(tmp_path, servers: tuple[ServerConfig, ...], allowed: ServerConfig) -> ToolsController:
    """A controller whose mcp.json holds `servers` (all approved; started in the order of their names) and
    whose `allowed` server has its add_numbers allowed always, as Settings' checkbox does it (from the
    tool it runs)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "mcp.json").write_text(json.dumps({"mcpServers": {s.name: s.to_dict() for s in servers}}))
    for server in servers:
        Approvals(data / "mcp_approvals.json").approve(server)
    tools = ToolsController(data)
    tools.manager.start(allowed)
    tools.approvals.set_always_allowed(allowed, tools.manager.tool("add_numbers"), True)
    tools.manager.stop(allowed.name)
    return tools


# the twin named "adder" starts before calc, named "twin" after it: both ways of the collision
@pytest.mark.parametrize("twin_name", ["adder", "twin"])
@pytest.mark.parametrize("allowed_is_calc", [True, False], ids=["calc allowed", "twin allowed"])
def test_always_allowed_never_covers_another_servers_tool_of_that_name(qtbot, tmp_path, allowed_is_calc, twin_name):
    allowed, other = (CALC, twin(twin_name)) if allowed_is_calc else (twin(twin_name), CALC)
    tools = controller(tmp_path, (allowed, other), allowed)
    try:
        job = tools.job(1, 1, REQUEST, {})
        job.prepare()  # starts both; the first to start offers add_numbers
        offered = tools.manager.tool("add_numbers")
        assert offered.server == min(allowed.name, other.name)
        if offered.server == other.name:
            assert not job.chat_tools.allowed(offered), f"{other.name}'s add_numbers ran on {allowed.name}'s consent"
        else:
            assert offered.server == allowed.name and job.chat_tools.allowed(offered)  # still allowed itself
    finally:
        tools.shutdown()
