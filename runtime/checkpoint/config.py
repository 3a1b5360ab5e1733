"""The parent model's architecture, read from a checkpoint's `config.json`.

`ModelConfig` is frozen data: derived sizes are computed once here, so the forward pass
never digs defaults out of a dict. The field names follow transformers' `NemotronHConfig`,
including its legacy aliases (`mamba_n_groups`, `hybrid_override_pattern`, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError, show
from ..json_file import JsonFileError, parse_json_bytes, read_json_file

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
    "norm_eps": "layer_norm_epsilon",  # NVIDIA's Nano configs carry both spellings
}


def _json_float(obj: dict):
    # transformers writes float("inf") as {"__float__": "Infinity"}.
    if set(obj) == {"__float__"}:
        try:
            return float(obj["__float__"])
        except (TypeError, ValueError):
            return obj  # not a number: the field's own type check says so
    return obj


MAX_JSON_FILE = 64 << 20  # an index of a 30B checkpoint is under 1 MB; a config a few KB


def read_json(path: Path) -> dict:
    """Reads a JSON object (json_file.read_json_file: a regular file of bounded size), turning every
    failure into a CheckpointError naming the file."""
    try:
        return read_json_file(path, MAX_JSON_FILE, object_hook=_json_float)
    except FileNotFoundError:
        raise CheckpointError(path, "file not found") from None
    except JsonFileError as e:
        raise CheckpointError(path, str(e)) from None


def parse_json(raw: bytes, path) -> dict:
    """`read_json` for bytes already read (from a folder or a hub): one JSON object, or one line naming `path`."""
    try:
        return parse_json_bytes(raw, MAX_JSON_FILE, object_hook=_json_float)
    except JsonFileError as e:
        raise CheckpointError(path, str(e)) from None


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
        """Builds the config; unknown keys are ignored, unsupported features are refused.

        Every field is type- and range-checked here (a count must be a whole number in its range,
        a scalar a finite number), so nothing downstream sees NaN, a string or an absurd size."""
        if not isinstance(d, dict):
            raise CheckpointError(path, "expected a JSON object")
        d = dict(d)
        for old, new in ALIASES.items():
            if old in d and new not in d:
                d[new] = d[old]
            elif old in d and d[old] != d[new] and d[old] is not None and d[new] is not None:
                raise CheckpointError(path, f"{new} is {show(d[new], 60)} but {old} is {show(d[old], 60)}; "
                                            "the two spellings of one setting disagree (config.json is damaged)")
        model_type = d.get("model_type")
        if model_type != "nemotron_h":
            raise CheckpointError(
                path,
                f"model_type is {show(model_type, 60)}; Elastic Chat runs NemotronH checkpoints "
                "(model_type 'nemotron_h'), such as NVIDIA's Star Elastic models",
            )
        layer_types = _layer_types(d, path)
        read = _Fields(d, path)
        heads = read.count("num_attention_heads", required=True)
        hidden = read.count("hidden_size", required=True)
        kv_heads = read.count("num_key_value_heads", default=heads, falsy_default=True)
        head_dim = read.count("head_dim", default=max(1, hidden // heads), falsy_default=True)
        if d.get("moe_latent_size") is not None:
            raise CheckpointError(path, "moe_latent_size is set; latent MoE projections are not supported")
        if d.get("sliding_window") is not None:
            raise CheckpointError(path, "sliding_window is set; sliding-window attention is not supported")
        for key, value in (("mlp_hidden_act", "relu2"), ("mamba_hidden_act", "silu")):
            if d.get(key, value) != value:
                raise CheckpointError(path, f"{key} is {show(d[key], 60)}; only {value!r} is supported")
        if read.flag("tie_word_embeddings", False):
            raise CheckpointError(path, "tie_word_embeddings is true; NemotronH checkpoints have an untied lm_head")
        read.time_step_limit()

        cfg = cls(
            vocab_size=read.count("vocab_size", required=True),
            hidden_size=hidden,
            layer_types=layer_types,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            mamba_num_heads=read.count("mamba_num_heads", 128),
            mamba_head_dim=read.count("mamba_head_dim", 64),
            ssm_state_size=read.count("ssm_state_size", 128),
            n_groups=read.count("n_groups", 8),
            conv_kernel=read.count("conv_kernel", 4),
            chunk_size=read.count("chunk_size", 128),
            time_step_min=read.number("time_step_min", 0.001, low=0.0),
            use_conv_bias=read.flag("use_conv_bias", True),
            use_bias=read.flag("use_bias", False),
            intermediate_size=read.count("intermediate_size", 21504),
            mlp_bias=read.flag("mlp_bias", False),
            n_routed_experts=read.count("n_routed_experts", 8),
            num_experts_per_tok=read.count("num_experts_per_tok", 2),
            moe_intermediate_size=read.count("moe_intermediate_size", 7688),
            moe_shared_expert_intermediate_size=read.count("moe_shared_expert_intermediate_size", 7688),
            routed_scaling_factor=read.number("routed_scaling_factor", 1.0, low=0.0, positive=True),
            n_group=read.count("n_group", 1),
            topk_group=read.count("topk_group", 1),
            norm_topk_prob=read.flag("norm_topk_prob", True),
            layer_norm_epsilon=read.number("layer_norm_epsilon", 1e-5, low=0.0, positive=True, high=1.0),
            bos_token_id=read.token_id("bos_token_id"),
            eos_token_id=read.token_ids("eos_token_id"),
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
        if self.topk_group > self.n_group:
            problems.append("topk_group is larger than n_group")
        if self.n_group > 1 and self.n_routed_experts // self.n_group < 2:
            problems.append("grouped routing needs at least 2 experts per group")
        if self.conv_kernel < 2:
            problems.append("conv_kernel must be at least 2")
        for name in ("bos_token_id",):
            if getattr(self, name) is not None and getattr(self, name) >= self.vocab_size:
                problems.append(f"{name} is not below vocab_size")
        if any(t >= self.vocab_size for t in self.eos_token_id):
            problems.append("eos_token_id is not below vocab_size")
        if problems:
            raise CheckpointError(path, "; ".join(problems))
        # Sizes are checked by arithmetic before anything is allocated: a config whose parent
        # would have more than MAX_PARAMS parameters is not a real checkpoint.
        experts = 2 * self.n_routed_experts * len(self.layers_of(MOE))
        if experts > MAX_EXPERT_TENSORS:
            raise CheckpointError(path, f"describes {experts:,} expert weight tensors; more than "
                                        f"{MAX_EXPERT_TENSORS:,} is not a real checkpoint (config.json is damaged)")
        total = count_params(self).total
        if total > MAX_PARAMS:
            raise CheckpointError(path, f"describes a model of {total:.3g} parameters, more than any checkpoint "
                                        f"this app can load ({MAX_PARAMS:.0e}); config.json is damaged")


# Largest value accepted for each count (far above NVIDIA's real configs: vocab 131072, hidden 2688,
# 52 layers, 128 experts, ...), so a damaged or hostile config fails here, not in an allocation.
MAX_COUNT = {
    "vocab_size": 1 << 24, "hidden_size": 1 << 17, "num_attention_heads": 1 << 12, "num_key_value_heads": 1 << 12,
    "head_dim": 1 << 12, "mamba_num_heads": 1 << 14, "mamba_head_dim": 1 << 12, "ssm_state_size": 1 << 12,
    "n_groups": 1 << 12, "conv_kernel": 64, "chunk_size": 1 << 16, "intermediate_size": 1 << 20,
    "n_routed_experts": 1 << 14, "num_experts_per_tok": 1 << 10, "moe_intermediate_size": 1 << 20,
    "moe_shared_expert_intermediate_size": 1 << 20, "n_group": 1 << 10, "topk_group": 1 << 10,
}
MAX_LAYERS = 1024
MAX_PARAMS = 10 ** 13
MAX_EXPERT_TENSORS = 1 << 20  # NVIDIA's 30B has 52 layers; 128 experts in each MoE layer: about 6k



class _Fields:
    """Reads typed fields of one config.json, each failure one sentence naming the field."""

    def __init__(self, d: dict, path):
        self.d, self.path = d, path

    def fail(self, key, want):
        raise CheckpointError(self.path, f"{key} is {show(self.d.get(key), 60)}; it must be {want}")

    def count(self, key, default=None, required=False, falsy_default=False) -> int:
        value = self.d.get(key)
        if value is None or (falsy_default and value == 0 and not isinstance(value, bool)):
            if required:
                raise CheckpointError(self.path, f"missing the required field {key!r}")
            value = default
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        high = MAX_COUNT[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
            self.fail(key, f"a whole number from 1 to {high:,}")
        return value

    def number(self, key, default: float, low: float, positive=False, high=None) -> float:
        value = self.d.get(key, default)
        if value is None:
            value = default
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            value = float(value)
            ok = (value > low if positive else value >= low) and (high is None or value <= high)
        if not ok:
            bound = f"more than {low:g}" if positive else f"at least {low:g}"
            self.fail(key, f"a finite number {bound}" + (f" and at most {high:g}" if high is not None else ""))
        return value

    def flag(self, key, default: bool) -> bool:
        value = self.d.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, "true or false")
        return value

    def token_id(self, key) -> int | None:
        value = self.d.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            self.fail(key, "a token id (a whole number, 0 or more) or null")
        return value

    def token_ids(self, key) -> tuple[int, ...]:
        value = self.d.get(key)
        values = [] if value is None else value if isinstance(value, list) else [value]
        if len(values) > 1024 or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in values):
            self.fail(key, "a token id or a list of token ids")
        return tuple(values)

    def time_step_limit(self) -> None:
        # Not used by the forward pass, but extract copies it: it must be two numbers (inf allowed).
        value = self.d.get("time_step_limit")
        if value is not None and (not isinstance(value, list) or len(value) != 2 or any(
                not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v) for v in value)):
            self.fail("time_step_limit", "a list of two numbers")


def _layer_types(d: dict, path) -> tuple[str, ...]:
    types = d.get("layers_block_type") or d.get("layer_types")
    if types is None and d.get("hybrid_override_pattern") is not None:
        pattern = d["hybrid_override_pattern"]
        if not isinstance(pattern, str) or not pattern:
            raise CheckpointError(path, f"hybrid_override_pattern is {show(pattern, 60)}; "
                                        "it must be a string such as 'M*EM'")
        bad = sorted(set(pattern) - set(PATTERN_LETTERS))
        if bad:
            raise CheckpointError(path, f"hybrid_override_pattern has unknown letters {show(bad, 60)}; "
                                        "expected M, *, E or -")
        types = [PATTERN_LETTERS[c] for c in pattern]
    if not types:
        raise CheckpointError(path, "neither layers_block_type nor hybrid_override_pattern is given")
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise CheckpointError(path, "layers_block_type must be a list of layer kinds (strings)")
    if len(types) > MAX_LAYERS:
        raise CheckpointError(path, f"has {len(types):,} layers; more than {MAX_LAYERS} is not a real checkpoint")
    types = tuple(LEGACY_KINDS.get(t, t) for t in types)
    bad = sorted(set(types) - set(PATTERN_LETTERS.values()))
    if bad:
        raise CheckpointError(path, f"layers_block_type has unknown layer kinds {show(bad, 60)}")
    return types


def load_config(folder: Path) -> ModelConfig:
    path = Path(folder) / "config.json"
    return ModelConfig.from_dict(read_json(path), path)


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int  # per token: top-k routed experts plus everything dense


def count_params(cfg: ModelConfig, sub=None) -> ParamCount:
    """Parameter counts of a submodel (a `submodels.Submodel`; None: the parent) as a physically sliced
    model would have them."""
    sub = sub or _ParentWidths(cfg)
    h, total, active = sub.hidden_size, 0, 0
    embed = 2 * cfg.vocab_size * h + h  # embeddings, lm_head, norm_f
    total += embed
    active += embed
    for i, kind in enumerate(cfg.layer_types):
        n = h  # the block's norm
        a = n
        if kind == MAMBA:
            heads = sub.mamba_num_heads[i]
            d_inner = heads * cfg.mamba_head_dim
            bc = 2 * cfg.n_groups * cfg.ssm_state_size
            in_rows = 2 * d_inner + bc + heads
            p = in_rows * h + (d_inner + bc) * cfg.conv_kernel + 3 * heads + d_inner + d_inner * h
            p += (in_rows + h) * cfg.use_bias + (d_inner + bc) * cfg.use_conv_bias
            n, a = n + p, a + p
        elif kind == ATTENTION:
            q = cfg.num_attention_heads * cfg.head_dim
            kv = cfg.num_key_value_heads * cfg.head_dim
            p = 2 * q * h + 2 * kv * h
            n, a = n + p, a + p
        elif kind == MLP:
            p = 2 * sub.intermediate_size[i] * h
            n, a = n + p, a + p
        else:
            e, f, fs = sub.n_routed_experts[i], sub.moe_intermediate_size[i], sub.moe_shared_expert_intermediate_size[i]
            router = e * h + e
            n += router + 2 * e * f * h + 2 * fs * h
            a += router + 2 * cfg.num_experts_per_tok * f * h + 2 * fs * h
        total, active = total + n, active + a
    return ParamCount(total, active)


class _ParentWidths:
    """The parent's widths in a Submodel's shape (per-layer tuples), for counting its parameters."""

    def __init__(self, cfg: ModelConfig):
        n = cfg.num_layers
        self.hidden_size = cfg.hidden_size
        self.mamba_num_heads = (cfg.mamba_num_heads,) * n
        self.n_routed_experts = (cfg.n_routed_experts,) * n
        self.moe_intermediate_size = (cfg.moe_intermediate_size,) * n
        self.moe_shared_expert_intermediate_size = (cfg.moe_shared_expert_intermediate_size,) * n
        self.intermediate_size = (cfg.intermediate_size,) * n
