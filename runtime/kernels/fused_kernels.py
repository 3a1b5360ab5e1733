"""The Triton kernels: packed NVFP4 and FP8 weights decoded in registers and multiplied, each weight
byte read once. triton_fused.py launches them; read the design there and in docs/quantization.md.

Two kernels per format:

    rows    one output row (a token, or a token's chosen expert) per program column, a block of
            BLOCK_N weight rows per program: multiply-adds on CUDA cores (FMA), any activation dtype.
            With `ids`, row r reads the weights of expert ids[r] (loaded on the device: no host sync).
    dot     BLOCK_T tokens at once (2..16 at decode), the decoded weight tile fed to tl.dot with
            fp32 accumulation; bf16/fp16 activations only (the weights are exact in both).
            F32_DOT feeds tl.dot the same exact values as fp32 operands: Triton 3.8's interpreter
            multiplies bf16 operands as their raw 16-bit integers (its create_dot matmuls the
            uint16 storage), so the launcher sets it there; compiled, the tensor cores take bf16.

Both may split K over the grid's third axis (SPLIT > 1), writing fp32 partial sums that the
caller adds in a fixed order (deterministic: no atomics); with SPLIT == 1 they write the output.

Decoding without lookup tables or FP8 types (RTX 30 cards have no FP8 conversions):
    E2M1 nibble s.ee.m -> fp16 bits s<<15 | eem<<9 is the value times 2^-14 (fp16's exponent bias
    15 against E2M1's 1; code 1, a subnormal there too, lands on 0.5 * 2^-14 exactly);
    E4M3 byte s.eeee.mmm -> fp16 bits s<<15 | eeeemmm<<7 is the value times 2^-8 (bias 15
    against 7; its subnormals map to fp16 subnormals), NaN where eeeemmm is all ones.
The fp16 values convert to fp32 exactly; the powers of two are applied once, to the block's or
the row's scale. Every product code * block scale has at most 6 significant bits, so it is exact
in bf16 and fp16 (as dequant.py's tables rely on too).
"""

from __future__ import annotations

import triton
import triton.language as tl

E2M1_UNIT = tl.constexpr(16384.0)  # 2^14: the fp16 bit trick's E2M1 values are the true ones times 2^-14
E4M3_UNIT = tl.constexpr(256.0)  # 2^8: likewise for E4M3 (block scales, FP8 weights)


