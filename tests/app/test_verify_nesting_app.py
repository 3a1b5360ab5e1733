"""The app's side of nesting: the model manager's Verify nesting (a folder, a hub repo through the
stand-in, a permuted slice refused), the Nesting column, the check that ends a download of a
catalog variant whose family lists published slices (and what happens when the hub cannot be
reached), and a chat never starting on a depth whose thinker is only estimated.

Parents are random tiny checkpoints; slices are made from them by this project's `extract` (see
tests/runtime/store/test_nesting.py), damaged where a test needs a wrong one.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from app.models_controller import ModelsController
from app.widgets.model_manager import NESTING
from runtime.checkpoint.config import read_json
from runtime.checkpoint.extract import extract
from runtime.units import format_bytes
from tests.app_support import open_dialog
from tests.checkpoints import make_checkpoint
from tests.paths import PROBES, ROOT

PARENT_REPO, SLICE_REPO = "someone/Tiny-Elastic", "someone/Tiny-small"


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A random parent with its own elastic.json: submodels "mid" and "small" are declared."""
    return make_checkpoint("hybrid", tmp_path_factory.mktemp("nest-app") / "parent", seed=3)


@pytest.fixture
def models(qtbot, home, hub_online):
    controller = ModelsController(probe_file=str(PROBES / "rtx5090.json"))
    yield controller
    controller.shutdown()


@pytest.fixture
def imported(parent, tmp_path, home):
    """A private copy of the parent, imported into the model store as "parent"."""
    from runtime.store.model_store import import_folder

    folder = shutil.copytree(parent, tmp_path / "parent")
    import_folder(folder, "parent")
    return folder




def states(manager, key) -> dict[str, str]:
    return {f.name: f.state for f in manager.row(key).fits}


def check(qtbot, models, start) -> str:
    """Runs `start()` and waits for the nesting check's last line (the verdict)."""
    with qtbot.waitSignal(models.sig_nesting, timeout=120000, check_params_cb=lambda key, line, running: not running) \
            as finished:
        start()
    return finished.args[1]


def settled(qtbot, manager, models) -> None:
    """The refresh a finished check starts has landed."""
    qtbot.waitUntil(lambda: not models.refreshing, timeout=60000)


def swap_experts(folder: Path) -> None:
    """Experts 0 and 2 of layer 1 trade places: same shapes, another order."""
    path = folder / "model.safetensors"
    t = load_file(str(path))
    layer = "backbone.layers.1.mixer."
    for part in ("up_proj.weight", "down_proj.weight"):
        a, b = layer + f"experts.0.{part}", layer + f"experts.2.{part}"
        t[a], t[b] = t[b].clone(), t[a].clone()
    for name in ("gate.e_score_correction_bias", "gate.weight"):
        w = t[layer + name]
        w[[0, 2]] = w[[2, 0]].clone()
    save_file(t, str(path), metadata={"format": "pt"})


@pytest.mark.slow
def test_verify_nesting_proves_an_extracted_slice_and_its_state_turns_verified(qtbot, models, imported, parent,
                                                                                tmp_path):
    piece = extract(parent, "small", tmp_path / "slice-small")
    manager = open_dialog(qtbot, models)
    manager.select("parent")
    assert states(manager, "parent") == {"full": "verified", "mid": "declared", "small": "declared"}
    i = manager.rows.index(manager.row("parent"))
    cell = manager.table.item(i, NESTING)
    assert cell.text() == "declared" and "Verify nesting" in cell.toolTip()
    assert manager.buttons["Verify nesting…"].isEnabled()
    manager.buttons["Verify nesting…"].click()
    dialog = manager.nesting_dialog
    assert dialog is not None and dialog.isVisible() and dialog.slice.count() == 0  # no catalog family
    dialog.slice.setEditText(str(piece))
    line = check(qtbot, models, dialog.verify_button.click)
    assert line.startswith("Verified: small nests in this checkpoint") and " read)" in line, line
    assert dialog.verdict.text() == line and dialog.verify_button.isEnabled() and not dialog.busy.isVisible()
    settled(qtbot, manager, models)
    assert states(manager, "parent") == {"full": "verified", "mid": "declared", "small": "verified"}
    cell = manager.table.item(i, NESTING)
    assert cell.text() == "1 of 2 verified"
    assert "small: verified" in cell.toolTip() and "mid: declared" in cell.toolTip()
    entry = json.loads((imported / "elastic.json").read_text())["submodels"][-1]
    assert entry["name"] == "small" and entry["verified"]["path"] == str(piece.resolve())


def test_a_permuted_slice_is_refused_with_the_tensor_named_and_nothing_written(qtbot, models, imported, parent,
                                                                               tmp_path):
    piece = extract(parent, "small", tmp_path / "slice-small")
    swap_experts(piece)
    before = (imported / "elastic.json").read_bytes()
    manager = open_dialog(qtbot, models)
    manager.select("parent")
    dialog = manager.verify_nesting()
    dialog.slice.setEditText(str(piece))
    line = check(qtbot, models, dialog.verify_button.click)
    assert line.startswith("Refused:") and "backbone.layers.1.mixer.gate" in line and "Nothing was written" in line
    settled(qtbot, manager, models)
    assert (imported / "elastic.json").read_bytes() == before
    assert states(manager, "parent")["small"] == "declared"


