"""`linear(x, w, bias)` for dense and packed weights, and which kernel path actually runs.

Paths for packed weights, chosen once per (device, format) by what the device can do:

    cpu-kernel   the project's C++ kernels (runtime/kernels/cpu/): codes decoded in registers,
                 read in place; on the CPU wherever they are built. They also take BF16 weights
                 on the CPU: one token always (a matvec at the memory's speed), several where the
                 CPU has no native BF16 matmul (PyTorch's emulated one is about 10x slower).
    dequantize   decode the weight exactly into the activation dtype through byte tables, then a
                 normal matmul (dequant.py): on the CPU block by block into buffers that stay in
                 cache (where the kernels are not built); on a GPU whole (the weight-only
                 fallback, capturable in a CUDA graph).
    fp8-scaled   FP8 activations (dynamic per-tensor scale) times FP8 weights with
                 torch._scaled_mm, compute capability 8.9 and newer.
    nvfp4-native FP4 activations and weights with torch._scaled_mm's block-scaled FP4 mode,
                 compute capability 10.x and 12.0, when this torch build supports it.

A fast path is used only after a self-test on the device agrees with the reference; if the
test fails the reason is kept and shown in the engine status. Nothing falls back silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import kernels
from .checkpoint.quant import PackedFP8, PackedNVFP4
from .checkpoint.quant_pack import FP8_MAX, pack_fp8, pack_nvfp4, swizzle_block_scales
from .dequant import linear as dequant_linear
from .device import cpu_runs_bf16


@dataclass(frozen=True)
class KernelChoice:
    path: str  # "cpu-kernel", "dequantize", "fp8-scaled" or "nvfp4-native"
    label: str  # what the status shows, e.g. "FP8 scaled matmul" or "NVFP4 weight-only dequantize"
    note: str = ""  # why a faster path is not used, when it is not


_choices: dict[tuple[str, str], KernelChoice] = {}


def linear(x: torch.Tensor, w, bias: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(w, torch.Tensor):
        if not _cpu_bf16(x, w):
            return F.linear(x, w, bias)
        out = kernels.backend("cpu").linear(x, w)
    elif (path := kernel_for(w).path) == "cpu-kernel":
        out = kernels.backend("cpu").linear(x, w)
    elif path == "fp8-scaled":
        out = _fp8_scaled(x, w)
    elif path == "nvfp4-native":
        out = _nvfp4_native(x, w)
    else:
        out = dequant_linear(x, w)
    return out if bias is None else out + bias


def _cpu_bf16(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether a dense BF16 product goes to the CPU kernels (see the module doc)."""
    if w.dtype != torch.bfloat16 or x.dtype != torch.bfloat16 or x.device.type != "cpu":
        return False
    if describe(x.device, "BF16").path != "cpu-kernel":
        return False
    return x.numel() == x.shape[-1] or not _native_bf16()


_native: list[bool] = []


def _native_bf16() -> bool:
    if not _native:
        _native.append(cpu_runs_bf16())
    return _native[0]


def reset_choices() -> None:
    """Forget the paths chosen (tests that build or turn off kernels within one process)."""
    _choices.clear()
    _native.clear()


def kernel_for(w) -> KernelChoice:
    return describe(w.device, "NVFP4" if isinstance(w, PackedNVFP4) else "FP8")


def describe(device: torch.device, fmt: str) -> KernelChoice:
    """The path packed weights of format `fmt` take on `device` (runs the self-test if needed)."""
    key = (str(torch.device(device)), fmt)
    if key not in _choices:
        _choices[key] = _choose(torch.device(device), fmt)
    return _choices[key]


def _choose(device: torch.device, fmt: str) -> KernelChoice:
    if device.type == "cpu":
        why = kernels.unavailable("cpu", device)
        if why is None:
            return KernelChoice("cpu-kernel", f"{fmt} weights read in registers by the CPU kernels "
                                              f"({kernels.backend('cpu').path()})")
        return KernelChoice("dequantize", f"{fmt} weights decoded exactly by byte table + matmul (CPU)",
                            f"CPU kernels {why}")
    if device.type != "cuda":
        return KernelChoice("dequantize", f"{fmt} weights decoded exactly by byte table + matmul (CPU)")
    major, minor = torch.cuda.get_device_capability(device)
    fallback = f"{fmt} weight-only dequantize"
    if fmt == "FP8":
        if (major, minor) < (8, 9):
            return KernelChoice("dequantize", fallback,
                                f"FP8 matmul needs compute capability 8.9+, this GPU is {major}.{minor}")
        problem = _self_test(device, "fp8-scaled")
        return KernelChoice("fp8-scaled", "FP8 scaled matmul") if problem is None else \
            KernelChoice("dequantize", fallback, f"FP8 scaled matmul failed its self-test: {problem}")
    if major not in (10, 12):
        return KernelChoice("dequantize", fallback,
                            f"native NVFP4 needs a Blackwell GPU (10.x or 12.0), this is {major}.{minor}")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        return KernelChoice("dequantize", fallback, "this PyTorch build has no FP4 dtype")
    problem = _self_test(device, "nvfp4-native")
    return KernelChoice("nvfp4-native", "NVFP4 native matmul") if problem is None else \
        KernelChoice("dequantize", fallback, f"native NVFP4 failed its self-test: {problem}")


def _self_test(device: torch.device, path: str) -> str | None:
    """Runs `path` on a random problem and compares it with the dequantizing reference."""
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(32, 256, generator=g).to(device, torch.bfloat16)
        w = torch.randn(128, 256, generator=g) / 16
        packed = (pack_fp8 if path == "fp8-scaled" else pack_nvfp4)(w).to(device)
        want = F.linear(x.float(), packed.dequantize(torch.float32))
        got = (_fp8_scaled if path == "fp8-scaled" else _nvfp4_native)(x, packed).float()
        err = ((got - want).norm() / want.norm()).item()
        limit = 0.05 if path == "fp8-scaled" else 0.15  # activation quantization costs some precision
        return None if err < limit else f"relative error {err:.3f} against the reference"
    except Exception as e:  # an unsupported kernel raises; the message says which
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def _fp8_scaled(x: torch.Tensor, w: PackedFP8) -> torch.Tensor:
    """FP8 x FP8 with a dynamic per-tensor activation scale."""
    x2 = x.reshape(-1, x.shape[-1])
    scale = (x2.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
    xq = (x2.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    out = torch._scaled_mm(xq, w.weight.t(), scale_a=scale, scale_b=w.scale.float().reshape(()), out_dtype=x.dtype)
    return out.reshape(*x.shape[:-1], -1)


def _nvfp4_native(x: torch.Tensor, w: PackedNVFP4) -> torch.Tensor:
    """FP4 x FP4 with 16-wide block scales: activations are quantized on the fly."""
    x2 = x.reshape(-1, x.shape[-1])
    xq = pack_nvfp4(x2.float())
    out = torch._scaled_mm(xq.packed.view(torch.float4_e2m1fn_x2), w.packed.view(torch.float4_e2m1fn_x2).t(),
                           swizzle_block_scales(xq.scale), swizzle_block_scales(w.scale), out_dtype=torch.float32)
    out = out * (xq.scale2 * w.scale2.float())
    return out.to(x.dtype).reshape(*x.shape[:-1], -1)

