"""The CPU kernels (runtime/kernels/cpu/) against the exact reference: every code path this CPU runs,
at the real shapes (a few rows each here, whole ones marked slow), odd shapes, one token and several,
strided and per-expert views read in place, the edge values of the formats, and ModelOpt's own
dequantization as the outside oracle. Skipped, with the reason, where the library is not built
(test_kernel_fallback.py covers that case)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
import torch

from runtime import kernel_check
from runtime.checkpoint.quant import PackedFP8, PackedNVFP4, stack
from runtime.checkpoint.quant_pack import pack_fp8, pack_nvfp4
from runtime.kernels import cpu
from runtime.kernels.cpu import library

MODULE = library.load()
pytestmark = pytest.mark.skipif(MODULE is None, reason=f"CPU kernels not available: {library.problem()}")
ISAS = MODULE.isas() if MODULE is not None else []
TOKENS = (1, 2, 7, 33)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)  # every random input is the same on every run


@pytest.fixture(params=ISAS)
def isa(request):
    """Each code path this CPU runs, in turn (the best one restored after)."""
    best = MODULE.isa()
    MODULE.set_isa(request.param)
    yield request.param
    MODULE.set_isa(best)


def weight(fmt: str, rows: int, cols: int, seed: int = 0, lead: tuple = ()):
    return kernel_check.random_weight(fmt, (*lead, rows, cols), torch.Generator().manual_seed(seed), "cpu")


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return kernel_check.errors(got, want)[1]


def limit(fmt: str, dtype: torch.dtype, tokens: int, exact: bool) -> float:
    """What the backend promises: its stated tolerance; the exact paths (FP8, exact=True, the
    portable code) are held to the output's rounding alone."""
    return cpu.tolerance(fmt, dtype) if int8_path(fmt, tokens, exact) else cpu.EXACT_TOLERANCE[dtype]


def int8_path(fmt: str, tokens: int, exact: bool) -> bool:
    """NVFP4 rounds activations to int8 per 16-input block, one token or several, except exact=True
    and on the portable path."""
    return fmt.lower() == "nvfp4" and not exact and MODULE.isa() != "portable"


