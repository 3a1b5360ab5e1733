"""Helpers the window tests share (plain functions and classes; fixtures live in conftest.py)."""

import json
import sys
import threading
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, QTimer

from app.main_window import MainWindow
from app.state.settings import Settings
from app.widgets.model_manager import ModelManager
from runtime.mcp.approvals import Approvals
from runtime.mcp.config import ServerConfig
from tests.paths import ROOT

SUM = "What is 45 + 23 - 17 + 9?"  # the demo thinks 83 tokens about it on every submodel
LONG = 300000  # ms: a reply on a busy shared CPU


def make_window(qtbot, data: Path, settings: Settings | None = None) -> MainWindow:
    """A shown window over the data folder `data`, returned once its model (the demo) is loaded and warmed up."""
    data.mkdir(parents=True, exist_ok=True)
    w = MainWindow(data, settings or Settings(max_new_tokens=160), data / "settings.json")
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: getattr(w, "loaded", None) is not None, timeout=180000)
    warmed_up(qtbot, w)
    return w


def enter(qtbot, w: MainWindow, text: str) -> None:
    """Types `text` into the message box and presses Enter, as a user sends."""
    w.input.setPlainText(text)
    qtbot.keyClick(w.input, Qt.Key.Key_Return)


def warmed_up(qtbot, w: MainWindow) -> None:
    """Waits for the engine worker's warm-up replies (they run right after a load, holding the engine's
    line), so that a test holding replies (Gate, held_engine) never holds one of them instead."""
    qtbot.waitUntil(lambda: w.controller.worker.queue.snapshot().running is None, timeout=180000)


def ask(qtbot, w: MainWindow, text: str, depth: str, timeout=180000, key=Qt.KeyboardModifier.NoModifier):
    """Sends `text` at `depth` with the Return key (plus `key`); returns the saved reply once it is done."""
    w.controller.set_depth(depth)
    w.input.setPlainText(text)
    with qtbot.waitSignal(w.controller.sig_reply_done, timeout=timeout) as done:
        qtbot.keyClick(w.input, Qt.Key.Key_Return, key)
    return done.args[1]


def strip_token(strip, submodel: str, phase: str, ms: float, ttft_ms: float, tokens_per_s: float) -> None:
    """One token reaching the live strip, as a frame of one (the strip takes a frame's tokens at once)."""
    from app.reply import TokenBatch

    strip.on_tokens(TokenBatch(((ms, submodel),), submodel, phase, ttft_ms, tokens_per_s))


def open_dialog(qtbot, models) -> ModelManager:
    """The model manager over the controller `models`, returned once its first listing is shown."""
    dialog = ModelManager(models=models)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: bool(dialog.rows) and not models.refreshing, timeout=60000)
    return dialog


class Gate:
    """Replaces runtime.controls.Controls for the replies the controller starts: each reply's decode loop
    waits before its `at`-th token (at its `at`-th look at the thinking requests) until released. Moving
    `at` further on while a reply is held holds it again there. The engine worker's warm-up replies
    (two tokens each, right after a load) are never held when `at` is 3 or more."""

    def __init__(self, monkeypatch):
        from runtime import controls as engine

        self.at: int | None = None
        self.made: list = []
        gate = self

        class HeldControls(engine.Controls):
            def __init__(self):
                super().__init__()
                self.looks = 0
                self.waiting, self.released = threading.Event(), threading.Event()
                gate.made.append(self)

            def take_thinking_request(self):
                self.looks += 1
                if self.looks == gate.at:
                    self.waiting.set()
                    self.released.wait(LONG / 1000)  # never forever, should a test fail while it waits
                    self.waiting.clear()
                    self.released.clear()  # ready for a later hold
                return super().take_thinking_request()

        import runtime.api

        monkeypatch.setattr(engine, "Controls", HeldControls)
        monkeypatch.setattr(runtime.api, "Controls", HeldControls)  # app/ takes it from there

    def release_all(self) -> None:
        self.at = None  # no further holds
        for controls in self.made:
            controls.released.set()


def hold(qtbot, w, gate, depth: str, at: int, question: str = SUM):
    """Sends `question` at `depth`; returns (reply, its controls) once the engine waits before token `at`
    and the window has every event before it."""
    gate.at = at
    w.controller.set_depth(depth)
    w.input.setPlainText(question)
    w.send()
    c = w.controller
    reply = c.replies.reply_in(c.chats.current)
    held_at(qtbot, gate, reply, reply.controls, at)
    return reply, reply.controls


def held_at(qtbot, gate, reply, controls, at: int) -> None:
    """Waits until the engine holds `reply` before token `at` and the window has every event before it."""
    qtbot.waitUntil(lambda: gate.at == at and controls.waiting.is_set()
                    and reply.progress.tokens == at - 1, timeout=LONG)


def finish(qtbot, w, controls):
    """Lets the held reply go on; returns the saved message once it is done."""
    with qtbot.waitSignal(w.controller.sig_reply_done, timeout=LONG) as done:
        controls.released.set()
    return done.args[1]


# ----------------------------------------------------------------------------- tool use

CALC = ServerConfig("calc", command=sys.executable, args=(str(ROOT / "tests" / "runtime" / "mcp" / "calc_server.py"),))


def script_tool_replies(monkeypatch) -> list:
    """Replies with tools offered are spelled by the script in the returned list's first item (a
    tests.engine_support.Scripted the test puts there): the demo's own calls vary by question, and
    these tests need the same call every run."""
    import runtime.generate

    real, scripts = runtime.generate.stream_chat, []

    def stream(engine, request, controls=None):
        if request.tools and scripts:
            request = replace(request, logits_processors=(scripts[0],))
        return real(engine, request, controls)
    monkeypatch.setattr(runtime.generate, "stream_chat", stream)
    return scripts


def data_with_calc(tmp_path, approved=True) -> Path:
    """A data folder whose mcp.json holds the tests' calc server (over stdio), approved or not."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": CALC.to_dict()}}))
    if approved:
        Approvals(data / "mcp_approvals.json").approve(CALC)
    return data


def allow_when_asked(qtbot, w: MainWindow, button="once", seen=None) -> None:
    """Answers every consent dialog of `w` with `button` ("once", "chat", "decline"), noting the calls."""
    def click(request_id, call, box):
        if seen is not None:
            seen.append(call)
        QTimer.singleShot(50, lambda: qtbot.mouseClick(getattr(w.dialogs.consents[request_id], button),
                                                       Qt.MouseButton.LeftButton))
    w.controller.sig_consent.connect(click)
