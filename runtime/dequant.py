"""Packed weights decoded into the compute dtype through byte tables: the exact weight-only path.

Every NVFP4 value is an E2M1 code times its block's E4M3 scale, and every such product is exact in
bfloat16, float16 and float32 (at most 6 significant bits, exponents from 2^-10 to 2688); FP8
values are exact in all three too. So table lookups decode weights exactly, with the per-matrix
scale (NVFP4's `weight_scale_2`, FP8's `weight_scale`) applied once, to the matmul's output:

    pairs   index = block scale byte << 8 | code byte -> (e2m1(low) * scale, e2m1(high) * scale),
            or, FP8, the two bytes of a pair read as one uint16 -> (e4m3(first), e4m3(second))
    quads   two NVFP4 code bytes read as one uint16 -> 4 unscaled E2M1 values (one 8-byte gather)

Indices are built without arithmetic: bytes copied into the low bytes of a zeroed int32 buffer
(little-endian), or a uint16 view widened to int32; the tables (256-512 KiB) stay in cache.

* CPU, one token (`linear`, NVFP4): a block of rows at a time, the codes of each (row, 16-input
  block) transposed to block-major order and looked up as quads; one batched matmul gives each
  block's partial sum, which its scale weights in fp32. Less work per weight than scaling each one.
* CPU, several tokens, and FP8: blocks of rows decoded as scaled pairs into reused cache-sized
  buffers, then one matmul per block, so the matmul's cost does not grow with the decode's.
* GPU without native FP8/NVFP4 matmuls (`dequantize`): the whole (stacked) weight in one gather,
  no host sync (it captures in a CUDA graph), bit for bit ModelOpt's fp32 values before rounding.

No path decodes a whole matrix to fp32 per token on the CPU. `quant.py`'s `dequantize` stays the
slow, obviously right reference; the tests compare every path with ModelOpt's own dequantization.
"""

from __future__ import annotations

import sys
import threading
import types

import torch

from .checkpoint.quant import BLOCK, E2M1_VALUES, PackedFP8, PackedNVFP4

assert sys.byteorder == "little", "the byte tables assume a little-endian machine"

PAIR = {torch.bfloat16: torch.int32, torch.float16: torch.int32, torch.float32: torch.int64}
CHUNK_BYTES = 2 << 20  # decoded weight rows per block on the CPU: about the L2 cache of one core

_tables: dict[tuple, torch.Tensor] = {}
_local = threading.local()  # per-thread CPU buffers (an engine decodes on one thread; tests may use several)


def _scratch() -> types.SimpleNamespace:
    """This thread's buffers for the current autograd mode: a buffer made under inference_mode is an
    inference tensor, which torch refuses to update in place outside it (and the reverse)."""
    mode = torch.is_inference_mode_enabled()
    spaces = _local.__dict__.setdefault("spaces", {})
    return spaces.setdefault(mode, types.SimpleNamespace())


def table(fmt: str, device, dtype: torch.dtype) -> torch.Tensor:
    """(65536,) pairs of `dtype` values, each pair stored as one integer (see the module doc)."""
    key = (fmt, str(torch.device(device)), dtype)
    if key not in _tables:
        byte = torch.arange(256, dtype=torch.int64)
        e4m3 = byte.to(torch.uint8).view(torch.float8_e4m3fn).float()  # 0x7F/0xFF are NaN, as the format says
        if fmt == "NVFP4":  # [scale byte, code byte]
            low, high = E2M1_VALUES[byte & 0x0F], E2M1_VALUES[byte >> 4]
            pairs = torch.stack([e4m3[:, None] * low[None, :], e4m3[:, None] * high[None, :]], dim=-1)
        else:  # [second byte, first byte]
            pairs = torch.stack([e4m3[None, :].expand(256, 256), e4m3[:, None].expand(256, 256)], dim=-1)
        pairs = pairs.to(dtype).reshape(65536, 2).contiguous()  # (index, 2 values)
        _tables[key] = pairs.view(PAIR[dtype]).reshape(65536).to(device)
    return _tables[key]