@triton.jit
def _e2m1(nibble):
    """E2M1 codes (any int tensor, values 0..15) -> fp32 values times 2^-14."""
    n = nibble.to(tl.int16)
    return (((n & 8) << 12) | ((n & 7) << 9)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _e4m3(byte):
    """E4M3 bytes (uint8 tensor) -> fp32 values times 2^-8; 0x7F/0xFF are NaN, as the format says."""
    b = byte.to(tl.int16)
    value = (((b & 0x80) << 8) | ((b & 0x7F) << 7)).to(tl.float16, bitcast=True).to(tl.float32)
    return tl.where((b & 0x7F) == 0x7F, float("nan"), value)


@triton.jit
def _row_setup(ids_ptr, r, stride_ce, stride_se, stride_s2, ACTIVE: tl.constexpr, X_PER_ROW: tl.constexpr):
    """Output row r -> (offset of its weights' codes, of its scales, of its scale2, its x row)."""
    if ACTIVE > 0:  # gathered experts: row r = token * ACTIVE + slot reads expert ids[r]
        e = tl.load(ids_ptr + r).to(tl.int64)
        c_off, s_off, s2_off = e * stride_ce, e * stride_se, e * stride_s2
        if X_PER_ROW:  # one input per chosen expert (a down projection)
            x_row = r
        else:  # one input per token for its chosen experts (an up projection)
            x_row = r // ACTIVE
    else:
        c_off, s_off, s2_off, x_row = 0, 0, 0, r
    return c_off, s_off, s2_off, x_row


@triton.jit
def _store(out_ptr, acc, s, r, rows, row_mask, N, R, SPLIT: tl.constexpr):
    """acc (BLOCK_N,) of output row r: the result, or split s's fp32 partial sum."""
    if SPLIT == 1:
        tl.store(out_ptr + r.to(tl.int64) * N + rows, acc.to(out_ptr.dtype.element_ty), mask=row_mask)
    else:
        tl.store(out_ptr + (s * R + r).to(tl.int64) * N + rows, acc, mask=row_mask)


@triton.jit
def nvfp4_rows(x_ptr, codes_ptr, scale_ptr, scale2_ptr, ids_ptr, out_ptr,
               N, KB, R, stride_x, stride_ce, stride_cn, stride_se, stride_sn, stride_s2, split_bytes,
               ACTIVE: tl.constexpr, X_PER_ROW: tl.constexpr, BLOCK_N: tl.constexpr, BB: tl.constexpr,
               SPLIT: tl.constexpr):
    """out[r, n] = x[row(r)] . w[n] for BLOCK_N rows n, over the bytes of split s (KB code bytes a row,
    two inputs each; a scale block is 8 bytes)."""
    pid_n, r, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    c_off, s_off, s2_off, x_row = _row_setup(ids_ptr, r, stride_ce, stride_se, stride_s2, ACTIVE, X_PER_ROW)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    codes = codes_ptr + c_off + rows[:, None] * stride_cn  # (BLOCK_N, 1) row starts
    scales = scale_ptr + s_off + rows[:, None] * stride_sn
    xs = x_ptr + x_row.to(tl.int64) * stride_x
    acc = tl.zeros((BLOCK_N,), tl.float32)
    start = s * split_bytes
    stop = tl.minimum(start + split_bytes, KB)
    for b0 in range(start, stop, BB):
        byte = b0 + tl.arange(0, BB)
        inside = byte < stop
        c = tl.load(codes + byte[None, :], mask=row_mask[:, None] & inside[None, :], other=0)  # (BLOCK_N, BB)
        w = tl.interleave(_e2m1(c & 15), _e2m1(c >> 4))  # (BLOCK_N, 2 BB): low nibble first, in input order
        col = 2 * b0 + tl.arange(0, 2 * BB)
        x = tl.load(xs + col, mask=col < 2 * stop, other=0).to(tl.float32)  # contiguous: vector loads
        block = tl.sum(tl.reshape(w * x[None, :], (BLOCK_N, BB // 8, 16)), axis=2)  # (BLOCK_N, BB/8) per block
        sb = b0 // 8 + tl.arange(0, BB // 8)
        sc = tl.load(scales + sb[None, :], mask=row_mask[:, None] & (sb < (stop + 7) // 8)[None, :], other=0)
        acc += tl.sum(block * _e4m3(sc), axis=1)
    scale2 = tl.load(scale2_ptr + s2_off).to(tl.float32) * (E2M1_UNIT * E4M3_UNIT)
    _store(out_ptr, acc * scale2, s, r, rows, row_mask, N, R, SPLIT)


@triton.jit
def fp8_rows(x_ptr, w_ptr, scale_ptr, ids_ptr, out_ptr,
             N, K, R, stride_x, stride_we, stride_wn, stride_s, split_cols,
             ACTIVE: tl.constexpr, X_PER_ROW: tl.constexpr, BLOCK_N: tl.constexpr, BK: tl.constexpr,
             SPLIT: tl.constexpr):
    """out[r, n] = x[row(r)] . w[n] * scale for BLOCK_N rows n, over the columns of split s."""
    pid_n, r, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    w_off, _, s_off, x_row = _row_setup(ids_ptr, r, stride_we, 0, stride_s, ACTIVE, X_PER_ROW)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    ws = w_ptr + w_off + rows[:, None] * stride_wn
    xs = x_ptr + x_row.to(tl.int64) * stride_x
    acc = tl.zeros((BLOCK_N,), tl.float32)
    start = s * split_cols
    stop = tl.minimum(start + split_cols, K)
    for k0 in range(start, stop, BK):
        col = k0 + tl.arange(0, BK)
        inside = col < stop
        w = tl.load(ws + col[None, :], mask=row_mask[:, None] & inside[None, :], other=0)  # (BLOCK_N, BK) bytes
        x = tl.load(xs + col, mask=inside, other=0).to(tl.float32)
        acc += tl.sum(_e4m3(w) * x[None, :], axis=1)
    scale = tl.load(scale_ptr + s_off).to(tl.float32) * E4M3_UNIT
    _store(out_ptr, acc * scale, s, r, rows, row_mask, N, R, SPLIT)


@triton.jit
def nvfp4_dot(x_ptr, codes_ptr, scale_ptr, scale2_ptr, out_ptr,
              T, N, KB, stride_x, stride_cn, stride_sn, split_bytes,
              BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BB: tl.constexpr, SPLIT: tl.constexpr,
              F32_DOT: tl.constexpr):
    """out[t, n] for BLOCK_T tokens and BLOCK_N rows: each weight tile decoded once, scaled exactly into
    x's dtype, then two tensor-core products (the low nibbles with the even inputs, the high with the odd)."""
    pid_n, pid_t, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    token_mask = tokens < T
    codes = codes_ptr + rows[:, None] * stride_cn
    scales = scale_ptr + rows[:, None] * stride_sn
    xs = x_ptr + tokens[:, None].to(tl.int64) * stride_x  # (BLOCK_T, 1)
    acc = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    start = s * split_bytes
    stop = tl.minimum(start + split_bytes, KB)
    for b0 in range(start, stop, BB):
        byte = b0 + tl.arange(0, BB)
        inside = byte < stop
        c = tl.load(codes + byte[None, :], mask=row_mask[:, None] & inside[None, :], other=0)  # (BLOCK_N, BB)
        sb = b0 // 8 + tl.arange(0, BB // 8)
        sc = tl.load(scales + sb[None, :], mask=row_mask[:, None] & (sb < (stop + 7) // 8)[None, :], other=0)
        sc = (_e4m3(sc) * (E2M1_UNIT * E4M3_UNIT))[:, :, None]  # (BLOCK_N, BB/8, 1): true scales
        low = tl.reshape(tl.reshape(_e2m1(c & 15), (BLOCK_N, BB // 8, 8)) * sc, (BLOCK_N, BB))
        high = tl.reshape(tl.reshape(_e2m1(c >> 4), (BLOCK_N, BB // 8, 8)) * sc, (BLOCK_N, BB))
        col = 2 * b0 + tl.arange(0, 2 * BB)
        x = tl.load(xs + col[None, :], mask=token_mask[:, None] & (col < 2 * stop)[None, :], other=0)
        x_even, x_odd = tl.split(tl.reshape(x, (BLOCK_T, BB, 2)))  # (BLOCK_T, BB) each, in x's dtype
        if F32_DOT:  # the same exact products, as fp32 operands (see the module doc)
            acc = tl.dot(x_even.to(tl.float32), tl.trans(low), acc)
            acc = tl.dot(x_odd.to(tl.float32), tl.trans(high), acc)
        else:
            acc = tl.dot(x_even, tl.trans(low.to(x_even.dtype)), acc)
            acc = tl.dot(x_odd, tl.trans(high.to(x_odd.dtype)), acc)
    acc = acc * tl.load(scale2_ptr).to(tl.float32)
    _store_tile(out_ptr, acc, s, tokens, rows, token_mask, row_mask, T, N, SPLIT)


@triton.jit
def fp8_dot(x_ptr, w_ptr, scale_ptr, out_ptr, T, N, K, stride_x, stride_wn, split_cols,
            BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
            F32_DOT: tl.constexpr):
    """out[t, n] for BLOCK_T tokens and BLOCK_N rows: E4M3 weights (exact in bf16/fp16) on tensor cores."""
    pid_n, pid_t, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    token_mask = tokens < T
    ws = w_ptr + rows[:, None] * stride_wn
    xs = x_ptr + tokens[:, None].to(tl.int64) * stride_x
    acc = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    start = s * split_cols
    stop = tl.minimum(start + split_cols, K)
    for k0 in range(start, stop, BK):
        col = k0 + tl.arange(0, BK)
        inside = col < stop
        w = tl.load(ws + col[None, :], mask=row_mask[:, None] & inside[None, :], other=0)
        x = tl.load(xs + col[None, :], mask=token_mask[:, None] & inside[None, :], other=0)
        if F32_DOT:
            acc = tl.dot(x.to(tl.float32), tl.trans(_e4m3(w) * E4M3_UNIT), acc)
        else:
            acc = tl.dot(x, tl.trans((_e4m3(w) * E4M3_UNIT).to(x.dtype)), acc)
    acc = acc * tl.load(scale_ptr).to(tl.float32)
    _store_tile(out_ptr, acc, s, tokens, rows, token_mask, row_mask, T, N, SPLIT)


@triton.jit
def _store_tile(out_ptr, acc, s, tokens, rows, token_mask, row_mask, T, N, SPLIT: tl.constexpr):
    """acc (BLOCK_T, BLOCK_N): the result, or split s's fp32 partial sums."""
    where = (s * T + tokens[:, None]).to(tl.int64) * N + rows[None, :]
    mask = token_mask[:, None] & row_mask[None, :]
    if SPLIT == 1:
        tl.store(out_ptr + where, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(out_ptr + where, acc, mask=mask)
