"""Checkpoints in the real Nemotron 3 Nano / Star Elastic layout (tools/real_layout.py), in every
variant the published files come in: NVFP4, FP8 (10 shards, an empty last one, side files) and BF16;
`torch_dtype` or `dtype`; `layer_norm_epsilon`, `norm_eps` or both; with or without transformers v5's
`time_step_limit`; plain or MIXED_PRECISION quant configs (in hf_quant_config.json and config.json);
ModelOpt 0.47's garbled exclude names; more modules kept BF16 than Nano's list (read from the file);
the repos' Python files present, never run. The toy widths keep tests fast; the full-size plan is
checked by arithmetic against the published tensor count and bytes."""

import json
import math
import subprocess
import sys

import pytest
import torch

from runtime import CheckpointError, ElasticModel
from runtime.checkpoint import load as load_module
from runtime.checkpoint.check import check_checkpoint, inspect_checkpoint
from runtime.checkpoint.load import resident_bytes_of, stored_bytes
from runtime.checkpoint.quant import PackedFP8, PackedNVFP4
from runtime.checkpoint.reader import LoadCancelled
from runtime.store import model_store
from runtime.store.hardware import HardwareProbe
from runtime.store.planner import FITS, NO, check_cpu_fit, plan_checkpoint
from tests.paths import ROOT
from tools.real_layout import PY_FILES, Options, generate, layout

VARIANTS = {
    "nvfp4": Options("nvfp4", "tiny"),
    "fp8": Options("fp8", "tiny"),
    "bf16": Options("bf16", "tiny"),
    "nvfp4-mixed-v5": Options("nvfp4", "tiny", dtype_key="dtype", eps_keys=("norm_eps",), time_step_limit=True,
                              mixed=True),
    "fp8-mixed": Options("fp8", "tiny", eps_keys=("layer_norm_epsilon",), mixed=True),
    "nvfp4-garbled-more-bf16": Options("nvfp4", "tiny", garbled=True,
                                       keep_bf16=("backbone.layers.*.mixer.shared_experts.*",)),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-layout")
    return {name: generate(root / name, o) for name, o in VARIANTS.items()}


def test_full_size_plans_are_the_published_files():
    """24,147 tensors and 19,339,781,632 bytes (NVFP4), 18,179 tensors in 10 shards (FP8), 6,243 and
    63.16 GB (BF16): the counts real-checkpoint.md gives for NVIDIA's repos."""
    for fmt, tensors, nbytes in (("nvfp4", 24147, 19_339_781_632), ("fp8", 18179, None), ("bf16", 6243, None)):
        plan = layout(Options(fmt))[2]
        assert len(plan) == tensors, fmt
        if nbytes:
            assert sum(t.nbytes for t in plan) == nbytes
    assert round(sum(t.nbytes for t in layout(Options("bf16"))[2]) / 1e9, 2) == 63.17
    assert len(layout(Options("nvfp4"))[1]) == 60  # the modules NVIDIA keeps in BF16


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_checks_loads_and_decodes(folders, name):
    folder = folders[name]
    check_checkpoint(folder)
    model = ElasticModel.load(folder, dtype="float32")
    assert list(model.views) == ["30B", "23B", "12B"]
    ids = [10, 300, 301, 302, 303, 304, 305, 306]
    # the CPU kernels round activations to int8 per block, in the prefill and each step separately
    # (each moved these logits by up to about 3e-3 from the exact path): 1e-2 between the two there
    tol = 1e-2 if "CPU kernels" in model.compute_path() else 2e-3
    for sub in ("30B", "12B"):
        cache = model.new_cache(sub, 32)
        full = model.forward(sub, cache, ids, all_logits=True)
        assert torch.isfinite(full).all()
        stepped = model.new_cache(sub, 32)
        model.forward(sub, stepped, ids[:4])
        last = [model.forward(sub, stepped, [t]) for t in ids[4:]][-1]
        assert torch.allclose(last[0], full[-1], atol=tol, rtol=tol), sub  # decode steps agree with the prefill
    assert not (folder / "EXECUTED").exists()


def test_the_layout_is_as_published(folders):
    fp8 = folders["fp8"]
    shards = sorted(fp8.glob("model-*-of-00010.safetensors"))
    assert len(shards) == 10 and shards[-1].stat().st_size == 40  # the empty last shard: a header only
    assert len(list(fp8.glob("model-*-of-00010.json"))) == 10  # the per-shard side files
    assert len(list(folders["nvfp4"].glob("model-*-of-00005.safetensors"))) == 5
    assert len(list(folders["bf16"].glob("model-*-of-00013.safetensors"))) == 13
    config = json.loads((folders["nvfp4"] / "config.json").read_text())
    assert "time_step_limit" not in config and config["torch_dtype"] == "bfloat16" and "auto_map" in config
    assert config["norm_eps"] == config["layer_norm_epsilon"] and "rope_theta" in config
    table = inspect_checkpoint(folders["nvfp4"]).table
    assert table["backbone.layers.1.mixer.experts.0.up_proj.weight"].dtype == "U8"
    assert table["backbone.layers.1.mixer.gate.weight"].dtype == "F32"
    assert table["backbone.layers.4.mixer.in_proj.weight"].dtype == "BF16"  # the Mamba layer before attention
    assert table["backbone.layers.0.mixer.in_proj.weight"].dtype == "U8"


def test_mixed_precision_configs_give_each_module_its_format(folders):
    for name, fmt in (("nvfp4-mixed-v5", "NVFP4"), ("fp8-mixed", "FP8")):
        checked = inspect_checkpoint(folders[name])
        q = checked.quant
        assert q.layers is not None and q.formats == (fmt,)
        assert q.format_of("backbone.layers.0.mixer.in_proj") == fmt
        assert q.format_of("backbone.layers.4.mixer.in_proj") is None and q.format_of("lm_head") is None
        config = json.loads((folders[name] / "config.json").read_text())
        assert config["quantization_config"]["quant_algo"] == "MIXED_PRECISION"


def test_a_mixed_config_that_leaves_out_a_packed_module_is_refused(folders, tmp_path):
    import shutil

    folder = shutil.copytree(folders["nvfp4-mixed-v5"], tmp_path / "m")
    q = json.loads((folder / "hf_quant_config.json").read_text())
    del q["quantization"]["quantized_layers"]["backbone.layers.0.mixer.in_proj"]
    (folder / "hf_quant_config.json").write_text(json.dumps(q))
    with pytest.raises(CheckpointError, match="layers.0.mixer.in_proj.*excludes"):
        check_checkpoint(folder)
    q["quantization"]["quantized_layers"]["backbone.layers.0.mixer.in_proj"] = {"quant_algo": "INT4_AWQ"}
    (folder / "hf_quant_config.json").write_text(json.dumps(q))
    with pytest.raises(CheckpointError, match="INT4_AWQ"):
        check_checkpoint(folder)


def test_exclusions_are_read_from_the_file(folders):
    """The Elastic file keeps more in BF16 than Nano's list: what the file says is what loads."""
    model = ElasticModel.load(folders["nvfp4-garbled-more-bf16"], dtype="float32")
    moe = model.weights.layers[1].mixer
    assert isinstance(moe.shared.up, torch.Tensor) and isinstance(moe.up, PackedNVFP4)
    assert isinstance(model.weights.lm_head, torch.Tensor)  # "lm_head" read through ModelOpt's garbled name


def test_epsilon_spellings_that_disagree_are_refused(folders, tmp_path):
    import shutil

    folder = shutil.copytree(folders["nvfp4"], tmp_path / "e")
    config = json.loads((folder / "config.json").read_text())
    config["norm_eps"] = 1e-3
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="norm_eps.*disagree"):
        check_checkpoint(folder)


