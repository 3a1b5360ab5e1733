"""A dense weight stored narrower than the compute dtype (BF16 or FP16 under fp32), multiplied exactly.

A large checkpoint on a CPU without native BF16 matmuls computes in fp32 but keeps its BF16 linears
and embeddings as stored (device.keeps_narrow): views of the memory-mapped file, file-backed pages the
OS can drop and reread, instead of fp32 copies twice their size in private memory (the real 30B's
2.2 GB of BF16 weights would take 4.3 GB). Widening BF16 or FP16 to fp32 is exact, so the product is
the fp32 one: rows are widened a block at a time into a buffer that stays in cache, then multiplied.
"""

from __future__ import annotations

import threading

import torch

BLOCK_ROWS = 512  # 512 rows of a 2688-wide weight in fp32: 5.5 MB, about the L3 share of one core

_local = threading.local()  # per-thread buffers, per autograd mode (as dequant.py's)


def widened_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) in the compute dtype times w (out, in) stored narrower: (..., out) in x's dtype."""
    x2 = x.reshape(-1, x.shape[-1])  # (T, in)
    out = torch.empty(x2.shape[0], w.shape[0], dtype=x.dtype, device=x.device)  # (T, out)
    buf = _buffer(min(BLOCK_ROWS, w.shape[0]) * w.shape[1], x.dtype, x.device)
    for start in range(0, w.shape[0], BLOCK_ROWS):
        rows = w[start:start + BLOCK_ROWS]  # (n, in)
        block = buf[:rows.numel()].view(rows.shape)
        block.copy_(rows)
        if x2.shape[0] == 1:
            torch.mm(x2, block.t(), out=out[:, start:start + rows.shape[0]])  # a contiguous piece of the row
        else:
            out[:, start:start + rows.shape[0]] = x2 @ block.t()
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], w.shape[0])


def _buffer(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    key = (torch.is_inference_mode_enabled(), dtype, str(device))
    buffers = _local.__dict__.setdefault("buffers", {})
    buf = buffers.get(key)
    if buf is None or buf.numel() < n:
        buf = buffers[key] = torch.empty(n, dtype=dtype, device=device)
    return buf
