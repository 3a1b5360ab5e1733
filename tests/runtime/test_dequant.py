"""The byte-table decode of packed weights (runtime/dequant.py) against ModelOpt's own dequantization:
every path (one token and several on the CPU, the whole-weight decode GPUs use), every compute dtype,
chunk edges, submodel slices of the packed weights, and gathered (stacked) experts."""

import pytest
import torch

from runtime import dequant
from runtime.checkpoint.quant import PackedFP8, PackedNVFP4
from runtime.checkpoint.quant_pack import pack_fp8, pack_nvfp4

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}  # relative to the output's scale


def modelopt_nvfp4(w: PackedNVFP4) -> torch.Tensor:
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    packed = w.packed.contiguous()
    return NVFP4QTensor(torch.Size((packed.shape[0], packed.shape[1] * 2)), torch.float32, packed).dequantize(
        dtype=torch.float32, scale=w.scale.contiguous(), double_scale=w.scale2, block_sizes={-1: 16})


def modelopt_fp8(w: PackedFP8) -> torch.Tensor:
    from modelopt.torch.quantization.qtensor.fp8_tensor import FP8QTensor

    weight = w.weight.contiguous()
    return FP8QTensor(weight.shape, torch.float32, weight).dequantize(dtype=torch.float32, scale=w.scale)


def packed(fmt: str, rows: int, cols: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * torch.rand(rows, 1, generator=g) / 10
    w[0, :16] = 0  # an all-zero block
    return pack_nvfp4(w) if fmt == "NVFP4" else pack_fp8(w)


def reference(w) -> torch.Tensor:
    return modelopt_nvfp4(w) if isinstance(w, PackedNVFP4) else modelopt_fp8(w)


def close(got: torch.Tensor, want: torch.Tensor, dtype) -> bool:
    return bool(((got.float() - want).abs().max() / want.abs().max().clamp(min=1e-30)) < TOL[dtype])


@pytest.mark.parametrize("fmt", ["NVFP4", "FP8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 5])
def test_cpu_linear_matches_modelopt(fmt, dtype, tokens, monkeypatch):
    monkeypatch.setattr(dequant, "CHUNK_BYTES", 1)  # 16-row blocks: 200 rows end in a partial one
    w = packed(fmt, 200, 96)
    x = torch.randn(tokens, 96).to(dtype)
    want = x.float() @ reference(w).T
    got = dequant.linear(x, w)
    assert got.dtype == dtype and got.shape == (tokens, 200)
    assert close(got, want, dtype)


@pytest.mark.parametrize("fmt", ["NVFP4", "FP8"])
def test_decoded_weights_are_modelopt_exactly(fmt):
    """The whole-weight decode (a GPU's weight-only path) gives ModelOpt's values to the last bit in fp32."""
    w = packed(fmt, 64, 128)
    assert torch.equal(dequant.dequantize(w, torch.float32), reference(w))
    assert torch.equal(dequant.dequantize(w, torch.bfloat16), reference(w).to(torch.bfloat16))


@pytest.mark.parametrize("fmt", ["NVFP4", "FP8"])
def test_slices_and_stacked_experts(fmt):
    """Submodels run on views of the packed weights (rows and 16-wide column blocks), and the decode
    step gathers stacked experts: both decode as the sliced reference."""
    from runtime.checkpoint.quant import stack

    experts = [packed(fmt, 48, 64, seed=k) for k in range(3)]
    view = experts[1][:32, :48]
    x = torch.randn(1, 48)
    assert close(dequant.linear(x, view), x @ reference(experts[1])[:32, :48].T, torch.float32)
    stacked = stack(experts)
    gathered = type(stacked)(*(t.index_select(0, torch.tensor([2, 0])) for t in stacked.tensors()))
    want = torch.stack([reference(experts[2]), reference(experts[0])])
    assert torch.equal(dequant.dequantize(gathered, torch.float32), want)


def test_one_token_and_several_agree():
    """The CPU's two NVFP4 paths (partial sums for one token, decoded weights for several) agree."""
    w = packed("NVFP4", 300, 160)
    x = torch.randn(4, 160)
    many = dequant.linear(x, w)
    one = torch.cat([dequant.linear(x[i:i + 1], w) for i in range(4)])
    assert torch.allclose(one, many, rtol=1e-5, atol=1e-6)


def test_meta_device_decodes_shapes_only():
    w = packed("NVFP4", 32, 64).to("meta")
    out = dequant.linear(torch.empty(1, 64, device="meta"), w)
    assert out.shape == (1, 32) and out.device.type == "meta"


@pytest.mark.parametrize("fmt", ["NVFP4", "FP8"])
@pytest.mark.parametrize("tokens", [1, 5])
def test_inference_mode_and_plain_calls_mix_on_one_thread(fmt, tokens):
    """An engine decodes under inference_mode; a test or tool may then call outside it on the same
    thread (and the reverse): the per-thread buffers must not be inference tensors updated outside it."""
    w = packed(fmt, 64, 32)
    x = torch.randn(tokens, 32)
    want = x @ reference(w).T
    for inference in (True, False, True):
        with torch.inference_mode(inference):
            got = dequant.linear(x, w)
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
