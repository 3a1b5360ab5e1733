"""Fused dequantize-and-multiply kernels in Triton: the `triton` backend (interface in __init__.py).

Packed weights are read where they lie (ModelOpt's layout, any strides: a nested submodel's
weights are slices of the parent's, so rows, columns and experts keep the parent's strides),
each code byte and each block scale once, decoded in registers, multiplied in fp32:

    1 token, or fp32 activations   `rows` kernels (fused_kernels.py): each program takes BLOCK_N
                                   weight rows of one output row; K split over programs when the
                                   rows alone cannot fill the GPU (fp32 partial sums, added in a
                                   fixed order afterwards: no atomics, the same bits every run).
    2+ tokens, bf16/fp16           `dot` kernels: the decoded tile goes to the tensor cores for
                                   up to 16 tokens at a time, so the weights are read once for all.
    gathered experts               the `rows` kernels with an expert id per output row, read from
                                   a device tensor inside the kernel: no host sync, capturable.

The kernels are torch custom ops (`elastic_chat::nvfp4_mm`, `elastic_chat::fp8_mm`) with fake
functions that give the output's shape, so on the meta device (decode-check) they run as shapes
and a CUDA graph or torch.compile sees one opaque op. On CPU tensors they run only in Triton's
interpreter (TRITON_INTERPRET=1 before triton is imported): that is how the tests check them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction

from ..checkpoint.quant import BLOCK, PackedFP8, PackedNVFP4
from . import fused_kernels as fk

HALF = (torch.bfloat16, torch.float16)  # activations the tensor-core `dot` kernels take
PROGRAMS_PER_SM = 4  # enough programs in flight per SM to hide memory latency at one row


@dataclass(frozen=True)
class Plan:
    """How one call is cut into programs: BLOCK_N weight rows a program; BB code bytes (NVFP4) or
    columns (FP8) a loop step; SPLIT parts of K; BLOCK_T tokens a program (dot kernels only)."""
    block_n: int
    bb: int
    split: int = 1
    block_t: int = 0
    num_warps: int = 4


def interpreted() -> bool:
    """Whether the kernels were built for Triton's interpreter (CPU tensors) rather than compiled."""
    return isinstance(fk.nvfp4_rows, InterpretedFunction)


def unavailable(device: torch.device) -> str | None:
    if device.type == "meta":
        return None  # shapes only: the ops' fake functions run
    if device.type == "cuda":
        if interpreted():
            return "Triton's interpreter is on (TRITON_INTERPRET=1): the kernels would run on the CPU"
        if not torch.cuda.is_available():
            return "no CUDA GPU is usable by this PyTorch build"
        return None
    if device.type == "cpu":
        return None if interpreted() else ("the Triton kernels are compiled for CUDA GPUs; on the CPU they run "
                                           "only in Triton's interpreter (TRITON_INTERPRET=1 set before triton "
                                           "is imported), which is for tests")
    return f"no Triton kernels for {device.type} tensors"


def tolerance(fmt: str, dtype: torch.dtype) -> float:
    # Products of exact weights and bf16/fp16 activations are exact in fp32 and summed in fp32; what
    # is left is the output's one rounding to `dtype`: at most 2^-8 (bf16) or 2^-11 (fp16) of the
    # largest output on a GPU (round to nearest), twice that in Triton's interpreter (it truncates);
    # fp32 activations add the products' own rounding, summed over K.
    return {torch.bfloat16: 8e-3, torch.float16: 1.5e-3, torch.float32: 1e-5}[dtype]


def linear(x: torch.Tensor, w) -> torch.Tensor:
    """x (..., K) @ w.T for a 2-D packed weight (N, K), in x.dtype."""
    N, K = w.shape
    out = _op(x.reshape(-1, K), w, None)
    return out.reshape(*x.shape[:-1], N)


def experts(x: torch.Tensor, w, ids: torch.Tensor) -> torch.Tensor:
    """out[t, j] = x[t(, j)] @ w[ids[t, j]].T, (T, k, N), reading only the chosen experts."""
    return _op(x, w, ids)


