"""`python -m runtime kernel-check`: a packed-weight kernel against the exact reference, and its speed
against the device's streaming-read limit measured in the same process.

    python -m runtime kernel-check --format nvfp4|fp8 --kernel cpu|triton|torch [--device cpu|cuda]
        [--rows R --cols C] [--experts E --active K] [--tokens T] [--dtype bfloat16] [--threads N] --json

Without --rows/--cols/--experts it runs the real 30B-A3B shapes (kernels/__init__.py's `linear` for
the routed and shared experts and the packed Mamba projections, `experts` for the gathered up and
down projections of 128 experts, 6 active). --rows/--cols choose one weight shape; with --experts
(and --active, default 6) the case is the gathered-experts call over E such weights.

One line per case; with --json each is a JSON object (a contract other checks read) with at least:
    kernel, format, device, dtype, shape ([N, K], or [E, N, K] for experts), tokens, active (experts
    only), threads, max_abs_err, max_rel_err, tolerance, ok, gb_per_s, bandwidth_gb_per_s, read_share
where max_rel_err is the largest absolute error divided by the largest magnitude of the exact fp32
reference output (x @ dequantized weight, from quant.py's slow reference decoder), so one number
compares cases of any scale; ok is max_rel_err <= the backend's stated tolerance. gb_per_s is packed
weight bytes read per second (the chosen experts' only), over a set of weights larger than the
caches; bandwidth_gb_per_s is a sum over a touched 1 GiB buffer on the same device at the same
thread count, measured in this process just before; read_share is their ratio; timing says how the
calls were timed ("cuda graph": one pass captured and replayed, on CUDA; else "eager"). Speeds under
Triton's interpreter measure the interpreter, not a GPU.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass

import torch

from . import kernels
from .checkpoint.quant import BLOCK, PackedFP8, PackedNVFP4
from .device import DTYPES
from .errors import UsageError

H, MAMBA_IN, MAMBA_INNER = 2688, 10304, 4096  # 30B-A3B: hidden; Mamba in_proj rows (z, x, B, C, dt); heads x dim
EXPERT_FFN, SHARED_FFN, EXPERTS, ACTIVE = 1856, 3712, 128, 6
REAL_LINEAR = {"expert.up": (EXPERT_FFN, H), "expert.down": (H, EXPERT_FFN), "shared.up": (SHARED_FFN, H),
               "shared.down": (H, SHARED_FFN), "mamba.in_proj": (MAMBA_IN, H), "mamba.out_proj": (H, MAMBA_INNER)}
REAL_EXPERTS = {"experts.up": (EXPERT_FFN, H), "experts.down": (H, EXPERT_FFN)}
STREAM_BYTES = 256 << 20  # weights cycled per timing pass: past the last-level cache
MIN_SECONDS = 0.25  # time each case at least this long (and at least 3 passes)


@dataclass(frozen=True)
class Case:
    name: str
    rows: int
    cols: int
    experts: int = 0  # 0: a plain linear
    active: int = 0


def cases(args) -> list[Case]:
    if args.rows is None and args.cols is None and args.experts is None:  # the real shapes
        return [Case(n, r, c) for n, (r, c) in REAL_LINEAR.items()] + \
               [Case(n, r, c, EXPERTS, ACTIVE) for n, (r, c) in REAL_EXPERTS.items()]
    rows, cols = args.rows or EXPERT_FFN, args.cols or H
    if cols % BLOCK:
        raise UsageError(f"--cols must be a multiple of {BLOCK} (NVFP4's scale blocks), not {cols}")
    if args.experts is None:
        return [Case("linear", rows, cols)]
    active = args.active
    if active > args.experts:
        raise UsageError(f"--active {active} is more than --experts {args.experts}")
    # up: one input for the k chosen experts; down: one input per chosen expert
    return [Case(name, rows, cols, args.experts, active) for name in ("experts.up", "experts.down")]


def random_weight(fmt: str, shape: tuple[int, ...], g: torch.Generator, device) -> PackedNVFP4 | PackedFP8:
    """Random packed bytes of every code (finite scales in the range real exports use)."""
    *lead, N, K = shape
    if fmt == "nvfp4":
        packed = torch.randint(0, 256, (*lead, N, K // 2), generator=g, dtype=torch.uint8)
        scale = (torch.rand(*lead, N, K // BLOCK, generator=g) * 440 + 8).to(torch.float8_e4m3fn)
        scale2 = torch.rand(*lead, generator=g) * 1e-3 + 1e-4 if lead else torch.tensor(5e-4)
        return PackedNVFP4(packed, scale, scale2.float()).to(device)
    codes = torch.randint(0, 256, (*lead, N, K), generator=g, dtype=torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # E4M3's two NaN codes do not occur in exported weights
    scale = torch.rand(*lead, generator=g) * 1e-2 + 1e-3 if lead else torch.tensor(4e-3)
    return PackedFP8(codes.view(torch.float8_e4m3fn), scale.float()).to(device)


def reference(x: torch.Tensor, w, ids: torch.Tensor | None) -> torch.Tensor:
    """The exact output in fp32 from quant.py's slow decoder: (T, N), or (T, k, N) for experts."""
    if ids is None:
        return x.float() @ w.dequantize(torch.float32).T
    T, k = ids.shape
    chosen = w[ids.reshape(-1)].dequantize(torch.float32).view(T, k, *w.shape[-2:])  # (T, k, N, K)
    xs = x.float()[:, None, :].expand(T, k, -1) if x.dim() == 2 else x.float()
    return torch.einsum("tjnk,tjk->tjn", chosen, xs)


def errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    diff = (got.float() - want).abs()
    bad = ~torch.isfinite(got.float())
    if bad.any():
        return math.inf, math.inf
    worst = diff.max().item()
    return worst, worst / max(want.abs().max().item(), 1e-30)


def streaming_read(device: torch.device) -> float:
    """GB/s of a sum over a touched 1 GiB buffer on `device`, best of 3 (torch.ones, never empty:
    untouched pages read the zero page)."""
    buf = torch.ones(1 << 28, dtype=torch.float32, device=device)
    best = 0.0
    for _ in range(3):
        _sync(device)
        t0 = time.perf_counter()
        buf.sum()
        _sync(device)
        best = max(best, buf.nbytes / (time.perf_counter() - t0))
    del buf
    return best / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def read_bytes(w, ids: torch.Tensor | None) -> int:
    """Packed bytes one call reads: the whole weight, or the distinct chosen experts."""
    if ids is None:
        return w.nbytes
    per_expert = w.nbytes // w.shape[0]
    return per_expert * ids.unique().numel()


def check(case: Case, fmt: str, kernel, device: torch.device, dtype: torch.dtype, tokens: int,
          interpreted: bool, g: torch.Generator) -> dict:
    shape = (case.experts, case.rows, case.cols) if case.experts else (case.rows, case.cols)
    one = random_weight(fmt, shape, g, device)
    copies = 1 if interpreted else max(1, -(-STREAM_BYTES // one.nbytes))
    weights = [one] + [random_weight(fmt, shape, g, device) for _ in range(copies - 1)]
    xs, ids_list = [], []
    for _ in weights:
        ids = None
        if case.experts:
            ids = torch.stack([torch.randperm(case.experts, generator=g)[:case.active] for _ in range(tokens)])
            ids = ids.to(device)
        per_expert = case.experts and case.name.endswith("down")  # one input per chosen expert
        x_shape = (tokens, case.active, case.cols) if per_expert else (tokens, case.cols)
        xs.append(torch.randn(*x_shape, generator=g).to(device, dtype))
        ids_list.append(ids)

    def call(i):
        if ids_list[i] is None:
            return kernel.linear(xs[i], weights[i])
        return kernel.experts(xs[i], weights[i], ids_list[i])

    got = call(0)
    abs_err, rel_err = errors(got, reference(xs[0], weights[0], ids_list[0]))
    per_pass = sum(read_bytes(w, ids) for w, ids in zip(weights, ids_list))

    def one_pass():
        for i in range(len(weights)):
            call(i)

    run, timing = graphed(one_pass, device)
    times, spent = [], 0.0
    while len(times) < (1 if interpreted else 3) or spent < (0 if interpreted else MIN_SECONDS):
        _sync(device)
        t0 = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return {"shape": list(shape), "tokens": tokens, **({"active": case.active} if case.experts else {}),
            "max_abs_err": abs_err, "max_rel_err": rel_err, "gb_per_s": per_pass / statistics.median(times) / 1e9,
            "timing": timing}


def graphed(fn, device: torch.device):
    """`fn` as a replayed CUDA graph on CUDA, as the engine's decode step runs its matmuls (a decode-sized
    matmul reads its weight in about as long as Python takes to launch it, so eager timing would measure
    the launch); eager elsewhere, or where capture fails. Returns (callable, "cuda graph" or "eager")."""
    if device.type != "cuda":
        return fn, "eager"
    try:
        fn()  # compiled and warm before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay, "cuda graph"
    except Exception:  # not capturable: time it eagerly (the "timing" field says so)
        torch.cuda.synchronize(device)
        return fn, "eager"


def main(args) -> int:
    fmt = args.format
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but no CUDA GPU is usable by this PyTorch build")
    if args.dtype not in DTYPES:
        raise UsageError(f"unknown --dtype {args.dtype!r}; use one of {', '.join(DTYPES)}")
    dtype = DTYPES[args.dtype]
    if args.threads:
        torch.set_num_threads(args.threads)
    interpreted = args.kernel == "triton" and device.type == "cpu"
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: its kernels then run on CPU tensors
    why = kernels.unavailable(args.kernel, device)
    if why is not None:
        raise UsageError(f"the {args.kernel} kernels cannot run on {device}: {why}")
    kernel = kernels.backend(args.kernel)
    todo = cases(args)
    bandwidth = streaming_read(device)
    g = torch.Generator().manual_seed(args.seed or 0)
    for case in todo:
        with torch.inference_mode():
            result = check(case, fmt, kernel, device, dtype, args.tokens, interpreted, g)
        tolerance = kernel.tolerance(fmt.upper(), dtype)
        line = {"kernel": args.kernel, "format": fmt, "case": case.name, "device": str(device),
                "dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
                "interpreted": interpreted, **result, "tolerance": tolerance,
                "ok": result["max_rel_err"] <= tolerance, "bandwidth_gb_per_s": bandwidth,
                "read_share": result["gb_per_s"] / bandwidth}
        print(json.dumps(line) if args.json else _row(line), flush=True)
    return 0


def _row(r: dict) -> str:
    shape = "x".join(map(str, r["shape"])) + (f" (k={r['active']})" if "active" in r else "")
    verdict = "ok" if r["ok"] else f"OVER {r['tolerance']:.1e}"
    return (f"{r['kernel']:>6} {r['format']} {r['case']:<15} {shape:<22} T={r['tokens']:<3} "
            f"rel {r['max_rel_err']:.2e} {verdict:<5} {r['gb_per_s']:7.2f} GB/s of "
            f"{r['bandwidth_gb_per_s']:.1f} ({100 * r['read_share']:.0f}%) threads={r['threads']}")
