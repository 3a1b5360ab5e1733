"""Weights in memory: one resident copy, and every submodel as views into it.

Loading reads, for the *resident* submodel (the parent, or the largest submodel that fits
the device), only its slices of each tensor from disk. Every other submodel that fits
within it is then a set of views (`narrow`) into those tensors: no copies.

Two layout changes at load make every nested width a leading slice, so views suffice:

* MoE experts are stacked into one (E, F, H) up and one (E, H, F) down tensor (on the CPU, a
  large checkpoint's experts stay a list of per-expert views of the file instead: load.py).
* Mamba heads are reordered *rank-major*. On disk, head h = g * Q + j belongs to group g
  (Q heads per group, j is its rank inside the group), and a submodel keeps the first q
  ranks of every group: a strided set. Internally head i = j * G + g, so the same set is
  the first q * G heads. The in_proj rows are regrouped as [B, C, then per head (z, x, dt)]
  so a submodel's rows are one prefix too, and conv channels as [B, C, x per head].
  The mixer (mamba.py) undoes nothing: it simply knows head i belongs to group i % G.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..units import format_bytes
from .config import ATTENTION, MAMBA, MLP, ModelConfig, count_params
from .quant import BLOCK, QuantSpec
from .safetensors_io import TensorInfo
from .submodels import Submodel, parent_submodel

EMBED_NAMES = ("backbone.embeddings.weight", "backbone.embedding.weight")


@dataclass
class MambaWeights:
    in_proj: torch.Tensor  # (2GN + H*(2P+1), hidden): [B, C, per head (z, x, dt)]
    in_bias: torch.Tensor | None
    conv_w: torch.Tensor  # (2GN + H*P, K): [B, C, per head x]
    conv_b: torch.Tensor | None
    A: torch.Tensor  # (H,) fp32, -exp(A_log)
    D: torch.Tensor  # (H,) fp32
    dt_bias: torch.Tensor  # (H,) fp32
    norm_w: torch.Tensor  # (H*P,)
    out_proj: torch.Tensor  # (hidden, H*P)
    out_bias: torch.Tensor | None


@dataclass
class AttentionWeights:
    q: torch.Tensor  # (heads*D, hidden)
    k: torch.Tensor  # (kv_heads*D, hidden)
    v: torch.Tensor
    o: torch.Tensor  # (hidden, heads*D)


@dataclass
class MLPWeights:
    up: torch.Tensor  # (F, hidden)
    down: torch.Tensor  # (hidden, F)
    up_bias: torch.Tensor | None
    down_bias: torch.Tensor | None


@dataclass
class MoEWeights:
    router: torch.Tensor  # (E, hidden) fp32
    router_bias: torch.Tensor  # (E,) fp32, e_score_correction_bias
    up: torch.Tensor | list | None  # (E, F, hidden), or a list of E (F, hidden) weights (large CPU checkpoints:
    down: torch.Tensor | list | None  # load.py); (E, hidden, F) or a list of (hidden, F); None: only in RAM
    shared: MLPWeights
    # The routed experts kept in RAM and computed by the CPU (placement.py), as up/down; None: none there.
    # A submodel's view holds one side only: the device's experts when it fits within them, else these.
    host_up: torch.Tensor | list | None = None
    host_down: torch.Tensor | list | None = None


@dataclass
class LayerWeights:
    kind: str
    norm: torch.Tensor  # (hidden,)
    mixer: MambaWeights | AttentionWeights | MLPWeights | MoEWeights


@dataclass
class ModelWeights:
    embed: torch.Tensor  # (vocab, hidden)
    layers: list[LayerWeights]
    norm_f: torch.Tensor
    lm_head: torch.Tensor  # (vocab, hidden)

    def tensors(self):
        """Every tensor, for memory accounting and storage-sharing checks."""
        yield from _tensors(self)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif hasattr(obj, "__dataclass_fields__"):
        for f in fields(obj):
            yield from _tensors(getattr(obj, f.name))


def host_expert_bytes(w: ModelWeights) -> int:
    """Bytes of the routed experts kept in RAM (placement.py), shared storage counted once."""
    return _storage_bytes(_tensors([(layer.mixer.host_up, layer.mixer.host_down) for layer in w.layers
                                    if isinstance(layer.mixer, MoEWeights)]))


# ----------------------------------------------------------------------------- file layout

def expected_tensors(cfg: ModelConfig, sub: Submodel | None = None) -> dict[str, tuple[int, ...]]:
    """Names and shapes a dense checkpoint of this config holds (hub layout); with `sub`, the
    shapes that submodel keeps (what a physically sliced checkpoint of it would hold)."""
    sub = sub or parent_submodel(cfg)
    h, out = sub.hidden_size, {}
    out["backbone.embeddings.weight"] = (cfg.vocab_size, h)
    out["backbone.norm_f.weight"] = (h,)
    out["lm_head.weight"] = (cfg.vocab_size, h)
    for i, kind in enumerate(cfg.layer_types):
        p = f"backbone.layers.{i}."
        out[p + "norm.weight"] = (h,)
        m = p + "mixer."
        if kind == MAMBA:
            heads, bc = sub.mamba_num_heads[i], 2 * cfg.n_groups * cfg.ssm_state_size
            d = heads * cfg.mamba_head_dim
            out[m + "in_proj.weight"] = (2 * d + bc + heads, h)
            out[m + "conv1d.weight"] = (d + bc, 1, cfg.conv_kernel)
            out[m + "A_log"] = (heads,)
            out[m + "D"] = (heads,)
            out[m + "dt_bias"] = (heads,)
            out[m + "norm.weight"] = (d,)
            out[m + "out_proj.weight"] = (h, d)
            if cfg.use_bias:
                out[m + "in_proj.bias"] = (2 * d + bc + heads,)
                out[m + "out_proj.bias"] = (h,)
            if cfg.use_conv_bias:
                out[m + "conv1d.bias"] = (d + bc,)
        elif kind == ATTENTION:
            q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
            out.update({m + "q_proj.weight": (q, h), m + "k_proj.weight": (kv, h),
                        m + "v_proj.weight": (kv, h), m + "o_proj.weight": (h, q)})
        elif kind == MLP:
            out.update(_mlp_shapes(m, sub.intermediate_size[i], h, cfg.mlp_bias))
        else:
            e, f = sub.n_routed_experts[i], sub.moe_intermediate_size[i]
            out[m + "gate.weight"] = (e, h)
            out[m + "gate.e_score_correction_bias"] = (e,)
            for k in range(e):
                out[m + f"experts.{k}.up_proj.weight"] = (f, h)
                out[m + f"experts.{k}.down_proj.weight"] = (h, f)
            out.update(_mlp_shapes(m + "shared_experts.", sub.moe_shared_expert_intermediate_size[i], h, cfg.mlp_bias))
    return out


def _mlp_shapes(prefix, f, h, bias):
    out = {prefix + "up_proj.weight": (f, h), prefix + "down_proj.weight": (h, f)}
    if bias:
        out.update({prefix + "up_proj.bias": (f,), prefix + "down_proj.bias": (h,)})
    return out


LINEAR_NAMES = ("in_proj.weight", "out_proj.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                "o_proj.weight", "up_proj.weight", "down_proj.weight", "lm_head.weight")


def is_linear(name: str) -> bool:
    return name.endswith(LINEAR_NAMES)


def check_tensor_table(cfg: ModelConfig, table: dict[str, TensorInfo], folder: Path,
                       quant: QuantSpec | None = None) -> dict[str, TensorInfo]:
    """Matches the file's tensors against the config; returns the table under canonical names.

    In a quantized checkpoint a linear weight may be stored packed (NVFP4: uint8 codes plus
    `weight_scale` and `weight_scale_2`; FP8: E4M3 plus `weight_scale`), with an optional
    `input_scale`; everything else must be stored as the config implies.
    """
    table = dict(table)
    if EMBED_NAMES[1] in table and EMBED_NAMES[0] not in table:
        table[EMBED_NAMES[0]] = table.pop(EMBED_NAMES[1])
    _check_sizes(cfg, table, folder, quant)  # arithmetic first: nothing below may grow with a bogus config
    expected = expected_tensors(cfg)
    companions = set()
    for name in expected:
        if quant is not None and is_linear(name) and name + "_scale" in table:
            companions |= {name + s for s in ("_scale", "_scale_2", "_input_scale")}
            companions.add(name[: -len("weight")] + "input_scale")
    present = {n for n in table if not n.startswith("mtp.")}  # multi-token-prediction heads are unused
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected) - companions)
    where = _weights_file_name(folder)
    if missing:
        raise CheckpointError(where, f"{len(missing)} tensors that config.json requires are missing, "
                                     f"e.g. {missing[0]!r}; the file does not belong to this config.json")
    if extra:
        raise CheckpointError(where, f"{len(extra)} tensors that config.json does not describe, "
                                     f"e.g. {extra[0]!r}; the file does not belong to this config.json")
    for name, shape in expected.items():
        info = table[name]
        if quant is not None and name + "_scale" in table:
            _check_packed(name, shape, table, quant)
            continue
        if info.shape != shape:
            raise CheckpointError(info.file, f"tensor {name!r} has shape {list(info.shape)} but config.json "
                                             f"implies {list(shape)}")
        if info.dtype not in ("F32", "BF16", "F16"):
            raise CheckpointError(info.file, f"tensor {name!r} is stored as {info.dtype}; unquantized weights "
                                             "must be F32, BF16 or F16")
    return table


def expected_tensor_count(cfg: ModelConfig) -> int:
    """len(expected_tensors(cfg)), by arithmetic (without listing thousands of expert names)."""
    n = 3
    for kind in cfg.layer_types:
        n += 1
        if kind == MAMBA:
            n += 7 + 2 * cfg.use_bias + cfg.use_conv_bias
        elif kind == ATTENTION:
            n += 4
        elif kind == MLP:
            n += 2 + 2 * cfg.mlp_bias
        else:
            n += 4 + 2 * cfg.n_routed_experts + 2 * cfg.mlp_bias
    return n


# The fewest bytes a parameter can take in any supported file (NVFP4 packs two per byte). A bound
# for every format alike: it only has to catch absurd configs; the per-tensor check names the rest.
MIN_BYTES_PER_PARAM = 0.5


def _check_sizes(cfg: ModelConfig, table: dict[str, TensorInfo], folder: Path, quant: QuantSpec | None) -> None:
    """Refuses a config that describes far more tensors or parameters than the files hold, by
    arithmetic on the headers alone, so an absurd config (10^9 experts) fails in microseconds
    and nothing below grows with it."""
    where = _weights_file_name(folder)
    present = sum(1 for n in table if not n.startswith("mtp."))
    want = expected_tensor_count(cfg)
    if want > 2 * present + 1024:  # a few missing ones are named by the full check below
        raise CheckpointError(where, f"config.json describes {want:,} tensors but the weight files hold {present:,}; "
                                     "the files do not belong to this config.json (or are incomplete)")
    params = count_params(cfg, parent_submodel(cfg)).total
    have = sum(info.nbytes for info in table.values())
    if params * MIN_BYTES_PER_PARAM > have:
        raise CheckpointError(where, f"config.json describes {params:,} parameters, more than {format_bytes(have)} of "
                                     "weight files can hold; the files do not belong to this config.json")


def check_nesting(cfg: ModelConfig, subs, table: dict[str, TensorInfo], quant: QuantSpec | None) -> None:
    """Every submodel must be sliceable from packed NVFP4 weights: the input columns it keeps of
    each packed linear come in whole 16-wide blocks (loading builds every submodel as views)."""
    if quant is None:
        return
    packed = [n for n in expected_tensors(cfg) if is_linear(n) and n + "_scale" in table and table[n].dtype == "U8"]
    for name in packed:
        if name.endswith("mixer.out_proj.weight") and cfg.mamba_head_dim % BLOCK:
            raise CheckpointError(table[name].file, f"tensor {name!r} is NVFP4 but mamba_head_dim "
                                  f"({cfg.mamba_head_dim}) is not a multiple of {BLOCK}: its heads cannot be "
                                  "reordered in whole blocks")
    parent = expected_tensors(cfg)
    for sub in subs:
        shapes = expected_tensors(cfg, sub)
        for name in packed:
            cols = shapes[name][1] if name in shapes else 0  # experts beyond the submodel's are unused
            if cols % BLOCK:
                shown = re.sub(r"experts\.\d+\.", "experts.*.", name)
                raise CheckpointError(table[name].file, f"tensor {shown!r}: submodel {sub.name!r} keeps {cols} of its "
                                      f"{parent[name][1]} input columns, which breaks NVFP4's {BLOCK}-wide scale "
                                      f"blocks; nested widths must be multiples of {BLOCK} in NVFP4 checkpoints")


def _check_packed(name: str, shape: tuple, table: dict[str, TensorInfo], quant: QuantSpec) -> None:
    info = table[name]
    module = name[: -len(".weight")]
    out, cols = shape

    def fail(problem):
        raise CheckpointError(info.file, f"tensor {name!r}: {problem}")

    fmt = quant.format_of(module)
    if fmt is None:
        fail(f"is stored quantized, but the quantization config excludes {module!r}")
    if fmt == "NVFP4":
        if cols % BLOCK:
            fail(f"has {cols} input columns, not a multiple of NVFP4's {BLOCK}-wide blocks")
        want = {name: ("U8", (out, cols // 2)), name + "_scale": ("F8_E4M3", (out, cols // BLOCK))}
        if name + "_scale_2" not in table:
            fail("is NVFP4 but has no weight_scale_2 (its global scale)")
        want[name + "_scale_2"] = ("F32", None)
    else:
        want = {name: ("F8_E4M3", (out, cols)), name + "_scale": ("F32", None)}
    for tensor, (dtype, tshape) in want.items():
        got = table[tensor]
        if got.dtype != dtype:
            fail(f"{tensor.rsplit('.', 1)[-1]} is {got.dtype}, but {fmt} stores {dtype}")
        if tshape is None and got.shape not in ((), (1,)):
            fail(f"{tensor.rsplit('.', 1)[-1]} should be one number, has shape {list(got.shape)}")
        if tshape is not None and got.shape != tshape:
            fail(f"{tensor.rsplit('.', 1)[-1]} has shape {list(got.shape)}, but config.json implies {list(tshape)}")


def _weights_file_name(folder: Path) -> Path:
    index = Path(folder) / "model.safetensors.index.json"
    return index if index.exists() else Path(folder) / "model.safetensors"


# ----------------------------------------------------------------------------- reading (load.py)

def mamba_head_order(cfg: ModelConfig, heads: int, rank_major: bool) -> torch.Tensor:
    """Original ids of the heads a width keeps (the first heads/G of every group), either
    group by group (the hub layout of a sliced checkpoint) or rank-major (the runtime's layout)."""
    G, Q, q = cfg.n_groups, cfg.mamba_num_heads // cfg.n_groups, heads // cfg.n_groups
    pairs = [(j, g) for j in range(q) for g in range(G)] if rank_major else [(j, g) for g in range(G) for j in range(q)]
    return torch.tensor([g * Q + j for j, g in pairs])


# ----------------------------------------------------------------------------- views

def submodel_views(cfg: ModelConfig, root: ModelWeights, sub: Submodel) -> ModelWeights:
    """A submodel's weights as views into the resident tensors (no memory is allocated)."""
    h = sub.hidden_size
    layers = []
    for i, layer in enumerate(root.layers):
        w = layer.mixer
        if layer.kind == MAMBA:
            H, P, gn = sub.mamba_num_heads[i], cfg.mamba_head_dim, cfg.n_groups * cfg.ssm_state_size
            rows = 2 * gn + H * (2 * P + 1)
            mixer = MambaWeights(
                in_proj=w.in_proj[:rows, :h], in_bias=None if w.in_bias is None else w.in_bias[:rows],
                conv_w=w.conv_w[:2 * gn + H * P], conv_b=None if w.conv_b is None else w.conv_b[:2 * gn + H * P],
                A=w.A[:H], D=w.D[:H], dt_bias=w.dt_bias[:H], norm_w=w.norm_w[:H * P],
                out_proj=w.out_proj[:h, :H * P], out_bias=None if w.out_bias is None else w.out_bias[:h])
        elif layer.kind == ATTENTION:
            mixer = AttentionWeights(q=w.q[:, :h], k=w.k[:, :h], v=w.v[:, :h], o=w.o[:h])
        elif layer.kind == MLP:
            mixer = _mlp_view(w, sub.intermediate_size[i], h)
        else:
            e, f = sub.n_routed_experts[i], sub.moe_intermediate_size[i]
            on_device = w.up is not None and _holds(w.up, e, f, h)
            up, down = _experts_view(w.up, w.down, e, f, h) if on_device else (None, None)
            host_up, host_down = (None, None) if on_device else _experts_view(w.host_up, w.host_down, e, f, h)
            mixer = MoEWeights(router=w.router[:e, :h], router_bias=w.router_bias[:e], up=up, down=down,
                               shared=_mlp_view(w.shared, sub.moe_shared_expert_intermediate_size[i], h),
                               host_up=host_up, host_down=host_down)
        layers.append(LayerWeights(layer.kind, layer.norm[:h], mixer))
    return ModelWeights(embed=root.embed[:, :h], layers=layers, norm_f=root.norm_f[:h], lm_head=root.lm_head[:, :h])


def _holds(up, e: int, f: int, h: int) -> bool:
    """Whether stacked or listed experts `up` hold e experts of width f over h hidden channels."""
    count, (rows, cols) = (len(up), tuple(up[0].shape)) if isinstance(up, list) else (up.shape[0], tuple(up.shape[1:]))
    return e <= count and f <= rows and h <= cols


def _experts_view(up, down, e: int, f: int, h: int):
    if isinstance(up, list):
        return [x[:f, :h] for x in up[:e]], [x[:h, :f] for x in down[:e]]
    return up[:e, :f, :h], down[:e, :h, :f]


def has_host_experts(w: "ModelWeights") -> bool:
    """Whether some of these weights' routed experts run in RAM (placement.py)."""
    return any(isinstance(layer.mixer, MoEWeights) and layer.mixer.host_up is not None for layer in w.layers)


def _mlp_view(w: MLPWeights, f: int, h: int) -> MLPWeights:
    return MLPWeights(up=w.up[:f, :h], down=w.down[:h, :f],
                      up_bias=None if w.up_bias is None else w.up_bias[:f],
                      down_bias=None if w.down_bias is None else w.down_bias[:h])


def resident_bytes(*models: ModelWeights) -> int:
    """Bytes of distinct storage behind the given weights (shared storage counted once)."""
    return _storage_bytes(t for model in models for t in model.tensors())


def _storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
