"""Checkpoints in the real Star Elastic / Nemotron 3 Nano layout, filled with random valid values.

    python -m tools.real_layout OUT --format nvfp4                # full size: 24,147 tensors, 18.0 GiB, 5 shards
    python -m tools.real_layout OUT --format nvfp4 --experts 8    # the same with 8 routed experts (3.8 GB)
    python -m tools.real_layout OUT --format fp8 --shape tiny     # the layout at toy widths (tests)

The layout is the one published for NVIDIA's Nemotron 3 Nano 30B-A3B releases
(shared/docs/real-checkpoint.md): tensor names, dtypes, the 60 modules NVIDIA keeps in BF16,
shard counts and names (5 for NVFP4; 10 for FP8, the last an empty 40-byte shard, each with a
small `model-0000N-of-00010.json` side file; 13 for BF16), `model.safetensors.index.json`, the
real `config.json` (with its `auto_map`, `rope_theta`, both epsilon keys, no `time_step_limit`)
and `hf_quant_config.json`, the tokenizer files, and the repos' Python files, which write a
`EXECUTED` marker if anything ever runs them. At full size the NVFP4 plan is exactly the
published file: 24,147 tensors and 19,339,781,632 tensor bytes.

Shards are written tensor by tensor (header first, then each tensor's bytes) from small seeded
pools of valid values, so memory stays small whatever the size. Values: BF16 weights N(0, 0.02),
norms near 1, Mamba A_log/D/dt_bias in their usual ranges, routers F32; NVFP4 codes are uniform
random bytes (every byte is two valid E2M1 codes) with E4M3 block scales in [0.5, 2] and a global
scale that gives the same spread; FP8 codes have magnitudes up to 3.75 and no NaN encodings.
Written pages are flushed and dropped from the page cache shard by shard (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
FORMATS = ("nvfp4", "fp8", "bf16")
SHARDS = {"nvfp4": 5, "fp8": 10, "bf16": 13}
STD = 0.02  # the spread of every random weight matrix


@dataclass(frozen=True)
class Shape:
    """The widths; `full` is the real model's, `tiny` the same structure at toy widths."""

    hidden: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    mamba_heads: int
    mamba_head_dim: int
    groups: int
    state: int
    chunk: int
    expert_width: int
    shared_width: int
    experts: int
    top_k: int = 6


SHAPES = {
    "full": Shape(2688, 131072, 32, 2, 128, 64, 64, 8, 128, 128, 1856, 3712, 128),
    "tiny": Shape(64, 1024, 4, 2, 16, 16, 16, 8, 16, 16, 32, 64, 8),
}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # safetensors spelling
    shape: tuple[int, ...]
    fill: str  # which pool of values: see Filler

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}[self.dtype]


# ----------------------------------------------------------------------------- config files


def config_json(
    s: Shape,
    dtype_key: str = "torch_dtype",
    eps_keys: tuple[str, ...] = ("layer_norm_epsilon", "norm_eps"),
    time_step_limit: bool = False,
) -> dict:
    """config.json as NVIDIA's repos ship it (NVFP4 and FP8 share it; BF16 differs in transformers_version)."""
    d = {
        "architectures": ["NemotronHForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_nemotron_h.NemotronHConfig",
            "AutoModel": "modeling_nemotron_h.NemotronHForCausalLM",
            "AutoModelForCausalLM": "modeling_nemotron_h.NemotronHForCausalLM",
        },
        "bos_token_id": 1,
        "chunk_size": s.chunk,
        "conv_kernel": 4,
        "eos_token_id": 2,
        "expand": 2,
        "head_dim": s.head_dim,
        "hidden_dropout": 0.0,
        "hidden_size": s.hidden,
        "hybrid_override_pattern": PATTERN,
        "initializer_range": 0.02,
        "intermediate_size": s.expert_width,
        "mamba_head_dim": s.mamba_head_dim,
        "mamba_hidden_act": "silu",
        "mamba_num_heads": s.mamba_heads,
        "mamba_proj_bias": False,
        "mamba_ssm_cache_dtype": "float32",
        "max_position_embeddings": 262144,
        "mlp_bias": False,
        "mlp_hidden_act": "relu2",
        "model_type": "nemotron_h",
        "moe_intermediate_size": s.expert_width,
        "moe_shared_expert_intermediate_size": s.shared_width,
        "n_group": 1,
        "n_groups": s.groups,
        "n_routed_experts": s.experts,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": s.heads,
        "num_experts_per_tok": s.top_k,
        "num_hidden_layers": len(PATTERN),
        "num_key_value_heads": s.kv_heads,
        "num_logits_to_keep": 1,
        "pad_token_id": 0,
        "partial_rotary_factor": 1.0,
        "rescale_prenorm_residual": True,
        "residual_in_fp32": False,
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "sliding_window": None,
        "ssm_state_size": s.state,
        "tie_word_embeddings": False,
        "time_step_floor": 0.0001,
        "time_step_max": 0.1,
        "time_step_min": 0.001,
        "topk_group": 1,
        dtype_key: "bfloat16",
        "transformers_version": "4.55.4",
        "use_bias": False,
        "use_cache": True,
        "use_conv_bias": True,
        "use_mamba_kernels": True,
        "vocab_size": s.vocab,
    }
    for key in eps_keys:
        d[key] = 1e-05
    if time_step_limit:  # what transformers v5 writes; the real file has none
        d["time_step_limit"] = [0.0, {"__float__": "Infinity"}]
    return dict(sorted(d.items()))


