"""The widgets on their own, offscreen: the depth slider (stops, jumps, labels under ticks,
focus ring), the live strip (elision, the sparkline's scale) and the elided label."""


import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QWidget

from app.widgets.depth_slider import DepthSlider, slider_stops
from app.widgets.elided_label import ElidedLabel
from app.widgets.live_strip import LiveStrip
from tests.app_support import strip_token
from tests.paths import PROBES


def demo_stops(loaded=None):
    from runtime.depth import depth_levels

    return depth_levels(["0.5M", "1.0M", "1.5M"], 96, loaded=loaded)


@pytest.fixture
def slider(qtbot):
    s = DepthSlider()
    qtbot.addWidget(s)
    s.resize(520, s.sizeHint().height())
    s.set_stops(slider_stops(demo_stops(), {}), "Off")
    s.show()
    qtbot.waitExposed(s)
    return s


def test_the_slider_disables_stops_from_a_recorded_small_gpu_probe(qtbot):
    from runtime.depth import depth_levels, usable_level
    from runtime.store.catalog import load_catalog
    from runtime.store.hardware import load_probe
    from runtime.store.planner import make_plan

    catalog = load_catalog()
    plan = make_plan(load_probe(PROBES / "rtx4070.json"), catalog)
    nvfp4 = plan.variant("star-elastic-30b-nvfp4")
    names = [f.name for f in reversed(nvfp4.submodels)]  # smallest first
    loaded = {f.name for f in nvfp4.submodels if f.verdict != "does not fit"}
    assert loaded == {"12B"}
    stops = depth_levels(names, 32768, loaded=loaded)
    reasons = {f.name: f.reason for f in nvfp4.submodels}
    slider = DepthSlider()
    qtbot.addWidget(slider)
    chosen = usable_level(stops, "Max").name  # Max is unavailable: the depth's owner takes the nearest below
    slider.set_stops(slider_stops(stops, reasons), chosen)
    enabled = {s.name: s.enabled for s in slider.stops}
    assert enabled == {"Off": True, "Quick": True, "Balanced": False, "Deep": False, "Max": False, "Auto": True}
    assert slider.selected == chosen == "Quick"
    labels = slider.labels
    assert labels[4].toolTip().startswith("Unavailable: 30B does not fit: needs")
    assert not labels[2].isEnabled() and "23B does not fit" in labels[2].toolTip()
    slider.slider.setValue(3)  # the user drags onto Deep: it snaps back and says why
    assert slider.selected == "Quick" and "23B does not fit" in slider.detail.text()
    slider.jump(4)  # a click on Max's label: the same
    assert slider.selected == "Quick" and "30B does not fit" in slider.detail.text()


def test_each_stop_label_shows_its_thinking_budget(slider):
    stops = demo_stops()  # budgets are fractions of the ceiling (96 tokens here)
    for label, stop in zip(slider.labels, stops):
        if stop.think:
            assert f"{stop.think} ≤{stop.budget}" in label.text()
        else:
            assert "none" in label.text()
    assert [s.budget for s in stops] == [0, 19, 24, 48, 96, 48]  # Quick: 0.2 of 96, rounded
    slider.jump(2)
    assert slider.detail.text().startswith("Balanced · 1.0M thinks ≤24 tokens")


def test_clicking_a_label_jumps_straight_to_its_stop(qtbot, slider):
    seen = []
    slider.sig_changed.connect(seen.append)
    qtbot.mouseClick(slider.labels[3], Qt.MouseButton.LeftButton)
    assert slider.selected == "Deep" and seen == ["Deep"]  # not one step ("Quick")
    qtbot.mouseClick(slider.labels[0], Qt.MouseButton.LeftButton)
    assert slider.selected == "Off" and seen == ["Deep", "Off"]