@pytest.mark.slow
def test_a_hub_slice_is_read_by_ranges_and_the_bytes_are_counted(qtbot, models, imported, parent, tmp_path,
                                                                 serve_hub, monkeypatch):
    from runtime.store.nesting.tensor_source import TensorSource
    from tests.hub_stub import COMMIT

    monkeypatch.setattr(TensorSource, "GAP", 0)  # tiny files: merging neighbours would read them whole
    piece = extract(parent, "mid", tmp_path / "slice-mid")
    stub = serve_hub({SLICE_REPO: piece})
    manager = open_dialog(qtbot, models)
    line = check(qtbot, models, lambda: models.verify_nesting("parent", SLICE_REPO))
    served = sum(r["sent"] for r in stub.requests)
    assert line.startswith("Verified: mid nests") and f"{format_bytes(served)} of them from the hub" in line, line
    weights = (piece / "model.safetensors").stat().st_size
    ranged = [r for r in stub.requests if r["path"] == "model.safetensors"]
    assert ranged and all(r["status"] == 206 for r in ranged) and sum(r["sent"] for r in ranged) < weights / 2
    settled(qtbot, manager, models)
    assert states(manager, "parent")["mid"] == "verified"
    entry = next(e for e in json.loads((imported / "elastic.json").read_text())["submodels"] if e["name"] == "mid")
    assert entry["verified"]["repo"] == SLICE_REPO and entry["verified"]["revision"] == COMMIT


# ------------------------------------------------------------------ after a download


@pytest.fixture
def tiny_catalog(parent, tmp_path, monkeypatch):
    """The real catalog plus a family built on the random parent, whose widths are estimates (as the
    official repos' are), with one published slice, and a variant to download it from."""
    from runtime.store import catalog

    data = json.loads(catalog.CATALOG.read_text())
    table = json.loads((parent / "elastic.json").read_text())
    data["families"]["tiny"] = {
        "title": "Tiny elastic", "config": read_json(parent / "config.json"),  # decodes its Infinity
        "elastic": {**table, "max_thinking_tokens": 64},
        "slices": [{"repo": SLICE_REPO, "submodel": "small", "about": "made by extract"}]}
    data["variants"].insert(0, {
        "id": "tiny-bf16", "family": "tiny", "repo": PARENT_REPO, "format": "BF16", "approx_size_bytes": 200000,
        "licence": {"name": "test"}, "fast_path": {"label": "BF16 matmul", "min_compute_capability": [8, 0]},
        "fallback_path": "BF16 matmul"})
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    # every caller (planner, store, tables) reads the catalog through load_catalog's default path
    monkeypatch.setattr(catalog.load_catalog, "__defaults__", (path,))
    served = shutil.copytree(parent, tmp_path / "served-parent")
    (served / "elastic.json").unlink()  # like NVIDIA's repos: the widths come from the catalog
    return served


def download(qtbot, manager, models, key="tiny-bf16") -> str:
    manager.select(key)
    assert manager.buttons["Download"].isEnabled()
    return check(qtbot, models, manager.buttons["Download"].click)


@pytest.mark.slow
def test_a_download_ends_by_verifying_against_the_catalog_slices(qtbot, models, parent, tiny_catalog, home,
                                                                 tmp_path, serve_hub):
    piece = extract(parent, "small", tmp_path / "slice-small")
    serve_hub({PARENT_REPO: tiny_catalog, SLICE_REPO: piece})
    manager = open_dialog(qtbot, models)
    assert states(manager, "tiny-bf16") == {"full": "verified", "mid": "estimated", "small": "estimated"}
    line = download(qtbot, manager, models)
    assert line.startswith("Download complete and verified. Verified: small nests"), line
    settled(qtbot, manager, models)
    row = manager.row("tiny-bf16")
    assert row.status == "ready" and row.slices == (SLICE_REPO,)
    assert states(manager, "tiny-bf16") == {"full": "verified", "mid": "estimated", "small": "verified"}
    # the estimate that was not checked is kept, still estimated, and so is the thinking ceiling
    written = json.loads((row.folder / "elastic.json").read_text())
    assert written["max_thinking_tokens"] == 64
    assert [e["name"] for e in written["submodels"]] == ["full", "mid", "small"]
    assert "estimated" in written["submodels"][1] and written["submodels"][2]["verified"]["repo"] == SLICE_REPO


