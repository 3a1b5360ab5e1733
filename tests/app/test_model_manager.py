"""The model manager: its controller (downloads, tasks, the plan) outlives the dialog, progress
crosses to the GUI at about 10 Hz, and the dialog shows what the controller knows."""

import shutil
from pathlib import Path

import pytest

from app.model_texts import hardware_text, verify_text
from app.models_controller import ModelsController, actions
from app.widgets.model_manager import STATUS
from app.workers import PROGRESS_INTERVAL_S, DownloadWorker, Throttle
from tests.app_support import open_dialog
from tests.paths import PROBES, ROOT

REPO = "nvidia/NVIDIA-Nemotron-Labs-3-Elastic-30B-A3B-NVFP4"
KEY = "star-elastic-30b-nvfp4"


@pytest.fixture
def hub(tmp_path, serve_hub):
    """A stand-in hub serving the demo checkpoint as the NVFP4 30B repo; models go under tmp_path."""
    source = shutil.copytree(ROOT / "assets" / "demo-nvfp4", tmp_path / "repo")
    stub = serve_hub({REPO: source})
    stub.source = source
    return stub


@pytest.fixture
def models(qtbot):
    controller = ModelsController(probe_file=str(PROBES / "rtx5090.json"))
    yield controller
    controller.shutdown()


@pytest.mark.slow
def test_the_model_manager_drives_a_download(qtbot, hub, models, tmp_path):
    hub.faults["model.safetensors"] = {"throttle": 0.03}
    manager = open_dialog(qtbot, models)
    assert "RTX 5090" in manager.hardware.text()
    manager.select(KEY)
    row = manager.row()
    assert row.status == "not downloaded" and [f.verdict for f in row.fits] == ["fits"] * 3
    assert manager.buttons["Download"].isEnabled() and not manager.buttons["Use"].isEnabled()
    states = []
    with qtbot.waitSignal(manager.sig_changed, timeout=60000):
        manager.buttons["Download"].click()
        qtbot.waitUntil(lambda: "DOWNLOADING" in manager.progress_text.text(), timeout=30000)
        states.append(manager.progress_text.text())
        assert manager.buttons["Pause"].isEnabled() and not manager.buttons["Download"].isEnabled()
    assert "complete and verified" in manager.progress_text.text()
    qtbot.waitUntil(lambda: manager.row(KEY) is not None and manager.row(KEY).status == "ready", timeout=30000)
    dest = tmp_path / "home" / "models" / REPO.replace("/", "--")
    assert (dest / "model.safetensors").read_bytes() == (hub.source / "model.safetensors").read_bytes()
    assert "MiB/s" in states[0]
    manager.select(KEY)
    with qtbot.waitSignal(manager.sig_use, timeout=5000) as used:
        manager.buttons["Use"].click()
    assert used.args[0] == str(dest)
    assert manager.row(KEY).status == "active" and not manager.buttons["Use"].isEnabled()


@pytest.mark.slow
def test_progress_reaches_the_gui_about_ten_times_a_second(qtbot, hub, monkeypatch):
    """Many small reads; only about 10 reports a second cross to the GUI thread."""
    import time

    from PySide6.QtCore import QMetaObject, Qt

    import runtime.store.download.transfer
    from app.workers import start_in_thread, stop_thread
    from runtime.store.model_store import download_dir

    monkeypatch.setattr(runtime.store.download.transfer, "READ", 16 << 10)  # many small reads: many reports
    (hub.source / "big.bin").write_bytes(bytes(range(256)) * (32 << 12))  # 32 MiB
    hub.faults["big.bin"] = {"throttle": 0.004}  # about 2 s for the file
    worker = DownloadWorker(REPO, download_dir(REPO))
    received, finished = [], []  # appended in the download's thread, where the emissions happen
    worker.sig_progress.connect(lambda p: received.append(p), Qt.ConnectionType.DirectConnection)
    worker.sig_finished.connect(lambda *a: finished.append(a), Qt.ConnectionType.DirectConnection)
    thread = start_in_thread(worker, "download")
    started = time.monotonic()
    QMetaObject.invokeMethod(worker, "run", Qt.ConnectionType.QueuedConnection)
    qtbot.waitUntil(lambda: bool(finished), timeout=60000)
    elapsed = time.monotonic() - started
    stop_thread(thread)
    assert finished[0][0].state == "done" and not finished[0][1]
    states = [p.state for p in received]
    changes = 1 + sum(a != b for a, b in zip(states, states[1:]))
    # The downloader itself reports at most every 0.1 s (its CLI prints them too); whatever the
    # source, at most one emission per interval crosses to the GUI, plus one at each change of state.
    assert len(received) <= elapsed / PROGRESS_INTERVAL_S + changes + 1
    downloading = [p for p in received if p.state == "downloading"]
    assert len(downloading) >= 3 and downloading[-1].done_bytes > downloading[0].done_bytes


