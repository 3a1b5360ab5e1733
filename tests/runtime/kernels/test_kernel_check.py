"""`python -m runtime kernel-check`: its JSON contract, its reference, and its refusals."""

from __future__ import annotations

import json

import pytest
import torch

from runtime import cli, kernel_check, kernels
from runtime.checkpoint.quant_pack import pack_nvfp4

FIELDS = {"kernel", "format", "shape", "max_abs_err", "max_rel_err", "gb_per_s", "bandwidth_gb_per_s", "tokens",
          "threads", "tolerance", "ok", "read_share", "device", "dtype"}


def run(capsys, *argv) -> list[dict]:
    assert cli.main(["kernel-check", *argv, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture(autouse=True)
def small_streams(monkeypatch):
    monkeypatch.setattr(kernel_check, "STREAM_BYTES", 1 << 20)  # a quick timing pass: speed is not tested here
    monkeypatch.setattr(kernel_check, "MIN_SECONDS", 0.0)
    monkeypatch.setattr(kernel_check, "streaming_read", lambda device: 10.0)


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
def test_one_shape_is_one_json_line_with_the_contract_fields(capsys, fmt):
    rows = run(capsys, "--format", fmt, "--kernel", "torch", "--rows", "40", "--cols", "96", "--tokens", "3")
    assert len(rows) == 1
    (row,) = rows
    assert FIELDS <= row.keys()
    assert (row["kernel"], row["format"], row["shape"], row["tokens"]) == ("torch", fmt, [40, 96], 3)
    assert row["ok"] and 0 < row["max_rel_err"] <= row["tolerance"]
    assert row["gb_per_s"] > 0 and row["bandwidth_gb_per_s"] == 10.0


def test_experts_check_the_shared_and_the_per_expert_input(capsys):
    rows = run(capsys, "--format", "nvfp4", "--kernel", "torch", "--rows", "32", "--cols", "64", "--experts", "9",
               "--active", "4", "--tokens", "2")
    assert [r["case"] for r in rows] == ["experts.up", "experts.down"]
    assert all(r["shape"] == [9, 32, 64] and r["active"] == 4 and r["ok"] for r in rows)


def test_the_reference_is_the_slow_decoder_and_catches_a_wrong_kernel(monkeypatch):
    # a kernel that drops the per-tensor scale must fail: the check compares against quant.py's decoder
    class Wrong:
        @staticmethod
        def linear(x, w):
            return kernels.backend("torch").linear(x, w) * 1.01

    g = torch.Generator().manual_seed(1)
    case = kernel_check.Case("linear", 24, 48)
    result = kernel_check.check(case, "nvfp4", Wrong, torch.device("cpu"), torch.float32, 2, False, g)
    assert result["max_rel_err"] > 5e-3  # 1% off, seen as such
    right = kernel_check.check(case, "nvfp4", kernels.backend("torch"), torch.device("cpu"), torch.float32, 2, False, g)
    assert right["max_rel_err"] < 1e-5


def test_reference_matches_a_packed_weight_exactly():
    w = torch.randn(16, 32)
    packed = pack_nvfp4(w)
    x = torch.randn(3, 32)
    assert torch.equal(kernel_check.reference(x, packed, None), x @ packed.dequantize(torch.float32).T)


def test_a_nan_output_is_an_infinite_error():
    assert kernel_check.errors(torch.tensor([float("nan")]), torch.tensor([1.0])) == (float("inf"), float("inf"))


@pytest.mark.parametrize("argv, words", [
    (["--rows", "8", "--cols", "40"], "multiple of 16"),
    (["--experts", "4", "--active", "5"], "more than --experts"),
    (["--rows", "0"], "whole number from 1"),
    (["--dtype", "int4"], "unknown --dtype"),
])
def test_bad_shapes_are_one_line_refusals(capsys, argv, words):
    code = None
    try:
        code = cli.main(["kernel-check", "--format", "nvfp4", "--kernel", "torch", *argv])
    except SystemExit as e:  # argparse-level refusals exit 2 themselves
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1


def test_an_unavailable_backend_says_why(capsys, monkeypatch):
    monkeypatch.setitem(kernels.BACKENDS, "cpu", "runtime.kernels.no_such_module")
    assert cli.main(["kernel-check", "--format", "nvfp4", "--kernel", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the cpu kernels cannot run on cpu:") and "cannot be imported" in err
