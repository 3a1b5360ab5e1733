"""The chosen depth has one owner (app/depth_choice.py DepthChoice): it resolves a depth the loaded model
cannot run by the runtime's rule (runtime/depth.py usable_level), it alone writes the settings' depth, and
the slider shows what it says, for every pattern of levels the model cannot run."""

import itertools
from dataclasses import dataclass, replace

import pytest

from app.depth_choice import DepthChoice
from app.state.settings import Settings
from runtime.depth import depth_levels, level_names, usable_level


def patterns():
    """The demo's levels with every non-empty proper subset made unavailable (as a server's model makes
    Auto unavailable, or a small GPU the levels whose thinker does not fit)."""
    levels = depth_levels(["0.5M", "1.0M", "1.5M"], 96)
    for n in range(1, len(levels)):
        for off in itertools.combinations(range(len(levels)), n):
            yield [replace(s, unavailable="not offered here") if i in off else s for i, s in enumerate(levels)]


@dataclass
class Model:
    levels: tuple
    default_depth: str = "Balanced"


@pytest.mark.parametrize("saved", level_names())
def test_a_loaded_model_resolves_the_depth_by_the_runtime_rule(saved):
    for levels in patterns():
        settings, saves = Settings(depth=saved), []
        choice = DepthChoice(settings, lambda: saves.append(1), lambda: Model(tuple(levels)))
        choice.resolve()
        level = next(s for s in levels if s.name == choice.name)
        assert level.available and settings.depth == choice.name
        kept = usable_level(levels, saved)
        if kept is not None:  # the saved depth, or the nearest usable one below it that works the same way
            assert choice.name == kept.name
        for s in levels:  # a choice is taken (and saved) only when the model can run it
            before = choice.name
            assert choice.choose(s.name) == s.available
            assert settings.depth == choice.name == (s.name if s.available else before)
        assert len(saves) <= len(levels)


def test_with_no_model_a_choice_is_any_level_of_the_table():
    settings = Settings(depth="Balanced")
    choice = DepthChoice(settings, lambda: None, lambda: None)
    assert choice.choose("Max") and settings.depth == "Max"
    assert not choice.choose("Deepest") and choice.name == "Max"


@pytest.mark.slow
def test_the_slider_shows_the_controllers_depth_for_every_choice(qtbot, tmp_path):
    """A depth the model cannot run (Auto on a server's model, whose stream has no uncertainty) used to
    be taken by the controller while the slider showed another stop (its own fallback dropped Auto to Max)."""
    from tests.app_support import make_window

    w = make_window(qtbot, tmp_path / "data")
    c = w.controller
    try:
        for levels in patterns():
            c.worker.sig_loaded.emit(replace(w.loaded, levels=tuple(levels)))
            assert w.depth.selected == c.depth.name == w.settings.depth
            for s in levels:
                c.set_depth(s.name)
                assert w.depth.selected == c.depth.name == w.settings.depth
                assert next(x for x in levels if x.name == c.depth.name).available
    finally:
        w.close()
