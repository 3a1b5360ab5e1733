"""The fused Triton kernels (runtime/kernels/triton_fused.py), run by Triton's interpreter on CPU
tensors (conftest.py), against the exact reference (quant.py's decoder, kernel_check.reference) and
ModelOpt's dequantization: the real 30B-A3B shapes (a few rows each: the interpreter is slow), random
odd shapes through every kernel and launch plan, gathered experts in nested (non-contiguous) views,
every code and scale byte, and edge values (NaN scales, zero blocks, the largest E4M3 scale)."""

import random

import pytest
import torch

from runtime import cli, kernel_check
from runtime.checkpoint.quant import PackedFP8, PackedNVFP4, stack

FORMATS = ["nvfp4", "fp8"]
ROWS = 24  # rows of each real shape: the real input width, a few outputs


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return kernel_check.errors(got, want)[1]


def weight(fmt: str, shape, seed: int = 0):
    return kernel_check.random_weight(fmt, tuple(shape), torch.Generator().manual_seed(seed), "cpu")


def nested(fmt: str, E: int, N: int, K: int, seed: int = 0):
    """Stacked experts (E, N, K) as a nested submodel sees them: a view of a larger parent."""
    return weight(fmt, (E + 3, N + 5, K + 32), seed)[:E, :N, :K]


# ----------------------------------------------------------------------------- the real shapes

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(kernel_check.REAL_LINEAR))
@pytest.mark.parametrize("tokens", [1, 5])
def test_real_linear_shapes(fused, fmt, case, tokens):
    """Every packed linear of the 30B-A3B at its real input width: one token (the rows kernel) and five
    (the tensor-core dot kernel), bf16 activations as the engine runs them."""
    N, K = kernel_check.REAL_LINEAR[case]
    w = weight(fmt, (ROWS, K))
    x = torch.randn(tokens, K, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got = fused.linear(x, w)
    assert got.shape == (tokens, ROWS) and got.dtype == torch.bfloat16
    assert rel_err(got, kernel_check.reference(x, w, None)) <= fused.tolerance(fmt.upper(), torch.bfloat16)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(kernel_check.REAL_EXPERTS))
def test_real_gathered_experts(fused, fmt, case):
    """6 chosen experts of a nested view at the real widths; the down projection takes one input per
    chosen expert. Tokens share some experts and not others."""
    N, K = kernel_check.REAL_EXPERTS[case]
    w = nested(fmt, 10, ROWS, K)
    ids = torch.tensor([[3, 0, 9, 4, 7, 1], [1, 2, 3, 8, 5, 6]])
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, K, generator=g) if case.endswith("down") else torch.randn(2, K, generator=g)
    x = x.to(torch.bfloat16)
    got = fused.experts(x, w, ids)
    assert got.shape == (2, 6, ROWS)
    assert rel_err(got, kernel_check.reference(x, w, ids)) <= fused.tolerance(fmt.upper(), torch.bfloat16)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_against_modelopt(fused, fmt):
    """The outside oracle: ModelOpt's own dequantization (tests/runtime/test_dequant.py) times fp32
    activations, at the real expert-down width, through the rows kernel with K split in three."""
    from tests.runtime.test_dequant import modelopt_fp8, modelopt_nvfp4, packed

    w = packed(fmt.upper(), 40, 1856)
    x = torch.randn(3, 1856, generator=torch.Generator().manual_seed(3))
    want = x @ (modelopt_nvfp4(w) if fmt == "nvfp4" else modelopt_fp8(w)).T
    run = fused.run_nvfp4 if fmt == "nvfp4" else fused.run_fp8
    args = (w.packed, w.scale, w.scale2) if fmt == "nvfp4" else (w.weight, w.scale)
    got = run(x, *args, None, plan=fused.Plan(16, 64, 3))
    assert rel_err(got, want) <= fused.tolerance(fmt.upper(), torch.float32)


# ----------------------------------------------------------------------------- random odd shapes

def random_plan(fused, rng: random.Random, dot: bool):
    if dot:
        return fused.Plan(rng.choice([16, 32]), rng.choice([16, 32, 64]), rng.choice([1, 2, 3]), block_t=16)
    return fused.Plan(rng.choice([8, 32]), rng.choice([32, 64]), rng.choice([1, 2, 3]))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", range(6))
