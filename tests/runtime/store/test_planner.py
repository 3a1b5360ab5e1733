"""Fit planner verdicts on recorded probes of real cards, and the hardware probe without a GPU."""


import pytest

from runtime.store.catalog import load_catalog
from runtime.store.hardware import load_probe, probe
from runtime.store.planner import FITS, NO, TIGHT, catalog_packing, make_plan, weight_bytes
from tests.paths import PROBES

NVFP4, FP8, BF16 = "star-elastic-30b-nvfp4", "star-elastic-30b-fp8", "star-elastic-30b-bf16"

# probe -> (default variant, {variant: (30B, 23B, 12B) verdicts}, {variant: compute path})
EXPECTED = {
    "rtx5090": (NVFP4, {NVFP4: (FITS, FITS, FITS), FP8: (NO, FITS, FITS), BF16: (NO, NO, FITS)},
                {NVFP4: "NVFP4 native matmul", FP8: "FP8 scaled matmul"}),
    "rtx4090": (NVFP4, {NVFP4: (FITS, FITS, FITS), FP8: (NO, TIGHT, FITS), BF16: (NO, NO, NO)},
                {NVFP4: "NVFP4 weight-only dequantize", FP8: "FP8 scaled matmul"}),
    "rtx4070": (NVFP4, {NVFP4: (NO, NO, FITS), FP8: (NO, NO, NO), BF16: (NO, NO, NO)},
                {NVFP4: "NVFP4 weight-only dequantize"}),
    "rtx3060": (NVFP4, {NVFP4: (NO, NO, FITS), FP8: (NO, NO, NO)},
                {NVFP4: "NVFP4 weight-only dequantize", FP8: "FP8 weight-only dequantize"}),
    "h200": (FP8, {NVFP4: (FITS, FITS, FITS), FP8: (FITS, FITS, FITS), BF16: (FITS, FITS, FITS)},
             {FP8: "FP8 scaled matmul", NVFP4: "NVFP4 weight-only dequantize", BF16: "BF16 matmul"}),
    "rtx4090_busy": (NVFP4, {NVFP4: (NO, FITS, FITS), FP8: (NO, NO, FITS)}, {}),
    "no_gpu": ("demo", {NVFP4: (NO, NO, NO), FP8: (NO, NO, NO), BF16: (NO, NO, NO)},
               {NVFP4: "none: needs an NVIDIA GPU", "demo": "CPU demo"}),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_verdicts_match_the_recorded_probes(name):
    plan = make_plan(load_probe(PROBES / f"{name}.json"), load_catalog(), context=8192)
    default, verdicts, paths = EXPECTED[name]
    assert plan.default == default
    for vid, expected in verdicts.items():
        assert tuple(f.verdict for f in plan.variant(vid).submodels) == expected, vid
    for vid, path in paths.items():
        assert plan.variant(vid).compute_path == path
    demo = plan.variant("demo")
    assert [f.verdict for f in demo.submodels] == [FITS] * 3 and demo.compute_path == "CPU demo"


def test_resident_is_the_largest_submodel_that_fits_and_reasons_read_well():
    plan = make_plan(load_probe(PROBES / "rtx4090_busy.json"), load_catalog())
    nv = plan.variant(NVFP4)
    assert nv.resident == "23B"
    assert "other programs hold 6.3 GiB" in nv.submodels[0].reason
    assert nv.submodels[1].reason.startswith("23B fits: 17.5 GiB free, needs 13.4 GiB weights + 0.1 GiB cache at 8k")
    assert "largest that fits is 23B" in plan.default_reason


def test_longer_context_needs_more_cache():
    hw = load_probe(PROBES / "rtx4090.json")
    short, long = (make_plan(hw, load_catalog(), c).variant(NVFP4).submodels[0] for c in (8192, 262144))
    assert long.cache_bytes > 10 * short.cache_bytes and long.weight_bytes == short.weight_bytes


def test_size_estimates_match_the_published_checkpoints():
    """NVFP4 about 18.7 / 14 / 8 GB, FP8 about 31 / 24 / 13 GB (NVIDIA's figures, as quoted in elastic.md)."""
    cat = load_catalog()
    fam = cat.families["star-elastic-30b"]
    for vid, published in ((NVFP4, (18.7, 14, 8)), (FP8, (31, 24, 13))):
        sizes = [weight_bytes(fam.config, s, catalog_packing(cat.variant(vid), fam.config)) / 1e9
                 for s in fam.submodels]
        assert sizes == pytest.approx(published, rel=0.06)


def test_estimated_widths_reproduce_the_published_parameter_counts():
    from runtime.checkpoint.config import count_params

    fam = load_catalog().families["star-elastic-30b"]
    counts = [count_params(fam.config, s) for s in fam.submodels]
    assert [round(c.total / 1e9, 1) for c in counts] == [31.6, 23.0, 12.0]
    assert [round(c.active / 1e9, 1) for c in counts] == [3.6, 2.8, 2.0]


def test_probe_without_a_gpu_is_a_clear_state_not_a_crash(tmp_path):
    hw = probe(tmp_path)
    if hw.gpus:
        pytest.skip("this machine has an NVIDIA GPU")
    assert hw.no_gpu_reason and hw.gpu is None and hw.ram_total_bytes > 0 and hw.disk_free_bytes > 0
    assert hw.summary().startswith("No NVIDIA GPU")
    assert load_probe_roundtrip(hw) == hw


def load_probe_roundtrip(hw):
    import json

    from runtime.store.hardware import HardwareProbe

    return HardwareProbe.from_dict(json.loads(hw.to_json()))
