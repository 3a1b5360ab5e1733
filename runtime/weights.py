"""Weights in memory: one resident copy, and every submodel as views into it.

Loading reads, for the *resident* submodel (the parent, or the largest submodel that fits
the device), only its slices of each tensor from disk. Every other submodel that fits
within it is then a set of views (`narrow`) into those tensors: no copies.

Two layout changes at load make every nested width a leading slice, so views suffice:

* MoE experts are stacked into one (E, F, H) up and one (E, H, F) down tensor.
* Mamba heads are reordered *rank-major*. On disk, head h = g * Q + j belongs to group g
  (Q heads per group, j is its rank inside the group), and a submodel keeps the first q
  ranks of every group: a strided set. Internally head i = j * G + g, so the same set is
  the first q * G heads. The in_proj rows are regrouped as [B, C, then per head (z, x, dt)]
  so a submodel's rows are one prefix too, and conv channels as [B, C, x per head].
  The mixer (mamba.py) undoes nothing: it simply knows head i belongs to group i % G.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors import safe_open

from .config import ATTENTION, MAMBA, MLP, MOE, ModelConfig
from .elastic import Submodel
from .errors import CheckpointError
from .safetensors_io import TensorInfo

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
    up: torch.Tensor  # (E, F, hidden)
    down: torch.Tensor  # (E, hidden, F)
    shared: MLPWeights


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
        def walk(obj):
            if isinstance(obj, torch.Tensor):
                yield obj
            elif isinstance(obj, list):
                for item in obj:
                    yield from walk(item)
            elif hasattr(obj, "__dataclass_fields__"):
                for f in fields(obj):
                    yield from walk(getattr(obj, f.name))
        yield from walk(self)


# ----------------------------------------------------------------------------- file layout

def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Names and shapes a dense checkpoint of this config holds (hub layout)."""
    h, out = cfg.hidden_size, {}
    out["backbone.embeddings.weight"] = (cfg.vocab_size, h)
    out["backbone.norm_f.weight"] = (h,)
    out["lm_head.weight"] = (cfg.vocab_size, h)
    for i, kind in enumerate(cfg.layer_types):
        p = f"backbone.layers.{i}."
        out[p + "norm.weight"] = (h,)
        m = p + "mixer."
        if kind == MAMBA:
            d, heads, bc = cfg.mamba_d_inner, cfg.mamba_num_heads, 2 * cfg.n_groups * cfg.ssm_state_size
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
            out.update(_mlp_shapes(m, cfg.intermediate_size, h, cfg.mlp_bias))
        else:
            e, f = cfg.n_routed_experts, cfg.moe_intermediate_size
            out[m + "gate.weight"] = (e, h)
            out[m + "gate.e_score_correction_bias"] = (e,)
            for k in range(e):
                out[m + f"experts.{k}.up_proj.weight"] = (f, h)
                out[m + f"experts.{k}.down_proj.weight"] = (h, f)
            out.update(_mlp_shapes(m + "shared_experts.", cfg.moe_shared_expert_intermediate_size, h, cfg.mlp_bias))
    return out


def _mlp_shapes(prefix, f, h, bias):
    out = {prefix + "up_proj.weight": (f, h), prefix + "down_proj.weight": (h, f)}
    if bias:
        out.update({prefix + "up_proj.bias": (f,), prefix + "down_proj.bias": (h,)})
    return out


def check_tensor_table(cfg: ModelConfig, table: dict[str, TensorInfo], folder: Path) -> dict[str, TensorInfo]:
    """Matches the file's tensors against the config; returns the table under canonical names."""
    table = dict(table)
    if EMBED_NAMES[1] in table and EMBED_NAMES[0] not in table:
        table[EMBED_NAMES[0]] = table.pop(EMBED_NAMES[1])
    expected = expected_tensors(cfg)
    present = {n for n in table if not n.startswith("mtp.")}  # multi-token-prediction heads are unused
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected))
    where = _weights_file_name(folder)
    if missing:
        raise CheckpointError(where, f"{len(missing)} tensors that config.json requires are missing, "
                                     f"e.g. {missing[0]!r}; the file does not belong to this config.json")
    if extra:
        raise CheckpointError(where, f"{len(extra)} tensors that config.json does not describe, "
                                     f"e.g. {extra[0]!r}; the file does not belong to this config.json")
    for name, shape in expected.items():
        info = table[name]
        if info.shape != shape:
            raise CheckpointError(info.file, f"tensor {name!r} has shape {list(info.shape)} but config.json "
                                             f"implies {list(shape)}")
        if info.dtype not in ("F32", "BF16", "F16"):
            raise CheckpointError(info.file, f"tensor {name!r} is stored as {info.dtype}; dense checkpoints "
                                             "need F32, BF16 or F16 weights")
    return table


