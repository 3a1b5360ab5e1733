"""Which path packed matmuls take (runtime/matmul.py): on CUDA each role (decode rows, prefill chunks,
gathered experts) takes the first path that passes its self-test at the shapes it runs, with every
refusal's reason in the status; GPUs are simulated by their compute capability and self-test results."""

import pytest
import torch

from runtime import matmul
from runtime.checkpoint.quant_pack import pack_nvfp4
from runtime.errors import UsageError

CUDA = torch.device("cuda")
REFUSED = "RuntimeError: mat_a must have at least 128 rows"  # what a native matmul might say


@pytest.fixture
def gpu(monkeypatch):
    """A simulated GPU: set .capability, .native (shape set -> problem), .fused (problem or None)."""
    class Gpu:
        capability = (8, 6)
        native = {}
        fused = None

    monkeypatch.setattr(matmul, "_choices", {})
    monkeypatch.delenv(matmul.ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: Gpu.capability)
    monkeypatch.setattr(matmul, "_self_test", lambda device, path, shapes: Gpu.native.get(shapes))
    monkeypatch.setattr(matmul, "_fused_problem", lambda device, fmt: Gpu.fused)
    monkeypatch.setattr(torch, "float4_e2m1fn_x2", torch.uint8, raising=False)
    return Gpu


@pytest.mark.parametrize("capability, fmt, native, fused, want", [
    # RTX 30 (8.6): no native format; the fused kernels decode and run the experts
    ((8, 6), "NVFP4", {}, None, ("fused", "dequantize", "fused")),
    ((8, 6), "FP8", {}, None, ("fused", "dequantize", "fused")),
    # ...and without triton, today's dequantize path everywhere
    ((8, 6), "NVFP4", {}, "triton kernels cannot be imported (No module named 'triton')",
     ("dequantize", "dequantize", "dequantize")),
    # RTX 40 (8.9), FP8: native for both when it passes at one row
    ((8, 9), "FP8", {}, None, ("fp8-scaled", "fp8-scaled", "fused")),
    # RTX 50 (12.0), NVFP4, a torch whose block-scaled FP4 refuses one row: fused decode, native prefill
    ((12, 0), "NVFP4", {matmul.DECODE_SHAPES: REFUSED}, None, ("fused", "nvfp4-native", "fused")),
    # ...refusing every shape: fused decode, dequantized prefill chunks
    ((12, 0), "NVFP4", {matmul.DECODE_SHAPES: REFUSED, matmul.PREFILL_SHAPES: REFUSED}, None,
     ("fused", "dequantize", "fused")),
    # NVFP4 on a 40-series card: never native
    ((8, 9), "NVFP4", {}, None, ("fused", "dequantize", "fused")),
])
def test_each_role_takes_the_first_path_that_passes(gpu, capability, fmt, native, fused, want):
    gpu.capability, gpu.native, gpu.fused = capability, native, fused
    choice = matmul.describe(CUDA, fmt)
    assert (choice.path, choice.prefill, choice.experts) == want
    for problem in [*native.values(), fused]:
        assert problem is None or problem in choice.note  # every refusal is in the status, with its words


def test_the_status_says_what_runs_where_and_why(gpu):
    gpu.capability, gpu.native = (12, 0), {matmul.DECODE_SHAPES: REFUSED}
    choice = matmul.describe(CUDA, "NVFP4")
    assert choice.label == "NVFP4 fused Triton kernels (decode, experts); NVFP4 native matmul (prefill)"
    assert choice.note == f"native NVFP4 matmul failed its self-test at decode rows: {REFUSED}"
    gpu.capability = (8, 6)
    gpu.fused = "triton kernels cannot be imported (No module named 'triton')"
    choice = matmul.describe(CUDA, "FP8")
    assert choice.label == "FP8 weight-only dequantize"
    assert choice.note == ("native FP8 matmul needs compute capability 8.9+, this GPU is 8.6; "
                           "fused Triton kernels: triton kernels cannot be imported (No module named 'triton')")


def test_the_environment_chooses(gpu, monkeypatch):
    monkeypatch.setenv(matmul.ENV, "torch")
    choice = matmul.describe(CUDA, "NVFP4")
    assert (choice.path, choice.experts) == ("dequantize", "dequantize")
    assert choice.note == "chosen by ELASTIC_CHAT_KERNEL=torch"
    monkeypatch.setenv(matmul.ENV, "triton")
    monkeypatch.setattr(matmul.kernels, "unavailable", lambda name, device: None)
    assert matmul.describe(CUDA, "NVFP4").path == "fused"
    monkeypatch.setenv(matmul.ENV, "cublas")
    with pytest.raises(UsageError, match="ELASTIC_CHAT_KERNEL='cublas' is not a kernel choice; use one of auto"):
        matmul.describe(CUDA, "NVFP4")


def test_force_overrides_the_environment_until_reset(gpu, monkeypatch):
    monkeypatch.setenv(matmul.ENV, "torch")
    matmul.force("auto")
    try:
        assert matmul.describe(CUDA, "NVFP4").path == "fused"
    finally:
        matmul.force(None)
    assert matmul.describe(CUDA, "NVFP4").path == "dequantize"
    with pytest.raises(UsageError, match="unknown kernel 'fast'"):
        matmul.force("fast")


def test_the_cpu_path_is_unchanged_unless_triton_is_asked_for(monkeypatch):
    monkeypatch.setattr(matmul, "_choices", {})
    monkeypatch.delenv(matmul.ENV, raising=False)
    assert matmul.describe(torch.device("cpu"), "NVFP4").label.endswith("(CPU)")
    assert matmul.describe(torch.device("meta"), "FP8").path == "dequantize"


@pytest.mark.parametrize("shape, want", [((1, 32), "fused"), ((16, 32), "fused"), ((17, 32), "dequantize"),
                                         ((512, 32), "dequantize"), ((2, 8, 32), "fused"), ((2, 9, 32), "dequantize")])
def test_rows_decide_between_the_decode_and_the_prefill_path(monkeypatch, shape, want):
    """Up to FUSED_MAX_TOKENS rows (leading dims together) take the decode path, more the prefill's."""
    choice = matmul.KernelChoice("fused", "test", prefill="dequantize", experts="fused")
    monkeypatch.setattr(matmul, "kernel_for", lambda w: choice)
    ran = []

    def recorder(name):
        return lambda x, w: ran.append(name) or torch.zeros(*x.shape[:-1], w.shape[0])

    class Fused:
        linear = staticmethod(recorder("fused"))

    monkeypatch.setattr(matmul.kernels, "backend", lambda name: Fused)
    monkeypatch.setattr(matmul, "dequant_linear", recorder("dequantize"))
    out = matmul.linear(torch.randn(*shape), pack_nvfp4(torch.randn(8, 32)))
    assert out.shape == (*shape[:-1], 8) and ran == [want]
