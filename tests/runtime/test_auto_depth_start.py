"""Where Auto's thought starts: elastic.json's `auto_depth` `start` names a submodel on the Auto stop's
ladder below its top; the thought starts there and climbs the rungs above it (issue 40: on the NVFP4 demo
the smallest submodel slips confidently). Without the key nothing changes. The tiny checkpoint is random,
so test_auto_depth's Script says how sure the thinker is."""

from __future__ import annotations

import json

import pytest

from runtime.auto_depth import AutoPolicy, parse_policy
from runtime.checkpoint.config import load_config
from runtime.checkpoint.submodels import parse_elastic
from runtime.controls import Controls
from runtime.depth import auto_ladder, depth_levels, find_level
from runtime.engine import Engine
from runtime.errors import CheckpointError
from runtime.events import THINKING, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.server.openai_api import parse_chat
from runtime.server.serving import ServedModel
from tests.engine_support import HELLO
from tests.runtime.test_auto_depth import GREEDY, Script, switches

NAMES = ["small", "mid", "full"]  # the hybrid checkpoint's submodels, fewest active parameters first


def with_start(folder, start, **extra):
    """`folder`'s elastic.json with auto_depth's start set (None: the key left out)."""
    path = folder / "elastic.json"
    data = json.loads(path.read_text())
    data["auto_depth"] = {"signal": "entropy", "threshold": 1.0, "window": 1, **extra}
    if start is not None:
        data["auto_depth"]["start"] = start
    path.write_text(json.dumps(data))
    return data


def parse(folder, data):
    return parse_elastic(data, load_config(folder), folder / "elastic.json")


# ---------------------------------------------------------------------- the key, checked at load


@pytest.mark.parametrize("start", ["small", "mid"])
def test_a_rung_below_the_top_is_a_start(hybrid_copy, start):
    parse(hybrid_copy, with_start(hybrid_copy, start))
    engine = Engine.load(hybrid_copy, max_context=128)
    assert engine.auto_policy == AutoPolicy("entropy", 1.0, 1, start)
    assert engine.auto_policy.as_dict()["start"] == start


def test_without_start_the_policy_is_as_before():
    policy = parse_policy({"signal": "entropy", "threshold": 0.35}, "auto_depth")
    assert policy.start is None and "start" not in policy.as_dict()


@pytest.mark.parametrize("bad", [5, True, ["mid"], {"name": "mid"}, "", "   ", "m" * 65, "mid\n", "a\x00b"])
def test_a_start_that_is_no_name_is_refused(bad):
    with pytest.raises(CheckpointError, match=r"^elastic.json: auto_depth: start .* must be the name of a submodel"):
        parse_policy({"start": bad}, "auto_depth", "elastic.json")


@pytest.mark.parametrize("start, says", [
    ("medium", r"names no submodel of this checkpoint \(it has small, mid, full\)"),
    ("MID", "names no submodel"),  # names are exact, as everywhere else
    ("full", "is the parent, which has nowhere to climb"),
])
def test_a_start_off_the_ladder_is_refused_naming_the_file_and_the_key(hybrid_copy, start, says):
    data = with_start(hybrid_copy, start)
    for load in (lambda: parse(hybrid_copy, data), lambda: Engine.load(hybrid_copy, max_context=128)):
        with pytest.raises(CheckpointError, match=says) as err:
            load()
        message = str(err.value)
        assert message.startswith(f"{hybrid_copy / 'elastic.json'}: auto_depth: start {start!r}")
        assert "\n" not in message and message.endswith("name one of small, mid, or delete it to start on the smallest")


def test_a_submodel_the_ladder_skips_is_refused(hybrid_copy):
    """With four submodels the table's ladder is smallest > middle > parent: the second largest is on no rung."""
    data = with_start(hybrid_copy, "mid2")
    mid = next(e for e in data["submodels"] if e["name"] == "mid")
    data["submodels"].append(dict(mid, name="mid2"))  # as large as mid, listed after it: sorted above it
    assert auto_ladder(["small", "mid", "mid2", "full"]) == ("small", "mid", "full")
    skipped = r"auto_depth: start 'mid2' is not on Auto's ladder \(small > mid > full\)"
    with pytest.raises(CheckpointError, match=skipped):
        parse(hybrid_copy, data)


# ---------------------------------------------------------------------- the stop