@pytest.mark.slow
def test_an_unreachable_hub_after_a_download_is_one_line_and_changes_nothing(qtbot, models, tiny_catalog, home,
                                                                             serve_hub, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    serve_hub({PARENT_REPO: tiny_catalog})
    manager = open_dialog(qtbot, models)
    # the download is done (sig_changed comes first); the hub goes away before its nesting check
    models.sig_changed.connect(lambda: monkeypatch.setenv("HF_ENDPOINT", dead))
    line = download(qtbot, manager, models)
    assert line.startswith(f"Download complete and verified. Nesting not checked against {SLICE_REPO}: cannot reach "
                           f"{dead}") and line.endswith("The submodels' states are unchanged."), line
    assert "\n" not in line
    settled(qtbot, manager, models)
    row = manager.row("tiny-bf16")
    assert row.status == "ready" and not (row.folder / "elastic.json").exists()
    assert states(manager, "tiny-bf16") == {"full": "verified", "mid": "estimated", "small": "estimated"}


def test_the_demo_cannot_be_rewritten_and_a_running_check_can_be_cancelled(qtbot, models, imported, parent, tmp_path,
                                                                           monkeypatch):
    from runtime.store.catalog import load_catalog
    from runtime.store.nesting.tensor_source import FolderSource

    manager = open_dialog(qtbot, models)
    demo = next(v for v in load_catalog().variants if v.bundled)
    manager.select(demo.id)
    assert not manager.buttons["Verify nesting…"].isEnabled()  # the app's own files
    piece = extract(parent, "small", tmp_path / "slice-small")
    before = (imported / "elastic.json").read_bytes()
    # the first read of a weights file waits until the test has pressed cancel: no race either way
    entered, release, original = threading.Event(), threading.Event(), FolderSource._read

    def held(self, file, start, length):
        if not entered.is_set():
            entered.set()
            release.wait(60)
        return original(self, file, start, length)

    monkeypatch.setattr(FolderSource, "_read", held)
    with qtbot.waitSignal(models.sig_nesting, timeout=60000, check_params_cb=lambda key, line, running: not running) \
            as finished:
        models.verify_nesting("parent", str(piece))
        assert not models.actions("parent")["Verify nesting…"]  # one check at a time
        qtbot.waitUntil(entered.is_set, timeout=60000)
        models.cancel_nesting()
        release.set()
    assert finished.args[1] == "Nesting check cancelled; nothing was written."
    settled(qtbot, manager, models)
    assert (imported / "elastic.json").read_bytes() == before
    assert states(manager, "parent")["small"] == "declared" and models.actions("parent")["Verify nesting…"]


# ------------------------------------------------------------------ the chat's depth


@pytest.mark.slow
def test_a_chat_never_starts_on_a_depth_whose_thinker_is_estimated(qtbot, tmp_path):
    from app.controller import ChatController
    from app.state.settings import Settings
    from app.widgets.depth_slider import slider_stops

    demo = shutil.copytree(ROOT / "assets" / "demo-nvfp4", tmp_path / "demo")
    table = json.loads((demo / "elastic.json").read_text())
    middle = table["submodels"][1]["name"]
    table["submodels"][1]["estimated"] = "a test's estimate"  # as a slice check keeps an unchecked estimate
    (demo / "elastic.json").write_text(json.dumps(table))
    data = tmp_path / "data"
    data.mkdir()
    controller = ChatController(data, Settings(depth="Balanced"), data / "settings.json")
    notices = []
    controller.sig_notice.connect(notices.append)
    try:
        controller.chats.ensure()
        with qtbot.waitSignal(controller.sig_model_loaded, timeout=180000) as loaded:
            controller.load_model(str(demo), "", is_demo=True)
        levels = {s.name: s for s in loaded.args[0].levels}
        assert levels["Balanced"].think == middle and levels["Balanced"].estimated
        default = loaded.args[0].default_depth
        assert default != "Balanced" and not levels[default].estimated
        assert controller.depth.name == default and len(notices) == 1
        assert "not Balanced" in notices[0] and "estimated" in notices[0] and "\n" not in notices[0]
        shown = {s.name: s for s in slider_stops(loaded.args[0].levels, {})}
        assert "estimated" in shown["Balanced"].detail and "estimated" not in shown[default].detail
        # chosen on purpose, it stays for this chat; a new chat starts on the default again
        controller.set_depth("Balanced")
        controller.history.add_message(controller.chats.current, "user", "hi")
        controller.chats.new()
        assert controller.depth.name == default and len(notices) == 2
    finally:
        controller.shutdown()


def test_the_catalog_lists_its_published_slices_checked(tmp_path):
    from runtime.store.catalog import CATALOG, CatalogError, load_catalog

    family = load_catalog().families["star-elastic-30b"]
    assert [(s.repo, s.submodel) for s in family.slices] == [("DavidAU/NVIDIA-Nemotron-Labs-3-Elastic-12B-A2B", "12B")]
    for bad, says in (({"repo": "DavidAU/x", "submodel": "30B"}, "not one of the nested"),  # the parent itself
                      ({"repo": "../x", "submodel": "12B"}, "not a hub repo id"),
                      ({"repo": "DavidAU/x"}, "needs 'repo' and 'submodel'")):
        data = json.loads(CATALOG.read_text())
        data["families"]["star-elastic-30b"]["slices"] = [bad]
        path = tmp_path / "catalog.json"
        path.write_text(json.dumps(data))
        with pytest.raises(CatalogError, match=says):
            load_catalog(path)
