"""The registry of settings (runtime/options.py) and the depth table's rules (runtime/depth.py): the
command line reproduces its contract from them, and each rule has one implementation."""

import math

import pytest

from runtime import options
from runtime.cli import build_parser
from runtime.depth import (
    depth_levels,
    effort_levels,
    level_for_effort,
    lower_level,
    thinking_ceiling,
    usable_level,
)
from runtime.options import MIN_P, SEED, TEMPERATURE, TOP_K, TOP_P, Option, OptionError

# `python -m runtime ...`'s numeric flags as scripts rely on them: (argv, dest, type, default).
CLI_CONTRACT = [
    (["generate", "--checkpoint", "x", "--prompt", "p"], {
        "max_new_tokens": (int, 512), "temperature": (float, 0.6), "top_p": (float, 0.95), "top_k": (int, 0),
        "min_p": (float, 0.0), "seed": (int, None), "thinking_budget": (int, None), "max_context": (int, 4096)}),
    (["serve", "--checkpoint", "x"], {"port": (int, 8000), "max_context": (int, 4096), "max_queue": (int, 8)}),
    (["models", "probe"], {"context": (int, 8192)}),
    (["models", "download", "x/y"], {"stall_seconds": (float, 30.0)}),
    (["decode-check", "--config", "x"], {"steps": (int, 4)}),
]


def _actions(parser, argv):
    """The argparse actions of the subcommand `argv` names, by dest."""
    for word in argv:
        sub = next((a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)), None)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
    return {a.dest: a for a in parser._actions}


@pytest.mark.parametrize("argv,flags", CLI_CONTRACT, ids=[" ".join(a[:2]) for a, _ in CLI_CONTRACT])
def test_the_command_line_keeps_its_flags(argv, flags):
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    actions = _actions(parser, argv)
    for dest, (kind, default) in flags.items():
        assert args[dest] == default and actions[dest].type is kind, dest
        assert options.for_flag(dest) is not None, f"--{dest} is not declared in runtime/options.py"


def test_every_numeric_flag_is_declared():
    """A number on the command line that no option declares would go unchecked."""
    for argv, _ in CLI_CONTRACT:
        for dest, action in _actions(build_parser(), argv).items():
            if action.type in (int, float):
                assert options.for_flag(dest) is not None, dest


@pytest.mark.parametrize("option,good,bad", [
    (TEMPERATURE, [0, 0.0, 2, 1.5], [-0.1, 2.01, math.nan, math.inf, True, "1", None]),
    (TOP_P, [1, 0.01, 1e-9], [0, 0.0, 1.0001, -1, math.nan]),
    (TOP_K, [0, 40, 40.0, 1 << 24], [-1, 2.5, (1 << 24) + 1, False, math.inf]),
    (MIN_P, [0, 0.5, 0.999999], [1, 1.0, -0.1]),
    (SEED, [0, (1 << 64) - 1], [-1, 1 << 64, 1.5, 10 ** 5000]),
])
def test_each_option_has_one_rule(option, good, bad):
    for value in good:
        assert option.check(value) == value and type(option.check(value)) is option.kind
    for value in bad:
        with pytest.raises(OptionError) as e:
            option.parse(value, "--x")
        finite = "finite " if value in (math.inf, math.nan) else ""
        assert str(e.value).startswith("--x is ") and f"; it must be a {finite}" in str(e.value)


def test_a_consumer_may_narrow_an_option_and_says_so_in_the_same_words():
    capped = options.MAX_NEW_TOKENS.within(high=4096)
    assert capped.rule == "a whole number from 1 to 4,096" and options.MAX_NEW_TOKENS.high == options.MAX_TOKENS
    assert Option("x", float, 0.5, 0.0, 1.0, "", low_open=True).rule == "a number above 0 and at most 1"


# ---------------------------------------------------------------------- the depth table's rules

NAMES = ["small", "mid", "full"]


def levels(loaded):
    return depth_levels(NAMES, 100, loaded=set(loaded))


@pytest.mark.parametrize("loaded,effort,expected", [
    (NAMES, "high", "Max"), ({"small", "full"}, "high", "Max"), ({"small", "mid"}, "high", "Deep"),
    ({"small"}, "high", "Quick"), ({"small"}, "medium", "Quick"), (NAMES, "medium", "Balanced"),
    (NAMES, "low", "Quick"), ({"mid", "full"}, "low", None),  # an effort that thinks never falls to thinking off
    (NAMES, "none", "Off"), (NAMES, "auto", "Auto"), ({"mid", "full"}, "auto", None),  # nor out of Auto
])
def test_an_effort_is_its_level_or_the_nearest_usable_one_below(loaded, effort, expected):
    got = level_for_effort(levels(loaded), effort)
    assert (got.name if got else None) == expected


def test_the_efforts_are_the_tables():
    assert effort_levels() == {"none": "Off", "minimal": "Quick", "low": "Quick", "medium": "Balanced", "high": "Max",
                               "xhigh": "Max", "max": "Max", "auto": "Auto"}
    with pytest.raises(KeyError):
        level_for_effort(levels(NAMES), "extreme")


def test_usable_and_lower_levels():
    stops = levels({"small", "full"})  # the middle submodel is not in memory
    assert usable_level(stops, "Deep").name == "Quick" and usable_level(stops, "deep").name == "Quick"
    assert usable_level(stops, "Ultra") is None and usable_level(stops, "Max").name == "Max"
    assert lower_level(stops, "Max").name == "Quick" and lower_level(stops, "Quick").name == "Off"
    assert lower_level(stops, "Off") is None and lower_level(stops, "Ultra") is None


@pytest.mark.parametrize("declared,context,expected", [(None, 4096, 1024), (None, 1 << 20, 32768), (480, 4096, 480),
                                                       (4000, 4096, 2048), (None, 2, 1)])
def test_the_thinking_ceiling(declared, context, expected):
    assert thinking_ceiling(declared, context) == expected
    assert max(s.budget for s in depth_levels(NAMES, expected)) == expected  # the Max level's budget
