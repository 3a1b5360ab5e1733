"""Tiny random NemotronH checkpoints made with transformers (the independent oracle), with
`elastic.json` files of several nested widths and a real tokenizer and chat template.

Weights are re-drawn with larger spreads than transformers' init (std 0.02 would make every
logit nearly equal, and a wrong slice could hide in the noise).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from training.tokenizer import build_tokenizer

VOCAB = 320
CORPUS = [
    "Hello! How are you today? I am fine, thank you. What is 12 + 34? It is 46.",
    "The quick brown fox jumps over the lazy dog. Elastic models nest small inside large.",
    "Think step by step: 7 * 8 = 56, then 56 + 4 = 60. So the answer is 60.",
    "Unicode: café, naïve, ✓, 你好, 🙂.",
] * 8

# Each spec: transformers config kwargs and the nested widths for elastic.json.
SPECS = {
    # Mamba, MoE with shared expert, attention and a dense MLP layer; n_groups 2.
    "hybrid": dict(
        config=dict(layers_block_type=["linear_attention", "moe", "full_attention", "mlp", "linear_attention", "moe"],
                    hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    mamba_num_heads=8, mamba_head_dim=8, ssm_state_size=16, n_groups=2, chunk_size=8,
                    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                    moe_shared_expert_intermediate_size=48, intermediate_size=96, routed_scaling_factor=2.5),
        submodels=[
            {"name": "mid", "hidden_size": 48, "mamba_num_heads": 6, "n_routed_experts": 6,
             "moe_intermediate_size": 24, "moe_shared_expert_intermediate_size": 32, "intermediate_size": 64},
            {"name": "small", "hidden_size": 32, "mamba_num_heads": 4, "n_routed_experts": 4,
             "moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 16, "intermediate_size": 48},
        ]),
    # Grouped routing (n_group 2), four Mamba groups, biases everywhere, no prob normalisation,
    # the pattern given as hybrid_override_pattern, weights sharded over several files.
    "grouped": dict(
        config=dict(hybrid_override_pattern="M*EM-E", hidden_size=48, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=24, mamba_num_heads=8, mamba_head_dim=6, ssm_state_size=8, n_groups=4, chunk_size=4,
                    n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, norm_topk_prob=False,
                    moe_intermediate_size=16, moe_shared_expert_intermediate_size=24, intermediate_size=40,
                    use_bias=True, mlp_bias=True, use_conv_bias=False, routed_scaling_factor=1.5),
        submodels=[
            {"name": "half", "hidden_size": 32, "mamba_num_heads": 4, "n_routed_experts": 4,
             "moe_intermediate_size": 8, "moe_shared_expert_intermediate_size": 12, "intermediate_size": 20},
        ],
        shard=True),
}


def sharpen(model, seed: int) -> None:
    """Re-draws every weight so that logits are far from uniform and each slice matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(1 + 15 * torch.rand(p.shape, generator=g)))
            elif name.endswith("mixer.D"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g) - 1.0)
            elif "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def make_checkpoint(kind: str, folder: Path, seed: int = 0) -> Path:
    """Writes checkpoint `kind` (a key of SPECS) into `folder` and returns it."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    spec = SPECS[kind]
    folder = Path(folder)
    torch.manual_seed(seed)
    config = NemotronHConfig(vocab_size=VOCAB, bos_token_id=1, eos_token_id=4, pad_token_id=0, **spec["config"])
    model = NemotronHForCausalLM(config).eval()
    sharpen(model, seed)
    model.save_pretrained(folder, max_shard_size="40KB" if spec.get("shard") else "5GB")
    if "hybrid_override_pattern" in spec["config"]:
        raw = json.loads((folder / "config.json").read_text())
        raw.pop("layers_block_type")
        raw["hybrid_override_pattern"] = spec["config"]["hybrid_override_pattern"]
        (folder / "config.json").write_text(json.dumps(raw, indent=2))
    parent = {"name": "full"}
    (folder / "elastic.json").write_text(json.dumps(
        {"format": "elastic-nemotron-h/1", "submodels": [parent, *spec["submodels"]]}, indent=2))
    build_tokenizer(CORPUS, VOCAB, folder)
    return folder


def rename_tensor(folder: Path, old: str, new: str) -> None:
    """Renames one tensor in a single-file checkpoint (for the alternative embedding name)."""
    path = Path(folder) / "model.safetensors"
    tensors = load_file(str(path))
    tensors[new] = tensors.pop(old)
    save_file(tensors, str(path), metadata={"format": "pt"})


def names_of(folder: Path) -> list[str]:
    return [s["name"] for s in json.loads((Path(folder) / "elastic.json").read_text())["submodels"]]
