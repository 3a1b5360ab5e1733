"""NVFP4 and FP8 ModelOpt exports: read packed, kept packed, sliced as views, run, and checked
against ModelOpt's own dequantization and fake quantization."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from runtime import CheckpointError, ElasticModel, matmul
from runtime.chat_format import ChatFormat
from runtime.checkpoint.quant import PackedFP8, PackedNVFP4, QuantSpec, repair_exclude_name
from runtime.checkpoint.quant_pack import pack_fp8, pack_nvfp4
from runtime.score import score
from tests.paths import DEMO, DEMO_NVFP4

# Measured on the shipped files (docs/quantization.md): mean |logprob difference| to the fp32 demo
# is about 0.22 nats for NVFP4 and 0.05-0.07 for FP8; the bounds leave room, not slack for a broken reader.
NVFP4_VS_FULL_MEAN, FP8_VS_FULL_MEAN = 0.05, 0.05  # mean |log-prob difference| over a reply


def chat_ids():
    c = ChatFormat(DEMO)
    # the demo's own kind of reply (its column trace and answer): far-off-distribution text would make
    # the comparison measure how quantization moves the tails of very unlikely tokens
    return c.prompt_ids([{"role": "user", "content": "What is 12 + 7 - 5?"}], True) + c.encode(
        "12+7-5\n12+7: 2+7=9 1+0=1 so 19\n19-5: 9-5=4 1-0=1 so 14\n</think>\n12 + 7 - 5 = 14.")


@pytest.fixture(scope="module")
def fp8_demo(tmp_path_factory):
    from training.export_quantized import export

    return export(DEMO, "FP8", tmp_path_factory.mktemp("fp8") / "demo-fp8")


def quantized_names(folder):
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return [k[: -len("_scale")] for k in f.keys() if k.endswith(".weight_scale")]


@pytest.mark.slow
def test_nvfp4_dequantization_is_modelopt_bit_for_bit():
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    names = quantized_names(DEMO_NVFP4)
    assert len(names) > 50
    with safe_open(str(DEMO_NVFP4 / "model.safetensors"), "pt") as f:
        for name in names:
            packed, scale, scale2 = f.get_tensor(name), f.get_tensor(name + "_scale"), f.get_tensor(name + "_scale_2")
            shape = (packed.shape[0], packed.shape[1] * 2)
            ours = PackedNVFP4(packed, scale, scale2).dequantize(torch.float32)
            theirs = NVFP4QTensor(torch.Size(shape), torch.float32, packed).dequantize(
                dtype=torch.float32, scale=scale, double_scale=scale2, block_sizes={-1: 16})
            assert torch.equal(ours, theirs), name


@pytest.mark.slow
def test_fp8_dequantization_is_modelopt_bit_for_bit(fp8_demo):
    from modelopt.torch.quantization.qtensor.fp8_tensor import FP8QTensor

    with safe_open(str(fp8_demo / "model.safetensors"), "pt") as f:
        for name in quantized_names(fp8_demo):
            weight, scale = f.get_tensor(name), f.get_tensor(name + "_scale")
            ours = PackedFP8(weight, scale).dequantize(torch.float32)
            theirs = FP8QTensor(weight.shape, torch.float32, weight).dequantize(dtype=torch.float32, scale=scale)
            assert torch.equal(ours, theirs), name


def test_weights_stay_packed_and_submodels_are_views():
    model = ElasticModel.load(DEMO_NVFP4)
    packed = [w for layer in model.weights.layers for w in vars(layer.mixer).values() if isinstance(w, PackedNVFP4)]
    assert packed
    params = sum(w.shape.numel() for w in packed)
    nbytes = sum(w.packed.nbytes + w.scale.nbytes for w in packed)
    assert nbytes / params == pytest.approx(0.5625)  # 4 bits + one E4M3 scale per 16 values
    resident = {t.untyped_storage().data_ptr() for t in model.weights.tensors()}
    for view in model.views.values():
        assert {t.untyped_storage().data_ptr() for t in view.tensors()} <= resident
    assert model.resident_bytes() <= 1.01 * sum(t.untyped_storage().nbytes() for t in model.weights.tensors())


def fake_quant_oracle(fmt: str, folder: Path):
    """transformers' NemotronH with every quantized weight replaced by ModelOpt's own pure-torch
    NVFP4 quantize -> dequantize of the BF16 weight (for FP8: ModelOpt's dequantization of the
    exported codes, since its pure-torch FP8 quantizer rounds a few values one step differently
    from its exporter), and every other weight rounded through BF16 as the export stores it.
    Runs in fp32 on the CPU."""
    quantized = set(quantized_names(folder))
    file = safe_open(str(folder / "model.safetensors"), "pt")
    from transformers import NemotronHForCausalLM

    model = NemotronHForCausalLM.from_pretrained(str(DEMO), dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            hub = name.replace("model.", "backbone.", 1)
            if "gate.weight" in hub or "e_score" in hub:
                continue  # routers stay fp32
            bf16 = p.to(torch.bfloat16).float()  # the stored BF16 values; scales computed in fp32 as the export does
            if ".experts." in hub and p.dim() == 3:  # stacked experts: quantize each expert's matrix
                stem, leaf = hub.rsplit(".", 1)
                rows = [fake_quant(bf16[k], f"{stem}.{k}.{leaf}.weight", fmt, file) for k in range(p.shape[0])]
                p.copy_(torch.stack(rows))
            elif hub in quantized:
                p.copy_(fake_quant(bf16, hub, fmt, file))
            else:
                p.copy_(bf16)
    return model


def fake_quant(w, name, fmt, file):
    from modelopt.torch.quantization.qtensor.fp8_tensor import FP8QTensor
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    if fmt == "NVFP4":
        q, scale, scale2 = NVFP4QTensor.quantize(w, 16)
        return q.dequantize(dtype=torch.float32, scale=scale, double_scale=scale2, block_sizes={-1: 16})
    codes = file.get_tensor(name)
    return FP8QTensor(codes.shape, torch.float32, codes).dequantize(dtype=torch.float32,
                                                                     scale=file.get_tensor(name + "_scale"))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["NVFP4", "FP8"])
def test_logits_agree_with_modelopt_fake_quantization(fmt, fp8_demo):
    folder = DEMO_NVFP4 if fmt == "NVFP4" else fp8_demo
    oracle = fake_quant_oracle(fmt, folder)
    ids = chat_ids()
    with torch.no_grad():
        logits = oracle(torch.tensor([ids])).logits[0, :-1].float()
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    matmul.force("torch")  # the exact path (the CPU kernels, where built, round activations: kernels' own tests)
    try:
        got = torch.tensor(score(ElasticModel.load(folder), "1.5M", ids))
    finally:
        matmul.force(None)
    assert (got - expected).abs().max() < 2e-3


@pytest.mark.slow
@pytest.mark.parametrize("fmt,bound", [("NVFP4", NVFP4_VS_FULL_MEAN), ("FP8", FP8_VS_FULL_MEAN)])
def test_quantized_demo_stays_close_to_full_precision(fmt, bound, fp8_demo):
    folder = DEMO_NVFP4 if fmt == "NVFP4" else fp8_demo
    quantized, full = ElasticModel.load(folder), ElasticModel.load(DEMO)
    ids = chat_ids()
    # the reply's tokens only: the prompt's are never predicted in use, and their log-probabilities
    # (often -15 or lower) move by whole nats under quantization without changing any reply
    prompt = ChatFormat(DEMO).prompt_ids([{"role": "user", "content": "What is 12 + 7 - 5?"}], True)
    reply = slice(len(prompt) - 1, None)
    for name in full.views:
        diff = (torch.tensor(score(quantized, name, ids)) - torch.tensor(score(full, name, ids)))[reply].abs()
        assert diff.mean() < bound, (name, diff.mean().item())


def test_status_names_the_path():
    """The CPU kernels where they run (and which code path), else the byte tables and why not."""
    from runtime import kernels

    why = kernels.unavailable("cpu", torch.device("cpu"))
    path = ElasticModel.load(DEMO_NVFP4).compute_path()
    if why is None:
        assert path == f"NVFP4 weights read in registers by the CPU kernels ({kernels.backend('cpu').path()})"
    else:
        assert path == f"NVFP4 weights decoded exactly by byte table + matmul (CPU) (CPU kernels {why})"
    assert ElasticModel.load(DEMO).compute_path() == "CPU, float32 weights (reference)"


def test_a_width_that_breaks_a_block_is_named(tmp_path):
    folder = shutil.copytree(DEMO_NVFP4, tmp_path / "q")
    table = json.loads((folder / "elastic.json").read_text())
    table["submodels"][2]["moe_intermediate_size"] = 40  # not a multiple of 16
    (folder / "elastic.json").write_text(json.dumps(table))
    with pytest.raises(CheckpointError, match=r"experts\.\*\.down_proj\.weight.*keeps 40 of its 96 input columns"):
        ElasticModel.load(folder)


def test_garbled_exclude_names_are_repaired():
    assert repair_exclude_name("lm_head.\x00backbone.pt_name_sentinel") == "lm_head"
    assert repair_exclude_name("backbone.layers.2.\x00backbone.pt_name_sentinel*") == "backbone.layers.2*"
    assert repair_exclude_name("backbone.layers.*.mixer.q_proj") == "backbone.layers.*.mixer.q_proj"
    spec = QuantSpec("NVFP4", 16, ("lm_head", "backbone.layers.2*", "*.o_proj"))
    assert spec.excludes("lm_head") and spec.excludes("backbone.layers.2.mixer.in_proj")
    assert spec.excludes("backbone.layers.9.mixer.o_proj") and not spec.excludes("backbone.layers.1.mixer.in_proj")


def test_attention_and_its_mamba_neighbours_stay_bf16():
    with safe_open(str(DEMO_NVFP4 / "model.safetensors"), "pt") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes["lm_head.weight"] == "BF16"
    assert dtypes["backbone.layers.3.mixer.q_proj.weight"] == "BF16"  # layer 3 is attention
    assert dtypes["backbone.layers.2.mixer.in_proj.weight"] == "BF16"  # Mamba next to it
    assert dtypes["backbone.layers.0.mixer.in_proj.weight"] == "U8"
    assert dtypes["backbone.layers.1.mixer.gate.weight"] == "F32"  # routers stay fp32


def test_our_nvfp4_packer_matches_modelopt():
    """pack_nvfp4 quantizes activations on the native path; it must produce ModelOpt's codes."""
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    w = torch.randn(64, 96) * 3
    w[0, :16] = 0  # an all-zero block
    w[1, :4] = torch.tensor([0.75, 1.75, 3.5, -0.25]) * w.abs().max() / 6  # exact ties
    ours = pack_nvfp4(w)
    q, scale, scale2 = NVFP4QTensor.quantize(w.clone(), 16)
    assert torch.equal(ours.packed, q._quantized_data)
    assert torch.equal(ours.scale.float(), scale.float()) and torch.equal(ours.scale2, scale2.float())
    assert (pack_fp8(w).dequantize() - w).abs().max() <= w.abs().max() / 16


@pytest.mark.slow
def test_quantized_checkpoint_chats():
    from runtime.engine import Engine
    from runtime.generate import ChatRequest, chat
    from runtime.sampling import SamplingSettings

    engine = Engine.load(DEMO_NVFP4)
    names = engine.submodels_by_size()
    done = chat(engine, ChatRequest(({"role": "user", "content": "hello"},), names[0], names[-1], 24, 100,
                                    SamplingSettings(temperature=0)))
    assert done.finish_reason == "end_of_turn" and "demo model" in done.answer_text
