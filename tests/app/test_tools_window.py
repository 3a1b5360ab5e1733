"""A session of tool use in the real window on the demo: an approved MCP server (the tests' calc server,
over stdio), a reply that calls its tool, the consent dialog, the call shown in the reply, the history
kept across a restart and replayed to the model. The demo calls a tool for most sums it cannot do, not
all (docs/results/demo-eval.md), and these tests need the same call every run, so the replies are
spelled by a script (tests/engine_support.py Scripted); everything else is the app's own path."""

import json
import sys

import pytest
from PySide6.QtCore import Qt, QTimer

from app.main_window import MainWindow
from app.state.settings import Settings
from app.widgets.mcp_settings import McpSettingsBox
from runtime.mcp.approvals import Approvals
from runtime.mcp.config import ServerConfig
from runtime.tool_calls import format_tool_call
from tests.app_support import CALC, allow_when_asked, ask, data_with_calc, make_window, script_tool_replies, warmed_up
from tests.engine_support import Scripted

pytestmark = pytest.mark.slow


@pytest.fixture
def scripted(monkeypatch):
    """Replies with tools offered are spelled by the script in `scripts[0]` (set by the test)."""
    return script_tool_replies(monkeypatch)


def test_a_session_of_tool_use(qtbot, tmp_path, scripted):
    data = data_with_calc(tmp_path)
    w = make_window(qtbot, data, Settings(max_new_tokens=160))
    scripted.append(Scripted(w.controller.worker.engine, [["Let me add.", format_tool_call(
        "add_numbers", {"a": 145, "b": 223})], ["It is 368."]]))
    seen = []
    allow_when_asked(qtbot, w, seen=seen)
    reply = ask(qtbot, w, "What is 145 + 223?", "Off", timeout=120000)
    assert [c.name for c in seen] == ["add_numbers"] and seen[0].server == "calc"
    assert reply.content == "It is 368."
    call = reply.meta["tool_rounds"][0]["calls"][0]
    assert (call["name"], call["content"], call["status"], call["is_error"]) == ("add_numbers", "368", "ok", False)
    view = w.chat.message_widget(reply.id)
    assert view.tools.isVisible() and view.tools.calls[0].toggle.text().startswith("✓ add_numbers · calc")
    w.grab().save(str(tmp_path / "tool_reply.png"))
    cid = w.controller.chats.current
    w.close()

    again = MainWindow(data, Settings(max_new_tokens=160), data / "settings.json")  # a restart
    qtbot.addWidget(again)
    again.show()
    qtbot.waitUntil(lambda: again.loaded is not None, timeout=180000)
    warmed_up(qtbot, again)
    again.controller.chats.select(cid)
    shown = again.chat.message_widget(reply.id)
    assert shown is not None and shown.tools.calls[0].call["content"] == "368"
    # the next question's prompt holds the earlier call's result: the history replays what the model saw
    follow = Scripted(again.controller.worker.engine, [["Still 368."]])
    scripted[0] = follow
    ask(qtbot, again, "And again?", "Off", timeout=120000)
    seen = again.controller.worker.engine.chat.decode(follow.contexts[0])
    assert "<function=add_numbers>" in seen and "<tool_response>\n368\n</tool_response>" in seen
    assert seen.index("<tool_response>") < seen.index("And again?")


def test_a_declined_call_and_the_chat_switch(qtbot, tmp_path, scripted):
    data = data_with_calc(tmp_path)
    w = make_window(qtbot, data, Settings(max_new_tokens=160))
    scripted.append(Scripted(w.controller.worker.engine, [[format_tool_call("add_numbers", {"a": 1, "b": 2})],
                                                          ["I was not allowed."]]))
    allow_when_asked(qtbot, w, button="decline")
    reply = ask(qtbot, w, "What is 1 + 2?", "Off", timeout=120000)
    assert reply.meta["tool_rounds"][0]["calls"][0]["status"] == "declined"
    assert "declined by you" in w.chat.message_widget(reply.id).tools.calls[0].toggle.text()
    w.tools_button.menu_.aboutToShow.emit()  # the chat's switch: no tools offered at all
    switch = w.tools_button.menu_.actions()[0]
    assert switch.text() == "Offer tools in this chat" and switch.isChecked()
    assert "add_numbers  (calc)" in [a.text() for a in w.tools_button.menu_.actions()]
    switch.trigger()
    assert w.controller.chats.tool_switch() == (False, set()) and w.tools_button.text() == "Tools: off"
    plain = ask(qtbot, w, "What is 1 + 2?", "Off", timeout=120000)
    assert "tool_rounds" not in plain.meta


