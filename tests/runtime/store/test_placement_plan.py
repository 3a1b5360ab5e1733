"""The planner's placements of routed experts in RAM (runtime/store/placement_plan.py) on recorded probes of
8-12 GB cards, with the real 30B config: which placements fit, what each puts where, the bytes each side
reads per token and the speed that implies, and the choice between them and the plain split."""

import math

import pytest

from runtime.checkpoint.check import read_model_files
from runtime.checkpoint.config import MOE
from runtime.store.catalog import load_catalog
from runtime.store.hardware import load_probe
from runtime.store.placement_plan import FITS, NO, TIGHT
from runtime.store.planner import catalog_packing, make_plan, plan_variant, weight_bytes
from tests.paths import PROBES, ROOT

NVFP4 = "star-elastic-30b-nvfp4"
SHAPE_30B = ROOT / "tests" / "data" / "star-elastic-30b"


@pytest.fixture(scope="module")
def real():
    """The real 30B config and its nested widths (tests/data), and the catalog's NVFP4 variant."""
    _, cfg, _, subs = read_model_files(SHAPE_30B)
    variant = load_catalog().variant(NVFP4)
    return cfg, subs, variant, catalog_packing(variant, cfg)


def plan_on(real, probe_name, context=8192):
    cfg, subs, variant, packing = real
    return plan_variant(variant, cfg, subs, load_probe(PROBES / f"{probe_name}.json"), context, packing)


def expert_bytes(cfg, sub, layer, packing):
    """One MoE layer's routed experts of `sub`, by the estimate's own rule (0.5625 bytes a weight + 8 for scales)."""
    e, f, h = sub.n_routed_experts[layer], sub.moe_intermediate_size[layer], sub.hidden_size
    return e * 2 * (int(f * h * 0.5625) + 8)


# probe -> (proposed placement, {placement: verdict})
EXPECTED = {
    "rtx3060": ("13", {"all": FITS, "13": FITS, "nested:12B": FITS, "nested:23B": NO, "none": FITS}),
    "rtx4070": ("nested:12B", {"all": FITS, "14": FITS, "nested:12B": FITS, "nested:23B": NO, "none": FITS}),
}


@pytest.mark.parametrize("probe_name", list(EXPECTED))
def test_the_placements_offered_and_the_one_proposed(real, probe_name):
    plan = plan_on(real, probe_name)
    proposed, verdicts = EXPECTED[probe_name]
    assert plan.submodels[0].verdict == NO  # the parent does not fit the card plainly
    assert plan.resident == "12B"  # the plain split: the 12B alone
    assert {p.placement: p.verdict for p in plan.placements} == verdicts
    assert plan.placement == proposed and plan.proposed().placement == proposed
    usable = [p for p in plan.placements if p.verdict != NO]
    assert plan.proposed() is max(usable, key=lambda p: p.score())
    best = plan.proposed()
    # every submodel runs under the proposal; the plain split runs the 12B alone
    assert [s.name for s in best.speeds] == ["30B", "23B", "12B"]
    assert [s.name for s in next(p for p in plan.placements if p.placement == "none").speeds] == ["12B"]


@pytest.mark.parametrize("probe_name", list(EXPECTED))
def test_the_layered_placement_is_the_fewest_layers_that_fit(real, probe_name):
    from runtime.store.placement_plan import Sizes, plan_placements
    from runtime.store.planner import FITS_SHARE, WORKSPACE_BYTES, tensor_bytes

    cfg, subs, _, packing = real
    plan = plan_on(real, probe_name)
    n = int(next(p.placement for p in plan.placements if p.placement.isdigit()))
    layered = next(p for p in plan.placements if p.placement == str(n))
    one_less = layered.device_bytes + expert_bytes(cfg, subs[0], cfg.layers_of(MOE)[n - 1], packing)
    free = load_probe(PROBES / f"{probe_name}.json").gpu.free_bytes
    assert one_less + layered.cache_bytes + layered.workspace_bytes > FITS_SHARE * free
    assert layered.need_bytes <= FITS_SHARE * free
    sizes = Sizes(cfg, lambda s: tensor_bytes(cfg, s, packing))
    again = plan_placements(cfg, subs, sizes, load_probe(PROBES / f"{probe_name}.json"), 8192, "12B",
                            WORKSPACE_BYTES, FITS_SHARE)
    assert [p.placement for p in again] == [p.placement for p in plan.placements]