def _op(x: torch.Tensor, w, ids: torch.Tensor | None) -> torch.Tensor:
    if x.numel() == 0 or (ids is not None and ids.numel() == 0):  # no rows: no grid to launch
        return x.new_zeros(_out_shape(x, w.shape[-2], ids))
    if isinstance(w, PackedNVFP4):
        return nvfp4_mm(x, w.packed, w.scale, w.scale2, ids)
    if isinstance(w, PackedFP8):
        return fp8_mm(x, w.weight, w.scale, ids)
    raise TypeError(f"the Triton kernels take packed NVFP4/FP8 weights, not {type(w).__name__}")


# ----------------------------------------------------------------------------- the custom ops

@torch.library.custom_op("elastic_chat::nvfp4_mm", mutates_args=())
def nvfp4_mm(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, scale2: torch.Tensor,
             ids: Optional[torch.Tensor]) -> torch.Tensor:
    """x (T, K) @ NVFP4 weight (N, K).T -> (T, N); with ids (T, k) over stacked (E, N, K) weights,
    x (T, K) or (T, k, K) -> (T, k, N)."""
    return run_nvfp4(x, packed, scale, scale2, ids)


@torch.library.custom_op("elastic_chat::fp8_mm", mutates_args=())
def fp8_mm(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, ids: Optional[torch.Tensor]) -> torch.Tensor:
    """As nvfp4_mm for FP8 weights (N, K) or (E, N, K) with one fp32 scale per matrix."""
    return run_fp8(x, weight, scale, ids)


@nvfp4_mm.register_fake
def _nvfp4_shape(x, packed, scale, scale2, ids):
    return x.new_empty(_out_shape(x, packed.shape[-2], ids))


@fp8_mm.register_fake
def _fp8_shape(x, weight, scale, ids):
    return x.new_empty(_out_shape(x, weight.shape[-2], ids))


def _out_shape(x: torch.Tensor, n: int, ids: torch.Tensor | None) -> tuple[int, ...]:
    return (x.shape[0], n) if ids is None else (*ids.shape, n)


# ----------------------------------------------------------------------------- launching

def run_nvfp4(x, packed, scale, scale2, ids, plan: Plan | None = None) -> torch.Tensor:
    N, KB = packed.shape[-2:]
    packed, scale = _last_dim_dense(packed), _last_dim_dense(scale.view(torch.uint8))
    scale2 = scale2.reshape(-1) if ids is not None else scale2.reshape(())
    rows, R, per_row = _rows_input(x, 2 * KB, ids)
    if ids is None and R > 1 and x.dtype in HALF:
        plan = plan or plan_dot(x.device, N, KB, R)
        out = _output(plan, R, N, x)
        fk.nvfp4_dot[_dot_grid(plan, N, R)](
            rows, packed, scale, scale2, out, R, N, KB, rows.stride(0), packed.stride(-2), scale.stride(-2),
            _split_size(KB, plan), BLOCK_T=plan.block_t, BLOCK_N=plan.block_n, BB=plan.bb, SPLIT=plan.split,
            F32_DOT=interpreted(), num_warps=plan.num_warps)
    else:
        plan = plan or plan_rows(x.device, N, KB, R)
        out = _output(plan, R, N, x)
        lead = ids is not None
        fk.nvfp4_rows[_rows_grid(plan, N, R)](
            rows, packed, scale, scale2, ids.reshape(-1) if lead else rows, out, N, KB, R, rows.stride(0),
            packed.stride(0) if lead else 0, packed.stride(-2), scale.stride(0) if lead else 0, scale.stride(-2),
            scale2.stride(0) if lead else 0, _split_size(KB, plan), ACTIVE=ids.shape[1] if lead else 0,
            X_PER_ROW=per_row, BLOCK_N=plan.block_n, BB=plan.bb, SPLIT=plan.split, num_warps=plan.num_warps)
    return _finish(out, plan, x, ids, N)


