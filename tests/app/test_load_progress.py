"""A model load has a face: progress while it reads (bytes of the total, the shard, time left), Send
and the depth slider disabled with the reason, and Cancel, which stops it between tensors."""

import pytest

from app.main_window import MainWindow
from app.state.settings import Settings
from app.widgets.load_progress import LoadProgress
from runtime.checkpoint.reader import LoadProgress as Progress
from tools.real_layout import Options, generate


@pytest.fixture(scope="module")
def real_layout(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("layout") / "nvfp4", Options("nvfp4", "tiny"))


class CancelAfter:
    """Stands in for the worker's cancel flag: set once the loader has asked `n` times."""

    def __init__(self, n):
        self.n, self.asked = n, 0

    def clear(self):
        pass

    def set(self):
        self.n = 0

    def is_set(self):
        self.asked += 1
        return self.asked > self.n


def test_the_widget_shows_progress_and_asks_to_cancel(qtbot):
    w = LoadProgress()
    qtbot.addWidget(w)
    w.start("big-model")
    assert not w.isHidden()
    w.update_progress(Progress(3_200_000_000, 18_000_000_000, 900, 24147, "model-00001-of-00005.safetensors", 1, 5,
                               12.0, 55.0))
    assert w.bar.value() == 178 and "3.0 of 16.8 GiB (18%), shard 1 of 5, about 55 s left" in w.text.text()
    with qtbot.waitSignal(w.sig_cancel):
        w.cancel.click()
    assert not w.cancel.isEnabled()
    w.finish()
    assert w.isHidden()


def test_a_long_progress_line_does_not_widen_the_window(qtbot):
    """A window widened by its load line stays wide after the load (it crept past an 800 px screen):
    the line asks for no more width when it grows, and is kept whole (shown elided)."""
    w = LoadProgress()
    qtbot.addWidget(w)
    w.start("x" * 40)
    narrow = w.minimumSizeHint().width()
    long_name = "a-model-folder-with-a-very-long-name-" * 6
    w.start(long_name)
    w.update_progress(Progress(3_200_000_000, 18_000_000_000, 900, 24147, "model-00001-of-00005.safetensors", 1, 5,
                               12.0, 55.0))
    assert abs(w.minimumSizeHint().width() - narrow) <= 2 and narrow < 400
    assert long_name in w.text.text()  # whole, though shown elided


def test_loading_disables_send_and_the_slider_then_cancel_leaves_no_model(qtbot, tmp_path, real_layout):
    data = tmp_path / "data"
    data.mkdir()
    w = MainWindow(data, Settings(), data / "settings.json")  # starts on the demo
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.loaded is not None, timeout=180000)
    progress = []
    w.controller.sig_load_progress.connect(progress.append)
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=120000):
        w.model_panel.load(str(real_layout), "")
        assert not w.send_button.isEnabled() and not w.depth.isEnabled()
        assert "Waiting for nvfp4 to load" in w.send_button.toolTip() and not w.loading.isHidden()
    assert progress and progress[-1].fraction == 1.0
    assert w.send_button.isEnabled() and w.depth.isEnabled() and w.loading.isHidden()
    w.controller.worker.cancel_requested = CancelAfter(40)
    with qtbot.waitSignal(w.controller.sig_load_cancelled, timeout=120000):
        w.model_panel.load(str(real_layout), "")
    assert w.controller.worker.engine is None and w.loading.isHidden()
    assert not w.send_button.isEnabled() and "cancelled" in w.model_line.text()
    w.close()
