"""The parent model's architecture, read from a checkpoint's `config.json`.

`ModelConfig` is frozen data: derived sizes are computed once here, so the forward pass
never digs defaults out of a dict. The field names follow transformers' `NemotronHConfig`,
including its legacy aliases (`mamba_n_groups`, `hybrid_override_pattern`, ...).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .errors import CheckpointError

# Layer kinds, in transformers' 5.x spelling, and the one-letter pattern NVIDIA's configs use.
MAMBA, ATTENTION, MOE, MLP = "linear_attention", "full_attention", "moe", "mlp"
PATTERN_LETTERS = {"M": MAMBA, "*": ATTENTION, "E": MOE, "-": MLP}
LEGACY_KINDS = {"mamba": MAMBA, "attention": ATTENTION}

# Old names NVIDIA's first configs used for the Mamba fields.
ALIASES = {
    "mamba_n_groups": "n_groups",
    "mamba_d_conv": "conv_kernel",
    "mamba_dt_min": "time_step_min",
    "mamba_conv_bias": "use_conv_bias",
    "mamba_chunk_size": "chunk_size",
}


def _json_float(obj: dict):
    # transformers writes float("inf") as {"__float__": "Infinity"}.
    if set(obj) == {"__float__"}:
        return float(obj["__float__"])
    return obj


def read_json(path: Path) -> dict:
    """Reads a JSON object, turning every failure into a CheckpointError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(path, "file not found") from None
    except OSError as e:
        raise CheckpointError(path, f"cannot read the file ({e.strerror})") from None
    except UnicodeDecodeError:
        raise CheckpointError(path, "not a UTF-8 text file") from None
    try:
        data = json.loads(text, object_hook=_json_float)
    except json.JSONDecodeError as e:
        raise CheckpointError(path, f"not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise CheckpointError(path, "expected a JSON object at the top level")
    return data


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    layer_types: tuple[str, ...]
    # attention
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    # Mamba-2
    mamba_num_heads: int
    mamba_head_dim: int
    ssm_state_size: int
    n_groups: int
    conv_kernel: int
    chunk_size: int
    time_step_min: float
    use_conv_bias: bool
    use_bias: bool  # in_proj / out_proj bias of the Mamba mixer
    # dense MLP and MoE
    intermediate_size: int
    mlp_bias: bool
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    moe_shared_expert_intermediate_size: int
    routed_scaling_factor: float
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    layer_norm_epsilon: float
    bos_token_id: int | None = None
    eos_token_id: tuple[int, ...] = ()

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def mamba_d_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def pattern(self) -> str:
        letters = {kind: letter for letter, kind in PATTERN_LETTERS.items()}
        return "".join(letters[k] for k in self.layer_types)

    def layers_of(self, kind: str) -> list[int]:
        return [i for i, k in enumerate(self.layer_types) if k == kind]

    @classmethod
    def from_dict(cls, d: dict, path: Path | str = "config.json") -> "ModelConfig":
        """Builds the config; unknown keys are ignored, unsupported features are refused."""
        d = dict(d)
        for old, new in ALIASES.items():
            if old in d and new not in d:
                d[new] = d[old]
        model_type = d.get("model_type")
        if model_type != "nemotron_h":
            raise CheckpointError(
                path,
                f"model_type is {model_type!r}; Elastic Chat runs NemotronH checkpoints "
                "(model_type 'nemotron_h'), such as NVIDIA's Star Elastic models",
            )
        layer_types = _layer_types(d, path)

        def need(key):
            if d.get(key) is None:
                raise CheckpointError(path, f"missing the required field {key!r}")
            return d[key]

        heads = int(need("num_attention_heads"))
        hidden = int(need("hidden_size"))
        kv_heads = d.get("num_key_value_heads") or heads
        head_dim = d.get("head_dim") or hidden // heads
        eos = d.get("eos_token_id")
        eos = () if eos is None else tuple(eos) if isinstance(eos, list) else (int(eos),)
        if d.get("moe_latent_size") is not None:
            raise CheckpointError(path, "moe_latent_size is set; latent MoE projections are not supported")
        if d.get("sliding_window") is not None:
            raise CheckpointError(path, "sliding_window is set; sliding-window attention is not supported")
        for key, value in (("mlp_hidden_act", "relu2"), ("mamba_hidden_act", "silu")):
            if d.get(key, value) != value:
                raise CheckpointError(path, f"{key} is {d[key]!r}; only {value!r} is supported")
        if d.get("tie_word_embeddings"):
            raise CheckpointError(path, "tie_word_embeddings is true; NemotronH checkpoints have an untied lm_head")

        cfg = cls(
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            layer_types=layer_types,
            num_attention_heads=heads,
            num_key_value_heads=int(kv_heads),
            head_dim=int(head_dim),
            mamba_num_heads=int(d.get("mamba_num_heads", 128)),
            mamba_head_dim=int(d.get("mamba_head_dim", 64)),
            ssm_state_size=int(d.get("ssm_state_size", 128)),
            n_groups=int(d.get("n_groups", 8)),
            conv_kernel=int(d.get("conv_kernel", 4)),
            chunk_size=int(d.get("chunk_size", 128)),
            time_step_min=float(d.get("time_step_min", 0.001)),
            use_conv_bias=bool(d.get("use_conv_bias", True)),
            use_bias=bool(d.get("use_bias", False)),
            intermediate_size=int(d.get("intermediate_size", 21504)),
            mlp_bias=bool(d.get("mlp_bias", False)),
            n_routed_experts=int(d.get("n_routed_experts", 8)),
            num_experts_per_tok=int(d.get("num_experts_per_tok", 2)),
            moe_intermediate_size=int(d.get("moe_intermediate_size", 7688)),
            moe_shared_expert_intermediate_size=int(d.get("moe_shared_expert_intermediate_size", 7688)),
            routed_scaling_factor=float(d.get("routed_scaling_factor", 1.0)),
            n_group=int(d.get("n_group", 1)),
            topk_group=int(d.get("topk_group", 1)),
            norm_topk_prob=bool(d.get("norm_topk_prob", True)),
            layer_norm_epsilon=float(d.get("layer_norm_epsilon", 1e-5)),
            bos_token_id=d.get("bos_token_id"),
            eos_token_id=eos,
        )
        cfg._check(path)
        return cfg

    def _check(self, path) -> None:
        problems = []
        if self.num_attention_heads % self.num_key_value_heads:
            problems.append("num_attention_heads is not a multiple of num_key_value_heads")
        if self.mamba_num_heads % self.n_groups:
            problems.append("mamba_num_heads is not a multiple of n_groups")
        if self.n_routed_experts % self.n_group:
            problems.append("n_routed_experts is not a multiple of n_group")
        if self.num_experts_per_tok > self.n_routed_experts:
            problems.append("num_experts_per_tok is larger than n_routed_experts")
        if not math.isfinite(self.layer_norm_epsilon) or self.layer_norm_epsilon <= 0:
            problems.append("layer_norm_epsilon must be a positive number")
        sizes = ("vocab_size", "hidden_size", "head_dim", "mamba_head_dim", "ssm_state_size", "conv_kernel", "chunk_size")
        problems += [f"{name} must be positive" for name in sizes if getattr(self, name) <= 0]
        if problems:
            raise CheckpointError(path, "; ".join(problems))


def _layer_types(d: dict, path) -> tuple[str, ...]:
    types = d.get("layers_block_type") or d.get("layer_types")
    if types is None and d.get("hybrid_override_pattern") is not None:
        pattern = d["hybrid_override_pattern"]
        bad = sorted(set(pattern) - set(PATTERN_LETTERS))
        if bad:
            raise CheckpointError(path, f"hybrid_override_pattern has unknown letters {bad}; expected M, *, E or -")
        return tuple(PATTERN_LETTERS[c] for c in pattern)
    if not types:
        raise CheckpointError(path, "neither layers_block_type nor hybrid_override_pattern is given")
    types = tuple(LEGACY_KINDS.get(t, t) for t in types)
    bad = sorted(set(types) - set(PATTERN_LETTERS.values()))
    if bad:
        raise CheckpointError(path, f"layers_block_type has unknown layer kinds {bad}")
    return types


def load_config(folder: Path) -> ModelConfig:
    path = Path(folder) / "config.json"
    return ModelConfig.from_dict(read_json(path), path)