def assert_close(got: torch.Tensor, x: torch.Tensor, w, fmt: str, tokens: int, exact: bool):
    """The exact paths within the output's rounding of the reference; the int8 path within its proven
    bound, output by output: each activation is rounded by at most half a step, a step being its
    16-block's largest magnitude / 127, so |error| <= sum over blocks of that half step times the
    block's sum of |weights| (plus the output's own rounding)."""
    want = kernel_check.reference(x, w, None)
    if not int8_path(fmt, tokens, exact):
        assert rel_err(got, want) <= cpu.EXACT_TOLERANCE[x.dtype]
        return
    dense = w.dequantize(torch.float32)
    T, K = x.shape
    half_step = x.float().abs().view(T, K // 16, 16).amax(-1) / 254  # (T, blocks)
    block_mass = dense.abs().view(-1, K // 16, 16).sum(-1)  # (N, blocks)
    bound = half_step @ block_mass.T * (1 + 1e-4) + want.abs() * (2 ** -8 if got.dtype == torch.bfloat16 else 1e-6)
    assert ((got.float() - want).abs() <= bound + 1e-30).all()
    assert rel_err(got, want) <= cpu.tolerance(fmt, x.dtype) or want.numel() < 8  # few outputs: cancellation


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
@pytest.mark.parametrize("name", list(kernel_check.REAL_LINEAR))
@pytest.mark.parametrize("tokens", TOKENS)
def test_real_shapes_a_few_rows(isa, fmt, name, tokens):
    rows, cols = kernel_check.REAL_LINEAR[name]
    w = weight(fmt, rows, cols)[5:5 + 19]  # 19 rows of the real width, starting mid-matrix: a strided view
    x = torch.randn(tokens, cols).to(torch.bfloat16)
    for exact in (False, True):
        got = cpu.linear(x, w, exact=exact)
        assert got.dtype == torch.bfloat16 and got.shape == (tokens, 19)
        assert_close(got, x, w, fmt, tokens, exact)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
@pytest.mark.parametrize("name", list(kernel_check.REAL_LINEAR))
def test_real_shapes_whole(isa, fmt, name):
    rows, cols = kernel_check.REAL_LINEAR[name]
    w = weight(fmt, rows, cols, seed=3)
    for tokens in (1, 33):
        x = torch.randn(tokens, cols).to(torch.bfloat16)
        assert_close(cpu.linear(x, w), x, w, fmt, tokens, False)


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
@pytest.mark.parametrize("rows, cols", [(1, 16), (3, 48), (37, 80), (5, 112), (11, 208), (7, 1040), (2, 1072)])
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_odd_shapes(isa, fmt, rows, cols, tokens, dtype):
    """Widths a multiple of 16 but not of 32 or 64 (every tail of the kernels), odd row counts."""
    w = weight(fmt, rows, cols, seed=rows * cols)
    x = torch.randn(tokens, cols).to(dtype)
    for exact in (False, True):
        assert_close(cpu.linear(x, w, exact=exact), x, w, fmt, tokens, exact)


@pytest.mark.parametrize("rows, cols", [(1, 7), (9, 16), (33, 100), (64, 2688)])
@pytest.mark.parametrize("tokens", TOKENS)
def test_bf16_weights(isa, rows, cols, tokens):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(rows, cols, generator=g).to(torch.bfloat16)
    x = torch.randn(tokens, cols, generator=g).to(torch.bfloat16)
    got = cpu.linear(x, w)
    assert rel_err(got, x.float() @ w.float().T) <= cpu.EXACT_TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("tokens", [1, 6])
def test_the_int8_activations_are_measured_not_assumed(tokens):
    """The NVFP4 path rounds activations to int8 per block: its error is real (so the exact
    reference can see it) and within the stated tolerance, at the real width."""
    if MODULE.isa() == "portable":
        pytest.skip("the portable path is exact")
    w = weight("nvfp4", 256, 2688, seed=9)
    x = torch.randn(tokens, 2688)
    want = kernel_check.reference(x, w, None)
    quantized, exact = rel_err(cpu.linear(x, w), want), rel_err(cpu.linear(x, w, exact=True), want)
    assert exact < 1e-5 < quantized <= cpu.tolerance("NVFP4", torch.float32)


@pytest.mark.parametrize("cols", [208, 1856, 2688])
@pytest.mark.parametrize("tokens", [2, 3, 4, 5, 9, 70])
def test_several_tokens_take_the_one_token_arithmetic(isa, cols, tokens):
    """A prefill chunk's NVFP4 rows (each row's codes decoded once per few tokens) give what each
    token alone gives: the same int8 rounding and block sums, to fp32 rounding; token counts past
    4 (the kernel's tile), and past the 64-token block the rows are read once per, included."""
    w = weight("nvfp4", 67, cols, seed=cols)
    x = torch.randn(tokens, cols)
    alone = torch.cat([cpu.linear(x[t:t + 1], w) for t in range(tokens)])
    assert torch.allclose(cpu.linear(x, w), alone, rtol=1e-6, atol=1e-6 * alone.abs().max().item())


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_any_thread_count_gives_the_same_outputs(threads):
    """Work is split in chunks among the kernels' own threads: every output computed once, by one
    chunk, whichever thread takes it, so more threads change nothing, bit for bit (more threads
    than cores too), call after call."""
    before = torch.get_num_threads()
    w = weight("nvfp4", 300, 2688, seed=1)
    xs = [torch.randn(t, 2688) for t in (1, 1, 7, 1, 70)]
    torch.set_num_threads(1)
    want = [cpu.linear(x, w) for x in xs] + [cpu.linear(xs[2], w, exact=True)]
    torch.set_num_threads(threads)
    try:
        for _ in range(20):
            got = [cpu.linear(x, w) for x in xs] + [cpu.linear(xs[2], w, exact=True)]
            assert all(torch.equal(a, b) for a, b in zip(got, want))
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread states from Linux's /proc")
def test_idle_workers_sleep():
    """Between calls the kernels' workers wait on a condition variable, never spinning against the
    user's other programs: after calls on 3 threads, every thread but this one is asleep."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        w = weight("nvfp4", 300, 2688, seed=2)
        for tokens in (1, 7, 1):
            cpu.linear(torch.randn(tokens, 2688), w)
    finally:
        torch.set_num_threads(before)
    me = threading.get_native_id()
    for _ in range(3):
        time.sleep(0.1)  # a worker that finished its last chunk has gone to sleep well within this
        running = [t.name for t in Path("/proc/self/task").iterdir()
                   if int(t.name) != me and (t / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R"]
        assert running == []


def _linear_in_a_child(queue):
    torch.set_num_threads(2)
    w = weight("nvfp4", 64, 256)
    queue.put(float(cpu.linear(torch.ones(3, 256), w).sum()))


def test_a_forked_child_starts_its_own_threads():
    """The workers of the parent do not exist in a forked child: its calls start their own instead
    of waiting for them forever."""
    import multiprocessing

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        w = weight("nvfp4", 64, 256)
        want = float(cpu.linear(torch.ones(3, 256), w).sum())  # the parent's workers exist now
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_linear_in_a_child, args=(queue,))
        child.start()
        child.join(timeout=120)  # a deadlock guard, not a speed check
        alive = child.is_alive()
        if alive:
            child.kill()
        assert not alive and child.exitcode == 0 and queue.get(timeout=5) == want
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- views read in place


def test_submodel_slices_are_read_in_place(isa):
    """A submodel's slice of a parent (fewer rows and a prefix of the inputs) is a strided view."""
    w = weight("nvfp4", 40, 256, seed=2)
    part = w[:23, :160]
    assert part.packed.stride(0) == 128 and part.packed.data_ptr() == w.packed.data_ptr()
    x = torch.randn(3, 160)
    for tokens in (1, 3):
        assert_close(cpu.linear(x[:tokens], part), x[:tokens], part, "nvfp4", tokens, False)


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("per_slot", [False, True])
def test_experts_stacked_and_as_views_of_a_mapped_file(isa, tmp_path, fmt, tokens, per_slot):
    """`experts` over stacked weights, and over per-expert views of a memory-mapped file (how large
    checkpoints hold them), gives the reference for the chosen experts only."""
    E, k, N, K = 9, 4, 40, 96
    stacked = weight(fmt, N, K, seed=11, lead=(E,))
    as_list = [_mapped(stacked[e], tmp_path / f"e{e}") for e in range(E)]
    g = torch.Generator().manual_seed(4)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(tokens)])
    x = torch.randn(tokens, k, K) if per_slot else torch.randn(tokens, K)
    want = kernel_check.reference(x, stacked, ids)
    for w in (stacked, as_list):
        got = cpu.experts(x, w, ids)
        assert got.shape == (tokens, k, N)
        assert rel_err(got, want) <= cpu.tolerance(fmt, torch.float32)  # an expert's one token: the int8 path


