"""Issue 40: the stops reported on several seeds' sums pooled (`evaluate --seeds 0,4,6,7`), because 60 sums
cannot rank two policies a sum apart. The pool keeps the sample reported before (seed 0's sums, exactly),
never scores a sum Auto's policies were calibrated on or one twice, and keeps each seed's mix of two, three
and four numbers; the page shows each seed's accuracy beside the pooled one."""

import argparse
from types import SimpleNamespace

import pytest

from training import evaluate
from training.data import is_held_out
from training.evaluate import (
    CALIBRATION_RUNS,
    accuracy_by_seed,
    calibration_questions,
    pooled_questions,
    questions,
    seed_lines,
    seed_list,
    sums_avoiding,
)

CALIBRATED = {p.expression for seed, n in CALIBRATION_RUNS for p, _ in calibration_questions(seed, n)}


@pytest.mark.parametrize("seeds", [(0,), (0, 4, 6, 7), (4, 0), (7, 6)])
def test_a_pool_keeps_each_seeds_mix_and_never_a_calibration_sum_or_a_repeat(seeds):
    items, seed_of = pooled_questions(seeds, 30)
    assert len(items) == 30 * len(seeds) and seed_of == [s for s in seeds for _ in range(30)]
    expressions = [p.expression for p, _ in items]
    assert len(set(expressions)) == len(expressions)
    assert not set(expressions) & CALIBRATED
    assert all(is_held_out(e) for e in expressions)  # held out of training, as every evaluation sum
    for i, seed in enumerate(seeds):
        mine = items[30 * i:30 * (i + 1)]
        assert [len(p.numbers) for p, _ in mine] == [len(p.numbers) for p, _ in questions(seed, 30)]


def test_the_reported_sample_is_kept_exactly_at_the_head_of_the_pool():
    assert pooled_questions((0, 4, 6, 7), 60)[0][:60] == questions(0, 60)
    assert pooled_questions((0,), 60)[0] == questions(0, 60)


def test_a_seed_whose_sums_were_calibrated_on_gets_others_of_the_same_length():
    """Seed 1 is calibration's own: every one of its first sums is replaced, by its next unused ones."""
    plain = [p for p, _ in questions(1, 30)]
    assert {p.expression for p in plain} & CALIBRATED
    swapped = sums_avoiding(1, 30, CALIBRATED)
    assert [len(p.numbers) for p in swapped] == [len(p.numbers) for p in plain]
    assert not {p.expression for p in swapped} & CALIBRATED


def test_accuracy_by_seed_reads_each_pooled_sample_alone():
    replies = [{"right": r} for r in (True, True, False, True, False, False)]
    assert accuracy_by_seed(replies, [0, 0, 4, 4, 6, 6]) == {"0": 1.0, "4": 0.5, "6": 0.0}


def test_the_page_shows_each_seed_beside_the_pool():
    stop = {"stop": "Auto", "accuracy": 0.95, "by_seed": {"0": 0.9, "4": 1.0}}
    lines = seed_lines({"seeds": [0, 4], "problems": 120, "stops": [stop]}, {"stops": [dict(stop, accuracy=0.9)]})
    assert "| fp32 | Auto | 90.0% | 100.0% | 95.0% |" in lines
    assert "| NVFP4 | Auto | 90.0% | 100.0% | 90.0% |" in lines
    assert seed_lines({"problems": 60, "stops": [stop]}, None) == []  # one sample: no such table


@pytest.mark.parametrize("text, want", [("0,4,6,7", (0, 4, 6, 7)), ("3", (3,)), ("0,x", None), ("0,4,0", None),
                                        ("-1,2", None), ("", None)])
def test_seeds_are_distinct_whole_numbers(text, want):
    if want is None:
        with pytest.raises(argparse.ArgumentTypeError, match="e.g. 0,4,6,7"):
            seed_list(text)
    else:
        assert seed_list(text) == want


def test_update_runs_the_stops_on_the_pool_and_says_so(monkeypatch):
    seen = []

    def fake_stops(engine, runner, checkpoint):
        seen.append((len(runner.items), (runner.seed_of or [])[::60]))
        return {"checkpoint": str(checkpoint), "problems": len(runner.items), "submodels": ["s", "m", "p"],
                "thinking_ceiling": 480, "machine": "here", "stops": [], "auto_policy_from": "elastic.json",
                "stops_load_average": [1.0, 2.0]}

    monkeypatch.setattr(evaluate.Engine, "load", lambda folder, **kw: SimpleNamespace(thinking_ceiling=480))
    monkeypatch.setattr(evaluate, "run_stops", fake_stops)
    monkeypatch.setattr(evaluate, "samples", lambda result: [])
    earlier = {"checkpoint": "old", "problems": 60, "stops": [], "nvfp4": {"stops": []}}
    pooled = evaluate.update_stops(earlier, "fp32", 60, 0, nvfp4="nvfp4", log=lambda *a: None, seeds=(0, 4, 6, 7))
    assert seen == [(240, [0, 4, 6, 7])] * 2 and pooled["seeds"] == [0, 4, 6, 7] and pooled["problems"] == 240
    alone = evaluate.update_stops(pooled, "fp32", 60, 0, log=lambda *a: None)
    assert "seeds" not in alone and alone["problems"] == 60 and seen[-1] == (60, [])