def test_throttle_passes_changes_of_state_at_once():
    now = [0.0]
    t = Throttle(0.1, clock=lambda: now[0])
    assert t.ready("downloading")
    now[0] = 0.05
    assert not t.ready("downloading")
    assert t.ready("verifying")  # a new state is never held back
    now[0] = 0.16
    assert t.ready("verifying")
    now[0] = 0.2
    assert not t.ready("verifying")


@pytest.mark.slow
def test_closing_and_reopening_the_dialog_keeps_the_download(qtbot, hub, models):
    # held before its last piece until the second dialog has looked (however slow the machine)
    hub.faults["model.safetensors"] = {"throttle": 0.01, "hold": True}
    first = open_dialog(qtbot, models)
    first.select(KEY)
    first.buttons["Download"].click()
    qtbot.waitUntil(lambda: "DOWNLOADING" in first.progress_text.text() and first.progress.value() > 0,
                    timeout=30000)
    first.close()
    first.deleteLater()
    qtbot.wait(50)  # the dialog is gone; the download is not
    worker, thread = models.downloads[KEY]
    assert thread.isRunning()
    at_close = models.progress[KEY].done_bytes
    second = open_dialog(qtbot, models)
    # the new dialog shows the download at once, from what the controller kept
    assert second.progress.isVisible() and "DOWNLOADING" in second.progress_text.text()
    assert second.row(KEY).status.startswith("downloading")
    second.select(KEY)
    assert second.buttons["Pause"].isEnabled()
    with qtbot.waitSignal(models.sig_changed, timeout=60000):
        hub.faults["model.safetensors"] = {}  # the link lets the rest through
    assert models.progress[KEY].state == "done" and models.progress[KEY].done_bytes > at_close
    assert "complete and verified" in second.progress_text.text()
    qtbot.waitUntil(lambda: second.row(KEY).status == "ready", timeout=30000)


def test_use_is_disabled_for_the_active_model(qtbot, models):
    from runtime.store.catalog import load_catalog

    demo = next(v for v in load_catalog().variants if v.bundled)
    models.set_active(str(demo.path))
    dialog = open_dialog(qtbot, models)
    dialog.select(demo.id)
    assert dialog.row().status == "active"
    assert not dialog.buttons["Use"].isEnabled() and dialog.buttons["Verify"].isEnabled()
    assert "in use" in dialog.table.item(dialog.table.currentRow(), STATUS).text()
    with qtbot.assertNotEmitted(models.sig_use):
        models.use(demo.id)  # asked anyway (a stale click): nothing reloads
    models.set_active("/somewhere/else")
    assert dialog.row(demo.id).status == "ready" and dialog.buttons["Use"].isEnabled()


def test_an_imported_checkpoint_is_planned_from_its_own_files(qtbot, models, tmp_path, home):
    folder = shutil.copytree(ROOT / "assets" / "demo-nvfp4", tmp_path / "my-model")
    dialog = open_dialog(qtbot, models)
    with qtbot.waitSignal(models.sig_changed, timeout=30000):
        dialog.import_folder(str(folder))
    qtbot.waitUntil(lambda: dialog.row("my-model") is not None and not models.refreshing, timeout=30000)
    row = dialog.row("my-model")
    assert row.path_text == "NVFP4 native matmul"  # an RTX 5090 runs NVFP4 natively
    assert [f.verdict for f in row.fits] == ["fits"] * 3
    i = dialog.rows.index(row)
    assert dialog.table.item(i, 3).text() == "NVFP4 native matmul"
    assert "fits" in dialog.table.item(i, 4).text() and dialog.table.item(i, 4).toolTip().startswith(row.fits[0].name)
    dialog.select("my-model")
    assert dialog.buttons["Use"].isEnabled()
    # verify: no download record, so no hashes; it says so instead of "0 file hashes checked"
    with qtbot.waitSignal(models.sig_message, timeout=30000,
                          check_params_cb=lambda text: not text.startswith("Verifying")) as said:
        dialog.buttons["Verify"].click()
    assert "no download record" in said.args[0] and "0 file" not in said.args[0]


def test_long_model_names_elide_with_a_tooltip(qtbot, models):
    dialog = open_dialog(qtbot, models)
    dialog.resize(700, 400)
    assert not dialog.table.wordWrap() and dialog.table.textElideMode().name == "ElideMiddle"
    for i, r in enumerate(dialog.rows):
        assert dialog.table.item(i, 0).toolTip().startswith(r.title)


