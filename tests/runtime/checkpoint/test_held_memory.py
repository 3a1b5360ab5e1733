"""What loading keeps private and what stays pages of the file, on real-layout checkpoints: the header
arithmetic (load.py `held_tensors`, which the planner's RAM verdict uses) equals what a load holds, byte
for byte, in every way a CPU load can hold the weights; BF16 weights kept as stored under fp32 (a large
checkpoint on a CPU without native BF16) compute exactly what fp32 copies compute."""

import pytest
import torch

from runtime import ElasticModel
from runtime import device as device_module
from runtime.checkpoint import load as load_module
from runtime.checkpoint.check import inspect_checkpoint
from runtime.checkpoint.load import held_tensors
from runtime.store.hardware import HardwareProbe
from runtime.store.planner import CPU_WORKSPACE_BYTES, FITS, NO, TIGHT, check_cpu_fit
from tools.real_layout import Options, generate

IDS = [10, 300, 301, 302, 303, 304]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("held")
    return {fmt: generate(root / fmt, Options(fmt, "tiny")) for fmt in ("nvfp4", "fp8", "bf16")}


def large(monkeypatch, narrow: bool, listed: bool) -> None:
    """Makes the tiny checkpoint count as large: BF16 weights kept as stored, experts kept per expert."""
    monkeypatch.setattr(device_module, "CPU_FP32_LIMIT", 0 if narrow else 1 << 50)
    monkeypatch.setattr(load_module, "EXPERT_COPY_LIMIT", 0 if listed else 1 << 50)


def measured(model) -> tuple[int, int]:
    """(private, file-backed) bytes of the loaded weights' distinct storages."""
    storages = {}
    for t in model.weights.tensors():
        storages[t.untyped_storage().data_ptr()] = (t.untyped_storage().nbytes(), model.mapped.contains(t))
    private = sum(n for n, mapped in storages.values() if not mapped)
    return private, sum(n for n, mapped in storages.values() if mapped)


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8", "bf16"])
@pytest.mark.parametrize("narrow,listed", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype,resident", [("float32", None), ("bfloat16", None), ("float32", "12B")])
def test_private_and_file_backed_bytes_are_what_loading_holds(folders, monkeypatch, fmt, narrow, listed, dtype,
                                                             resident):
    large(monkeypatch, narrow, listed)
    folder = folders[fmt]
    model = ElasticModel.load(folder, resident=resident, dtype=dtype)
    checked = inspect_checkpoint(folder)
    held = list(held_tensors(checked.config, checked.table, model.resident, model.dtype,
                             device_module.keeps_narrow("cpu", model.dtype, 1)))
    planned = (sum(t.nbytes for t in held if not t.mapped), sum(t.nbytes for t in held if t.mapped))
    assert planned == measured(model)
    if narrow and dtype == "float32" and resident is None:
        assert model.weights.lm_head.dtype == torch.bfloat16 and model.mapped.contains(model.weights.lm_head)
        assert model.mapped.contains(model.weights.embed) and model.dtype == torch.float32


@pytest.mark.parametrize("fmt", ["nvfp4", "bf16"])
def test_weights_kept_as_stored_compute_what_fp32_copies_compute(folders, monkeypatch, fmt):
    large(monkeypatch, False, True)
    copies = ElasticModel.load(folders[fmt], dtype="float32")
    large(monkeypatch, True, True)
    narrow = ElasticModel.load(folders[fmt], dtype="float32")
    assert measured(narrow)[0] < measured(copies)[0]  # less private memory
    for sub in ("30B", "12B"):
        a, b = (m.forward(sub, m.new_cache(sub, 16), IDS, all_logits=True) for m in (copies, narrow))
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), sub
        ca, cb = copies.new_cache(sub, 16), narrow.new_cache(sub, 16)
        copies.forward(sub, ca, IDS)
        narrow.forward(sub, cb, IDS)
        assert torch.allclose(copies.forward(sub, ca, [7]), narrow.forward(sub, cb, [7]), atol=1e-5, rtol=1e-5)


def test_the_ram_verdict_counts_private_memory_and_the_file_apart(folders, monkeypatch):
    """Fits while private memory and the whole file fit; tight while private memory and the file's pages
    every token reads fit (the rest is reread from disk); refused below that, with the numbers."""
    large(monkeypatch, True, True)
    folder = folders["nvfp4"]
    roomy = HardwareProbe((), 64 << 30, 32 << 30, 100 << 30, "no GPU here")
    fit = check_cpu_fit(folder, 1024, probe=roomy)
    model = ElasticModel.load(folder)
    private, mapped = measured(model)
    assert (fit.weight_bytes - fit.mapped_bytes, fit.mapped_bytes) == (private, mapped)
    assert fit.private_bytes == private + fit.cache_bytes + CPU_WORKSPACE_BYTES
    checked = inspect_checkpoint(folder)
    hot = sum(t.nbytes for t in held_tensors(checked.config, checked.table, model.resident, model.dtype, True)
              if t.mapped and ".experts." not in t.name and "embeddings" not in t.name)
    assert 0 < hot < mapped

    def verdict(available):
        probe = HardwareProbe((), 64 << 30, available, 100 << 30, "no GPU here")
        try:
            return check_cpu_fit(folder, 1024, probe=probe).verdict
        except Exception as e:
            assert "does not fit in RAM: needs" in str(e) and "of the file every token reads" in str(e)
            return NO

    assert verdict(int((fit.private_bytes + mapped) / 0.9) + 1) == FITS
    assert verdict(fit.private_bytes + mapped) == TIGHT
    assert verdict(fit.private_bytes + hot) == TIGHT
    assert verdict(fit.private_bytes + hot - 1) == NO
    assert "of weights read from the file (pages the OS can drop and reread)" in fit.reason
