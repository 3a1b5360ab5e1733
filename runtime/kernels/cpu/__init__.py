"""The project's own CPU kernels (csrc/, a C++ torch extension) as a kernels backend (see
runtime/kernels/__init__.py for the interface), plus what the engine's CPU path calls directly.

Packed weights are read in place, codes decoded in registers, never unpacked whole:

    one token   NVFP4: activations rounded to int8 per 16-input block (ggml's Q8 idea), byte dot
                products of the codes (a 16-entry table and a byte shuffle), each block's int32 sum
                scaled once by its E4M3 scale; FP8 and BF16: decoded to fp32 in registers, fp32 FMA.
    several     NVFP4: the same int8 arithmetic, each row's codes decoded once per 4 tokens and
                multiplied with all of them from registers (prefill chunks: about 1.5-3x the exact
                panels' speed). FP8 and BF16 (and NVFP4 with `exact=True`, one token too): rows
                decoded exactly (the reference's fp32 values) into cache-sized panels, then an fp32
                product with the activations.

Threads: torch's count (torch.set_num_threads), but the kernels' own workers (csrc/work_pool.h),
not OpenMP's: a call returns when its chunks are done, never waiting for a thread that another
program kept from starting.

Code paths by the CPU's features, chosen at load (cpuid) and self-tested (self_test.py): avx512
(AVX2 code with AVX512-VNNI dot products), avx2 (AVX2 + FMA), portable (plain C++, exact).
library.py builds, finds and loads the compiled library; without one, `unavailable` says why and
the PyTorch path (torch_path.py) runs.
"""

from __future__ import annotations

import torch

from . import library
from .calls import NVFP4, args, call

# int8 activations (NVFP4, any number of tokens) against the exact fp32 reference: the rounding
# error of each activation is at most half a step of its 16-block's largest value / 127; measured
# max_rel_err (kernel_check.py's measure) stays below 1e-2 at the real shapes with random inputs.
Q8_TOLERANCE = 2e-2
EXACT_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # the output's rounding


def unavailable(device: torch.device) -> str | None:
    if torch.device(device).type != "cpu":
        return "the CPU kernels run on the CPU only"
    return library.problem()


def path() -> str:
    """The code path in use ("avx2", ...), with any that failed their self-test."""
    module = library.load()
    name = module.isa() if module is not None else "none"
    failed = library.dropped()
    return name + (f"; failed its self-test: {'; '.join(failed)}" if failed else "")


def linear(x: torch.Tensor, w, exact: bool = False) -> torch.Tensor:
    """x (..., K) @ w.T for an NVFP4, FP8 or BF16 weight (N, K), in x.dtype."""
    N, K = w.shape
    out = call(library.load(), x.reshape(-1, K), w, exact)
    return out.to(x.dtype).reshape(*x.shape[:-1], N)


def matvecs(x: torch.Tensor, w, ids: torch.Tensor, exact: bool = False) -> torch.Tensor:
    """One token through each of J chosen experts: x (J, K) (an expanded row for one shared input),
    w stacked (E, N, K) or a list of per-expert 2-D weights, ids (J,) int64 -> (J, N) fp32."""
    module = library.load()
    if isinstance(w, list):
        chosen = [w[i] for i in ids.tolist()]
        fmt, _, _, _ = args(chosen[0])
        datas = [args(c)[1] for c in chosen]
        scales = [c.scale for c in chosen] if fmt == NVFP4 else []
        scale2 = torch.stack([args(c)[3].reshape(()) for c in chosen])
        return module.matvecs(x, fmt, datas, scales, scale2, exact)
    fmt, data, scales, scale2 = args(w)
    return module.matvecs_stacked(x, fmt, data, scales, scale2, ids, exact)


def experts(x: torch.Tensor, w, ids: torch.Tensor) -> torch.Tensor:
    T, k = ids.shape
    N, K = w[0].shape if isinstance(w, list) else w.shape[-2:]
    if T == 1:
        xs = x.expand(k, K) if x.dim() == 2 else x[0]  # (k, K): one input, or one per chosen expert
        return matvecs(xs, w, ids[0].long()).to(x.dtype).view(1, k, N)
    out = torch.empty(T, k, N, dtype=x.dtype)
    for e in ids.unique().tolist():  # each chosen expert's weights read once for its tokens
        tokens, slot = (ids == e).nonzero(as_tuple=True)
        inputs = x[tokens] if x.dim() == 2 else x[tokens, slot]
        out[tokens, slot] = linear(inputs, w[e])
    return out


def moe_one_token(x: torch.Tensor, up, down, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The routed experts of one token: x (1, H), ids and weights (1, k) -> (1, H) fp32, the
    weighted sum of relu2(x @ up[e].T) @ down[e].T; each chosen expert's bytes read once."""
    k = ids.shape[1]
    chosen = ids[0].long()
    h = matvecs(x.expand(k, x.shape[1]), up, chosen)  # (k, F) fp32
    h = torch.relu(h).square_()
    out = matvecs(h, down, chosen)  # (k, H)
    return weights.float() @ out  # (1, H)


def ssm_step(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
             C: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """One decode step of a Mamba-2 state (H, P, N) in place, in one pass over it; x (H, P) (any view
    of that size), dt A D (H,), B C (G, N), head h reading group h % G; all fp32. Returns y (H, P)."""
    H, P, N = state.shape
    return library.load().ssm_step(state, x.reshape(H, P), dt.reshape(H), A.reshape(H), B.reshape(-1, N),
                                   C.reshape(-1, N), D.reshape(H))


def tolerance(fmt: str, dtype: torch.dtype) -> float:
    module = library.load()
    quantized = fmt.upper() == "NVFP4" and module is not None and module.isa() != "portable"
    return max(Q8_TOLERANCE, EXACT_TOLERANCE[dtype]) if quantized else EXACT_TOLERANCE[dtype]
