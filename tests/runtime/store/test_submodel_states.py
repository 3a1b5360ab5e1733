"""Honest states: every submodel is verified, declared or estimated, and says so."""

from __future__ import annotations

import json
import shutil

from runtime.checkpoint.submodel_table import DECLARED, ESTIMATED, VERIFIED
from runtime.store.catalog import load_catalog
from runtime.store.hardware import load_probe
from runtime.store.planner import make_plan, plan_checkpoint
from runtime.store.submodel_tables import folder_table
from tests.paths import PROBES, ROOT

NVFP4 = "star-elastic-30b-nvfp4"


def test_catalog_widths_are_estimated_and_the_plan_says_so():
    plan = make_plan(load_probe(PROBES / "rtx5090.json"), load_catalog())
    fits = plan.variant(NVFP4).submodels
    assert [f.state for f in fits] == [VERIFIED, ESTIMATED, ESTIMATED]
    assert all("estimated" in f.reason for f in fits[1:]) and "estimated" not in fits[0].reason


def test_a_folder_with_its_own_elastic_json_declares_its_submodels(tmp_path):
    demo = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "demo")
    table = folder_table(demo)
    names = [s["name"] for s in json.loads((demo / "elastic.json").read_text())["submodels"]]
    assert table.elastic is None and [table.state(n) for n in names] == [VERIFIED, DECLARED, DECLARED]
    data = json.loads((demo / "elastic.json").read_text())
    data["submodels"][1]["verified"] = {"path": "/somewhere", "checked_tensors": 9, "comparison": "bit-exact"}
    (demo / "elastic.json").write_text(json.dumps(data))
    assert folder_table(demo).state(names[1]) == VERIFIED
    assert folder_table(demo).note(names[2]) == ""


def test_a_downloaded_official_checkpoint_without_elastic_json_gets_the_catalog_estimate(tmp_path):
    from runtime.store.download.record import record_path, write_record

    catalog = load_catalog()
    family = catalog.families["star-elastic-30b"]
    folder = tmp_path / "official"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(family.raw_config))
    record_path(folder).parent.mkdir()
    write_record(folder, {"repo": catalog.variant(NVFP4).repo, "revision": "0" * 40, "files": {}, "complete": True})
    table = folder_table(folder, catalog)
    assert table.elastic == family.elastic
    assert [table.state(s["name"]) for s in family.elastic["submodels"]] == [VERIFIED, ESTIMATED, ESTIMATED]
    assert "estimate" in table.note("12B") and "verify" in table.note("12B")
    # Recognised by its config alone too (an imported copy has no download record).
    record_path(folder).unlink()
    assert folder_table(folder, catalog).elastic == family.elastic


def test_an_unknown_architecture_without_elastic_json_is_the_parent_alone(tmp_path):
    demo = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "demo")
    (demo / "elastic.json").unlink()
    table = folder_table(demo)
    assert table.elastic is None and table.states == {}
    plan = plan_checkpoint(demo, load_probe(PROBES / "no_gpu.json"), 4096)
    assert len(plan.submodels) == 1


def test_an_estimated_thinker_never_thinks_by_default_and_its_stops_say_why():
    from runtime.checkpoint.submodel_table import SubmodelTable
    from runtime.engine import Engine
    from runtime.model import ElasticModel

    model = ElasticModel.load(ROOT / "assets" / "demo-nvfp4")
    names = list(model.submodels)
    trusted = Engine(model, max_context=512)
    assert trusted.default_depth() == "Balanced" and not any(s.estimated for s in trusted.depth_levels())
    middle = next(s.think for s in trusted.depth_levels() if s.name == "Balanced")
    doubtful = Engine(model, max_context=512, table=SubmodelTable(None, {middle: ESTIMATED}, "a test"))
    stops = {s.name: s for s in doubtful.depth_levels()}
    assert stops["Balanced"].estimated and "estimate" in stops["Balanced"].about
    assert stops["Balanced"].available  # still selectable, on purpose
    assert doubtful.default_depth() == "Max" and not stops["Max"].estimated and stops["Max"].think == names[0]