def _weights_file_name(folder: Path) -> Path:
    index = Path(folder) / "model.safetensors.index.json"
    return index if index.exists() else Path(folder) / "model.safetensors"


# ----------------------------------------------------------------------------- reading

class _Reader:
    """Reads tensor slices from safetensors files (memory-mapped), converting dtype and device."""

    def __init__(self, table: dict[str, TensorInfo], device: torch.device, dtype: torch.dtype):
        self.table, self.device, self.dtype = table, device, dtype
        self.handles = {}

    def __call__(self, name: str, *index, fp32: bool = False) -> torch.Tensor:
        info = self.table[name]
        handle = self.handles.get(info.file)
        if handle is None:
            handle = self.handles[info.file] = safe_open(str(info.file), framework="pt")
        piece = handle.get_slice(_stored_name(handle, name))[index] if index else handle.get_tensor(_stored_name(handle, name))
        piece = piece.to(device=self.device, dtype=torch.float32 if fp32 else self.dtype).contiguous()
        # A row slice may come back as a view into the whole tensor: keep only the slice.
        return piece.clone() if piece.untyped_storage().nbytes() != piece.nbytes else piece


def _stored_name(handle, name: str) -> str:
    if name == EMBED_NAMES[0] and name not in handle.keys():
        return EMBED_NAMES[1]
    return name


def _rank_major(blocks: list[torch.Tensor], q: int, unit: int) -> torch.Tensor:
    """Per-group blocks of q heads x `unit` rows each -> rows ordered head i = j*G + g."""
    stacked = torch.stack(blocks)  # (G, q*unit, ...)
    rest = stacked.shape[2:]
    stacked = stacked.reshape(len(blocks), q, unit, *rest)  # (G, q, unit, ...)
    return stacked.transpose(0, 1).reshape(q * len(blocks) * unit, *rest)  # (q*G*unit, ...)


def load_weights(cfg: ModelConfig, table: dict[str, TensorInfo], root: Submodel,
                 device: torch.device, dtype: torch.dtype) -> ModelWeights:
    """Reads the `root` submodel's slices of every tensor into the internal layout."""
    read = _Reader(table, device, dtype)
    h = root.hidden_size
    layers = []
    for i, kind in enumerate(cfg.layer_types):
        m = f"backbone.layers.{i}.mixer."
        if kind == MAMBA:
            mixer = _load_mamba(read, m, cfg, h, root.mamba_num_heads[i])
        elif kind == ATTENTION:
            mixer = AttentionWeights(q=read(m + "q_proj.weight", slice(None), slice(0, h)),
                                     k=read(m + "k_proj.weight", slice(None), slice(0, h)),
                                     v=read(m + "v_proj.weight", slice(None), slice(0, h)),
                                     o=read(m + "o_proj.weight", slice(0, h)))
        elif kind == MLP:
            mixer = _load_mlp(read, m, cfg, h, root.intermediate_size[i])
        else:
            e, f = root.n_routed_experts[i], root.moe_intermediate_size[i]
            mixer = MoEWeights(
                router=read(m + "gate.weight", slice(0, e), slice(0, h), fp32=True),
                router_bias=read(m + "gate.e_score_correction_bias", slice(0, e), fp32=True),
                up=torch.stack([read(m + f"experts.{k}.up_proj.weight", slice(0, f), slice(0, h)) for k in range(e)]),
                down=torch.stack([read(m + f"experts.{k}.down_proj.weight", slice(0, h), slice(0, f)) for k in range(e)]),
                shared=_load_mlp(read, m + "shared_experts.", cfg, h, root.moe_shared_expert_intermediate_size[i]))
        layers.append(LayerWeights(kind, read(f"backbone.layers.{i}.norm.weight", slice(0, h)), mixer))
    return ModelWeights(embed=read(EMBED_NAMES[0], slice(None), slice(0, h)), layers=layers,
                        norm_f=read("backbone.norm_f.weight", slice(0, h)),
                        lm_head=read("lm_head.weight", slice(None), slice(0, h)))