def test_random_odd_linears(fused, fmt, seed):
    """Odd row counts and widths (FP8 any width, NVFP4 whole blocks), 1..17 tokens, every activation
    dtype, column-sliced weights (a row stride wider than the row), and launch plans with K split in
    up to three parts and blocks that overhang the rows and the columns."""
    rng = random.Random(seed)
    N, T = rng.randint(1, 70), rng.choice([1, 2, 3, 7, 16, 17])
    K = 16 * rng.randint(1, 20) if fmt == "nvfp4" else rng.randint(1, 320)
    dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16])
    w = weight(fmt, (N + 3, K + 16 * (fmt == "nvfp4") + 5 * (fmt == "fp8")), seed)[:N, :K]
    x = torch.randn(T, K, generator=torch.Generator().manual_seed(seed)).to(dtype)
    want = kernel_check.reference(x, w, None)
    limit = fused.tolerance(fmt.upper(), dtype)
    assert rel_err(fused.linear(x, w), want) <= limit
    dot = T > 1 and dtype != torch.float32
    plan = random_plan(fused, rng, dot)
    got = (fused.run_nvfp4(x, w.packed, w.scale, w.scale2, None, plan=plan) if fmt == "nvfp4"
           else fused.run_fp8(x, w.weight, w.scale, None, plan=plan))
    assert got.dtype == dtype and rel_err(got, want) <= limit, plan


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", range(4))
def test_random_gathered_experts(fused, fmt, seed):
    """Any expert count, any k, several tokens, one input per token or per chosen expert, nested views."""
    rng = random.Random(100 + seed)
    E = rng.randint(1, 9)
    k, T, N = rng.randint(1, E), rng.randint(1, 4), rng.randint(1, 40)
    K = 16 * rng.randint(1, 12)
    dtype = rng.choice([torch.float32, torch.bfloat16])
    w = nested(fmt, E, N, K, seed)
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
    x = (torch.randn(T, k, K, generator=g) if rng.random() < 0.5 else torch.randn(T, K, generator=g)).to(dtype)
    want = kernel_check.reference(x, w, ids)
    plan = random_plan(fused, rng, False)
    got = (fused.run_nvfp4(x, w.packed, w.scale, w.scale2, ids, plan=plan) if fmt == "nvfp4"
           else fused.run_fp8(x, w.weight, w.scale, ids, plan=plan))
    assert got.shape == (T, k, N) and rel_err(got, want) <= fused.tolerance(fmt.upper(), dtype), plan


# ----------------------------------------------------------------------------- every code, edge values

def every_byte_nvfp4(scale2: float) -> PackedNVFP4:
    """256 rows x 32 inputs: row r's two blocks scaled by E4M3 byte r, its bytes covering all 256 codes
    between them (so every code meets every scale)."""
    codes = (torch.arange(256)[:, None] * 16 + torch.arange(16)[None, :]) % 256
    scales = torch.arange(256, dtype=torch.uint8)[:, None].expand(256, 2).contiguous()
    return PackedNVFP4(codes.to(torch.uint8), scales.view(torch.float8_e4m3fn), torch.tensor(scale2))


def every_byte_fp8(scale: float) -> PackedFP8:
    codes = (torch.arange(256)[:, None] * 16 + torch.arange(16)[None, :]) % 256
    return PackedFP8(codes.to(torch.uint8).view(torch.float8_e4m3fn), torch.tensor(scale))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_code_and_scale_decodes_exactly(fused, fmt, dtype):
    """Multiplying by the identity gives the weights back: bit for bit quant.py's values, in fp32 (the
    rows kernel) and in bf16 (the dot kernel, whose scaled weights are exact in bf16). NaN bytes
    (E4M3 0x7F/0xFF) leave NaN where the reference has NaN."""
    w = every_byte_nvfp4(2.0 ** -10) if fmt == "nvfp4" else every_byte_fp8(2.0 ** -10)
    K = w.shape[1]
    got = fused.linear(torch.eye(K, dtype=dtype), w)  # (K, 256): column n is row n of the weight
    want = w.dequantize(torch.float32).to(dtype)
    bad = want.isnan().any(1)  # a NaN in a row spreads to every output of that row (NaN * 0 is NaN)
    assert bad.sum() == (2 if fmt == "nvfp4" else 32)
    assert torch.equal(got.T[~bad], want[~bad]) and got.T[bad].isnan().all()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("path", ["rows", "dot", "experts"])
def test_edge_values(fused, fmt, path):
    """Zero blocks (codes 0 and -0), the largest E4M3 scale with the largest codes, subnormal scales,
    and a NaN scale (or NaN weight) that must spoil its row and no other."""
    E, N, K = 3, 20, 64
    w = weight(fmt, (E, N, K), 5)
    if fmt == "nvfp4":
        w.packed[:, 0] = 0x00  # zero blocks
        w.packed[:, 1] = 0x88  # blocks of "-0"
        w.packed[:, 2, 8:16], w.scale[:, 2, 1] = 0x77, torch.tensor(448.0)  # 6 * 448: the largest value
        w.packed[:, 3, 16:24], w.scale[:, 3, 2] = 0xFF, torch.tensor(448.0)  # -6 * 448
        w.scale[:, 4] = torch.tensor(2.0 ** -9)  # the smallest subnormal scale
        w.scale.view(torch.uint8)[:, 5, 3] = 0x7F  # NaN
    else:
        w.weight.view(torch.uint8)[:, 0, :] = 0x00
        w.weight.view(torch.uint8)[:, 1, :] = 0x80  # -0
        w.weight.view(torch.uint8)[:, 2, :] = 0x7E  # 448
        w.weight.view(torch.uint8)[:, 3, :] = 0x01  # the smallest subnormal
        w.weight.view(torch.uint8)[:, 5, 7] = 0x7F  # NaN
    g = torch.Generator().manual_seed(6)
    if path == "experts":
        ids = torch.tensor([[2, 0], [1, 2]])
        x = torch.randn(2, K, generator=g).to(torch.bfloat16)
        got, want = fused.experts(x, w, ids), kernel_check.reference(x, w, ids)
    else:
        w = w[1]
        x = torch.randn(1 if path == "rows" else 4, K, generator=g).to(torch.bfloat16)
        got, want = fused.linear(x, w), kernel_check.reference(x, w, None)
    nan = want.isnan()
    assert nan.any() and torch.equal(got.isnan(), nan)
    assert (got[..., :2] == 0).all()  # the zero rows
    assert rel_err(got.masked_fill(nan, 0), want.masked_fill(nan, 0)) <= fused.tolerance(fmt.upper(), torch.bfloat16)


