"""The context meter's words for a prompt longer than the context (issue 38, item 8): routine trimming
(the policy leaves the earliest turns out) is said as such, in the meter's quiet colour; only a send the
policy refuses is "too long", and then the bar says it in the label's colour too."""

import pytest

from app.widgets.context_meter import ContextMeter


@pytest.fixture
def meter(qtbot):
    m = ContextMeter()
    qtbot.addWidget(m)
    return m


@pytest.mark.parametrize("policy,words,state", [
    ("keep_system", "earliest turns left out", "trim"),
    ("drop_oldest", "earliest messages left out", "trim"),
    ("refuse", "too long", "refuse"),
])
@pytest.mark.parametrize("tokens", [1537, 1800, 5000])
def test_an_over_long_prompt_is_said_by_what_the_policy_does(meter, policy, words, state, tokens):
    meter.set_policy(policy)
    meter.show_count(tokens, 1536, 2048, "")
    text = meter.label.text()
    assert text == f"Context {tokens:,} / 2,048 tokens: {words}"
    assert ("too long" in text) == (policy == "refuse")
    assert meter.label.property("over") == state and meter.bar.property("over") == state


@pytest.mark.parametrize("policy", ["keep_system", "drop_oldest", "refuse"])
@pytest.mark.parametrize("tokens", [0, 900, 1536])
def test_a_prompt_that_fits_says_only_its_count(meter, policy, tokens):
    meter.set_policy(policy)
    meter.show_count(tokens, 1536, 2048, "")
    assert meter.label.text() == f"Context {tokens:,} / 2,048 tokens"
    assert meter.label.property("over") == "" and meter.bar.property("over") == ""


def test_the_policy_changed_in_settings_changes_the_words_at_once(meter):
    meter.show_count(1800, 1536, 2048, "")
    meter.set_policy("refuse")
    assert meter.label.text().endswith(": too long")
    meter.set_policy("keep_system")
    assert meter.label.text().endswith(": earliest turns left out")


def test_a_count_that_could_not_be_made_drops_the_warning(meter):
    meter.set_policy("refuse")
    meter.show_count(1800, 1536, 2048, "")
    meter.show_count(-1, 1536, 2048, "no model is loaded")
    assert meter.label.text() == "Context: not counted (no model is loaded)"
    assert meter.label.property("over") == "" and meter.bar.property("over") == ""