def test_the_repos_python_files_never_run(folders, tmp_path):
    folder = folders["nvfp4-mixed-v5"]
    check_checkpoint(folder)
    ElasticModel.load(folder)
    model_store.verify(folder)
    from runtime.chat_format import ChatFormat

    ChatFormat(folder)
    assert all((folder / f).exists() for f in PY_FILES) and not (folder / "EXECUTED").exists()
    # the trap works: running one leaves the marker
    import shutil

    copy = shutil.copytree(folder, tmp_path / "c")
    subprocess.run([sys.executable, str(copy / PY_FILES[0])], capture_output=True, check=False)
    assert (copy / "EXECUTED").exists()


def test_the_store_imports_and_verifies_every_variant(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("ELASTIC_CHAT_HOME", str(tmp_path / "data"))
    for name, folder in folders.items():
        report = model_store.verify(folder)
        assert report.ok, (name, report.problems)
        model = model_store.import_folder(folder, name)
        assert not model.problem and model.submodels == ("30B", "23B", "12B"), name


@pytest.mark.parametrize("name", ["nvfp4", "fp8", "bf16"])
def test_the_plan_is_what_loading_holds(folders, name):
    """The planner's weight figure for the CPU is the loaded weights' bytes, tensor by tensor."""
    folder = folders[name]
    probe = HardwareProbe((), 64 << 30, 32 << 30, 100 << 30, "no GPU here")
    plan = plan_checkpoint(folder, probe, 1024)
    for dtype in ("float32", "bfloat16"):
        model = ElasticModel.load(folder, dtype=dtype)
        checked = inspect_checkpoint(folder)
        assert resident_bytes_of(checked.config, checked.table, checked.submodels[0], model.dtype) == \
            model.resident_bytes(), dtype
    auto = ElasticModel.load(folder)
    assert plan.submodels[0].weight_bytes == auto.resident_bytes()
    assert plan.compute_path.startswith("CPU") and plan.submodels[0].verdict == FITS


def test_a_cpu_load_that_does_not_fit_is_refused_with_the_numbers(folders):
    small = HardwareProbe((), 1 << 30, 100 << 20, 100 << 30, "no GPU here")
    with pytest.raises(Exception, match=r"does not fit this machine's memory: 30B does not fit in RAM: needs .* GiB"):
        check_cpu_fit(folders["nvfp4"], 1024, probe=small)
    assert plan_checkpoint(folders["nvfp4"], small, 1024).submodels[0].verdict == NO


def test_cpu_weights_stay_views_of_the_file(folders, monkeypatch):
    """Whole tensors in their stored dtype are pages of the file (no private copy); with experts
    kept per expert (a large checkpoint's way) the model computes what the stacked one does."""
    folder = folders["nvfp4"]
    stacked = ElasticModel.load(folder, dtype="bfloat16")
    mapped = stacked.mapped
    assert mapped.contains(stacked.weights.lm_head) and mapped.contains(stacked.weights.embed)
    assert not mapped.contains(stacked.weights.layers[0].mixer.in_proj.packed)  # rows reordered: a copy
    monkeypatch.setattr(load_module, "EXPERT_COPY_LIMIT", 0)
    listed = ElasticModel.load(folder, dtype="bfloat16")
    up = listed.weights.layers[1].mixer.up
    assert isinstance(up, list) and all(listed.mapped.contains(e.packed) for e in up)
    assert listed.resident_bytes() == stacked.resident_bytes()
    # the two MoE paths compute the same (in fp32, where rounding does not hide a mistake)
    listed = ElasticModel.load(folder, dtype="float32")
    monkeypatch.setattr(load_module, "EXPERT_COPY_LIMIT", 1 << 40)
    stacked = ElasticModel.load(folder, dtype="float32")
    assert isinstance(listed.weights.layers[1].mixer.up, list)
    assert not isinstance(stacked.weights.layers[1].mixer.up, list)
    ids = [10, 300, 301, 302, 303]
    for sub in ("30B", "12B"):
        a, b = (m.forward(sub, m.new_cache(sub, 16), ids, all_logits=True) for m in (stacked, listed))
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
        ca, cb = stacked.new_cache(sub, 16), listed.new_cache(sub, 16)
        stacked.forward(sub, ca, ids)
        listed.forward(sub, cb, ids)
        assert torch.allclose(stacked.forward(sub, ca, [7]), listed.forward(sub, cb, [7]), atol=1e-4, rtol=1e-4)


def test_load_progress_reaches_the_total_and_cancel_stops_it(folders):
    folder = folders["fp8"]
    seen = []
    model = ElasticModel.load(folder, progress=seen.append)
    checked = inspect_checkpoint(folder)
    last = seen[-1]
    assert last.bytes_read == last.bytes_total == stored_bytes(checked.config, checked.table, checked.submodels[0])
    assert last.tensors_read == last.tensors_total == len(seen)
    assert [p.bytes_read for p in seen] == sorted(p.bytes_read for p in seen)
    assert last.shard_count == 9 and "of 9" in last.line()  # the empty tenth shard holds nothing to read
    assert isinstance(model.weights.layers[0].mixer.in_proj, PackedFP8)
    calls = []
    with pytest.raises(LoadCancelled):
        ElasticModel.load(folder, progress=calls.append, cancelled=lambda: len(calls) >= 5)
    assert len(calls) == 5


def test_the_cli_prints_progress_on_stderr_only(folders):
    out = subprocess.run([sys.executable, "-m", "runtime", "generate", "--checkpoint", str(folders["nvfp4"]),
                          "--prompt", "hi", "--max-new-tokens", "3", "--thinking-budget", "0", "--json",
                          "--temperature", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert all(json.loads(line) for line in out.stdout.splitlines())  # stdout: the JSON events only
    assert "loading " in out.stderr and "(100%)" in out.stderr and "shard" in out.stderr


def test_dtype_spellings_are_both_accepted(folders):
    for name in ("nvfp4", "nvfp4-mixed-v5"):
        config = json.loads((folders[name] / "config.json").read_text())
        assert ("torch_dtype" in config) != ("dtype" in config)
        check_checkpoint(folders[name])
    assert math.isinf(json.loads((folders["nvfp4-mixed-v5"] / "config.json").read_text(),
                                 object_hook=lambda d: float(d["__float__"]) if "__float__" in d else d
                                 )["time_step_limit"][1])
