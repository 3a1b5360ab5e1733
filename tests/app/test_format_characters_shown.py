"""Where the user approves a tool or a server, format characters are shown escaped (issue 37, item 6):
the consent dialog (name, server, description, arguments), Settings' "Runs exactly" and tool list, the
Tools menu and the reply's record of a call. Every Cf code point, in every field."""

import json
import sys
import unicodedata
from types import SimpleNamespace

import pytest
from PySide6.QtWidgets import QLabel

from app.widgets.tool_call_view import ToolCallView, call_summary
from app.widgets.tool_consent import ToolConsentDialog
from app.widgets.tools_menu import ToolsButton
from runtime.tool_loop import PendingCall

FORMAT = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf")
SPOOF = "/home/me/notes/todo.txt\u202e\u2066 (read-only)\u2069"


def clean(text: str) -> bool:
    return not any(unicodedata.category(c) in ("Cf", "Cc", "Cn") for c in text.replace("\n", ""))


@pytest.mark.parametrize("field", ["arguments", "description", "name and server"])
def test_the_consent_dialog_shows_every_format_character_escaped(qtbot, field):
    name, server, description, arguments = "read_file", "files", "Reads a file.", {"path": "/tmp/a"}
    if field == "arguments":
        arguments = {"path": SPOOF, "mode": FORMAT, FORMAT: "key"}
    elif field == "description":
        description = f"Reads a file.{FORMAT}"
    else:
        name, server = f"read{FORMAT}", f"files{FORMAT}"
    d = ToolConsentDialog(None, PendingCall("call_1", name, server, arguments, description))
    qtbot.addWidget(d)
    d.show_whole.setChecked(True)
    shown = [label.text() for label in d.findChildren(QLabel)] + [d.arguments.toPlainText()]
    assert all(clean(text) for text in shown), [t for t in shown if not clean(t)]
    everything = " ".join(shown)
    assert "\\u202e" in everything and "\\U000e0001" in everything
    if field == "arguments":
        assert "todo.txt\\u202e\\u2066 (read-only)\\u2069" in d.arguments.toPlainText()


def test_the_record_of_a_call_shows_them_escaped(qtbot):
    call = {"name": f"read{FORMAT}", "server": f"files{FORMAT}", "arguments": {"path": SPOOF, "x": FORMAT},
            "status": "ok", "content": "fine", "ms": 3}
    view = ToolCallView(call)
    qtbot.addWidget(view)
    shown = [view.toggle.text(), call_summary(call)] + [label.text() for label in view.findChildren(QLabel)]
    assert all(clean(text) for text in shown)
    assert any("todo.txt\\u202e\\u2066 (read-only)\\u2069" in text for text in shown)


def test_the_tools_menu_shows_them_escaped(qtbot):
    tool = SimpleNamespace(name=f"calc{FORMAT}", server=f"srv{FORMAT}", description=f"Adds.{FORMAT}")
    button = ToolsButton(lambda: (True, set(), [tool], [f"web: starting{FORMAT}"]))
    qtbot.addWidget(button)
    button._build()
    actions = button.menu_.actions()
    shown = [a.text() for a in actions] + [a.toolTip() for a in actions]
    assert all(clean(text) for text in shown) and any("\\u202e" in text for text in shown)


def test_settings_runs_exactly_and_its_tools_show_them_escaped(qtbot, tmp_path):
    from app.tools_controller import ToolsController
    from app.widgets.mcp_settings import McpSettingsBox

    data = tmp_path / "data"
    data.mkdir()
    (data / "mcp.json").write_text(json.dumps({"mcpServers": {"notes": {
        "command": f"python3{FORMAT}", "args": ["-m", SPOOF], "env": {"NOTE": FORMAT}}}}))
    tools = ToolsController(data)
    try:
        box = McpSettingsBox(tools)
        qtbot.addWidget(box)
        shown = box.command.toPlainText()
        assert shown and clean(shown) and "todo.txt\\u202e\\u2066 (read-only)\\u2069" in shown
        assert all(clean(box.servers.item(i).text()) for i in range(box.servers.count()))
    finally:
        tools.shutdown()
