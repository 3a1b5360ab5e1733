"""How a weight is handed to the compiled library: its format code, its bytes, its block scales and
its per-matrix scale, read in place (the library takes views: strided rows, per-expert views of a
mapped file). Shared by the backend (__init__.py) and the self-test that vets a code path."""

from __future__ import annotations

import torch

from ...checkpoint.quant import PackedFP8, PackedNVFP4

NVFP4, FP8, BF16 = 0, 1, 2  # the library's format codes (csrc/kernels.h)
_ONE = torch.ones(())


def args(w):
    """(format, data, block scales or None, per-matrix scale) of a weight, as the library takes them."""
    if isinstance(w, PackedNVFP4):
        return NVFP4, w.packed, w.scale, w.scale2
    if isinstance(w, PackedFP8):
        return FP8, w.weight, None, w.scale
    if isinstance(w, torch.Tensor) and w.dtype == torch.bfloat16:
        return BF16, w, None, _ONE
    raise TypeError(f"the CPU kernels take NVFP4, FP8 or BF16 weights, not {type(w).__name__}")


def call(module, x: torch.Tensor, w, exact: bool = False) -> torch.Tensor:
    """x (T, K) @ w.T in fp32 through `module` (the loaded library)."""
    fmt, data, scales, scale2 = args(w)
    return module.linear(x, fmt, data, scales, scale2, exact)