def test_texts_without_a_gpu_have_no_nested_brackets():
    from runtime.store.hardware import HardwareProbe

    hw = HardwareProbe((), 32 << 30, 16 << 30, 100 << 30, "no NVIDIA driver found (NVML Shared Library Not Found)")
    line = hardware_text(hw)
    assert line.startswith("No NVIDIA GPU: no NVIDIA driver found (NVML")
    depth, deepest = 0, 0
    for ch in line:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, depth)
    assert deepest == 1


def test_actions_for_each_kind_of_row(tmp_path):
    from app.models_controller import ModelRow

    def row(status, folder=tmp_path, repo="r", name="m", fits=()):
        return ModelRow("k", "t", "NVFP4", "1 GB", "p", fits, repo, folder, name, status)

    assert actions(row("not downloaded", folder=None, name=None), False)["Download"]
    assert not actions(row("active"), False)["Use"] and actions(row("ready"), False)["Use"]
    busy = actions(row("downloading 40%"), True)
    assert busy["Pause"] and busy["Cancel"] and not busy["Delete"] and not busy["Resume"]
    assert not actions(row("ready", name="demo"), False)["Delete"]
    assert actions(None, False) == {**{k: False for k in actions(None, False)}, "Import folder…": True,
                                    "Add server…": True, "Refresh": True}


def test_verify_text():
    from runtime.store.model_store import VerifyReport

    assert "3 file hashes match" in verify_text(VerifyReport(Path("/m/x"), True, 3, ()))
    assert verify_text(VerifyReport(Path("/m/x"), False, 1, ("a is missing",))) == "Problems: a is missing"


@pytest.mark.parametrize("checked", [0, 3])
@pytest.mark.parametrize("name, said", [("demo-2", "demo-2"), ("", "demo")])
def test_verify_says_the_listed_name(checked, name, said):
    """A folder "demo" imported as "demo-2" was verified as "demo: its config ... check out" while the table
    and the picker call it "demo-2" (found in a real-window session)."""
    from runtime.store.model_store import VerifyReport

    assert verify_text(VerifyReport(Path("/m/demo"), True, checked, ()), name).startswith(f"{said}:" if not checked
                                                                                          else f"{said} is intact")


def test_verify_of_an_import_named_apart_from_its_folder_says_its_name(qtbot, models, tmp_path, home):
    taken = shutil.copytree(ROOT / "assets" / "demo-nvfp4", tmp_path / "a" / "sums")
    folder = shutil.copytree(ROOT / "assets" / "demo-nvfp4", tmp_path / "b" / "sums")
    dialog = open_dialog(qtbot, models)
    for f in (taken, folder):
        with qtbot.waitSignal(models.sig_changed, timeout=30000):
            dialog.import_folder(str(f))
        qtbot.waitUntil(lambda: not models.refreshing, timeout=30000)
    qtbot.waitUntil(lambda: dialog.row("sums-2") is not None, timeout=30000)
    dialog.select("sums-2")
    with qtbot.waitSignal(models.sig_message, timeout=30000,
                          check_params_cb=lambda text: not text.startswith("Verifying")) as said:
        dialog.buttons["Verify"].click()
    assert said.args[0].startswith("sums-2: its config"), said.args[0]


def test_a_card_too_small_for_the_parent_gets_experts_in_ram(qtbot):
    """On a 12 GB card the 30B does not fit: the dialog says which placement of routed experts in RAM runs
    every submodel, and Use loads the parent with it (not the 12B alone)."""
    from app.workers import EngineWorker
    from runtime.placement import ExpertPlacement
    from runtime.store.catalog import load_catalog
    from runtime.store.hardware import load_probe
    from runtime.store.planner import make_plan

    controller = ModelsController(probe_file=str(PROBES / "rtx4070.json"))
    try:
        manager = open_dialog(qtbot, controller)
        manager.select(KEY)
        row = manager.row()
        assert [f.verdict for f in row.fits][0] == "does not fit" and row.resident == ""
        assert row.path_text.endswith("; routed experts in RAM (nested:12B)")
        assert row.placement.startswith("Routed experts in RAM, --cpu-experts nested:12B: 12B's experts on the GPU")
        assert "expected 30B 42 tok/s" in row.placement
        i = next(i for i in range(manager.table.rowCount()) if manager.rows[i].key == KEY)
        assert row.placement in manager.table.item(i, 3).toolTip()
    finally:
        controller.shutdown()
    hw = load_probe(PROBES / "rtx4070.json")
    plan = make_plan(hw, load_catalog(), 8192).variant(KEY)
    assert EngineWorker._largest_that_fits((hw, plan)) == ("", ExpertPlacement(None, "12B"))
    busy = load_probe(PROBES / "rtx4090_busy.json")
    no_bandwidths = make_plan(busy, load_catalog(), 8192).variant(KEY)
    assert EngineWorker._largest_that_fits((busy, no_bandwidths))[1] == ExpertPlacement.parse(no_bandwidths.placement)
