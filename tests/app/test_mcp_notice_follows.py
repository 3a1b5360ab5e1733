"""Settings → MCP servers: the line "Added calculator: approve it to start it." follows the servers it
names. It stayed after Approve, above the server's own "Approved; running" (a real-window session); now
it names only the added servers still waiting for approval, and goes once none is (approved or removed)."""

import json

import pytest

from app.tools_controller import ToolsController
from app.widgets.mcp_settings import McpSettingsBox
from runtime.mcp.config import bundled_calculator


@pytest.fixture
def box(qtbot, tmp_path):
    tools = ToolsController(tmp_path)
    tools.manager.start = lambda server: []  # (nothing runs: the notice is about the approval)
    box = McpSettingsBox(tools)
    qtbot.addWidget(box)
    yield box
    tools.shutdown()


def approve(box, name: str) -> None:
    box.servers.setCurrentRow(box.tools.config.names.index(name))
    box.approve_button.click()


def imported(box, tmp_path, names) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"mcpServers": {n: {"command": f"run-{n}"} for n in names}}))
    box.import_file(str(path))


@pytest.mark.parametrize("then", ["approve", "remove"])
def test_the_calculator_line_goes_once_it_is_approved_or_removed(qtbot, box, then):
    name = bundled_calculator().name
    box.add_calculator()
    assert f"Added {name}: approve it" in box.notice.text()
    if then == "approve":
        approve(box, name)
        qtbot.waitUntil(lambda: "running" in box.state.text(), timeout=10000)
    else:
        box.remove_button.click()
    assert box.notice.text() == ""


def test_an_import_names_the_servers_still_waiting(qtbot, box, tmp_path):
    imported(box, tmp_path, ["web", "files", "notes"])
    assert "Added files, notes, web: approve each one" in box.notice.text()
    approve(box, "files")
    assert "Added notes, web: approve each one" in box.notice.text()
    box.servers.setCurrentRow(box.tools.config.names.index("notes"))
    box.remove_button.click()
    assert "Added web: approve" in box.notice.text() and "notes" not in box.notice.text()
    approve(box, "web")
    assert box.notice.text() == ""


def test_another_line_is_left_alone(qtbot, box, tmp_path):
    name = bundled_calculator().name
    box.add_calculator()
    imported(box, tmp_path, [])  # a file with no new server: its own line
    assert box.notice.text() == "No new server in that file."
    approve(box, name)
    assert box.notice.text() == "No new server in that file."
