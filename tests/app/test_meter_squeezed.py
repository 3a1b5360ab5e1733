"""A squeezed context meter keeps its verdict whole: at font 15 it read "Context 58,432 / 8,192 tokens: t…"
(a real-window session), so "too long" itself could not be read; the count gives way first (it is in the
tooltip)."""

import pytest

from app.widgets.context_meter import ContextMeter, shorter_counts


@pytest.mark.parametrize("size", [11, 13, 15])
@pytest.mark.parametrize("policy,alone_fits,verdict", [("refuse", True, "too long"),
                                                      ("keep_system", False, "too long"),
                                                      ("keep_system", True, "left out"),
                                                      ("drop_oldest", True, "left out")])
def test_the_verdict_stays_whole_when_the_meter_is_squeezed(qtbot, themed, size, policy, alone_fits, verdict):
    themed("light", size)
    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.set_policy(policy)
    meter.show_count(58432, 7680, 8192, "", alone_fits)
    meter.resize(meter.minimumSizeHint().width(), meter.sizeHint().height())  # as narrow as it goes
    meter.show()
    qtbot.waitExposed(meter)
    assert meter.label.shown().endswith(verdict) and "…" not in meter.label.shown()
    assert meter.label.text().startswith("Context 58,432 / 8,192 tokens")  # the whole line in its tooltip
    assert meter.label.toolTip().startswith(meter.label.text())


@pytest.mark.parametrize("text,forms", [
    ("Context 120 / 8,192 tokens", ["120 / 8,192", "120"]),
    ("Context about 1,120 / 8,192 tokens (estimated)", ["about 1,120 / 8,192 (estimated)", "1,120"]),
    ("Context about 9,000 / 8,192 tokens (estimated): too long", ["about 9,000 / 8,192 (estimated): too long",
                                                                   "too long"]),
    ("Context 9,000 / 8,192 tokens: earliest turns left out", ["9,000 / 8,192: earliest turns left out",
                                                               "earliest turns left out", "left out"]),
    ("Context: not counted (no model is loaded)", ["Context: not counted", "Context…"]),
    ("Context: not counted", ["Context…"]),
])
def test_the_meters_shorter_forms(text, forms):
    assert shorter_counts(text) == forms
