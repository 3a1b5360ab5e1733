"""Steering a reply's thought from the window (pytest-qt, offscreen, the real demo engine): the depth
slider moved while a reply thinks moves the rest of the thought, "Answer now" ends it, "Think longer"
extends it; the buttons and their keys work only while a reply thinks; the finished reply says which
submodels thought how much, also after a reload from history.

The demo is copied with a thinking ceiling of 64 tokens (stops: Quick 13, Balanced 16, Deep 32, Max 64),
so budgets bite long before the demo's own thoughts end (50 to 90 tokens for a sum). Greedy sampling.
To act at a known token, the decode loop is held just before its N-th token (`Gate`) until the test has
acted: no timing, no race with a thought that ends before the click lands."""

import json
import shutil

import pytest
from PySide6.QtCore import QPoint, Qt

from app.state.history import History
from app.state.settings import Sampling, Settings
from app.widgets.chat_view import thinking_summary
from app.widgets.depth_slider import DepthSlider, slider_stops
from app.widgets.live_strip import LiveStrip
from runtime.reply_record import GRACE_TOKENS
from tests.app_support import LONG, SUM, finish, held_at, hold, make_window, strip_token, warmed_up
from tests.paths import ROOT

CEILING = 64
QUICK = 13  # depth_levels.json: Quick thinks for 0.2 of the ceiling, 12.8 rounded


@pytest.fixture
def small_ceiling(tmp_path):
    folder = tmp_path / "demo-ceiling-64"
    shutil.copytree(ROOT / "assets" / "demo-nvfp4", folder)
    elastic = json.loads((folder / "elastic.json").read_text())
    elastic["max_thinking_tokens"] = CEILING
    (folder / "elastic.json").write_text(json.dumps(elastic))
    return folder


@pytest.fixture
def window(qtbot, tmp_path, small_ceiling, gate):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=200, sampling=Sampling(temperature=0.0)))
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=LONG):
        w.model_panel.load(str(small_ceiling), "", is_demo=True)
    warmed_up(qtbot, w)
    assert [(s.name, s.think, s.budget) for s in w.loaded.levels] == [
        ("Off", None, 0), ("Quick", "0.5M", QUICK), ("Balanced", "1.0M", 16), ("Deep", "1.0M", 32), ("Max", "1.5M", 64),
        ("Auto", "0.5M", 32)]
    yield w
    gate.release_all()
    w.close()


def steering_enabled(w) -> list[bool]:
    return [x.isEnabled() for x in (w.answer_now_button, w.think_longer_button, w.answer_now_action,
                                    w.think_longer_action)]


@pytest.mark.slow
def test_moving_the_slider_while_thinking_moves_the_rest_of_the_thought(qtbot, window, gate):
    w, c = window, window.controller
    reply, controls = hold(qtbot, w, gate, "Quick", at=4)  # 0.5M has thought 3 tokens
    # the view takes the controller's text at its next flush (a timer), so wait for it rather than race it
    qtbot.waitUntil(lambda: w.chat.widgets[-1].thinking.toggle.text().startswith("Thinking on 0.5M…"), timeout=LONG)
    assert "applies now to this thought" in w.depth.detail.text()
    w.depth.jump(2)  # a click on Balanced's label: 1.0M thinks, 16 tokens in all
    assert c.depth.name == "Balanced" and w.settings.depth == "Balanced"  # the chat's depth, for the next reply too
    message = finish(qtbot, w, controls)
    meta = message.meta
    depth_moves = [s for s in meta["switches"] if s["reason"] == "depth"]
    assert [(s["from"], s["to"]) for s in depth_moves] == [("0.5M", "1.0M")] and depth_moves[0]["reprefill_tokens"] > 0
    by = dict(meta["thinking_by_submodel"])
    assert list(by) == ["0.5M", "1.0M"] and by["0.5M"] == 3 and sum(by.values()) == meta["thinking_tokens"]
    # the new budget counts what 0.5M already thought: 16 in all, then at most the grace to a line end
    assert meta["thinking_budget"] == 16 and 16 <= meta["thinking_tokens"] <= 16 + GRACE_TOKENS
    assert (meta["switch"]["from"], meta["switch"]["to"]) == ("1.0M", "1.5M") and message.content
    # the live strip shows the switch where it happened (a mark after the third token), with its cost
    note = f"0.5M → 1.0M (depth): re-prefilled {depth_moves[0]['reprefill_tokens']} tok"
    assert note in w.strip.switch_note.toolTip()  # all of the reply's; the text shows the newest
    assert w.strip.sparkline.marks[0] == (3, "depth") and w.strip.sparkline.marks[1][1] == "answer"
    # the header names both thinkers, from what was saved, and again when the chat is rebuilt from history
    header = f"· 3 tokens on 0.5M, then {by['1.0M']} on 1.0M"
    assert header in w.chat.widgets[-1].thinking.toggle.text()
    here = c.chats.current
    c.chats.new()
    c.chats.select(here)
    assert header in w.chat.widgets[-1].thinking.toggle.text()
    reopened = History(c.history.path)
    try:
        saved = reopened.messages(here)[-1]
        assert saved.complete and saved.meta["thinking_by_submodel"] == {"0.5M": 3, "1.0M": by["1.0M"]}
    finally:
        reopened.close()