def prepare(device, dtype: torch.dtype) -> None:
    """Builds the tables `dequantize` reads on `device` now (a CUDA graph cannot copy them there
    during capture); the CPU's are built on first use."""
    _quads(device, torch.float32)
    table("FP8", device, torch.float32)


def _index(w, rows: slice, out: torch.Tensor) -> torch.Tensor:
    """The table indices of weight rows `rows` as int32 (..., n, K/2), written into `out`, whose
    bytes 2-3 of every element are zero (only bytes 0-1 are ever written)."""
    b = out.view(torch.uint8).unflatten(-1, (-1, 4))  # (..., n, K/2, 4): the bytes of each index
    if isinstance(w, PackedNVFP4):
        codes, scales = w.packed[..., rows, :], w.scale[..., rows, :].view(torch.uint8)
        b[..., 0].copy_(codes)
        b[..., 1].unflatten(-1, (-1, BLOCK // 2)).copy_(scales[..., None].expand(*scales.shape, BLOCK // 2))
    else:  # FP8: the pair's two bytes are the index, low byte first
        out.copy_(w.weight[..., rows, :].view(torch.uint16))
    return out


def _scale(w) -> torch.Tensor:
    """The per-matrix fp32 scale: (), or (E,) for stacked experts."""
    return w.scale2 if isinstance(w, PackedNVFP4) else w.scale


def dequantize(w, dtype: torch.dtype) -> torch.Tensor:
    """The whole weight (any leading dims) in `dtype`, bit for bit ModelOpt's fp32 values rounded
    once to `dtype`: NVFP4 codes are looked up 4 at a time and scaled by fp32 scale * scale2 per
    block, as ModelOpt computes them; FP8 pairs are looked up and scaled by the per-matrix scale."""
    shape = w.shape
    if isinstance(w, PackedFP8):
        index = w.weight.contiguous().view(torch.uint16).to(torch.int32)  # (..., N, K/2)
        values = table("FP8", w.device, torch.float32).index_select(0, index.reshape(-1)).view(torch.float32)
        return (values.view(shape) * w.scale.float()[(...,) + (None,) * 2]).to(dtype)
    quads = _quads(w.device, torch.float32)  # (65536, 4) fp32
    index = w.packed.contiguous().view(torch.uint16).to(torch.int32)  # (..., N, K/4): two code bytes each
    values = quads.index_select(0, index.reshape(-1)).view(*shape[:-1], shape[-1] // BLOCK, BLOCK)
    scales = w.scale.float() * w.scale2.float()[(...,) + (None,) * 2]  # (..., N, K/16), as ModelOpt
    return (values * scales[..., None]).view(shape).to(dtype)


def _buffers(n: int, pair: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """This thread's CPU buffers of n elements: a zeroed int32 index buffer and one of value pairs."""
    local = _scratch()
    index = getattr(local, "index", None)
    if index is None or index.numel() < n:
        index = local.index = torch.zeros(n, dtype=torch.int32)
    if not hasattr(local, "values"):
        local.values = {}
    values = local.values.get(pair)
    if values is None or values.numel() < n:
        values = local.values[pair] = torch.empty(n, dtype=pair)
    return index, values


def _quads(device, dtype: torch.dtype) -> torch.Tensor:
    """NVFP4 without its scales: (65536, 4) values of two code bytes (a uint16, low byte first), as
    one int64 per entry when `dtype` has 2 bytes (one 8-byte gather per 4 values)."""
    key = ("quads", str(torch.device(device)), dtype)
    if key not in _tables:
        codes = torch.arange(65536)
        values = torch.stack([E2M1_VALUES[(codes >> (4 * i)) & 0x0F] for i in range(4)], dim=-1).to(dtype)
        values = values.view(torch.int64).reshape(65536) if values.element_size() == 2 else values
        _tables[key] = values.contiguous().to(device)
    return _tables[key]


def _scale_values(device) -> torch.Tensor:
    key = ("e4m3", str(torch.device(device)))
    if key not in _tables:
        _tables[key] = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(torch.float8_e4m3fn).float().to(device)
    return _tables[key]


def linear(x: torch.Tensor, w) -> torch.Tensor:
    """x (..., K) @ w.T for a 2-D packed weight (N, K), decoding blocks of rows into `x.dtype`."""
    N, K = w.shape
    x2 = x.reshape(-1, K)
    if x.device.type != "cpu":  # one whole decode: a GPU has the bandwidth, and it captures in a graph
        return (x2 @ dequantize(w, x.dtype).T).reshape(*x.shape[:-1], N)
    rows = max(16, CHUNK_BYTES // (K * x2.element_size()))
    # One token: NVFP4's scales weight 16-wide partial sums (less work per weight than scaling every
    # weight); several tokens: decode the scaled weights, so the matmul's cost does not grow with them.
    one = x2.shape[0] == 1 and isinstance(w, PackedNVFP4)
    out = (_nvfp4_rows if one else _pair_rows)(x2, w, rows)  # (N, T)
    out = out.T if x2.shape[0] == 1 else out.T.contiguous()
    return out.to(x.dtype).reshape(*x.shape[:-1], N)


def _pair_rows(x2: torch.Tensor, w, rows: int) -> torch.Tensor:
    """Each pair of weights decoded (scaled, for NVFP4) through the 65,536-entry tables; (N, T)."""
    N, K = w.shape
    dtype = x2.dtype
    lut = table("NVFP4" if isinstance(w, PackedNVFP4) else "FP8", "cpu", dtype)
    index, values = _buffers(min(rows, N) * K // 2, PAIR[dtype])
    out = torch.empty(N, x2.shape[0], dtype=dtype)  # (N, T): each block's rows land contiguously
    for start in range(0, N, rows):
        stop = min(N, start + rows)
        n = (stop - start) * K // 2
        idx = _index(w, slice(start, stop), index[:n].view(stop - start, K // 2))
        block = torch.index_select(lut, 0, idx.view(-1), out=values[:n]).view(dtype).view(stop - start, K)
        torch.mm(block, x2.T, out=out[start:stop])
    return out.mul_(_scale(w))


def _nvfp4_rows(x2: torch.Tensor, w: PackedNVFP4, rows: int) -> torch.Tensor:
    """NVFP4, a block of rows at a time in block-major order: the 8 code bytes of each (row, 16-input
    block) are one int64, transposed to (block, row); as uint16s they index the unscaled values,
    4 per lookup; one batched matmul gives every (block, row) partial sum, which its E4M3 scale
    (an exact fp32 lookup) weights in fp32. Returns (N, T) fp32."""
    N, K = w.shape
    B, T, dtype = K // BLOCK, x2.shape[0], x2.dtype
    quads, scale_of = _quads("cpu", dtype), _scale_values("cpu")
    xb = x2.T.reshape(B, BLOCK, T)  # (block, 16, T)
    local = _scratch()
    cache = getattr(local, "nvfp4", None)
    if cache is None or cache[0].numel() < rows * B:
        cache = local.nvfp4 = (torch.empty(rows * B, dtype=torch.int64), torch.empty(rows * B * 4, dtype=torch.int32),
                                torch.empty(rows * B * 4, dtype=quads.dtype if quads.dim() == 1 else torch.int64),
                                torch.empty(rows * B, dtype=torch.int32))
    codes_t, index, values, scale_index = cache
    out = torch.empty(N, T)
    for start in range(0, N, rows):
        stop = min(N, start + rows)
        n = stop - start
        blocks = codes_t[:B * n].view(B, n)
        blocks.copy_(w.packed[start:stop].view(torch.int64).T)  # (block, row): 16 codes each
        idx = index[:B * n * 4]
        idx.copy_(blocks.view(torch.uint16).view(-1))  # (block, row, 4) uint16 -> int32
        if quads.dim() == 1:
            v = torch.index_select(quads, 0, idx, out=values[:B * n * 4]).view(dtype)
        else:
            v = quads.index_select(0, idx)
        partial = torch.bmm(v.view(B, n, BLOCK), xb)  # (block, row, T)
        si = scale_index[:B * n].view(B, n)
        si.copy_(w.scale[start:stop].view(torch.uint8).T)
        scales = scale_of.index_select(0, si.view(-1)).view(B, n, 1)
        torch.sum(partial.float().mul_(scales), dim=0, out=out[start:stop])
    return out.mul_(w.scale2)
