"""Closing the demo banner is remembered across launches (issue 38, item 7): it returns only when what it
says changes."""

import pytest

from app.demo_banner import banner_key
from app.state.settings import Settings
from tests.app_support import make_window


def launch(qtbot, data):
    return make_window(qtbot, data, Settings.load(data / "settings.json"))


@pytest.mark.slow
def test_a_closed_demo_banner_stays_closed_at_the_next_launch_until_its_text_changes(qtbot, tmp_path):
    data = tmp_path / "data"
    w = launch(qtbot, data)
    assert w.banner.isVisible()
    w.banner.close_button.click()
    assert not w.banner.isVisible()
    text = w.banner.text()
    w.close()

    again = launch(qtbot, data)  # read back from the settings file, as a new launch does
    assert not again.banner.isVisible() and again.banner.text() == text
    again.close()

    changed = Settings.load(data / "settings.json")
    changed.demo_banner_closed = banner_key(text + " (an older demo's wording)")
    changed.save(data / "settings.json")
    third = launch(qtbot, data)  # what the banner says differs from what was closed: it shows again
    assert third.banner.isVisible()
    third.close()


@pytest.mark.parametrize("value,kept", [("0123456789abcdef", True), ("", True), (12, False), ("x" * 65, False)])
def test_the_closed_banner_key_is_checked_like_every_setting(tmp_path, value, kept):
    import json

    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"demo_banner_closed": value, "theme": "dark"}))
    s = Settings.load(path)
    assert s.theme == "dark"
    if kept:
        assert s.demo_banner_closed == value and not s.problem
    else:
        assert s.demo_banner_closed == "" and "demo_banner_closed" in s.problem