# ----------------------------------------------------------------------------- the ops, the contract

def test_ops_run_as_shapes_on_meta(fused):
    """The custom ops' fake functions: no values read, the output shapes of a linear and of experts."""
    meta = torch.device("meta")
    w = weight("nvfp4", (7, 40, 64)).to(meta)
    x = torch.empty(3, 64, device=meta, dtype=torch.bfloat16)
    ids = torch.empty(3, 2, device=meta, dtype=torch.long)
    assert fused.linear(x, w[0]).shape == (3, 40) and fused.experts(x, w, ids).shape == (3, 2, 40)
    f = weight("fp8", (7, 40, 64)).to(meta)
    assert fused.experts(torch.empty(3, 2, 64, device=meta), f, ids).shape == (3, 2, 40)


@pytest.mark.slow
def test_ops_pass_torch_opcheck(fused):
    """torch.library.opcheck: the fake function against the real one (shapes, dtypes, strides) and the
    autograd registration. (Its schema check cannot run: it multiplies inputs, and CPU torch has no
    multiply for float8_e4m3fn.)"""
    checks = ("test_faketensor", "test_autograd_registration")
    w = weight("nvfp4", (4, 24, 32))
    x = torch.randn(2, 32).to(torch.bfloat16)
    ids = torch.tensor([[1, 3], [0, 1]])
    torch.library.opcheck(fused.nvfp4_mm, (x, w.packed, w.scale, w.scale2, ids), test_utils=checks)
    torch.library.opcheck(fused.nvfp4_mm, (x, w.packed[0], w.scale[0], w.scale2[0], None), test_utils=checks)
    f = weight("fp8", (4, 24, 32))
    torch.library.opcheck(fused.fp8_mm, (x[:, None].expand(2, 2, 32), f.weight, f.scale, ids), test_utils=checks)


def test_self_test_passes_and_catches_a_wrong_kernel(fused, monkeypatch):
    small = dict(linears=((1, 24, 96), (3, 8, 48)), gathered=(4, 2, 16, 64))
    cpu = torch.device("cpu")
    assert fused.self_test(cpu, "NVFP4", **small) is None and fused.self_test(cpu, "FP8", **small) is None
    real = fused.nvfp4_mm
    monkeypatch.setattr(fused, "nvfp4_mm", lambda *a: real(*a) * 1.02)
    problem = fused.self_test(cpu, "NVFP4", **small)
    assert problem.startswith("1 x 96 -> 24: relative error") and "allowed 8e-03" in problem


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_check_runs_the_interpreter(fused, capsys, monkeypatch, fmt):
    """`kernel-check --kernel triton --device cpu`: interpreted, within the stated tolerance."""
    import json

    monkeypatch.setattr(kernel_check, "streaming_read", lambda device: 10.0)
    for argv in (["--rows", "24", "--cols", "2688"], ["--experts", "8", "--active", "6", "--rows", "16",
                                                       "--cols", "1856"]):
        assert cli.main(["kernel-check", "--format", fmt, "--kernel", "triton", "--device", "cpu", *argv,
                         "--json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert rows and all(r["interpreted"] and r["ok"] and r["kernel"] == "triton" for r in rows)


def test_no_rows_is_an_empty_result(fused):
    w = weight("nvfp4", (3, 8, 32))
    assert fused.linear(torch.empty(0, 32), w[0]).shape == (0, 8)
    assert fused.experts(torch.empty(0, 32), w, torch.empty(0, 2, dtype=torch.long)).shape == (0, 2, 8)


def test_stacked_weights_keep_a_global_scale_per_expert(fused):
    """Each expert's scale2 is its own: experts that differ only by it give outputs in that ratio."""
    one = weight("nvfp4", (16, 32), 9)
    twice = PackedNVFP4(one.packed, one.scale, one.scale2 * 2)
    w = stack([one, twice])
    x = torch.randn(1, 32)
    out = fused.experts(x, w, torch.tensor([[0, 1]]))
    assert torch.allclose(out[0, 1], 2 * out[0, 0], rtol=1e-6)
