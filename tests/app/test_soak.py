"""A long session in one app instance (real MainWindow, the real demo engine, offscreen): 200+ short
replies with chat switches, new chats, stops, edits and regenerations mid-reply (and the versions they
keep), files attached, an MCP server approved, used with consent and revoked, the model manager
opened and closed, and theme changes. Nothing may show an error, log an exception, leak references to
None (the PySide6 6.12.0 defect that aborted long sessions) or save a reply with the wrong ending."""

import logging
import os
import sys
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.state.settings import Settings
from runtime.tool_calls import format_tool_call
from tests.app_support import allow_when_asked, data_with_calc, make_window, script_tool_replies
from tests.engine_support import Scripted

REPLIES = int(os.environ.get("ELASTIC_SOAK_REPLIES", "200"))  # fewer only to try a change quickly
ENDED = {"end_of_turn", "length"}
QUESTIONS = ["hello", "What is 2 + 3?", "What is 12 + 7 - 5?", "how do I get the real model?", "What is 9 - 4?"]


@pytest.mark.slow
def test_a_long_session_of_replies_switches_stops_and_edits(qtbot, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    dialogs = []
    monkeypatch.setattr(QMessageBox, "critical", lambda *a, **k: dialogs.append(a))
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: dialogs.append(a))
    started_at = time.monotonic()
    scripts = script_tool_replies(monkeypatch)  # the calls of the tool rounds (the demo rarely calls by itself)
    w = make_window(qtbot, data_with_calc(tmp_path, approved=False), Settings(max_new_tokens=12))
    c = w.controller
    allow_when_asked(qtbot, w)
    tool_replies = []
    errors, started, done = [], [], {}
    c.sig_error.connect(lambda message, _lower: errors.append(message))
    c.sig_reply_started.connect(lambda cid, mid, *_: started.append(mid))
    # only strings kept: holding the Messages (whose meta may hold None) would move None's count itself
    c.sig_reply_done.connect(lambda cid, m: done.__setitem__(m.id, (m.meta["finish_reason"], m.content)))
    interrupted: set[int] = set()  # replies this test stopped or replaced on purpose
    depths = [s.name for s in w.loaded.levels if s.available]
    notes = tmp_path / "notes.txt"
    notes.write_text("The meeting is on Tuesday.\n" * 10)

    def send(text: str) -> int:
        w.input.setPlainText(text)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        return started[-1]

    def idle():
        qtbot.waitUntil(lambda: not c.replies.busy, timeout=120000)

    def first_token(mid):
        qtbot.waitUntil(lambda: mid in done or any(r.message_id == mid and r.progress.tokens
                                                   for r in c.replies.in_flight.values()), timeout=120000)

    none_before = None
    i = 0
    while len(started) < REPLIES:
        c.set_depth(depths[i % len(depths)])
        question = QUESTIONS[i % len(QUESTIONS)]
        kind = i % 10
        if kind == 4:  # look at another chat right after sending, then come back
            mid = send(question)
            here = c.chats.current
            others = [x.id for x in c.history.conversations() if x.id != here]
            if others:
                c.chats.select(others[i % len(others)])
            idle()
            c.chats.select(here)
        elif kind == 5:  # Ctrl+N right after sending
            send(question)
            qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
            idle()
        elif kind == 6:  # Esc mid-reply
            mid = send("What is 45 + 23 - 17 + 9 + 12?")
            first_token(mid)
            qtbot.keyClick(w, Qt.Key.Key_Escape)
            interrupted.add(mid)
            idle()
        elif kind == 7:  # regenerate mid-reply
            mid = send(question)
            interrupted.add(mid)
            w.chat.widgets[-1].buttons["Regenerate"].click()
            idle()
            last = w.chat.widgets[-1]
            if last.versions:  # the reply it replaced is kept as a version: look at it, then come back
                last.buttons["Previous"].click()
                w.chat.widgets[-1].buttons["Next"].click()
                assert w.chat.widgets[-1].message_id == last.message_id
        elif kind == 8:  # edit the question mid-reply and send it again
            mid = send(question)
            interrupted.add(mid)
            user = w.chat.widgets[-2]
            user.buttons["Edit"].click()
            w.input.setPlainText(question + " (edited)")
            qtbot.keyClick(w.input, Qt.Key.Key_Return)
            idle()
        elif kind == 9:  # send in another chat while this one's reply streams
            mid = send(question)
            interrupted.add(mid)
            w.new_chat()
            send(QUESTIONS[(i + 1) % len(QUESTIONS)])
            idle()
        else:
            send(question)
            idle()
        if i % 40 == 20:  # a file as context (attachments), counted before sending
            c.composer.attach(str(notes))
            qtbot.waitUntil(lambda: bool(c.composer.attached.get(c.chats.current)), timeout=60000)
            send("What is 2 + 3?")
            idle()
        if i % 40 == 35:  # a tool: the server approved, a call allowed when asked, its result answered, revoked
            c.tools.approve("calc")
            qtbot.waitUntil(lambda: any(t.name == "add_numbers" for t in c.tools.known_tools()), timeout=60000)
            scripts[:] = [Scripted(c.worker.engine, [["Let me add.", format_tool_call("add_numbers", {"a": i, "b": 7})],
                                                     [f"It is {i + 7}."]])]
            c.set_depth("Off")
            w.settings.max_new_tokens = 160  # room for the call (the other replies are kept short)
            mid = send(f"What is {i} + 7?")
            idle()
            w.settings.max_new_tokens = 12
            scripts.clear()
            tool_replies.append((mid, str(i + 7)))
            c.tools.revoke("calc")
            qtbot.waitUntil(lambda: not c.tools.known_tools(), timeout=60000)
        if i % 50 == 25:
            w.dialogs.open_manager()
            qtbot.waitUntil(lambda: bool(w.dialogs.manager.rows), timeout=60000)
            w.dialogs.manager.close()
        if i % 60 == 30:
            w.settings.theme = "dark" if w.settings.theme != "dark" else "light"
            w.apply_appearance()
        assert not dialogs and not errors, (dialogs, errors)  # fail at the round that showed it
        i += 1
        if i == 10:
            none_before = sys.getrefcount(None)  # after the first replies built their caches
    idle()
    none_after = sys.getrefcount(None)
    seconds = time.monotonic() - started_at
    w.close()
    print(f"\nsoak: {len(started)} replies, {i} rounds, {seconds:.0f} s; refcount(None) {none_before} -> {none_after}")

    assert not dialogs and not errors
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    # The fatal direction: 6.12.0 dropped a reference per drawLine/drawRect until None was "deallocated".
    # It may not rise level either way exactly: PySide6 6.11.3 keeps one or two references to None per widget
    # it constructs (measured: QLabel +2, QPushButton +1, a message widget about +31), harmless and bounded
    # by the widgets built, so only a fall is a defect. tests/test_app.py checks painting alone stays level.
    assert none_after - none_before >= -10, (none_before, none_after)
    assert set(started) == set(done)  # every reply ended, and said so
    from app.state.history import History

    h = History(tmp_path / "data" / "history.sqlite3")
    saved = [m for conv in h.conversations() for m in h.all_messages(conv.id) if m.role == "assistant"]
    h.close()
    assert len(saved) >= REPLIES * 0.7
    stopped = 0
    for m in saved:
        assert m.complete and (m.meta["finish_reason"], m.content) == done[m.id]
        if m.id in interrupted:
            assert m.meta["finish_reason"] in ENDED | {"stopped"}
            stopped += m.meta["finish_reason"] == "stopped"
        else:
            assert m.meta["finish_reason"] in ENDED, m
    assert stopped >= 5  # Esc and a send elsewhere really stopped replies (some end before the flag is seen)
    by_id = {m.id: m for m in saved}
    assert len(tool_replies) >= REPLIES // 80  # (one round in forty; a round may hold two replies)
    for mid, result in tool_replies:  # each ran its call with consent and answered from the result
        assert "tool_rounds" in by_id[mid].meta, (by_id[mid].content, by_id[mid].meta)
        call = by_id[mid].meta["tool_rounds"][0]["calls"][0]
        assert (call["name"], call["status"], call["content"]) == ("add_numbers", "ok", result)
        assert by_id[mid].content == f"It is {result}."
