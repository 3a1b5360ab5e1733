"""Issue 40: the depth table's stops on the bundled demo. Quick's budget lets the smallest submodel finish
the thought a four-number sum needs; Auto, with the policy the demo's elastic.json measured, climbs out of
the confident slips the smallest submodel wrote before (docs/results/demo-eval.md)."""

import json
from types import SimpleNamespace

import pytest

from runtime.chat_format import ChatFormat
from runtime.depth import depth_levels, find_level
from runtime.reply_record import ThinkingBudget
from tests.paths import DEMO
from training.data import evaluation_problems, thinking_text


def demo_stops():
    elastic = json.loads((DEMO / "elastic.json").read_text())
    names = [s["name"] for s in reversed(elastic["submodels"])]  # smallest first
    return depth_levels(names, elastic["max_thinking_tokens"])


def thought_tokens_kept(pieces: list[str], budget: int) -> int:
    """How many of a thought's tokens (their texts) a budget of `budget` keeps, by the runtime's own rule
    (the first line end after the budget)."""
    rule = ThinkingBudget(budget, cap=10 * len(pieces))
    for i, text in enumerate(pieces, start=1):
        if rule.ends(i, text):
            return i
    return len(pieces)


def test_quick_lets_the_smallest_submodel_finish_a_four_number_thought():
    """Quick's budget was 60 tokens (1/8 of the demo's 480): it cut the right trace of most four-number
    sums before its last line (16 of Quick's 22 wrong replies on 60 held-out sums)."""
    quick = find_level(demo_stops(), "Quick")
    chat = ChatFormat(DEMO)
    cut = []
    for p in evaluation_problems(1, 300, numbers=(4,)):
        ids = chat.encode(thinking_text(p) + "\n")
        pieces = [chat.tokenizer.decode([i]) for i in ids]
        if thought_tokens_kept(pieces, quick.budget) < len(pieces):
            cut.append(p.expression)
    assert not cut, f"Quick's {quick.budget} tokens cut {len(cut)} of 300 right four-number traces, e.g. {cut[:3]}"


def test_quick_still_thinks_briefly():
    """Quick stays the short stop: below Balanced's budget, and its thinker the smallest submodel."""
    stops = demo_stops()
    quick, balanced = find_level(stops, "Quick"), find_level(stops, "Balanced")
    assert quick.think == "0.5M" and 0 < quick.budget < balanced.budget


# Auto's wrong replies on the reported held-out sums (docs/results/demo-eval.md, seed 0) before issue 40,
# each a slip the 0.5M wrote under the old threshold (entropy 0.83), never climbing. The policy was refitted
# on other sums (seed 1); it catches the column slips, not the number taken wrong from the question ("7-7:
# 7-5=2"), which the 0.5M writes with less entropy than its right tokens elsewhere.
SLIPPED = [("Tell me 75+11+66.", 152), ("work out 30 + 4 + 56 please", 90),
           pytest.param("Hey, what's 91 minus 84 minus 7 plus 51?", 51, marks=pytest.mark.xfail(
               strict=True, reason="a next-number slip written below the threshold: Auto does not climb"))]


@pytest.fixture(scope="module")
def demo_engine():
    from runtime.engine import Engine

    return Engine.load(DEMO, device="cpu", max_context=2048)


@pytest.mark.parametrize("asked, expected", SLIPPED)
def test_auto_climbs_out_of_the_smallest_submodels_confident_slips(demo_engine, asked, expected):
    from runtime.generate import ChatRequest
    from runtime.sampling import SamplingSettings
    from training.evaluate import last_number, reply

    auto = find_level(demo_engine.depth_levels(), "Auto")
    request = ChatRequest(({"role": "user", "content": asked},), auto.think, auto.answer, auto.budget,
                          demo_engine.thinking_ceiling + 64, SamplingSettings(temperature=0),
                          escalation=auto.escalation)
    done, climbed_at, _, _ = reply(demo_engine, request)
    assert climbed_at, f"Auto did not climb: {done.thinking_text!r}"
    assert last_number(done.answer_text) == expected, done.thinking_text + done.answer_text


def test_update_reruns_only_the_stops_and_keeps_the_other_tables(monkeypatch):
    """`evaluate --update`: after a change of the depth table or the Auto policy, the stops (fp32 and NVFP4)
    are measured again and every other table of the earlier run is kept as it was."""
    from training import evaluate

    def fake_stops(engine, runner, checkpoint):
        row = {"stop": "Auto", "accuracy": 0.95, "replies": [], "by_numbers": {}}
        return {"checkpoint": str(checkpoint), "problems": len(runner.items), "submodels": ["s", "m", "p"],
                "thinking_ceiling": 480, "machine": "here", "stops": [row], "auto_policy_from": "elastic.json",
                "stops_load_average": [1.0, 2.0]}

    monkeypatch.setattr(evaluate.Engine, "load", lambda folder, **kw: SimpleNamespace(thinking_ceiling=480))
    monkeypatch.setattr(evaluate, "run_stops", fake_stops)
    monkeypatch.setattr(evaluate, "samples", lambda result: ["sampled"])
    earlier = {"checkpoint": "old", "problems": 20, "stops": [{"stop": "Auto", "accuracy": 0.9}],
               "tool_use": {"kept": True}, "per_submodel": ["kept"], "samples": ["old"],
               "nvfp4": {"checkpoint": "old4", "stops": [], "tool_use": {"kept": 4}}}
    result = evaluate.update_stops(earlier, "fp32-dir", 6, 0, nvfp4="nvfp4-dir", log=lambda *a: None)
    assert result["stops"] == [{"stop": "Auto", "accuracy": 0.95, "by_numbers": {}}]  # replies dropped
    assert result["problems"] == 6 and result["problems_submodels"] == result["problems_tools"] == 20
    assert result["tool_use"] == {"kept": True} and result["per_submodel"] == ["kept"]
    assert result["samples"] == ["sampled"] and result["stops_load_average"] == [1.0, 2.0]
    assert result["nvfp4"]["checkpoint"] == "nvfp4-dir" and result["nvfp4"]["tool_use"] == {"kept": 4}
    assert result["nvfp4"]["stops"][0]["accuracy"] == 0.95 and "replies" not in result["nvfp4"]["stops"][0]
    assert earlier["stops"] == [{"stop": "Auto", "accuracy": 0.9}]  # the earlier result is not changed


def test_auto_rungs_reads_a_policy_as_a_ladder_and_a_threshold():
    from runtime.auto_depth import AutoPolicy, Escalation
    from training.auto_rungs import config

    roles = {"small": "0.5M", "mid": "1.0M", "parent": "1.5M"}
    assert config("small>parent@0.5", roles, 480) == (
        "0.5M", "1.5M", 240, Escalation(("0.5M", "1.5M"), AutoPolicy("entropy", 0.5, 1)))
    assert config("Max", roles, 480) == ("1.5M", "1.5M", 480, None)
