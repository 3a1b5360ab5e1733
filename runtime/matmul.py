"""`linear(x, w, bias)` for dense and packed weights, and which kernel path actually runs.

Paths for packed weights, chosen once per (device, format) by what the GPU can do:

    dequantize   decode the weight exactly into the activation dtype through byte tables, then a
                 normal matmul (dequant.py): on the CPU block by block into buffers that stay in
                 cache; on a GPU whole (the weight-only fallback, capturable in a CUDA graph).
    fused        Triton kernels that decode the packed bytes in registers and multiply, each byte
                 read once (kernels/triton_fused.py): any CUDA GPU where triton imports and the
                 kernels pass their self-test; decode (up to FUSED_MAX_TOKENS rows) and the
                 gathered experts, whose ids they read on the device.
    fp8-scaled   FP8 activations (dynamic per-tensor scale) times FP8 weights with
                 torch._scaled_mm, compute capability 8.9 and newer.
    nvfp4-native FP4 activations and weights with torch._scaled_mm's block-scaled FP4 mode,
                 compute capability 10.x and 12.0, when this torch build supports it.

On CUDA each role takes the first path that passes its self-test at the shapes it runs:
decode rows (up to FUSED_MAX_TOKENS): native, else fused, else dequantize; prefill chunks:
native, else dequantize (a chunk of many rows amortises the decode); gathered experts: fused,
else dequantize (a native matmul has no gathered form). A path that fails keeps its reason,
shown in the engine status (KernelChoice.label and .note). Nothing falls back silently.
ELASTIC_CHAT_KERNEL=triton (or `force("triton")`) takes the fused kernels wherever they run (on
meta: their shape functions, for decode-check); =torch takes the dequantize path on CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import kernels
from .checkpoint.quant import PackedFP8, PackedNVFP4
from .checkpoint.quant_pack import FP8_MAX, pack_fp8, pack_nvfp4, swizzle_block_scales
from .dequant import linear as dequant_linear
from .errors import UsageError

ENV = "ELASTIC_CHAT_KERNEL"
KERNELS = ("auto", "triton", "torch")
FUSED_MAX_TOKENS = 16  # rows up to which a matmul is a decode's (fused kernels); more: a prefill chunk
NATIVE = {"FP8": "fp8-scaled", "NVFP4": "nvfp4-native"}
# (rows, out, in) the native paths must pass: one decode row of the 30B-A3B's shared-expert and
# expert-down shapes; prefill chunks of 17 rows (the fewest that take the prefill path) and 300.
DECODE_SHAPES = ((1, 3712, 2688), (1, 2688, 1856))
PREFILL_SHAPES = ((FUSED_MAX_TOKENS + 1, 2688, 1856), (300, 1856, 2688))


@dataclass(frozen=True)
class KernelChoice:
    path: str  # decode rows (<= FUSED_MAX_TOKENS): "dequantize", "fused", "fp8-scaled" or "nvfp4-native"
    label: str  # what the status shows, e.g. "NVFP4 fused Triton kernels (decode, experts); ..."
    note: str = ""  # why a faster path is not used, when it is not
    prefill: str = ""  # the path of more rows (prefill chunks); "" = the same as `path`
    experts: str = "dequantize"  # the gathered experts' path: "fused" or "dequantize"

    def for_rows(self, rows: int) -> str:
        return self.path if rows <= FUSED_MAX_TOKENS or not self.prefill else self.prefill


_choices: dict[tuple[str, str, str], KernelChoice] = {}
_forced: str | None = None


def force(kernel: str | None) -> None:
    """Overrides ELASTIC_CHAT_KERNEL for this process ("auto", "triton", "torch"; None: the variable)."""
    global _forced
    if kernel is not None and kernel not in KERNELS:
        raise UsageError(f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)}")
    _forced = kernel


def forced_kernel() -> str:
    kernel = _forced or os.environ.get(ENV, "").strip().lower() or "auto"
    if kernel not in KERNELS:
        raise UsageError(f"{ENV}={kernel!r} is not a kernel choice; use one of {', '.join(KERNELS)}")
    return kernel


def linear(x: torch.Tensor, w, bias: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(w, torch.Tensor):
        return F.linear(x, w, bias)
    path = kernel_for(w).for_rows(x.numel() // x.shape[-1])
    if path == "fp8-scaled":
        out = _fp8_scaled(x, w)
    elif path == "nvfp4-native":
        out = _nvfp4_native(x, w)
    elif path == "fused":
        out = kernels.backend("triton").linear(x, w)
    else:
        out = dequant_linear(x, w)
    return out if bias is None else out + bias


def experts_fused(w) -> bool:
    """Whether the gathered experts of stacked weight `w` run on the fused kernels (never for dense)."""
    return not isinstance(w, torch.Tensor) and kernel_for(w).experts == "fused"


def fused_experts(x: torch.Tensor, w, ids: torch.Tensor) -> torch.Tensor:
    """x (T, K) or (T, k, K) through experts ids (T, k) of a stacked packed weight: (T, k, N), the ids
    read on the device (kernels/__init__.py's `experts`)."""
    return kernels.backend("triton").experts(x, w, ids)


def kernel_for(w) -> KernelChoice:
    return describe(w.device, "NVFP4" if isinstance(w, PackedNVFP4) else "FP8")


def describe(device: torch.device, fmt: str) -> KernelChoice:
    """The path packed weights of format `fmt` take on `device` (runs the self-tests if needed)."""
    key = (str(torch.device(device)), fmt, forced_kernel())
    if key not in _choices:
        _choices[key] = _choose(torch.device(device), fmt, key[2])
    return _choices[key]


def _choose(device: torch.device, fmt: str, forced: str) -> KernelChoice:
    fallback = f"{fmt} weight-only dequantize"
    if forced == "triton":
        why = kernels.unavailable("triton", device)
        if why is None:
            shapes = " (shapes only on meta)" if device.type == "meta" else ""
            return KernelChoice("fused", f"{fmt} fused Triton kernels{shapes}", f"chosen by {ENV}=triton",
                                experts="fused")
        if device.type == "cuda":
            return KernelChoice("dequantize", fallback, f"{ENV}=triton, but {why}")
    if device.type != "cuda":
        return KernelChoice("dequantize", f"{fmt} weights decoded exactly by byte table + matmul (CPU)")
    if forced == "torch":
        return KernelChoice("dequantize", fallback, f"chosen by {ENV}=torch")
    native = _native_problem(device, fmt)
    decode_native = native or _self_test(device, NATIVE[fmt], DECODE_SHAPES)
    prefill_native = native or _self_test(device, NATIVE[fmt], PREFILL_SHAPES)
    fused_problem = _fused_problem(device, fmt)
    fused = "fused" if fused_problem is None else "dequantize"
    decode = NATIVE[fmt] if decode_native is None else fused
    prefill = NATIVE[fmt] if prefill_native is None else "dequantize"
    if native:
        notes = [f"native {fmt} matmul {native}"]
    else:
        notes = [f"native {fmt} matmul failed its self-test at decode rows: {decode_native}" if decode_native else "",
                 f"native {fmt} matmul failed its self-test at prefill chunks: {prefill_native}" if prefill_native
                 else ""]
    notes.append(f"fused Triton kernels: {fused_problem}" if fused_problem else "")
    return KernelChoice(decode, _label(fmt, {"decode": decode, "prefill": prefill, "experts": fused}),
                        "; ".join(n for n in notes if n), prefill, fused)


def _label(fmt: str, roles: dict[str, str]) -> str:
    """e.g. "NVFP4 fused Triton kernels (decode, experts); NVFP4 native matmul (prefill)"."""
    names = {"dequantize": f"{fmt} weight-only dequantize", "fused": f"{fmt} fused Triton kernels",
             "fp8-scaled": "FP8 scaled matmul", "nvfp4-native": "NVFP4 native matmul"}
    paths = list(dict.fromkeys(roles.values()))
    if len(paths) == 1:
        return names[paths[0]]
    return "; ".join(f"{names[p]} ({', '.join(r for r, q in roles.items() if q == p)})" for p in paths)


def _fused_problem(device: torch.device, fmt: str) -> str | None:
    """Why the fused Triton kernels cannot run `fmt` on this GPU (not installed, or a failed self-test)."""
    return kernels.unavailable("triton", device) or kernels.backend("triton").self_test(device, fmt)


def _native_problem(device: torch.device, fmt: str) -> str | None:
    """Why this GPU and torch build have no native matmul for `fmt` at all, or None."""
    major, minor = torch.cuda.get_device_capability(device)
    if fmt == "FP8":
        return None if (major, minor) >= (8, 9) else f"needs compute capability 8.9+, this GPU is {major}.{minor}"
    if major not in (10, 12):
        return f"needs a Blackwell GPU (10.x or 12.0), this is {major}.{minor}"
    if not hasattr(torch, "float4_e2m1fn_x2"):
        return "this PyTorch build has no FP4 dtype"
    return None


def _self_test(device: torch.device, path: str, shapes) -> str | None:
    """Runs `path` on random problems of each (rows, out, in) and compares it with the exact reference."""
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        for rows, n, k in shapes:
            x = torch.randn(rows, k, generator=g).to(device, torch.bfloat16)
            w = torch.randn(n, k, generator=g) / k ** 0.5
            packed = (pack_fp8 if path == "fp8-scaled" else pack_nvfp4)(w).to(device)
            want = F.linear(x.float(), packed.dequantize(torch.float32))
            got = (_fp8_scaled if path == "fp8-scaled" else _nvfp4_native)(x, packed).float()
            err = ((got - want).norm() / want.norm()).item()
            limit = 0.05 if path == "fp8-scaled" else 0.15  # activation quantization costs some precision
            if not err < limit:
                return f"relative error {err:.3f} against the reference at {rows} x {k} -> {n}"
        return None
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