@pytest.mark.slow
def test_moving_the_slider_to_auto_while_thinking_lets_the_rest_of_the_thought_climb(qtbot, window, gate,
                                                                                      small_ceiling, tmp_path):
    """Auto's policy set to climb at any doubt (threshold 0: a real model is never quite sure of a token)."""
    w, c = window, window.controller
    eager = shutil.copytree(small_ceiling, tmp_path / "eager-auto")
    elastic = json.loads((eager / "elastic.json").read_text())
    elastic["auto_depth"] = {"signal": "entropy", "threshold": 0.0, "window": 1}
    (eager / "elastic.json").write_text(json.dumps(elastic))
    with qtbot.waitSignal(c.sig_model_loaded, timeout=LONG):
        w.model_panel.load(str(eager), "", is_demo=True)
    reply, controls = hold(qtbot, w, gate, "Deep", at=4)  # fixed on 1.0M: it never climbs by itself
    fixed = finish(qtbot, w, controls).meta
    assert [s["reason"] for s in fixed["switches"]] == ["answer"]
    reply, controls = hold(qtbot, w, gate, "Deep", at=4)  # 1.0M has thought 3 tokens
    w.depth.jump(5)  # Auto: its thinker (0.5M) takes over, watched, and climbs at its first doubt
    assert c.depth.name == "Auto"
    meta = finish(qtbot, w, controls).meta
    assert [(s["from"], s["to"], s["reason"]) for s in meta["switches"]] == [
        ("1.0M", "0.5M", "depth"), ("0.5M", "1.0M", "escalate"), ("1.0M", "1.5M", "escalate")]
    # 0.5M and then 1.0M each gave up their first token: 1.0M's 3 tokens, then 1.5M thought on and answered
    assert list(meta["thinking_by_submodel"]) == ["1.0M", "1.5M"] and meta["answer_tokens"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("at", [1, 6])
def test_answer_now_always_yields_an_answer_and_the_reply_is_saved_complete(qtbot, window, gate, at):
    w, c = window, window.controller
    reply, controls = hold(qtbot, w, gate, "Max", at=at)
    assert steering_enabled(w) == [True] * 4
    qtbot.mouseClick(w.answer_now_button, Qt.MouseButton.LeftButton)
    assert steering_enabled(w) == [False] * 4  # asked once: nothing more to steer
    assert "this one is answering" in w.depth.detail.text()
    message = finish(qtbot, w, controls)
    meta = message.meta
    assert meta["thinking_end"] == "user" and not meta["budget_hit"]
    assert meta["finish_reason"] in ("end_of_turn", "length") and meta["answer_tokens"] > 0 and message.content
    assert dict(meta["thinking_by_submodel"])["1.5M"] >= at - 1
    saved = c.history.messages(c.chats.current)[-1]
    assert saved.complete and saved.content == message.content and saved.meta["thinking_end"] == "user"
    assert w.chat.widgets[-1].thinking.toggle.text().endswith("ended by you")


@pytest.mark.slow
def test_think_longer_lets_the_thought_run_past_its_budget(qtbot, window, gate):
    w, c = window, window.controller
    gate.at = None
    c.set_depth("Quick")  # 0.5M, 13 tokens
    w.input.setPlainText(SUM)
    with qtbot.waitSignal(c.sig_reply_done, timeout=LONG) as done:
        w.send()
    base = done.args[1].meta
    assert base["budget_hit"] and base["thinking_tokens"] <= QUICK + GRACE_TOKENS  # cut at the first line end

    reply, controls = hold(qtbot, w, gate, "Quick", at=3)
    header = w.chat.widgets[-1].thinking.toggle.text
    qtbot.waitUntil(lambda: header() == f"Thinking on 0.5M… 2 of {QUICK} tokens", timeout=LONG)  # the budget as it is
    assert c.steering.think_longer_tokens == CEILING // 4
    qtbot.mouseClick(w.think_longer_button, Qt.MouseButton.LeftButton)
    assert steering_enabled(w) == [True] * 4  # it may think longer again, or answer now
    gate.at = 6  # a few tokens on, held again: the header shows the raised budget
    controls.released.set()
    held_at(qtbot, gate, reply, controls, 6)
    qtbot.waitUntil(lambda: header() == f"Thinking on 0.5M… 5 of {QUICK + CEILING // 4} tokens", timeout=LONG)
    longer = finish(qtbot, w, controls).meta
    assert longer["thinking_budget"] == QUICK + CEILING // 4
    # past anything the original budget allows (Quick's and the grace to a line end): the model kept thinking
    assert longer["thinking_tokens"] > QUICK + GRACE_TOKENS >= base["thinking_tokens"]
    assert longer["thinking_by_submodel"] == {"0.5M": longer["thinking_tokens"]}


@pytest.mark.slow
def test_think_longer_says_this_replys_raised_budget_by_the_slider_until_the_reply_ends(qtbot, window, gate):
    w, c = window, window.controller
    reply, controls = hold(qtbot, w, gate, "Quick", at=3)  # 0.5M, QUICK tokens; 2 thought
    assert "budget raised" not in w.depth.detail.text()
    qtbot.mouseClick(w.think_longer_button, Qt.MouseButton.LeftButton)
    raised = QUICK + CEILING // 4
    note = f"This reply: budget raised to {raised} tokens"
    assert w.depth.detail.text().startswith(note + " · Quick")  # in the slider's row, before the stop
    qtbot.keyClick(w, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    raised += CEILING // 4  # twice before the runtime took the first: both count
    assert w.depth.detail.text().startswith(f"This reply: budget raised to {raised} tokens · Quick")
    done = finish(qtbot, w, controls).meta
    assert done["thinking_budget"] == raised  # the note said what the runtime did
    qtbot.waitUntil(lambda: "budget raised" not in w.depth.detail.text(), timeout=LONG)  # the reply ended

    reply, controls = hold(qtbot, w, gate, "Quick", at=3)
    qtbot.mouseClick(w.think_longer_button, Qt.MouseButton.LeftButton)
    assert "budget raised" in w.depth.detail.text()
    c.set_depth("Deep")  # a depth move sets the thought's budget anew: the raise no longer holds
    assert "budget raised" not in w.depth.detail.text()
    finish(qtbot, w, controls)


@pytest.mark.slow
def test_steering_is_off_unless_the_reply_shown_is_thinking(qtbot, window, gate):
    w, c = window, window.controller
    assert steering_enabled(w) == [False] * 4 and "applies to the next reply" in w.depth.detail.text()
    # thinking off: the reply answers from its first token; a slider move is for the next reply only
    reply, controls = hold(qtbot, w, gate, "Off", at=3)
    assert steering_enabled(w) == [False] * 4 and "this one is answering" in w.depth.detail.text()
    assert not c.steering.answer_now() and c.steering.think_longer() == 0
    w.depth.jump(2)
    assert c.depth.name == "Balanced"
    off = finish(qtbot, w, controls).meta
    assert off["think_submodel"] is None and off["switches"] == [] and off["thinking_tokens"] == 0
    assert steering_enabled(w) == [False] * 4 and "applies to the next reply" in w.depth.detail.text()
    # thinking: on; looking at another chat: off (the buttons act on the reply shown); back: on again
    reply, controls = hold(qtbot, w, gate, "Balanced", at=3)
    assert steering_enabled(w) == [True] * 4
    here = c.chats.current
    c.chats.new()
    assert steering_enabled(w) == [False] * 4 and "applies to the next reply" in w.depth.detail.text()
    c.chats.select(here)
    assert steering_enabled(w) == [True] * 4
    qtbot.keyClick(w, Qt.Key.Key_Escape)  # stopped: nothing to steer
    assert steering_enabled(w) == [False] * 4
    assert finish(qtbot, w, controls).meta["finish_reason"] == "stopped"


@pytest.mark.slow
def test_the_keys_answer_now_and_think_longer(qtbot, window, gate):
    w = window
    reply, controls = hold(qtbot, w, gate, "Max", at=3)
    w.input.setFocus()  # where the cursor is after a send
    qtbot.keyClick(w.input, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert w.input.toPlainText() == ""  # the key went to the action, not into the message
    assert finish(qtbot, w, controls).meta["thinking_budget"] == CEILING + CEILING // 4
    reply, controls = hold(qtbot, w, gate, "Max", at=3)
    qtbot.keyClick(w.input, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    meta = finish(qtbot, w, controls).meta
    assert meta["thinking_end"] == "user" and meta["answer_tokens"] > 0
    assert w.answer_now_action.shortcut().toString() == "Ctrl+Shift+A"
    assert w.think_longer_action.shortcut().toString() == "Ctrl+Shift+L"
    w.dialogs.show_shortcuts()
    assert "Ctrl+Shift+A" in w.dialogs.shortcuts_dialog.text() and "Ctrl+Shift+L" in w.dialogs.shortcuts_dialog.text()
    w.dialogs.shortcuts_dialog.close()


# ---------------------------------------------------------------------- the widgets and the saved details

AUTO_TABLE = [
    {"name": "Off", "think": None, "answer": "parent", "budget": 0},
    {"name": "Auto", "think": "smallest", "answer": "parent", "budget": 0.25,
     "about": "The smallest submodel starts thinking and hands the thought up when it is unsure."},
    {"name": "Quick", "think": "smallest", "answer": "parent", "budget": 0.125},
    {"name": "Balanced", "think": "middle", "answer": "parent", "budget": 0.25},
    {"name": "Deep", "think": "middle", "answer": "parent", "budget": 0.5},
    {"name": "Max", "think": "parent", "answer": "parent", "budget": 1.0},
]


@pytest.mark.parametrize("width", [420, 700])
def test_the_slider_renders_any_list_of_stops(qtbot, width):
    from runtime.depth import depth_levels

    stops = depth_levels(["0.5M", "1.0M", "1.5M"], 96, table=AUTO_TABLE)
    slider = DepthSlider()
    qtbot.addWidget(slider)
    slider.set_stops(slider_stops(stops, {}), "Auto")
    slider.resize(width, slider.sizeHint().height())
    slider.show()
    qtbot.waitExposed(slider)
    slider.ticks.place()
    assert slider.selected == "Auto" and slider.slider.maximum() == 5
    assert [label.text().split("<br>")[0] for label in slider.labels] == [s["name"] for s in AUTO_TABLE]
    auto = slider.labels[1]
    assert "hands the thought up" in auto.toolTip() and "0.5M thinks ≤24" in auto.toolTip()
    for i, label in enumerate(slider.labels):  # each under its tick, none overlapping, none cut off
        tick = slider.slider.mapTo(slider, QPoint(round(slider.slider.tick_x(i)), 0)).x()
        geo = label.geometry().translated(slider.ticks.pos())
        assert geo.left() <= tick <= geo.right() and geo.left() >= 0 and geo.right() < slider.width()
    for a, b in zip(slider.labels, slider.labels[1:]):
        assert a.geometry().right() < b.geometry().left()
    slider.set_live("thinking")
    assert slider.detail.text().startswith("Auto · 0.5M thinks ≤24")
    assert "applies now to this thought" in slider.detail.text()
    assert "applies now to this thought" in slider.slider.toolTip()


def test_the_strip_notes_every_switch_with_its_reason_and_cost(qtbot):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.set_submodels(["0.5M", "1.0M", "1.5M"])
    strip.reset("0.5M", "thinking")
    for _ in range(3):
        strip_token(strip, "0.5M", "thinking", 10.0, 10.0, 100.0)
    strip.on_switch("0.5M", "1.0M", 40, 12.0, "depth")
    assert strip.badge.text() == "1.0M thinking"
    strip_token(strip, "1.0M", "thinking", 10.0, 10.0, 100.0)
    strip.on_switch("1.0M", "1.5M", 52, 20.0)
    assert strip.sparkline.marks == [(3, "depth"), (4, "answer")]
    assert strip.switch_note.text() == "1.0M → 1.5M: re-prefilled 52 tok in 20 ms"  # the newest
    assert ("0.5M → 1.0M (depth): re-prefilled 40 tok in 12 ms\n1.0M → 1.5M: re-prefilled 52 tok in 20 ms"
            in strip.switch_note.toolTip())
    strip.resize(900, 40)
    strip.show()
    qtbot.waitExposed(strip)
    strip.sparkline.grab()  # the marks paint
    strip.reset("0.5M", "thinking")
    assert strip.sparkline.marks == [] and strip.switch_note.text() == ""


def test_the_thinking_header_names_each_thinker_and_bad_details_are_dropped(tmp_path):
    meta = {"think_submodel": "0.5M", "thinking_ms": 2100, "thinking_tokens": 17, "finish_reason": "end_of_turn",
            "budget_hit": True, "thinking_by_submodel": {"0.5M": 5, "1.0M": 12}}
    assert thinking_summary(meta) == "Thought for 2.1 s · 5 tokens on 0.5M, then 12 on 1.0M, budget hit"
    assert thinking_summary({**meta, "thinking_by_submodel": {"0.5M": 17}}) == \
        "Thought for 2.1 s on 0.5M · 17 tokens, budget hit"
    assert thinking_summary({**meta, "budget_hit": False, "thinking_end": "user"}).endswith("ended by you")
    # a thought that came back to a submodel is told in order, not as totals
    back = {**meta, "thinking_tokens": 20, "thinking_by_submodel": {"0.5M": 8, "1.0M": 12},
            "thinking_path": [["0.5M", 5], ["1.0M", 12], ["0.5M", 3]]}
    assert thinking_summary(back) == "Thought for 2.1 s · 5 tokens on 0.5M, then 12 on 1.0M, then 3 on 0.5M, budget hit"
    h = History(tmp_path / "history.sqlite3")
    cid = h.new_conversation("c").id
    good = h.add_message(cid, "assistant", "ok", meta=meta).id
    bad = h.add_message(cid, "assistant", "ok", meta={**meta, "thinking_by_submodel": {"0.5M": "five"},
                                                      "switches": [{"from": 3}], "thinking_end": 1}).id
    paths = [[["0.5M", -1], ["1.0M", 2]], [["0.5M"]], [[3, 4], ["a", 1]], "0.5M", [["0.5M", True], ["x", 1]],
             [["0.5M", 1]] * 2000]
    bad_paths = [h.add_message(cid, "assistant", "ok", meta={**meta, "thinking_path": p}).id for p in paths]
    h.close()
    h = History(tmp_path / "history.sqlite3")
    try:
        by_id = {m.id: m.meta for m in h.messages(cid)}
        assert by_id[good]["thinking_by_submodel"] == {"0.5M": 5, "1.0M": 12}
        assert not {"thinking_by_submodel", "switches", "thinking_end"} & set(by_id[bad])
        thinking_summary(by_id[bad])  # still shown
        for message_id in bad_paths:
            assert "thinking_path" not in by_id[message_id]
            assert thinking_summary(by_id[message_id]).startswith("Thought for 2.1 s · 5 tokens on 0.5M")
    finally:
        h.close()
