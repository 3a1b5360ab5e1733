"""A load that fails leaves no model loaded (the worker lets the one before it go first), and the picker and
the model manager say so. The picker kept the model before it, "in memory" with Unload enabled, while the
status bar said "No model loaded" and Send was off (found in a real-window session: Use of a server's
model that answered 503)."""

import json
import shutil

import pytest

from app.state.settings import Settings
from tests.app_support import make_window
from tests.paths import DEMO_NVFP4


def broken_copy(tmp_path):
    folder = shutil.copytree(DEMO_NVFP4, tmp_path / "broken")
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = -1
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


FAILING = {
    "a folder that is gone": lambda tmp_path: str(tmp_path / "gone"),
    "a checkpoint that does not check out": broken_copy,
    "a server that does not answer": lambda tmp_path: "remote+http://127.0.0.1:9/v1#demo",
}


@pytest.mark.parametrize("case", list(FAILING))
def test_a_failed_load_leaves_the_picker_saying_no_model(qtbot, tmp_path, case):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=12))
    try:
        assert w.picker.unload.isEnabled() and w.models.active  # the demo, loaded
        with qtbot.waitSignal(w.controller.sig_model_failed, timeout=120000):
            w.controller.load_model(FAILING[case](tmp_path))
        assert w.controller.loaded is None and not w.send_button.isEnabled()
        assert w.picker.combo.currentText() == "No model loaded" and not w.picker.unload.isEnabled()
        assert w.models.active == ""  # the manager's "active (in use)" goes too
        assert w.notes.error.text().startswith("The model could not be loaded")
    finally:
        w.close()