def test_the_auto_stop_thinks_on_start_and_climbs_the_rungs_above_it():
    policy = AutoPolicy("entropy", 0.35, 1, "mid")
    stops = depth_levels(NAMES, 100, policy=policy)
    auto = find_level(stops, "Auto")
    assert (auto.think, auto.answer, auto.escalation.ladder, auto.escalation.policy) == (
        "mid", "full", ("mid", "full"), policy)
    plain = depth_levels(NAMES, 100, policy=AutoPolicy("entropy", 0.35, 1))
    assert [(s.name, s.think) for s in stops[:-1]] == [(s.name, s.think) for s in plain[:-1]]  # only Auto moves
    assert find_level(plain, "Auto").escalation.ladder == ("small", "mid", "full")
    starts_small = find_level(depth_levels(NAMES, 100, policy=AutoPolicy(start="small")), "Auto")
    assert starts_small.escalation.ladder == ("small", "mid", "full")  # naming the table's own thinker changes nothing


def test_a_start_not_in_memory_makes_auto_unavailable_not_another_start():
    stops = depth_levels(NAMES, 100, loaded={"small"}, policy=AutoPolicy(start="mid"))
    auto = next(s for s in stops if s.name == "Auto")
    assert not auto.available and auto.missing == "mid"
    fits = find_level(depth_levels(NAMES, 100, loaded={"small", "mid"}, policy=AutoPolicy(start="mid")), "Auto")
    assert fits.escalation.ladder == ("mid",) and fits.answer == "mid"  # nothing above it in memory: never watched


# ---------------------------------------------------------------------- the reply


@pytest.fixture
def mid_start(hybrid_copy):
    with_start(hybrid_copy, "mid")
    return Engine.load(hybrid_copy, max_context=256)


def auto_request(engine, script, level, think=None, escalation="level"):
    return ChatRequest(HELLO, think or level.think, level.answer, 20, 60, GREEDY, logits_processors=(script,),
                       escalation=level.escalation if escalation == "level" else escalation)


@pytest.mark.parametrize("struggle_at, moves", [
    (None, [("mid", "full", "answer")]),  # sure of every token: the middle submodel thinks it all
    (5, [("mid", "full", "escalate")]),  # unsure once: the parent takes the thought over and answers
])
def test_the_auto_reply_starts_on_start(mid_start, struggle_at, moves):
    auto = find_level(mid_start.depth_levels(), "Auto")
    events = list(stream_chat(mid_start, auto_request(mid_start, Script(mid_start, struggle_at), auto)))
    done = events[-1]
    assert switches(events) == moves
    assert done.progress.thinking_path[0][0] == "mid" and done.thinking_by_submodel[0][0] == "mid"
    assert "small" not in dict(done.progress.thinking_path)


@pytest.mark.parametrize("start, moves", [
    ("small", [("small", "mid", "depth")]),  # Quick -> Auto: Auto's start takes the thought, then climbs
    ("mid", []),  # Deep -> Auto: already on Auto's start, watched from this token on
])
def test_a_thought_moved_to_auto_goes_to_its_start_and_climbs_from_there(mid_start, start, moves):
    auto = find_level(mid_start.depth_levels(), "Auto")
    controls, events = Controls(), []
    request = auto_request(mid_start, Script(mid_start, struggle_at=5), auto, think=start, escalation=None)
    for event in stream_chat(mid_start, request, controls):
        events.append(event)
        if isinstance(event, Token) and event.phase == THINKING and sum(
                isinstance(e, Token) and e.phase == THINKING for e in events) == 2:
            controls.request_depth(auto.think, auto.budget, auto.escalation)
    assert switches(events) == moves + [("mid", "full", "escalate")]
    assert [name for name, _ in events[-1].progress.thinking_path][0] == start


def test_the_server_and_the_slider_say_where_auto_starts(mid_start):
    from app.widgets.depth_slider import slider_stops

    served = ServedModel.from_engine(mid_start)
    parsed = parse_chat({"model": served.id, "messages": [{"role": "user", "content": "hi"}],
                         "reasoning_effort": "auto"}, served)
    assert parsed.depth == "Auto" and (parsed.request.think_submodel, parsed.request.answer_submodel) == ("mid", "full")
    assert parsed.request.escalation.ladder == ("mid", "full")
    auto = next(s for s in slider_stops(mid_start.depth_levels(), {}) if s.name == "Auto")
    assert auto.detail.startswith("mid thinks ≤") and auto.budget.startswith("mid ≤")