def run_fp8(x, weight, scale, ids, plan: Plan | None = None) -> torch.Tensor:
    N, K = weight.shape[-2:]
    weight = _last_dim_dense(weight.view(torch.uint8))
    scale = scale.reshape(-1) if ids is not None else scale.reshape(())
    rows, R, per_row = _rows_input(x, K, ids)
    if ids is None and R > 1 and x.dtype in HALF:
        plan = plan or plan_dot(x.device, N, K, R)
        out = _output(plan, R, N, x)
        fk.fp8_dot[_dot_grid(plan, N, R)](
            rows, weight, scale, out, R, N, K, rows.stride(0), weight.stride(-2), _split_size(K, plan),
            BLOCK_T=plan.block_t, BLOCK_N=plan.block_n, BK=plan.bb, SPLIT=plan.split, F32_DOT=interpreted(),
            num_warps=plan.num_warps)
    else:
        plan = plan or plan_rows(x.device, N, K, R)
        out = _output(plan, R, N, x)
        lead = ids is not None
        fk.fp8_rows[_rows_grid(plan, N, R)](
            rows, weight, scale, ids.reshape(-1) if lead else rows, out, N, K, R, rows.stride(0),
            weight.stride(0) if lead else 0, weight.stride(-2), scale.stride(0) if lead else 0,
            _split_size(K, plan), ACTIVE=ids.shape[1] if lead else 0, X_PER_ROW=per_row, BLOCK_N=plan.block_n,
            BK=plan.bb, SPLIT=plan.split, num_warps=plan.num_warps)
    return _finish(out, plan, x, ids, N)


