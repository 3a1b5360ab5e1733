"""The demo banner's accuracy figure comes from the evaluation file that measured it, never from the code."""

import json

import pytest

from app.demo_banner import EVAL_FILE, accuracy_at, demo_banner
from tests.paths import DEMO, DEMO_NVFP4


@pytest.mark.parametrize("folder,section", [(DEMO_NVFP4, "nvfp4"), (DEMO, None)])
def test_the_banner_shows_the_measured_figure(folder, section):
    data = json.loads(EVAL_FILE.read_text())
    rows = (data[section] if section else data)["stops"]
    expected = next(r["accuracy"] for r in rows if r["stop"] == "Balanced")
    assert accuracy_at(folder, "Balanced") == (expected, data["problems"])
    text = demo_banner(folder, "Balanced")
    assert f"right {expected:.0%} of the time on {data['problems']} held-out sums at the Balanced depth" in text
    assert "docs/results/demo-eval.md" in text


def test_a_changed_evaluation_changes_the_banner(tmp_path):
    data = json.loads(EVAL_FILE.read_text())
    next(r for r in data["nvfp4"]["stops"] if r["stop"] == "Deep")["accuracy"] = 0.5
    results = tmp_path / "demo-eval.json"
    results.write_text(json.dumps(data))
    assert "right 50% of the time" in demo_banner(DEMO_NVFP4, "Deep", results)


@pytest.mark.parametrize("content", [None, "{broken", "[]", '{"problems": 60}', '{"checkpoint": "assets/demo", '
                                     '"problems": 60, "stops": [{"stop": "Balanced", "accuracy": "high"}]}'])
def test_without_a_usable_figure_the_banner_leaves_it_out(tmp_path, content):
    results = tmp_path / "demo-eval.json"
    if content is not None:
        results.write_text(content)
    text = demo_banner(DEMO, "Balanced", results)
    assert "%" not in text and "adds and subtracts" in text and "knows a few facts" in text
    assert "up to twelve earlier turns" in text and "start a new one (Ctrl+N)" in text  # where it stops being right
    assert demo_banner(DEMO, "Ultra") == text  # a depth it was not measured at