def test_nothing_starts_before_approval_and_settings_approve(qtbot, tmp_path, scripted):
    data = data_with_calc(tmp_path, approved=False)
    w = make_window(qtbot, data, Settings(max_new_tokens=160))
    scripted.append(Scripted(w.controller.worker.engine, [[format_tool_call("add_numbers", {"a": 1, "b": 2})]]))
    reply = ask(qtbot, w, "What is 1 + 2?", "Off", timeout=120000)
    assert "tool_rounds" not in reply.meta and w.controller.tools.manager.tools() == []  # no server ran
    box = McpSettingsBox(w.controller.tools)
    qtbot.addWidget(box)
    box.show()
    assert box.command.toPlainText() == CALC.command_line() and "Not approved" in box.state.text()
    qtbot.mouseClick(box.approve_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "running: 6 tools" in box.state.text(), timeout=60000)
    assert box.tool_list.count() == 6
    add = next(box.tool_list.item(i) for i in range(6) if box.tool_list.item(i).text() == "add_numbers")
    add.setCheckState(Qt.CheckState.Checked)  # always allow this one tool
    tool = w.controller.tools.manager.tool("add_numbers")
    assert Approvals(data / "mcp_approvals.json").always_allowed(CALC) == {"add_numbers": tool.definition}
    scripted[0] = Scripted(w.controller.worker.engine, [[format_tool_call("add_numbers", {"a": 1, "b": 2})],
                                                       ["3."]])
    with qtbot.assertNotEmitted(w.controller.sig_consent):  # allowed always: not asked
        reply = ask(qtbot, w, "What is 1 + 2?", "Off", timeout=120000)
    assert reply.meta["tool_rounds"][0]["calls"][0]["content"] == "3"
    qtbot.mouseClick(box.revoke_button, Qt.MouseButton.LeftButton)
    assert not Approvals(data / "mcp_approvals.json").is_approved(CALC) and box.approve_button.isEnabled()


def test_the_meter_and_the_fit_count_the_tools_the_chat_offers(qtbot, tmp_path):
    """The template renders the offered tools into the prompt: several hundred tokens the meter showed
    nothing of, and the context fit did not count."""
    w = make_window(qtbot, data_with_calc(tmp_path), Settings(max_new_tokens=8))
    c = w.controller
    # An approved server starts when the app opens: its tools are counted and listed before any reply.
    qtbot.waitUntil(lambda: bool(c.tools.known_tools()), timeout=60000)
    # (the button follows the start's signal, which reaches the GUI thread a moment after the tools)
    qtbot.waitUntil(lambda: w.tools_button.text() == f"Tools ({len(c.tools.known_tools())})", timeout=10000)
    qtbot.waitUntil(lambda: w.meter.tokens > 200, timeout=30000)  # an empty chat's prompt holds them too

    def counted(change) -> int:  # the meter once the count this change asked for has come back
        with qtbot.waitSignal(c.sig_context, timeout=30000):
            change()
        qtbot.wait(600)  # (the count waits for typing to pause; any later count lands too)
        return w.meter.tokens

    with_tools = counted(lambda: w.input.setPlainText("What is 1 + 2?"))
    without = counted(lambda: c.chats.set_tool_switch(False, set()))  # the chat's Tools switch off
    assert with_tools - without > 200, (with_tools, without)
    assert counted(lambda: c.chats.set_tool_switch(True, set())) == with_tools
    reply = ask(qtbot, w, "What is 1 + 2?", "Off", timeout=120000)
    assert reply.meta["prompt_tokens"] == with_tools  # the reply read what the meter said
    w.close()


def test_the_bundled_calculator_is_one_click_away_and_still_waits_for_approval(qtbot, tmp_path):
    from app.tools_controller import ToolsController
    from runtime.mcp.config import bundled_calculator

    data = tmp_path / "data"
    data.mkdir()
    tools = ToolsController(data)
    box = McpSettingsBox(tools)
    qtbot.addWidget(box)
    box.show()
    try:
        assert box.calculator_button.isEnabled() and box.servers.count() == 0
        assert box.empty.isVisible() and "add the calculator" in box.empty.text()  # never a blank box
        qtbot.mouseClick(box.calculator_button, Qt.MouseButton.LeftButton)
        assert not box.empty.isVisible()
        assert box.command.toPlainText().endswith(" -m runtime.mcp.calculator") and "Not approved" in box.state.text()
        assert not box.calculator_button.isEnabled() and tools.manager.tools() == []  # nothing runs unapproved
        qtbot.mouseClick(box.approve_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "running: 1 tool" in box.state.text(), timeout=60000)
        assert [box.tool_list.item(i).text() for i in range(box.tool_list.count())] == ["calculate"]
        assert tools.manager.call("calculate", {"expression": "971 + 48"}).content == "1019"
        assert Approvals(data / "mcp_approvals.json").is_approved(bundled_calculator())
    finally:
        tools.shutdown()


