"""The engine on the fused kernels: with ELASTIC_CHAT_KERNEL=triton (matmul.force) a model's packed
linears and gathered experts run the Triton kernels (interpreted here, on the CPU), and its prefill
and cached decode give the logits of the reference path, for NVFP4 (the shipped demo) and FP8."""

import json

import pytest
import torch

from runtime import ElasticModel, matmul
from runtime.decode_check import OpCounter, random_model
from tests.paths import DEMO_NVFP4

PROMPT = [1, 17, 42, 99, 5]
NEXT = [77, 160]


def logits_of(model, name: str, kernel: str | None):
    """Prefill logits and two cached decode steps' logits (fp32), with `kernel` forced, and the ops
    one decode step dispatched."""
    matmul.force(kernel)
    try:
        cache = model.new_cache(name, len(PROMPT) + len(NEXT) + 1)
        with torch.inference_mode():
            out = [model.forward(name, cache, PROMPT).float().clone()]
            step = model.decoder(name, cache)
            counter = OpCounter()
            with counter:
                out.append(step.forward_token(NEXT[0]).float().clone())
            out += [step.forward_token(t).float().clone() for t in NEXT[1:]]
        return out, counter.ops, model.compute_path()
    finally:
        matmul.force(None)


def assert_same_logits(fused_run, reference_run):
    for got, want in zip(fused_run, reference_run):
        assert (got - want).abs().max() <= 1e-4 * want.abs().max()


@pytest.mark.slow
def test_nvfp4_demo_decodes_on_the_fused_kernels(fused):
    model = ElasticModel.load(DEMO_NVFP4)
    name = next(iter(model.views))
    got, ops, path = logits_of(model, name, "triton")
    want, ref_ops, ref_path = logits_of(model, name, "torch")  # the exact path (the CPU kernels round activations)
    assert path.startswith("NVFP4 fused Triton kernels") and "byte table" in ref_path
    assert ops["elastic_chat.nvfp4_mm"] > 0 and "elastic_chat.nvfp4_mm" not in ref_ops
    assert_same_logits(got, want)


@pytest.mark.slow
def test_fp8_model_decodes_on_the_fused_kernels(fused, checkpoints, tmp_path):
    """Every submodel (nested views: sliced rows, columns and experts) of an FP8-packed random model."""
    folder = tmp_path / "fp8"
    folder.mkdir()
    for name in ("config.json", "elastic.json"):
        (folder / name).write_bytes((checkpoints["hybrid"] / name).read_bytes())
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8",
                                                                              "exclude_modules": ["lm_head"]}}))
    model = random_model(folder, "cpu", "float32")
    for name in model.views:
        got, ops, _ = logits_of(model, name, "triton")
        want, _, _ = logits_of(model, name, "torch")
        assert ops["elastic_chat.fp8_mm"] > 0
        assert_same_logits(got, want)
