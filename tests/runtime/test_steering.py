"""Steering a thought in flight: a depth change moves the rest of the thought to another
submodel and budget, "Answer now" ends it, "Think longer" extends it. Events tell what happened."""

from __future__ import annotations

import pytest

from runtime.controls import Controls
from runtime.events import ANSWER, THINKING, Done, Switch, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.reply_record import GRACE_TOKENS
from runtime.sampling import SamplingSettings
from tests.engine_support import HELLO, assert_same_as_fresh_prefill, forbid

GREEDY = SamplingSettings(temperature=0)


def run(engine, controls, on_token, **kw):
    """Streams a reply, calling on_token(n_thinking_tokens_so_far, controls) after each thinking token."""
    sp = engine.chat.special
    kw.setdefault("logits_processors", (forbid(sp.think_end, *sp.end_of_turn),))
    request = ChatRequest(HELLO, kw.pop("think", "small"), kw.pop("answer", "full"), sampling=GREEDY, **kw)
    events = []
    for event in stream_chat(engine, request, controls):
        events.append(event)
        if isinstance(event, Token) and event.phase == THINKING and not event.forced:
            on_token(sum(1 for e in events if isinstance(e, Token) and e.phase == THINKING), controls)
    return events


@pytest.mark.slow
def test_a_depth_change_mid_thought_moves_the_thought_and_keeps_the_count(engine):
    def steer(n, controls):
        if n == 5:
            controls.request_depth("mid", 12)

    events = run(engine, Controls(), steer, thinking_budget=40, max_new_tokens=80)
    thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING]
    assert [t.submodel for t in thinking[:5]] == ["small"] * 5 and thinking[5].submodel == "mid"
    switch = next(e for e in events if isinstance(e, Switch))
    assert (switch.from_submodel, switch.to_submodel, switch.reason) == ("small", "mid", "depth")
    assert switch.reprefill_tokens > 0
    done = events[-1]
    # The new budget counts what was already thought: 12 in all (plus at most the grace to a line end).
    assert 12 <= done.thinking_tokens <= 12 + GRACE_TOKENS and done.budget_hit and done.thinking_end == "budget"
    assert dict(done.thinking_by_submodel)["small"] == 5
    assert sum(n for _, n in done.thinking_by_submodel) == done.thinking_tokens
    assert [e.reason for e in events if isinstance(e, Switch)] == ["depth", "answer"]


def test_a_thought_that_comes_back_keeps_its_stretches_in_order_and_the_budget_as_it_is(engine):
    def steer(n, controls):
        if n == 3:
            controls.request_depth("mid", 30)
        elif n == 7:
            controls.request_depth("small", 30)
        elif n == 9:
            controls.think_longer(10)

    events = run(engine, Controls(), steer, thinking_budget=20, max_new_tokens=80)
    thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING]
    budgets = [t.progress.thinking_budget for t in thinking]
    assert budgets[0] == 20 and budgets[4] == 30 and budgets[-1] == 40  # each event says the budget then
    done = events[-1]
    path = done.progress.thinking_path
    assert [name for name, _ in path] == ["small", "mid", "small"] and path[:2] == (("small", 3), ("mid", 4))
    assert sum(n for _, n in path) == done.thinking_tokens  # the stretches add up to the thought
    assert dict(done.thinking_by_submodel) == {"small": 3 + path[2][1], "mid": 4}  # the totals, merged
    assert all(t.progress.thinking_path[-1][0] == t.submodel for t in thinking)


def test_a_live_switch_leaves_the_state_of_a_fresh_prefill(engine, checkpoints):
    def steer(n, controls):
        if n == 4:
            controls.request_depth("mid", 30)

    run(engine, Controls(), steer, thinking_budget=30, max_new_tokens=60, answer="mid")
    assert_same_as_fresh_prefill(engine, checkpoints["hybrid"], "mid")


@pytest.mark.slow
def test_answer_now_always_yields_an_answer(engine):
    for at in (1, 3, 9):
        def steer(n, controls, at=at):
            if n == at:
                controls.answer_now()

        events = run(engine, Controls(), steer, thinking_budget=None, max_new_tokens=60)
        done = events[-1]
        assert isinstance(done, Done) and done.thinking_end == "user" and not done.budget_hit
        assert done.answer_tokens > 0 and done.finish_reason in ("end_of_turn", "length")
        thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING and not e.forced]
        assert len(thinking) == at  # no thinking token after the request
        forced = [e for e in events if isinstance(e, Token) and e.forced]
        assert forced[-1].token_id == engine.chat.special.think_end
        assert any(isinstance(e, Token) and e.phase == ANSWER and e.submodel == "full" for e in events)


def test_setting_the_depth_to_off_mid_thought_answers_now(engine):
    events = run(engine, Controls(), lambda n, c: n == 2 and c.request_depth(None, 0), thinking_budget=30,
                 max_new_tokens=50)
    assert events[-1].thinking_end == "user" and events[-1].answer_tokens > 0


@pytest.mark.slow
def test_think_longer_extends_the_budget(engine):
    base = run(engine, Controls(), lambda n, c: None, thinking_budget=6, max_new_tokens=100)[-1]
    longer = run(engine, Controls(), lambda n, c: n == 3 and c.think_longer(20), thinking_budget=6,
                 max_new_tokens=100)[-1]
    assert base.budget_hit and longer.budget_hit
    assert longer.thinking_tokens >= 26 > base.thinking_tokens
    assert longer.thinking_budget == 26


def test_steering_is_ignored_once_the_answer_has_started(engine):
    controls = Controls()
    request = ChatRequest(HELLO, None, "full", max_new_tokens=12, sampling=GREEDY)
    events = []
    for event in stream_chat(engine, request, controls):
        events.append(event)
        if isinstance(event, Token) and len(events) == 3:
            controls.request_depth("small", 10)
            controls.answer_now()
    assert not any(isinstance(e, Switch) for e in events)
    assert all(e.submodel == "full" for e in events if isinstance(e, Token))


def test_an_unknown_submodel_request_does_not_break_the_reply(engine):
    events = run(engine, Controls(), lambda n, c: n == 2 and c.request_depth("nope", 10), thinking_budget=8,
                 max_new_tokens=40)
    assert events[-1].finish_reason != "error" and events[-1].answer_tokens > 0
