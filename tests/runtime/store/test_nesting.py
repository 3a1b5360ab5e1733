"""Nesting discovery: a slice's widths learned from its files and verified value by value.

Slices are made by this project's `extract` (an independent code path from the verifier's
prefix views) from random parents of several layer patterns; then damaged in the ways a
wrong slice would be (experts or Mamba heads in another order, a changed top-k, a different
parent) and each must be refused with the tensor or field named.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from runtime.checkpoint.config import load_config
from runtime.checkpoint.extract import extract
from runtime.checkpoint.submodels import load_elastic
from runtime.errors import CheckpointError
from runtime.store.nesting.discover import discover, mamba_kept_heads, size_name, write_verified
from runtime.store.nesting.tensor_source import FolderSource
from tests.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def parents(tmp_path_factory):
    root = tmp_path_factory.mktemp("nest")
    return {kind: make_checkpoint(kind, root / kind, seed=3) for kind in ("hybrid", "grouped")}


def _slice(parents, tmp_path, kind: str, sub: str):
    return extract(parents[kind], sub, tmp_path / f"{kind}-{sub}")


def _rewrite(folder, fn):
    """Applies fn(tensors) -> tensors to a single-file checkpoint."""
    path = folder / "model.safetensors"
    save_file(fn(load_file(str(path))), str(path), metadata={"format": "pt"})


@pytest.mark.parametrize("kind,sub", [("hybrid", "mid"), ("hybrid", "small"), ("grouped", "half")])
def test_an_extracted_slice_is_discovered_and_verified(parents, tmp_path, kind, sub):
    out = _slice(parents, tmp_path, kind, sub)
    report = discover(FolderSource(parents[kind]), FolderSource(out))
    assert report.verified, report.problems
    cfg = load_config(parents[kind])
    declared = next(s for s in load_elastic(parents[kind], cfg) if s.name == sub)
    for field in ("hidden_size", "mamba_num_heads", "n_routed_experts", "moe_intermediate_size",
                  "moe_shared_expert_intermediate_size", "intermediate_size"):
        assert getattr(report.submodel, field) == getattr(declared, field), field
    assert report.comparison == "bit-exact"
    assert report.checked_tensors > 3 * cfg.num_layers
    # Only headers and a few rows were read, far less than the files themselves.
    files = sum(p.stat().st_size for p in list(parents[kind].glob("*.safetensors")) + list(out.glob("*.safetensors")))
    assert 0 < report.bytes_read < files
    assert report.summary()["name"] == report.name and report.name.endswith(("K", "M"))


def test_the_parent_itself_verifies_as_the_full_width(parents):
    report = discover(FolderSource(parents["hybrid"]), FolderSource(parents["hybrid"]))
    assert report.verified and report.submodel.hidden_size == load_config(parents["hybrid"]).hidden_size


def test_permuted_experts_are_refused_naming_the_tensor(parents, tmp_path):
    out = _slice(parents, tmp_path, "hybrid", "mid")

    def swap(t):
        layer = "backbone.layers.1.mixer."
        a, b = layer + "experts.0.", layer + "experts.5."
        for part in ("up_proj.weight", "down_proj.weight"):
            t[a + part], t[b + part] = t[b + part].clone(), t[a + part].clone()
        bias = t[layer + "gate.e_score_correction_bias"]
        bias[[0, 5]] = bias[[5, 0]].clone()
        gate = t[layer + "gate.weight"]
        gate[[0, 5]] = gate[[5, 0]].clone()
        return t

    _rewrite(out, swap)
    report = discover(FolderSource(parents["hybrid"]), FolderSource(out))
    assert not report.verified
    assert "backbone.layers.1.mixer.gate" in report.problems[0]


def test_mamba_heads_moved_across_groups_are_refused(parents, tmp_path):
    out = _slice(parents, tmp_path, "hybrid", "mid")
    cfg = load_config(parents["hybrid"])
    # Keep the first 6 heads overall instead of the first 3 of each group: same shapes, wrong heads.
    parent = load_file(str(parents["hybrid"] / "model.safetensors"))
    wrong = torch.arange(6)
    assert not torch.equal(wrong, mamba_kept_heads(cfg, 6))

    def regroup(t):
        for name in ("A_log", "D", "dt_bias"):
            t[f"backbone.layers.0.mixer.{name}"] = parent[f"backbone.layers.0.mixer.{name}"][wrong].clone()
        return t

    _rewrite(out, regroup)
    report = discover(FolderSource(parents["hybrid"]), FolderSource(out))
    assert not report.verified and "backbone.layers.0.mixer.A_log" in report.problems[0]


def test_a_changed_top_k_is_refused_by_name(parents, tmp_path):
    out = _slice(parents, tmp_path, "hybrid", "mid")
    raw = json.loads((out / "config.json").read_text())
    raw["num_experts_per_tok"] = 3
    (out / "config.json").write_text(json.dumps(raw))
    report = discover(FolderSource(parents["hybrid"]), FolderSource(out))
    assert not report.verified and report.problems[0].startswith("num_experts_per_tok differs")


def test_a_slice_of_another_parent_is_refused(parents, tmp_path):
    other = make_checkpoint("hybrid", tmp_path / "other", seed=99)
    out = extract(other, "mid", tmp_path / "other-mid")
    report = discover(FolderSource(parents["hybrid"]), FolderSource(out))
    assert not report.verified and "does not equal the parent's prefix view" in report.problems[0]


def test_widths_that_do_not_nest_are_refused(parents, tmp_path):
    out = tmp_path / "wide"
    shutil.copytree(parents["grouped"], out)
    raw = json.loads((out / "config.json").read_text())
    raw["hidden_size"] = 2 * raw["hidden_size"]
    (out / "config.json").write_text(json.dumps(raw))
    report = discover(FolderSource(parents["grouped"]), FolderSource(out))
    assert not report.verified and "hidden_size" in report.problems[0]


def test_shapes_that_disagree_with_the_slice_config_are_refused(parents, tmp_path):
    out = _slice(parents, tmp_path, "hybrid", "small")
    raw = json.loads((out / "config.json").read_text())
    raw["moe_intermediate_size"] = 24  # the tensors keep 16 rows
    (out / "config.json").write_text(json.dumps(raw))
    report = discover(FolderSource(parents["hybrid"]), FolderSource(out))
    assert not report.verified and "experts" in report.problems[0]


def test_write_adds_the_verified_submodel_with_its_source(parents, tmp_path):
    parent = tmp_path / "parent"
    shutil.copytree(parents["hybrid"], parent)
    out = _slice(parents, tmp_path, "hybrid", "small")
    (parent / "elastic.json").unlink()  # like the official repo: no elastic.json
    report = discover(FolderSource(parent), FolderSource(out), name="tiny")
    write_verified(parent, report, {"path": str(out)})
    data = json.loads((parent / "elastic.json").read_text())
    assert [e["name"] for e in data["submodels"]][1:] == ["tiny"]
    assert data["submodels"][1]["verified"]["path"] == str(out)
    subs = load_elastic(parent, load_config(parent))
    assert subs[1].hidden_size == 32
    # Writing again corrects the entry instead of adding a second one.
    write_verified(parent, report, {"path": "elsewhere"})
    data = json.loads((parent / "elastic.json").read_text())
    assert len(data["submodels"]) == 2 and data["submodels"][1]["verified"]["path"] == "elsewhere"


def test_size_names():
    assert [size_name(n) for n in (31_600_000_000, 12_400_000_000, 1_520_000, 980_000, 52_000)] == \
        ["32B", "12B", "1.5M", "1.0M", "52K"]


def test_a_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="not a folder"):
        FolderSource(tmp_path / "nope")


DEMO, DEMO_NVFP4 = Path("assets/demo"), Path("assets/demo-nvfp4")


def test_a_full_precision_slice_of_the_nvfp4_parent_verifies_within_quantization_error(tmp_path):
    names = [s["name"] for s in json.loads((DEMO / "elastic.json").read_text())["submodels"]]
    out = extract(DEMO, names[1], tmp_path / "mid")
    report = discover(FolderSource(DEMO_NVFP4), FolderSource(out))
    assert report.verified, report.problems
    assert "NVFP4 quantization error" in report.comparison and report.name == names[1]


def test_a_permuted_full_precision_slice_of_the_nvfp4_parent_is_refused(tmp_path):
    names = [s["name"] for s in json.loads((DEMO / "elastic.json").read_text())["submodels"]]
    out = extract(DEMO, names[1], tmp_path / "mid")
    cfg = load_config(out)
    layer = cfg.layer_types.index("moe")

    def swap(t):
        m = f"backbone.layers.{layer}.mixer."
        for part in ("up_proj.weight", "down_proj.weight"):
            a, b = m + f"experts.0.{part}", m + f"experts.1.{part}"
            t[a], t[b] = t[b].clone(), t[a].clone()
        return t

    _rewrite(out, swap)
    report = discover(FolderSource(DEMO_NVFP4), FolderSource(out))
    assert not report.verified and f"backbone.layers.{layer}.mixer.experts.0" in report.problems[0]


@pytest.mark.slow
def test_a_hub_slice_is_verified_by_headers_and_ranges(parents, tmp_path, serve_hub, monkeypatch):
    from runtime.store.nesting.tensor_source import HubSource, TensorSource, open_source

    monkeypatch.setattr(TensorSource, "GAP", 0)  # tiny files: merging neighbours would read them whole

    out = _slice(parents, tmp_path, "grouped", "half")
    shard = tmp_path / "sharded-slice"
    shutil.copytree(out, shard)
    stub = serve_hub({"someone/Sliced-half": out, "someone/Parent": parents["grouped"]})
    source = open_source("someone/Sliced-half")
    assert isinstance(source, HubSource)
    report = discover(FolderSource(parents["grouped"]), source)
    assert report.verified, report.problems
    weights = (out / "model.safetensors").stat().st_size
    served = sum(r["sent"] for r in stub.requests if r["path"] == "model.safetensors")
    assert source.bytes_read == served + (out / "config.json").stat().st_size
    assert served < weights / 2 and all(r["status"] == 206 for r in stub.requests if r["path"].endswith(".safetensors"))
    # The parent may be remote too (sharded, here): the same check, through Range requests only.
    remote_parent = open_source("someone/Parent")
    assert discover(remote_parent, FolderSource(out)).verified


def test_a_hub_slice_with_another_order_is_refused(parents, tmp_path, serve_hub):
    from runtime.store.nesting.tensor_source import open_source

    out = _slice(parents, tmp_path, "hybrid", "mid")
    _rewrite(out, lambda t: {**t, "backbone.norm_f.weight": t["backbone.norm_f.weight"].flip(0)})
    serve_hub({"someone/Bad": out})
    report = discover(FolderSource(parents["hybrid"]), open_source("someone/Bad"))
    assert not report.verified and "backbone.norm_f.weight" in report.problems[0]


def test_a_missing_hub_repo_is_one_clear_error(serve_hub):
    from runtime.store.download.transfer import DownloadError
    from runtime.store.nesting.tensor_source import open_source

    serve_hub({})
    with pytest.raises(DownloadError, match="not found"):
        open_source("someone/Missing")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
def test_extract_writes_a_quantized_slice_that_loads_and_verifies_bit_exact(tmp_path, fmt, request):
    from safetensors import safe_open

    from runtime.checkpoint.quant import PackedNVFP4
    from runtime.model import ElasticModel
    from runtime.score import score

    if fmt == "nvfp4":
        parent = DEMO_NVFP4
    else:
        from training.export_quantized import export

        parent = export(DEMO, "fp8", tmp_path / "fp8")
    names = [s["name"] for s in json.loads((parent / "elastic.json").read_text())["submodels"]]
    out = extract(parent, names[1], tmp_path / "slice")
    quant_config = "hf_quant_config.json"
    assert json.loads((out / quant_config).read_text()) == json.loads((parent / quant_config).read_text())
    # Loads back as its own parent and computes exactly what the submodel computes inside the parent.
    ids = [5, 17, 42, 9, 100, 3, 77]
    sliced = ElasticModel.load(out)
    assert score(sliced, sliced.parent.name, ids) == score(ElasticModel.load(parent), names[1], ids)
    report = discover(FolderSource(parent), FolderSource(out))
    assert report.verified and report.comparison == "bit-exact", (report.problems, report.comparison)
    if fmt == "nvfp4":  # ModelOpt's own dequantization of the slice equals its prefix view of the parent's
        from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

        h = json.loads((out / "config.json").read_text())["hidden_size"]
        name = "lm_head.weight"
        with (safe_open(str(out / "model.safetensors"), "pt") as f,
              safe_open(str(parent / "model.safetensors"), "pt") as g):
            for name in [n for n in f.keys() if n.endswith("experts.0.up_proj.weight")]:
                packed, scale = f.get_tensor(name), f.get_tensor(name + "_scale")
                scale2 = f.get_tensor(name + "_scale_2")
                shape = torch.Size((packed.shape[0], packed.shape[1] * 2))
                theirs = NVFP4QTensor(shape, torch.float32, packed).dequantize(
                    dtype=torch.float32, scale=scale, double_scale=scale2, block_sizes={-1: 16})
                full = PackedNVFP4(g.get_tensor(name), g.get_tensor(name + "_scale"), g.get_tensor(name + "_scale_2"))
                assert torch.equal(theirs, full.dequantize()[: packed.shape[0], :h]), name


def test_extract_refuses_a_width_that_splits_nvfp4_blocks(tmp_path):
    parent = tmp_path / "parent"
    shutil.copytree(DEMO_NVFP4, parent)
    data = json.loads((parent / "elastic.json").read_text())
    data["submodels"][1]["hidden_size"] = 104  # not a multiple of 16
    (parent / "elastic.json").write_text(json.dumps(data))
    from runtime.errors import ElasticError

    with pytest.raises(ElasticError, match="16-wide (scale )?blocks"):
        extract(parent, data["submodels"][1]["name"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