def bf16_modules() -> list[str]:
    """The 60 modules NVIDIA's NVFP4 export keeps in BF16: lm_head, q/k/v/o of the attention layers,
    in_proj/out_proj of the Mamba layer before each attention layer, and every Mamba conv1d."""
    out = ["lm_head"]
    for i, kind in enumerate(PATTERN):
        if kind == "*":
            out += [f"backbone.layers.{i}.mixer.{p}_proj" for p in "qkvo"]
            out += [f"backbone.layers.{i - 1}.mixer.{p}_proj" for p in ("in", "out")]
        elif kind == "M":
            out.append(f"backbone.layers.{i}.mixer.conv1d")
    return sorted(out)


def quant_configs(
    fmt: str, kept: list[str], quantized: list[str], mixed: bool, garbled: bool
) -> tuple[dict, dict | None]:
    """hf_quant_config.json, and config.json's quantization_config (newer ModelOpt repeats it there)."""
    algo = fmt.upper()
    layer = {"quant_algo": algo, "group_size": 16} if algo == "NVFP4" else {"quant_algo": algo}
    exclude = list(kept)
    if garbled:  # what ModelOpt 0.46/0.47 writes for NemotronH (environment.md), plus a wildcard
        exclude = [e + ".\x00backbone.pt_name_sentinel" if e == "lm_head" else e for e in exclude]
        exclude = [e for e in exclude if not e.endswith(".conv1d")] + ["backbone.layers.*.mixer.conv1d*"]
    producer = {"name": "modelopt", "version": "0.47.0" if (mixed or garbled) else "0.29.0"}
    if not mixed:
        q = {**layer, "kv_cache_quant_algo": "FP8", "exclude_modules": exclude}
        return {"producer": producer, "quantization": q}, None
    q = {
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": "FP8",
        "quantized_layers": {m: dict(layer) for m in quantized},
        "exclude_modules": exclude,
    }
    in_config = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "producer": producer,
        "quantized_layers": q["quantized_layers"],
        "ignore": exclude,
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
    }
    return {"producer": producer, "quantization": q}, in_config


# ----------------------------------------------------------------------------- the tensors