def _last_dim_dense(t: torch.Tensor) -> torch.Tensor:
    """The kernels step along the last dimension one element at a time (every real slice does)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _rows_input(x: torch.Tensor, K: int, ids: torch.Tensor | None) -> tuple[torch.Tensor, int, bool]:
    """x as a 2-D (rows, K) tensor with unit column stride, the number of output rows, and whether
    each output row has its own input row (a down projection's (T, k, K) input)."""
    if x.shape[-1] != K:
        raise ValueError(f"the input has {x.shape[-1]} features, the packed weight takes {K}")
    if ids is None:
        return _last_dim_dense(x), x.shape[0], False
    per_row = x.dim() == 3
    rows = x.reshape(-1, K) if per_row else x
    return _last_dim_dense(rows), ids.numel(), per_row


def _output(plan: Plan, R: int, N: int, x: torch.Tensor) -> torch.Tensor:
    if plan.split == 1:
        return torch.empty(R, N, dtype=x.dtype, device=x.device)
    return torch.empty(plan.split, R, N, dtype=torch.float32, device=x.device)  # partial sums


def _finish(out: torch.Tensor, plan: Plan, x: torch.Tensor, ids, N: int) -> torch.Tensor:
    if plan.split > 1:
        out = out.sum(0).to(x.dtype)  # the splits' partial sums, added in a fixed order
    return out if ids is None else out.view(*ids.shape, N)


def _split_size(K: int, plan: Plan) -> int:
    """Bytes (or columns) of K each split covers: whole loop steps, so steps never straddle splits."""
    return -(-K // (plan.split * plan.bb)) * plan.bb


def _rows_grid(plan: Plan, N: int, R: int) -> tuple[int, int, int]:
    return (triton.cdiv(N, plan.block_n), R, plan.split)


def _dot_grid(plan: Plan, N: int, T: int) -> tuple[int, int, int]:
    return (triton.cdiv(N, plan.block_n), triton.cdiv(T, plan.block_t), plan.split)


# ----------------------------------------------------------------------------- plans

@lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 0  # the interpreter: one program at a time, so fewer, larger programs are faster
    return torch.cuda.get_device_properties(device).multi_processor_count


def _split_for(device: torch.device, programs: int, steps: int) -> int:
    """Parts of K to split into so that `programs` (without splitting) fill the GPU, keeping at least
    two loop steps a part; `steps` is the number of loop steps of a whole row."""
    want = PROGRAMS_PER_SM * _sm_count(device)
    if programs >= want or steps < 4:
        return 1
    return max(1, min(math.ceil(want / programs), steps // 2))


def plan_rows(device: torch.device, N: int, K: int, R: int) -> Plan:
    """One row of inputs per program column. K counts code bytes (NVFP4) or columns (FP8): a loop step
    reads 16 rows x 256 bytes, 32 bytes a thread of 4 warps, in 16-byte loads."""
    if _sm_count(device) == 0:
        return Plan(block_n=_interpreted_rows(N, 1), bb=256)
    block_n, bb = 16, 256
    programs = triton.cdiv(N, block_n) * R
    split = _split_for(device, programs, triton.cdiv(K, bb))
    return Plan(block_n, bb, _whole_steps(K, bb, split))


def plan_dot(device: torch.device, N: int, K: int, T: int) -> Plan:
    """Up to 16 tokens a program (tensor-core tiles are 16 rows at least)."""
    if _sm_count(device) == 0:
        return Plan(block_n=_interpreted_rows(N, 16), bb=128, block_t=16)
    block_n, bb, block_t = 32, 128, 16
    programs = triton.cdiv(N, block_n) * triton.cdiv(T, block_t)
    split = _split_for(device, programs, triton.cdiv(K, bb))
    return Plan(block_n, bb, _whole_steps(K, bb, split), block_t)


def _interpreted_rows(N: int, least: int) -> int:
    """Rows a program in the interpreter: up to 64 (its cost is per program step, nearly whatever the
    block's size), no more than N needs."""
    return max(least, min(64, triton.next_power_of_2(N)))


def _whole_steps(K: int, bb: int, split: int) -> int:
    """The split count after rounding each part up to whole loop steps (no empty parts)."""
    return triton.cdiv(K, -(-K // (split * bb)) * bb) if split > 1 else 1


# ----------------------------------------------------------------------------- the self-test

# (tokens, out, in) of plain linears, then (experts, active, out, in) of a gathered call: the
# 30B-A3B's expert shapes at one row, a few decode tokens, 6 of 128 experts.
SELF_TEST_LINEAR = ((1, 1856, 2688), (1, 2688, 1856), (5, 2688, 1856))
SELF_TEST_EXPERTS = (10, 6, 1856, 2688)


def self_test(device: torch.device, fmt: str, dtype: torch.dtype = torch.bfloat16,
              linears=SELF_TEST_LINEAR, gathered=SELF_TEST_EXPERTS) -> str | None:
    """Runs the kernels of format `fmt` on `device` at the shapes the engine runs (`linears`, and
    `gathered` experts in a view sliced as a nested submodel slices them, two tokens) against
    quant.py's exact decoder and, on CUDA, captures and replays the gathered experts in a CUDA
    graph. None when all agree, else what failed (the engine status shows it)."""
    try:
        g = torch.Generator().manual_seed(0)
        for T, N, K in linears:
            x = torch.randn(T, K, generator=g).to(device, dtype)
            w = _random(fmt, (N, K), g).to(device)
            problem = _compare(linear(x, w), x.float() @ w.dequantize(torch.float32).T, fmt, dtype,
                               f"{T} x {K} -> {N}")
            if problem:
                return problem
        E, k, N, K = gathered
        stacked = _random(fmt, (E + 2, N + 16, K + 32), g).to(device)[:E, :N, :K]  # a nested submodel's view
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(2)])
        x = torch.randn(2, k, K, generator=g).to(device, dtype)
        chosen = stacked[ids.reshape(-1).to(device)].dequantize(torch.float32).view(2, k, N, K)
        want = torch.einsum("tjnk,tjk->tjn", chosen, x.float())
        ids = ids.to(device)
        problem = _compare(experts(x, stacked, ids), want, fmt, dtype, "gathered experts")
        if problem or device.type != "cuda":
            return problem
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = experts(x, stacked, ids)
        graph.replay()
        return _compare(captured, want, fmt, dtype, "gathered experts replayed in a CUDA graph")
    except Exception as e:  # a kernel that does not compile or launch here: say which and why
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def _random(fmt: str, shape: tuple[int, ...], g: torch.Generator):
    """A packed weight of `shape` ((N, K), or (E, N, K) with one global scale per expert)."""
    from ..checkpoint.quant import stack
    from ..checkpoint.quant_pack import pack_fp8, pack_nvfp4

    pack = pack_nvfp4 if fmt == "NVFP4" else pack_fp8
    w = torch.randn(*shape, generator=g) / shape[-1] ** 0.5
    return pack(w) if w.dim() == 2 else stack([pack(e * (1 + i)) for i, e in enumerate(w)])


def _compare(got: torch.Tensor, want: torch.Tensor, fmt: str, dtype: torch.dtype, what: str) -> str | None:
    err = (got.float() - want).abs().max() / want.abs().max().clamp(min=1e-30)
    limit = tolerance(fmt, dtype)
    if not bool(torch.isfinite(got).all()) or err.item() > limit:
        return f"{what}: relative error {err.item():.2e} against the exact reference (allowed {limit:.0e})"
    return None


assert BLOCK == 16, "the kernels' scale blocks are 8 code bytes"