def _mapped(w, path):
    """A copy of a 2-D packed weight whose tensors are views of files mapped from disk."""
    def mapped(t, name):
        raw = t.contiguous().view(torch.uint8).reshape(-1)
        file = path.with_name(f"{path.name}.{name}")
        file.write_bytes(raw.numpy().tobytes())
        return torch.from_file(str(file), shared=False, size=raw.numel(), dtype=torch.uint8).view(t.dtype).view(t.shape)

    if isinstance(w, PackedNVFP4):
        return PackedNVFP4(mapped(w.packed, "codes"), mapped(w.scale, "scales"), w.scale2)
    return PackedFP8(mapped(w.weight, "codes"), w.scale)


def test_moe_one_token_is_the_weighted_sum_of_relu2_experts(isa):
    E, H, F = 8, 128, 64
    up, down = weight("nvfp4", F, H, seed=1, lead=(E,)), weight("nvfp4", H, F, seed=2, lead=(E,))
    x = torch.randn(1, H)
    ids = torch.tensor([[6, 0, 3]])
    weights = torch.tensor([[0.5, 0.3, 0.2]])
    want = torch.zeros(1, H)
    for j, e in enumerate(ids[0].tolist()):
        h = torch.relu(x @ up[e].dequantize().T).square()
        want += weights[0, j] * (h @ down[e].dequantize().T)
    for w in ((up, down), ([up[e] for e in range(E)], [down[e] for e in range(E)])):
        got = cpu.moe_one_token(x, *w, ids, weights)
        assert rel_err(got, want) <= 2 * cpu.tolerance("NVFP4", torch.float32)  # two rounded products in a row