def plan(s: Shape, fmt: str, kept: list[str]) -> list[Tensor]:
    """Every tensor in module order (the order the shards hold them)."""
    import fnmatch

    def is_kept(module):
        return fmt == "bf16" or any(module == k or fnmatch.fnmatchcase(module, k) for k in kept)

    def linear(module, rows, cols, fill="w"):
        if is_kept(module):
            return [Tensor(module + ".weight", "BF16", (rows, cols), fill)]
        if fmt == "nvfp4":
            return [
                Tensor(module + ".weight", "U8", (rows, cols // 2), "nvfp4"),
                Tensor(module + ".weight_scale", "F8_E4M3", (rows, cols // 16), "block_scale"),
                Tensor(module + ".weight_scale_2", "F32", (), "global_scale"),
                Tensor(module + ".input_scale", "F32", (), "input_scale"),
            ]
        return [
            Tensor(module + ".weight", "F8_E4M3", (rows, cols), "fp8"),
            Tensor(module + ".weight_scale", "F32", (), "fp8_scale"),
            Tensor(module + ".input_scale", "F32", (), "input_scale"),
        ]

    h = s.hidden
    d_inner, bc = s.mamba_heads * s.mamba_head_dim, 2 * s.groups * s.state
    out = [Tensor("backbone.embeddings.weight", "BF16", (s.vocab, h), "w")]
    for i, kind in enumerate(PATTERN):
        m = f"backbone.layers.{i}.mixer"
        out.append(Tensor(f"backbone.layers.{i}.norm.weight", "BF16", (h,), "norm"))
        if kind == "M":
            out += linear(m + ".in_proj", 2 * d_inner + bc + s.mamba_heads, h)
            out += [
                Tensor(m + ".conv1d.weight", "BF16", (d_inner + bc, 1, 4), "conv"),
                Tensor(m + ".conv1d.bias", "BF16", (d_inner + bc,), "small"),
                Tensor(m + ".A_log", "BF16", (s.mamba_heads,), "a_log"),
                Tensor(m + ".D", "BF16", (s.mamba_heads,), "norm"),
                Tensor(m + ".dt_bias", "BF16", (s.mamba_heads,), "dt_bias"),
                Tensor(m + ".norm.weight", "BF16", (d_inner,), "norm"),
            ]
            out += linear(m + ".out_proj", h, d_inner)
        elif kind == "*":
            q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
            for p, rows in (("q", q), ("k", kv), ("v", kv)):
                out += linear(f"{m}.{p}_proj", rows, h)
            out += linear(m + ".o_proj", h, q)
        else:
            out += [
                Tensor(m + ".gate.weight", "F32", (s.experts, h), "w32"),
                Tensor(m + ".gate.e_score_correction_bias", "F32", (s.experts,), "bias32"),
            ]
            for k in range(s.experts):
                out += linear(f"{m}.experts.{k}.up_proj", s.expert_width, h)
                out += linear(f"{m}.experts.{k}.down_proj", h, s.expert_width)
            out += linear(m + ".shared_experts.up_proj", s.shared_width, h)
            out += linear(m + ".shared_experts.down_proj", h, s.shared_width)
    out += [Tensor("backbone.norm_f.weight", "BF16", (h,), "norm"), Tensor("lm_head.weight", "BF16", (s.vocab, h), "w")]
    return out


def split_shards(tensors: list[Tensor], count: int, empty_last: bool) -> list[list[Tensor]]:
    """Consecutive runs of about equal bytes, as save_pretrained's max_shard_size cuts them; with
    `empty_last` the last shard holds nothing (the FP8 repo's 40-byte shard)."""
    data_shards = count - 1 if empty_last else count
    target = sum(t.nbytes for t in tensors) / data_shards
    shards, size = [[]], 0
    for t in tensors:
        if size >= target * len(shards) and len(shards) < data_shards:
            shards.append([])
        shards[-1].append(t)
        size += t.nbytes
    shards += [[] for _ in range(count - len(shards))]
    return shards


# ----------------------------------------------------------------------------- values


class Filler:
    """Bytes of random valid values for each kind of tensor, cut from seeded pools (fast, and
    memory stays at the pools' size however large the checkpoint)."""

    POOL = 1 << 22  # elements per pool

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.pools: dict[str, np.ndarray] = {}

    def _pool(self, kind: str) -> np.ndarray:
        if kind not in self.pools:
            self.pools[kind] = self._make(kind, self.POOL)
        return self.pools[kind]

    def _make(self, kind: str, n: int) -> np.ndarray:
        r = self.rng
        if kind == "nvfp4":
            return r.integers(0, 256, n, dtype=np.uint8)
        if kind == "block_scale":  # E4M3 bytes 0x30..0x40: 0.5 to 2.0
            return r.integers(0x30, 0x41, n, dtype=np.uint8)
        if kind == "fp8":  # magnitudes 0 .. 3.75 (0x47), random sign; never 0x7F/0xFF (NaN)
            return r.integers(0, 0x48, n, dtype=np.uint8) | (r.integers(0, 2, n, dtype=np.uint8) << 7)
        if kind in ("w32", "bias32"):
            values = r.normal(0, STD, n) if kind == "w32" else r.uniform(0, 0.01, n)
            return values.astype(np.float32)
        values = {
            "w": lambda: r.normal(0, STD, n),
            "norm": lambda: r.uniform(0.9, 1.1, n),
            "conv": lambda: r.normal(0, 0.2, n),
            "small": lambda: r.normal(0, 0.01, n),
            "a_log": lambda: np.log(r.uniform(1, 16, n)),
            "dt_bias": lambda: r.uniform(-4.5, -2.5, n),
        }[kind]()
        return bf16_bits(values)

    SCALARS: ClassVar[dict[str, float]] = {
        "global_scale": STD / (2.93 * 1.25),  # E2M1 codes have RMS 2.93, the block scales about 1.25
        "input_scale": 1 / 448,
        "fp8_scale": STD / 1.4,
    }

    def chunks(self, t: Tensor, chunk_bytes: int = 64 << 20):
        """The tensor's bytes in pieces of at most chunk_bytes."""
        if t.fill in self.SCALARS:
            yield np.array([self.SCALARS[t.fill]], dtype=np.float32).tobytes()
            return
        pool = self._pool(t.fill)
        left = math.prod(t.shape)
        step = max(1, min(chunk_bytes // pool.itemsize, len(pool) // 2))
        while left:
            n = min(left, step)
            start = int(self.rng.integers(0, len(pool) - n + 1))
            yield pool[start : start + n].tobytes()
            left -= n


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float64 values -> BF16 bit patterns (uint16), rounded to nearest even."""
    bits = values.astype(np.float32).view(np.uint32)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


# ----------------------------------------------------------------------------- files

# safetensors' writer orders a file's data by dtype (its enum, largest first), then by name
DTYPE_ORDER = {"F32": 3, "BF16": 2, "F8_E4M3": 1, "U8": 0}


def write_safetensors(path: Path, tensors: list[Tensor], filler: Filler, progress=None) -> int:
    """One shard: header (padded to 8 bytes), then every tensor's bytes, in the order safetensors'
    own writer uses (so alignment and neighbours are as in NVIDIA's files)."""
    tensors = sorted(tensors, key=lambda t: (-DTYPE_ORDER[t.dtype], t.name))
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in tensors:
            for piece in filler.chunks(t):
                f.write(piece)
                if progress:
                    progress(len(piece))
        f.flush()
        os.fsync(f.fileno())
        if hasattr(os, "posix_fadvise"):  # written and on disk: let the kernel drop the pages now
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return offset


# Run in a repo's Python files, this leaves a marker beside them: tests check nothing ever runs them.
TRAP = '''"""Stand-in for {name} from NVIDIA's repo: Elastic Chat must never run a checkpoint's code."""
import pathlib
pathlib.Path(__file__).with_name("EXECUTED").write_text(__name__)
raise RuntimeError("a checkpoint's Python file was executed")
'''
PY_FILES = ("configuration_nemotron_h.py", "modeling_nemotron_h.py", "nano_v3_reasoning_parser.py")
# The chat template's structure (thinking on: ends "<think>\n"; off: "<think></think>"; an empty
# system block always), the parts the runtime relies on; NVIDIA's own 10.5 kB template is not public here.
TEMPLATE = (
    "{%- set thinking = enable_thinking if enable_thinking is defined else true -%}"
    "{%- set truncate = truncate_history_thinking if truncate_history_thinking is defined else true -%}"
    "{%- if not messages or messages[0]['role'] != 'system' -%}{{- '<|im_start|>system\\n<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set reasoning = message.get('reasoning_content') or '' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if reasoning and not truncate -%}{{- '<think>\\n' + reasoning.strip() + '\\n</think>\\n' -}}"
    "{%- else -%}{{- '<think></think>' -}}{%- endif -%}{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{{- '<think>\\n' if thinking else '<think></think>' -}}{%- endif -%}"
)
SPECIALS = {0: "<unk>", 1: "<s>", 2: "</s>", 10: "<|im_start|>", 11: "<|im_end|>", 12: "<think>", 13: "</think>"}


WORDS = [
    "system",
    "user",
    "assistant",
    "tool",
    "Hello",
    "hello",
    "hi",
    "what",
    "is",
    "the",
    "a",
    "an",
    "of",
    "to",
    "and",
    "in",
    "that",
    "it",
    "for",
    "you",
    "are",
    "with",
    "on",
    "as",
    "this",
    "be",
    "have",
    "think",
    "answer",
    "yes",
    "no",
    "please",
    "thanks",
]


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """A byte-level BPE tokenizer with the real vocabulary size and special ids (<|im_end|> 11,
    </think> 13): merges for a few common words (so a one-word prompt is about as many tokens as
    with NVIDIA's tokenizer), the 256 byte tokens, then filler tokens up to vocab_size (random
    weights pick any id)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = {i: SPECIALS.get(i, f"<SPECIAL_{i}>") for i in range(16)}
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.train_from_iterator(
        [" ".join(WORDS)] * 50 + list(WORDS) * 20,
        trainers.BpeTrainer(
            vocab_size=1000,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=["<unk>"],
            show_progress=False,
        ),
    )
    learned = json.loads(trained.to_str())["model"]
    vocab = {tok: i for i, tok in specials.items()}
    for piece, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    i = 0
    while len(vocab) < vocab_size:
        vocab.setdefault(f"t{i}", len(vocab))
        i += 1
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials.values()])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "<|im_end|>",
                "unk_token": "<unk>",
                "pad_token": "<unk>",
                "model_max_length": 262144,
                "clean_up_tokenization_spaces": False,
                "auto_map": {"AutoTokenizer": [None, "PreTrainedTokenizerFast"]},
            },
            indent=2,
        )
        + "\n"
    )
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    (folder / "special_tokens_map.json").write_text(
        json.dumps(
            {"bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>", "pad_token": "<unk>"}, indent=2
        )
        + "\n"
    )


def elastic_json(s: Shape, full: bool) -> dict:
    """Our submodel table: the catalog's 23B/12B widths for the full shape (experts scaled to the
    count written), proportional multiples of 16 for the tiny one."""

    def experts(share):
        return max(s.top_k, round(s.experts * share))

    if full:
        return {
            "format": "elastic-nemotron-h/1",
            "max_thinking_tokens": 32768,
            "submodels": [
                {"name": "30B"},
                {
                    "name": "23B",
                    "hidden_size": 2560,
                    "mamba_num_heads": 48,
                    "n_routed_experts": experts(1.0),
                    "moe_intermediate_size": 1408,
                    "moe_shared_expert_intermediate_size": 2816,
                },
                {
                    "name": "12B",
                    "hidden_size": 2176,
                    "mamba_num_heads": 40,
                    "n_routed_experts": experts(104 / 128),
                    "moe_intermediate_size": 1024,
                    "moe_shared_expert_intermediate_size": 2048,
                },
            ],
        }
    return {
        "format": "elastic-nemotron-h/1",
        "submodels": [
            {"name": "30B"},
            {
                "name": "23B",
                "hidden_size": 48,
                "mamba_num_heads": 16,
                "n_routed_experts": experts(1.0),
                "moe_intermediate_size": 32,
                "moe_shared_expert_intermediate_size": 48,
            },
            {
                "name": "12B",
                "hidden_size": 32,
                "mamba_num_heads": 8,
                "n_routed_experts": experts(0.75),
                "moe_intermediate_size": 16,
                "moe_shared_expert_intermediate_size": 32,
            },
        ],
    }


@dataclass(frozen=True)
class Options:
    fmt: str = "nvfp4"
    shape: str = "full"
    experts: int | None = None  # None: the shape's own
    seed: int = 0
    dtype_key: str = "torch_dtype"
    eps_keys: tuple[str, ...] = ("layer_norm_epsilon", "norm_eps")
    time_step_limit: bool = False
    mixed: bool = False  # quant_algo MIXED_PRECISION with a per-module map
    garbled: bool = False  # ModelOpt 0.46/0.47's damaged exclude names and a wildcard
    keep_bf16: tuple[str, ...] = ()  # more modules kept in BF16 (the Elastic file keeps about 0.6 GiB more)
    elastic: bool = True


def the_shape(o: Options) -> Shape:
    s = SHAPES[o.shape]
    if o.experts is not None:
        from dataclasses import replace

        s = replace(s, experts=o.experts)
    return s


def layout(o: Options) -> tuple[Shape, list[str], list[Tensor]]:
    """The shape, the BF16-kept modules and every tensor of a checkpoint with these options."""
    s = the_shape(o)
    kept = bf16_modules() + list(o.keep_bf16)
    return s, kept, plan(s, o.fmt, kept)


def generate(out: Path, o: Options, log=None) -> Path:
    """Writes the checkpoint folder `out` (replacing an earlier one); returns it."""
    if o.fmt not in FORMATS:
        raise SystemExit(f"error: unknown format {o.fmt!r}: use one of {', '.join(FORMATS)}")
    s, kept, tensors = layout(o)
    if s.experts < s.top_k:
        raise SystemExit(f"error: --experts must be at least {s.top_k} (the model routes each token to {s.top_k})")
    total = sum(t.nbytes for t in tensors)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out.parent).free
    if total + (1 << 30) > free:
        raise SystemExit(
            f"error: the checkpoint needs {total / 1e9:.1f} GB and {out.parent} has {free / 1e9:.1f} GB free"
        )
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    config = config_json(s, o.dtype_key, o.eps_keys, o.time_step_limit)
    if o.fmt != "bf16":
        quantized = sorted({t.name.rsplit(".", 1)[0] for t in tensors if t.name.endswith(".weight_scale")})
        hf_quant, in_config = quant_configs(o.fmt, kept, quantized, o.mixed, o.garbled)
        (out / "hf_quant_config.json").write_text(json.dumps(hf_quant, indent=4) + "\n")
        if in_config is not None:
            config["quantization_config"] = in_config
    if o.fmt == "bf16":
        config["transformers_version"] = "4.57.1"
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps(
            {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": [2, 11], "pad_token_id": 0}, indent=2
        )
        + "\n"
    )
    for name in PY_FILES:
        (out / name).write_text(TRAP.format(name=name))
    (out / "README.md").write_text(
        f"Random weights in the real Nemotron 3 Nano layout ({o.fmt}, {s.experts} experts); "
        "written by tools/real_layout.py. Not a model.\n"
    )
    write_tokenizer(out, s.vocab)
    if o.elastic:
        (out / "elastic.json").write_text(json.dumps(elastic_json(s, o.shape == "full"), indent=2) + "\n")

    shards = split_shards(tensors, SHARDS[o.fmt], empty_last=o.fmt == "fp8")
    filler, done, start = Filler(o.seed), [0], time.perf_counter()
    last = [start]

    def progress(n):
        done[0] += n
        now = time.perf_counter()
        if log and now - last[0] > 2:
            last[0] = now
            log(
                f"wrote {done[0] / 1e9:.2f} of {total / 1e9:.2f} GB ({done[0] / max(now - start, 1e-9) / 1e6:.0f} MB/s)"
            )

    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(out / name, shard, filler, progress)
        weight_map.update({t.name: name for t in shard})
        if o.fmt == "fp8":  # the FP8 repo's per-shard side file; what NVIDIA's holds is not published
            (out / name.replace(".safetensors", ".json")).write_text(
                json.dumps({"shard": name, "tensors": len(shard), "bytes": sum(t.nbytes for t in shard)}) + "\n"
            )
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    if log:
        log(
            f"wrote {len(tensors):,} tensors, {total:,} bytes in {len(shards)} shards to {out} "
            f"in {time.perf_counter() - start:.0f} s"
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.real_layout", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the checkpoint folder to write (replaced if it exists)")
    p.add_argument("--format", choices=FORMATS, default="nvfp4")
    p.add_argument("--shape", choices=sorted(SHAPES), default="full")
    p.add_argument("--experts", type=int, help="routed experts per MoE layer (default: the shape's, 128 at full size)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype-key", choices=("torch_dtype", "dtype"), default="torch_dtype")
    p.add_argument(
        "--eps-keys",
        default="layer_norm_epsilon,norm_eps",
        help="which epsilon keys config.json carries (comma-separated)",
    )
    p.add_argument(
        "--time-step-limit", action="store_true", help='write transformers v5\'s [0, {"__float__": "Infinity"}]'
    )
    p.add_argument("--mixed", action="store_true", help="quant_algo MIXED_PRECISION with a per-module map")
    p.add_argument("--garbled-excludes", action="store_true", help="ModelOpt 0.46/0.47's damaged exclude names")
    p.add_argument("--keep-bf16", action="append", default=[], help="another module (glob) kept in BF16")
    p.add_argument("--no-elastic", action="store_true", help="no elastic.json (the hub repos have none)")
    p.add_argument("--dry-run", action="store_true", help="print the plan's tensor count and bytes, write nothing")
    a = p.parse_args(argv)
    o = Options(
        a.format,
        a.shape,
        a.experts,
        a.seed,
        a.dtype_key,
        tuple(k for k in a.eps_keys.split(",") if k),
        a.time_step_limit,
        a.mixed,
        a.garbled_excludes,
        tuple(a.keep_bf16),
        not a.no_elastic,
    )
    if a.dry_run:
        _, _, tensors = layout(o)
        print(json.dumps({"tensors": len(tensors), "bytes": sum(t.nbytes for t in tensors)}))
        return 0
    generate(a.out, o, log=lambda m: print(m, file=sys.stderr, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
