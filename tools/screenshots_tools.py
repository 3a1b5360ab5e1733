"""Takes docs/tools.md's screenshots of the real window (run under Xvfb, or any desktop):

    xvfb-run -a -s "-screen 0 1400x900x24" python tools/screenshots_tools.py [--out docs/screenshots]

1. tool-settings.png: Settings > MCP servers, the tests' calc server (an MCP server written with the
   SDK, over stdio) approved and running, its tools listed
2. tool-consent.png: the consent dialog for the demo's call of add_numbers(145, 223)
3. tool-call.png: the finished reply, its call opened (arguments, result), the answer from the result

The demo does not call tools yet (issue 26 item 5 retrains it), so the reply's words are spelled by a
script (tests/engine_support.py Scripted) while everything else is the app's own path: the server is
started by the app once approved, the call is parsed by the runtime, asked, run and its result read.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools import screenshot_kit as kit  # noqa: E402 (after the path)


def main():
    args, work = kit.start(ROOT / "docs" / "screenshots")
    from PySide6.QtWidgets import QApplication

    import runtime.generate
    from app.main_window import MainWindow
    from app.state.settings import Settings
    from app.widgets.settings_dialog import SettingsDialog
    from runtime.tool_calls import format_tool_call
    from tests.engine_support import Scripted

    data = work / "home"
    data.mkdir(parents=True)
    (data / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": {
        "command": sys.executable, "args": [str(ROOT / "tests" / "runtime" / "mcp" / "calc_server.py")]}}}))
    real, script = runtime.generate.stream_chat, {}

    def stream(engine, request, controls=None):
        if request.tools:
            script.setdefault("s", Scripted(engine, [["I will use the calculator for this.", format_tool_call(
                "add_numbers", {"a": 145, "b": 223})], ["145 + 223 = 368."]]))
            request = replace(request, logits_processors=(script["s"],))
        return real(engine, request, controls)
    runtime.generate.stream_chat = stream

    app = QApplication([])
    w = MainWindow(data, Settings(max_new_tokens=160), data / "settings.json")
    w.resize(1100, 780)
    w.show()
    assert kit.wait(app, lambda: w.loaded is not None and w.controller.worker.queue.snapshot().running is None, 300)
    dialog = SettingsDialog(w, w.settings, *w.controller.chats.settings(), tools=w.controller.tools)
    dialog.tabs.setCurrentIndex(dialog.mcp_tab)
    dialog.resize(760, 600)
    dialog.show()
    dialog.mcp.approve_button.click()
    assert kit.wait(app, lambda: "running" in dialog.mcp.state.text(), 60)
    kit.shoot(app, dialog, args.out / "tool-settings.png")
    dialog.accept()
    w.controller.set_depth("Off")
    w.input.setPlainText("What is 145 + 223?")
    w.send()
    assert kit.wait(app, lambda: bool(w.dialogs.consents), 300)
    consent = next(iter(w.dialogs.consents.values()))
    kit.shoot(app, consent, args.out / "tool-consent.png")
    consent.once.click()
    assert kit.wait(app, lambda: not w.controller.replies.in_flight, 300)
    reply = w.chat.widgets[-1]
    reply.tools.calls[0].toggle.setChecked(True)
    kit.wait(app, lambda: False, 0.5)
    kit.shoot(app, w, args.out / "tool-call.png")
    w.close()


if __name__ == "__main__":
    main()