# ----------------------------------------------------------------------------- edge values


def _edge_scales(rows: int, blocks: int) -> torch.Tensor:
    """Block scale bytes: the largest (448), subnormals, zero, negative, and both NaN encodings."""
    g = torch.Generator().manual_seed(5)
    s = (torch.rand(rows, blocks, generator=g) * 100 + 1).to(torch.float8_e4m3fn).view(torch.uint8)
    s[0, 0] = 0x7E  # 448
    s[1, :] = 0x7E
    s[2, 1] = 0x03  # subnormal: 3 * 2^-9
    s[3, :] = 0x01  # the smallest subnormal everywhere
    s[4, 2] = 0x00  # a zero block
    s[5, 0] = 0xB8  # -1: negative scales are decoded too
    s[6, 3] = 0x7F  # NaN
    s[7, 1] = 0xFF  # NaN
    return s.view(torch.float8_e4m3fn)


@pytest.mark.parametrize("cols", [80, 208, 1040])
@pytest.mark.parametrize("tokens", [1, 4])
def test_nvfp4_edge_values(isa, cols, tokens):
    rows = 9
    g = torch.Generator().manual_seed(cols)
    packed = torch.randint(0, 256, (rows, cols // 2), generator=g, dtype=torch.uint8)
    packed[8] = 0  # all-zero codes: every value 0 (and code 8, "-0", in row 4)
    packed[4, :8] = 0x88
    w = PackedNVFP4(packed, _edge_scales(rows, cols // 16), torch.tensor(1e-3))
    x = torch.randn(tokens, cols, generator=g)
    want = kernel_check.reference(x, w, None)
    for exact in (False, True):
        got = cpu.linear(x, w, exact=exact)
        nan = torch.isnan(want)
        assert nan[:, 6].all() and nan[:, 7].all() and torch.equal(torch.isnan(got), nan)  # NaN where the reference is
        err = (got[~nan] - want[~nan]).abs().max() / want[~nan].abs().max()
        assert err <= limit("nvfp4", torch.float32, tokens, exact), (isa, exact)
        assert (got[:, 8] == 0).all()


@pytest.mark.parametrize("tokens", [1, 4])
def test_fp8_edge_values(isa, tokens):
    cols = 72
    codes = torch.arange(256, dtype=torch.uint8).repeat(3)[: 10 * cols].view(10, cols).clone()  # every code
    w = PackedFP8(codes.view(torch.float8_e4m3fn), torch.tensor(0.25))
    x = torch.randn(tokens, cols)
    want = kernel_check.reference(x, w, None)
    got = cpu.linear(x, w)
    nan = torch.isnan(want)
    assert nan.any() and torch.equal(torch.isnan(got), nan)
    ok = ~nan.any(0)  # rows without a NaN code
    assert rel_err(got[:, ok], want[:, ok]) <= cpu.EXACT_TOLERANCE[torch.float32]


def test_a_nan_activation_makes_nan_outputs(isa):
    w = weight("nvfp4", 5, 64)
    x = torch.randn(1, 64)
    x[0, 17] = float("nan")
    assert torch.isnan(cpu.linear(x, w)).all() and torch.isnan(cpu.linear(x, w, exact=True)).all()


def test_zero_activations_give_zero(isa):
    w = weight("nvfp4", 6, 96)
    assert torch.equal(cpu.linear(torch.zeros(1, 96), w), torch.zeros(1, 6))


def test_denormals_stay_on_while_the_kernels_run(isa):
    """The E4M3 decode makes fp32 subnormals: a caller that flushes them must not change the result."""
    w = PackedNVFP4(torch.full((2, 8), 0x22, dtype=torch.uint8), torch.full((2, 1), 0x02, dtype=torch.uint8)
                    .view(torch.float8_e4m3fn), torch.tensor(1.0))
    x = torch.ones(1, 16)
    want = kernel_check.reference(x, w, None)
    torch.set_flush_denormal(True)
    try:
        got = cpu.linear(x, w, exact=True)
    finally:
        torch.set_flush_denormal(False)
    assert torch.equal(got, want)


# ----------------------------------------------------------------------------- the outside oracle


from tests.runtime.test_dequant import modelopt_fp8, modelopt_nvfp4  # noqa: E402  (the one oracle)


@pytest.mark.parametrize("fmt", ["NVFP4", "FP8"])
def test_against_modelopt(isa, fmt):
    """Weights packed by the project's packer from real-looking values, multiplied by the kernels,
    against ModelOpt's own dequantization; the exact path agrees to fp32 rounding."""
    g = torch.Generator().manual_seed(0)
    dense = torch.randn(50, 2688, generator=g) * torch.rand(50, 1, generator=g) / 10
    w = pack_nvfp4(dense) if fmt == "NVFP4" else pack_fp8(dense)
    oracle = modelopt_nvfp4(w) if fmt == "NVFP4" else modelopt_fp8(w)
    for tokens in (1, 5):
        x = torch.randn(tokens, 2688, generator=g)
        want = x @ oracle.T
        assert rel_err(cpu.linear(x, w, exact=True), want) <= 1e-5
        assert rel_err(cpu.linear(x, w), want) <= limit(fmt.lower(), torch.float32, tokens, False)


def test_stacked_helpers_agree():
    """`stack` of per-expert weights is what `experts` reads: one check that the two layouts match."""
    ws = [weight("nvfp4", 8, 32, seed=s) for s in range(3)]
    st = stack(ws)
    x = torch.randn(1, 32)
    ids = torch.tensor([[2, 0]])
    assert torch.equal(cpu.experts(x, st, ids), cpu.experts(x, ws, ids))
    assert math.isclose(float(st.scale2[2]), float(ws[2].scale2))


@pytest.mark.parametrize("G", [1, 8])
def test_the_fused_state_step_is_the_recurrence(G):
    """ops.cpp's one-pass Mamba state step against mamba.py's reference step (ssm_step), head h in
    group h % G as the rank-major layout puts it."""
    from runtime.mamba import ssm_step

    H, P, N = 16, 8, 24
    g = torch.Generator().manual_seed(G)
    state = torch.randn(H, P, N, generator=g)
    x, dt = torch.randn(H, P, generator=g), torch.rand(H, generator=g)
    A, D = -torch.rand(H, generator=g) * 4, torch.randn(H, generator=g)
    B, C = torch.randn(G, N, generator=g), torch.randn(G, N, generator=g)
    group = torch.arange(H) % G
    want_state = state.clone()
    want = ssm_step(x, dt, A, B[group], C[group], D, want_state)
    got = cpu.ssm_step(state, x, dt, A, B, C, D)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5) and torch.allclose(state, want_state, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
def test_kernel_check_runs_the_cpu_kernels(capsys, monkeypatch, fmt):
    """`kernel-check --kernel cpu`: the contract's JSON, within the backend's stated tolerance."""
    import json

    from runtime import cli

    monkeypatch.setattr(kernel_check, "STREAM_BYTES", 1 << 20)  # speed is not tested here
    monkeypatch.setattr(kernel_check, "MIN_SECONDS", 0.0)
    monkeypatch.setattr(kernel_check, "streaming_read", lambda device: 10.0)
    for argv in (["--rows", "33", "--cols", "208", "--tokens", "1"], ["--rows", "40", "--cols", "96", "--experts", "9",
                                                                      "--active", "4", "--tokens", "3"]):
        assert cli.main(["kernel-check", "--format", fmt, "--kernel", "cpu", *argv, "--json"]) == 0
        for row in (json.loads(line) for line in capsys.readouterr().out.splitlines()):
            assert row["kernel"] == "cpu" and row["ok"] and row["max_rel_err"] <= row["tolerance"]