def test_clicking_the_groove_jumps_too(qtbot, slider):
    s = slider.slider
    qtbot.mouseClick(s, Qt.MouseButton.LeftButton, pos=QPoint(round(s.tick_x(4)), s.height() // 2))
    assert slider.selected == "Max"
    qtbot.mouseClick(s, Qt.MouseButton.LeftButton, pos=QPoint(round(s.tick_x(1)) + 3, s.height() // 2))
    assert slider.selected == "Quick"


@pytest.mark.parametrize("width", [300, 520, 900])
def test_labels_sit_under_their_ticks(qtbot, slider, width):
    slider.resize(width, slider.height())
    qtbot.wait(10)
    slider.ticks.place()
    for i, label in enumerate(slider.labels):
        tick = slider.slider.mapTo(slider, QPoint(round(slider.slider.tick_x(i)), 0)).x()
        geo = label.geometry().translated(slider.ticks.pos())
        assert geo.left() <= tick <= geo.right(), (i, tick, geo)  # the tick is over its label
        assert geo.left() >= 0 and geo.right() < slider.width()
        if 0 < i < len(slider.labels) - 1:
            # the inner labels are centred on it (QRect.center floors, the tick position rounds: 2 px)
            assert abs(geo.center().x() - tick) <= 2
    for a, b in zip(slider.labels, slider.labels[1:]):
        assert a.geometry().right() < b.geometry().left()  # none overlap


def test_narrow_slider_drops_the_budget_line_but_keeps_names(qtbot, slider):
    slider.resize(slider.ticks.minimumSizeHint().width(), slider.height())
    qtbot.wait(10)
    slider.ticks.place()
    assert [label.text() for label in slider.labels] == ["Off", "Quick", "Balanced", "Deep", "Max", "Auto"]
    assert "≤24" in slider.labels[2].toolTip()
    slider.resize(900, slider.height())
    qtbot.wait(10)
    assert "≤24" in slider.labels[2].text()


def test_the_handle_shows_a_focus_ring(qtbot, slider):
    s = slider.slider
    slider.window().activateWindow()
    s.clearFocus()
    qtbot.wait(10)
    without = s.grab().toImage()
    s.setFocus()
    qtbot.waitUntil(s.hasFocus)
    with_focus = s.grab().toImage()
    handle = s._rect(s.style().SubControl.SC_SliderHandle)
    accent = s.palette().highlight().color()
    ring = [with_focus.pixelColor(x, handle.center().y()) for x in range(handle.left(), handle.left() + 4)]
    assert any(abs(c.green() - accent.green()) < 40 and abs(c.red() - accent.red()) < 40 for c in ring)
    assert without != with_focus


def test_elided_label_asks_for_its_text_accepts_less_and_tooltips_the_rest(qtbot):
    host = QWidget()
    qtbot.addWidget(host)
    label = ElidedLabel("NVFP4 weights, dequantize + matmul (CPU reference)", "The compute path", min_chars=3)
    label.setParent(host)
    host.show()
    full = label.sizeHint().width()
    assert label.minimumSizeHint().width() < full / 4
    label.resize(full, 20)
    assert not label.is_elided() and label.toolTip() == "The compute path"
    label.resize(full // 3, 20)
    assert label.is_elided() and label.text().startswith("NVFP4 weights")
    assert label.toolTip().startswith("NVFP4 weights, dequantize + matmul (CPU reference)")
    label.setText("short")
    assert label.sizeHint().width() < full and label.minimumSizeHint().width() <= label.sizeHint().width()


def test_live_strip_width_does_not_follow_its_text(qtbot):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.set_submodels(["0.5M", "1.0M", "1.5M"])
    strip.set_path("CPU")
    strip.on_switch("0.5M", "1.5M", 1, 1.0)
    strip.set_memory("RAM 1 MB")
    before = strip.minimumSizeHint().width()
    strip.set_path("CPU demo · NVFP4 weights, dequantize + matmul (CPU reference) " * 3)
    strip.on_switch("0.5M", "1.5M", 12345, 6789.0)
    strip.set_memory("VRAM 123.4 GB · RAM 123456 MB")
    assert strip.minimumSizeHint().width() <= before + 4  # a few characters each, whatever the text
    strip.resize(700, 40)
    strip.show()
    qtbot.waitExposed(strip)
    # the live numbers keep their room; the long texts are the ones that elide
    assert not strip.badge.is_elided() and not strip.ttft.is_elided() and not strip.speed.is_elided()
    assert strip.path.is_elided() and "CPU reference" in strip.path.toolTip()


def test_sparkline_labels_its_scale_maximum(qtbot):
    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.set_submodels(["0.5M", "1.5M"])
    strip.reset("0.5M", "thinking")
    assert strip.badge.text() == "0.5M thinking"  # before the first token: the one about to think
    strip_token(strip, "0.5M", "thinking", 9000.0, 9000.0, 0.0)  # the first token waits for the prefill
    assert strip.sparkline.scale_label() == "max 9000 ms"
    for ms in (40.0, 5421.0, 60.0):
        strip_token(strip, "0.5M", "thinking", ms, 9000.0, 10.0)
    assert strip.sparkline.scale_label() == "max 5421 ms"  # the rest are not flattened by the prefill
    assert len(strip.sparkline.points) == 4  # it is still drawn (clipped to the top)
    assert "max" in strip.sparkline.toolTip()


def test_the_labels_stay_under_their_ticks_through_resizes_a_splitter_and_a_font_change(qtbot):
    from PySide6.QtGui import QFont
    from PySide6.QtWidgets import QApplication, QSplitter, QTextEdit

    top = QSplitter()
    qtbot.addWidget(top)
    top.addWidget(QTextEdit())
    s = DepthSlider()
    top.addWidget(s)
    s.set_stops(slider_stops(demo_stops(), {}), "Off")
    top.resize(900, 300)
    top.show()
    qtbot.waitExposed(top)

    def drift():  # how far each inner label's centre is from its tick (the end ones sit inside the edges)
        origin = s.ticks.mapFromGlobal(s.slider.mapToGlobal(QPoint(0, 0))).x()
        return [abs(label.geometry().center().x() - (origin + s.slider.tick_x(i)))
                for i, label in enumerate(s.labels)][1:-1]

    app, font = QApplication.instance(), QApplication.font()
    steps = [lambda: top.resize(1200, 300), lambda: top.resize(700, 300), lambda: top.resize(500, 300),
             lambda: top.resize(1000, 300), lambda: top.setSizes([100, 800]),
             lambda: app.setFont(QFont(font.family(), 20)), lambda: top.resize(1200, 300),
             lambda: app.setFont(font), lambda: top.resize(700, 300)]
    try:
        for step in steps:
            step()
            app.processEvents()
            assert max(drift()) <= 3, drift()
    finally:
        app.setFont(font)