def _load_mlp(read, m, cfg, h, f) -> MLPWeights:
    return MLPWeights(up=read(m + "up_proj.weight", slice(0, f), slice(0, h)),
                      down=read(m + "down_proj.weight", slice(0, h), slice(0, f)),
                      up_bias=read(m + "up_proj.bias", slice(0, f)) if cfg.mlp_bias else None,
                      down_bias=read(m + "down_proj.bias", slice(0, h)) if cfg.mlp_bias else None)


def _load_mamba(read, m, cfg: ModelConfig, h: int, heads: int) -> MambaWeights:
    G, P = cfg.n_groups, cfg.mamba_head_dim
    Q, q = cfg.mamba_num_heads // G, heads // G
    d, gn = cfg.mamba_d_inner, cfg.n_groups * cfg.ssm_state_size

    def heads_of(name, offset, unit, *cols, fp32=False):
        # The first q heads of each group, `unit` rows per head, from rows offset.. of tensor `name`.
        blocks = [read(name, slice(offset + g * Q * unit, offset + (g * Q + q) * unit), *cols, fp32=fp32)
                  for g in range(G)]
        return _rank_major(blocks, q, unit)

    def in_proj_rows(name, *cols):
        z = heads_of(name, 0, P, *cols).unflatten(0, (heads, P))
        x = heads_of(name, d, P, *cols).unflatten(0, (heads, P))
        dt = heads_of(name, 2 * d + 2 * gn, 1, *cols).unflatten(0, (heads, 1))
        bc = read(name, slice(2 * d, 2 * d + 2 * gn), *cols)
        return torch.cat([bc, torch.cat([z, x, dt], dim=1).flatten(0, 1)])

    conv = read(m + "conv1d.weight")[:, 0, :]  # (d + 2GN, K); tiny, read whole
    conv_x = _rank_major([conv[g * Q * P:(g * Q + q) * P] for g in range(G)], q, P)
    conv_b = None
    if cfg.use_conv_bias:
        cb = read(m + "conv1d.bias")
        conv_b = torch.cat([cb[d:d + 2 * gn], _rank_major([cb[g * Q * P:(g * Q + q) * P] for g in range(G)], q, P)])
    out_blocks = [read(m + "out_proj.weight", slice(0, h), slice(g * Q * P, (g * Q + q) * P)).T for g in range(G)]
    return MambaWeights(
        in_proj=in_proj_rows(m + "in_proj.weight", slice(0, h)),
        in_bias=in_proj_rows(m + "in_proj.bias") if cfg.use_bias else None,
        conv_w=torch.cat([conv[d:d + 2 * gn], conv_x]).contiguous(),
        conv_b=conv_b,
        A=-torch.exp(heads_of(m + "A_log", 0, 1, fp32=True)),
        D=heads_of(m + "D", 0, 1, fp32=True),
        dt_bias=heads_of(m + "dt_bias", 0, 1, fp32=True),
        norm_w=heads_of(m + "norm.weight", 0, P),
        out_proj=_rank_major(out_blocks, q, P).T.contiguous(),
        out_bias=read(m + "out_proj.bias", slice(0, h)) if cfg.use_bias else None,
    )


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
            mixer = MoEWeights(router=w.router[:e, :h], router_bias=w.router_bias[:e],
                               up=w.up[:e, :f, :h], down=w.down[:e, :h, :f],
                               shared=_mlp_view(w.shared, sub.moe_shared_expert_intermediate_size[i], h))
        layers.append(LayerWeights(layer.kind, layer.norm[:h], mixer))
    return ModelWeights(embed=root.embed[:, :h], layers=layers, norm_f=root.norm_f[:h], lm_head=root.lm_head[:, :h])


def _mlp_view(w: MLPWeights, f: int, h: int) -> MLPWeights:
    return MLPWeights(up=w.up[:f, :h], down=w.down[:h, :f],
                      up_bias=None if w.up_bias is None else w.up_bias[:f],
                      down_bias=None if w.down_bias is None else w.down_bias[:h])


def resident_bytes(*models: ModelWeights) -> int:
    """Bytes of distinct storage behind the given weights (shared storage counted once)."""
    seen = {}
    for model in models:
        for t in model.tensors():
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