def test_what_each_placement_puts_on_the_gpu_and_in_ram(real):
    cfg, subs, _, packing = real
    parent, small = subs[0], subs[-1]
    moe = cfg.layers_of(MOE)
    experts = sum(expert_bytes(cfg, parent, i, packing) for i in moe)
    whole = weight_bytes(cfg, parent, packing)
    by = {p.placement: p for p in plan_on(real, "rtx3060").placements}
    assert by["all"].host_bytes == experts and by["all"].device_bytes == whole - experts
    layered = by["13"]
    first = sum(expert_bytes(cfg, parent, i, packing) for i in moe[:13])
    assert layered.host_bytes == first and layered.device_bytes + layered.host_bytes == whole
    kept = sum(expert_bytes(cfg, small, i, packing) for i in moe)
    assert by["nested:12B"].host_bytes == experts and by["nested:12B"].device_bytes == whole - experts + kept
    assert by["none"].device_bytes == weight_bytes(cfg, small, packing) and by["none"].host_bytes == 0


def test_bytes_read_per_token_and_the_speed_they_imply(real):
    """A step reads the rest once (one embedding row) and k experts per MoE layer; the expected speed is the
    GPU's bytes over its bandwidth plus RAM's over its, one after the other."""
    cfg, subs, _, packing = real
    probe = load_probe(PROBES / "rtx4070.json")
    gpu_bw, ram_bw = probe.gpu.memory_bandwidth_bytes_per_s, probe.ram_read_bytes_per_s
    assert gpu_bw == 192 * 10_501_000_000 * 2 // 8 and ram_bw == 40_000_000_000
    k, moe = cfg.num_experts_per_tok, cfg.layers_of(MOE)
    by = {p.placement: p for p in plan_on(real, "rtx4070").placements}
    for sub in subs:
        table = cfg.vocab_size * sub.hidden_size * 2
        experts = {i: expert_bytes(cfg, sub, i, packing) * k // sub.n_routed_experts[i] for i in moe}
        rest = weight_bytes(cfg, sub, packing) - sum(expert_bytes(cfg, sub, i, packing) for i in moe) - table \
            + table // cfg.vocab_size
        nested = sub.name == "12B"  # the 12B's experts are on the card under nested:12B
        for placement, ram_layers in (("all", moe), ("14", moe[:14]), ("nested:12B", [] if nested else moe)):
            speed = next(s for s in by[placement].speeds if s.name == sub.name)
            ram = sum(experts[i] for i in ram_layers)
            assert (speed.device_read_bytes, speed.host_read_bytes) == (rest + sum(experts.values()) - ram, ram)
            assert speed.tokens_per_s == pytest.approx(1 / ((rest + sum(experts.values()) - ram) / gpu_bw
                                                            + ram / ram_bw))
    nested = {s.name: s.tokens_per_s for s in by["nested:12B"].speeds}
    everything = {s.name: s.tokens_per_s for s in by["all"].speeds}
    assert nested["12B"] > 2 * everything["12B"]  # a thought on the 12B runs wholly on the card
    assert nested["30B"] == pytest.approx(everything["30B"])  # the parent reads all its experts from RAM either way
    assert "expected 30B 42 tok/s (2.11 GB on the GPU + 0.77 GB in RAM a token)" in by["all"].reason


def test_without_bandwidths_the_bytes_the_cpu_reads_decide(real):
    plan = plan_on(real, "rtx4090_busy")
    assert plan.submodels[0].verdict == NO and plan.resident == "23B"
    assert all(s.tokens_per_s is None for p in plan.placements for s in p.speeds)
    assert "no tok/s: the probe has no bandwidths" in plan.placements[0].reason
    usable = [p for p in plan.placements if p.verdict != NO and len(p.speeds) == 3]
    least = min(usable, key=lambda p: sum(s.host_read_bytes for s in p.speeds))
    assert plan.placement == least.placement


@pytest.mark.parametrize("probe_name", ["rtx4090", "rtx5090", "h200", "no_gpu"])
def test_nothing_is_proposed_where_the_parent_fits_or_there_is_no_gpu(probe_name):
    plan = make_plan(load_probe(PROBES / f"{probe_name}.json"), load_catalog(), 8192).variant(NVFP4)
    assert plan.placements == () and plan.placement is None


def test_ram_too_small_for_the_experts_is_tight(real, tmp_path):
    import json

    data = json.loads((PROBES / "rtx4070.json").read_text())
    data["ram_available_bytes"] = 8 << 30
    (tmp_path / "p.json").write_text(json.dumps(data))
    cfg, subs, variant, packing = real
    plan = plan_variant(variant, cfg, subs, load_probe(tmp_path / "p.json"), 8192, packing)
    by = {p.placement: p.verdict for p in plan.placements}
    assert by["all"] == TIGHT and by["nested:12B"] == TIGHT and by["none"] == FITS
    assert math.isfinite(plan.proposed().score()[1])