def test_importing_another_apps_file(qtbot, tmp_path):
    data = data_with_calc(tmp_path, approved=False)
    from app.tools_controller import ToolsController

    tools = ToolsController(data)
    box = McpSettingsBox(tools)
    qtbot.addWidget(box)
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps({"mcpServers": {"calc": {"command": "other"}, "web": {"url": "https://x.org/mcp"}}}))
    box.import_file(str(claude))
    assert [box.servers.item(i).text() for i in range(box.servers.count())] == [
        "calc — not approved", "calc-2 — not approved", "web — not approved"]
    assert "approve each one" in box.notice.text()
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    box.import_file(str(bad))
    assert str(bad) in box.notice.text() and box.servers.count() == 3
    tools.shutdown()


def test_stop_while_the_dialog_asks_runs_nothing(qtbot, tmp_path, scripted):
    data = data_with_calc(tmp_path)
    w = make_window(qtbot, data, Settings(max_new_tokens=160))
    scripted.append(Scripted(w.controller.worker.engine, [[format_tool_call("add_numbers", {"a": 1, "b": 2})],
                                                          ["never"]]))
    w.controller.sig_consent.connect(lambda *_: QTimer.singleShot(50, w.controller.replies.stop))  # Esc, while it asks
    reply = ask(qtbot, w, "What is 1 + 2?", "Off", timeout=120000)
    qtbot.waitUntil(lambda: not w.dialogs.consents, timeout=5000)  # the dialog went with the reply
    call = reply.meta["tool_rounds"][0]["calls"][0]
    assert reply.meta["finish_reason"] == "stopped" and call["status"] == "stopped" and call["content"] != "3"


def test_a_server_that_cannot_start_is_one_line_once(qtbot, tmp_path, scripted):
    data = tmp_path / "data"
    data.mkdir()
    broken = ServerConfig("broken", command=sys.executable, args=("-c", "import sys; sys.exit('no config')"))
    (data / "mcp.json").write_text(json.dumps({"mcpServers": {"broken": broken.to_dict()}}))
    Approvals(data / "mcp_approvals.json").approve(broken)
    w = make_window(qtbot, data, Settings(max_new_tokens=160))
    errors = []
    w.controller.sig_error.connect(lambda text, _: errors.append(text))
    ask(qtbot, w, "hello", "Off", timeout=120000)
    ask(qtbot, w, "hello", "Off", timeout=120000)
    assert len(errors) == 1 and "'broken' could not start" in errors[0] and "\n" not in errors[0]
    w.tools_button.menu_.aboutToShow.emit()  # the menu says why its approved server offers nothing
    lines = [a.text() for a in w.tools_button.menu_.actions()]
    assert any(t.startswith("broken: ") and "could not start" in t for t in lines), lines
    assert not any(t.startswith("No server is running") for t in lines), lines


def test_revoking_the_server_takes_its_tools_off_the_button_and_the_count(qtbot, tmp_path, monkeypatch):
    """"Tools (6)" stayed after the server was revoked (issue 38, item 8): the server stops off the GUI
    thread, and the button counted what was still running; on a busy machine the stop comes late."""
    import threading

    w = make_window(qtbot, data_with_calc(tmp_path), Settings(max_new_tokens=8))
    c = w.controller
    qtbot.waitUntil(lambda: w.tools_button.text() == "Tools (6)", timeout=60000)
    late, stop = threading.Event(), c.tools.manager.stop
    monkeypatch.setattr(c.tools.manager, "stop", lambda name: (late.wait(60), stop(name)))
    try:
        c.tools.revoke(CALC.name)
        assert w.tools_button.text() == "Tools" and c.tools.known_tools() == []  # at once, while it stops
        assert c.tools.offered_tools(c.chats.settings()[1]) is None  # the meter counts none of them
    finally:
        late.set()
    qtbot.waitUntil(lambda: c.tools.manager.tools() == [], timeout=60000)  # stopped
    qtbot.wait(50)  # the stop's end reaches the window
    assert w.tools_button.text() == "Tools"
    w.close()
