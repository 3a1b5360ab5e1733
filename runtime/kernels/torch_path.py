"""The packed-weight kernels in plain PyTorch: byte-table decoding (dequant.py), then a matmul.

The path every device can take; the reference the faster backends fall back to. See
runtime/kernels/__init__.py for the interface.
"""

from __future__ import annotations

import torch

from .. import dequant


def unavailable(device: torch.device) -> str | None:
    return None


def linear(x: torch.Tensor, w) -> torch.Tensor:
    return dequant.linear(x, w)


def experts(x: torch.Tensor, w, ids: torch.Tensor) -> torch.Tensor:
    T, k = ids.shape
    N, K = w.shape[-2:]
    chosen = dequant.dequantize(w[ids.reshape(-1)], x.dtype)  # (T*k, N, K): only the chosen experts
    xs = x[:, None, :].expand(T, k, K) if x.dim() == 2 else x  # (T, k, K)
    return torch.bmm(chosen, xs.reshape(T * k, K, 1)).view(T, k, N)


def tolerance(fmt: str, dtype: torch.dtype) -> float:
    # The weights are decoded exactly; what is left is the activations' and the output's rounding
    # to `dtype` and the matmul's accumulation order.
    return {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}[dtype]
