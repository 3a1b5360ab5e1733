"""Samplers and the reasoning-depth table."""

import pytest
import torch

from runtime.depth import depth_levels, find_level, load_table, resolve_roles
from runtime.errors import UsageError
from runtime.sampling import DeviceSampler, SamplingSettings

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])


def draws(settings, n=400):
    sample = DeviceSampler(settings)
    return [sample(LOGITS) for _ in range(n)]


def test_greedy_is_argmax():
    assert set(draws(SamplingSettings(temperature=0), 20)) == {0}


def test_top_k_limits_the_choice():
    assert set(draws(SamplingSettings(temperature=2, top_p=1, top_k=2, seed=0))) == {0, 1}


def test_top_p_keeps_the_smallest_covering_set():
    # softmax(LOGITS): p0 ~ .55, p1 ~ .20 -> top_p .6 needs tokens 0 and 1
    assert set(draws(SamplingSettings(temperature=1, top_p=0.6, seed=0))) == {0, 1}
    assert set(draws(SamplingSettings(temperature=1, top_p=0.3, seed=0))) == {0}


def test_min_p_drops_unlikely_tokens():
    got = set(draws(SamplingSettings(temperature=1, top_p=1, min_p=0.3, seed=0)))
    assert got == {0, 1}  # p1/p0 = e^-1 ~ .37 >= .3; p2/p0 ~ .22 < .3


def test_seed_repeats_and_differs():
    s = SamplingSettings(temperature=1, top_p=1, seed=7)
    assert draws(s, 50) == draws(s, 50)
    assert draws(s, 50) != draws(SamplingSettings(temperature=1, top_p=1, seed=8), 50)


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(top_p=0), dict(top_k=-1), dict(min_p=1.0)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(UsageError):
        DeviceSampler(SamplingSettings(**bad))


@pytest.mark.parametrize("names,expected", [
    (["12B", "23B", "30B"], ("12B", "23B", "30B")),
    (["small", "full"], ("small", "small", "full")),
    (["only"], ("only", "only", "only")),
])
def test_roles_work_for_any_number_of_submodels(names, expected):
    roles = resolve_roles(names)
    assert (roles["smallest"], roles["middle"], roles["parent"]) == expected


def test_stops_follow_the_table_and_scale_with_the_ceiling():
    table = load_table()
    assert [r["name"] for r in table] == ["Off", "Quick", "Balanced", "Deep", "Max", "Auto"]
    small = depth_levels(["12B", "23B", "30B"], 256)
    big = depth_levels(["12B", "23B", "30B"], 32768)
    assert [s.budget for s in small] == [0, 51, 64, 128, 256, 128]  # Quick: 0.2 of the ceiling, rounded
    assert [s.budget for s in big] == [0, 6554, 8192, 16384, 32768, 16384]
    assert [(s.think, s.answer) for s in big] == [(None, "30B"), ("12B", "30B"), ("23B", "30B"), ("23B", "30B"),
                                                  ("30B", "30B"), ("12B", "30B")]
    assert find_level(big, "deep").name == "Deep"
    with pytest.raises(UsageError, match="unknown depth"):
        find_level(big, "ultra")


def test_stops_when_only_a_smaller_submodel_fits():
    """Only 23B fits: it answers in place of the parent; stops that think on 30B are unavailable."""
    stops = depth_levels(["12B", "23B", "30B"], 32768, loaded={"12B", "23B"})
    assert [(s.name, s.think, s.answer, s.available) for s in stops] == [
        ("Off", None, "23B", True), ("Quick", "12B", "23B", True), ("Balanced", "23B", "23B", True),
        ("Deep", "23B", "23B", True), ("Max", "30B", "23B", False), ("Auto", "12B", "23B", True)]
    with pytest.raises(UsageError, match="depth Max needs submodel 30B"):
        find_level(stops, "max")
