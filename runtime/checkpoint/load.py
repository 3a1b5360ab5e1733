"""Loading the resident submodel's weights into the runtime's layout (weights.py), and what that costs.

Every tensor is read in its stored form through the shard mappings (reader.py), then placed:

* on the CPU, a whole tensor whose stored dtype is the compute dtype stays a view of the file
  (file-backed pages, read in now so the first token does not wait for the disk); anything sliced,
  reordered or converted is copied, and the pages it came from are released;
* on a GPU, each tensor is copied to the device as it is read and its host pages released, so
  host memory never holds more than a tensor or so of the file;
* routed experts are stacked into one (E, out, in) weight per projection (the decode step gathers
  from it on the device), written expert by expert into the stacked tensor. On the CPU, experts
  that would be copied to be stacked stay per-expert views instead when they are large
  (EXPERT_COPY_LIMIT): a private copy of a 30B's 16 GB of experts is what a CPU cannot spare.

`load_weights` reports progress (bytes read of the total, the shard) and checks a cancel flag
between tensors. `stored_bytes` and `resident_bytes_of` size a submodel from the headers alone,
for the progress total and for the planner: they are the same arithmetic the loader follows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch

from ..errors import CheckpointError
from .config import ATTENTION, MAMBA, MLP, ModelConfig
from .quant import BLOCK, PackedFP8, PackedNVFP4, block_slice
from .reader import LoadMeter, MappedShards, ProgressFn
from .safetensors_io import BYTES_PER_ELEMENT, TensorInfo
from .submodels import Submodel
from .weights import (
    EMBED_NAMES,
    AttentionWeights,
    LayerWeights,
    MambaWeights,
    MLPWeights,
    ModelWeights,
    MoEWeights,
    expected_tensors,
    is_linear,
    mamba_head_order,
)

EXPERT_COPY_LIMIT = 256 << 20  # bytes of routed experts the CPU may copy to stack them
FP32_NAMES = (".A_log", ".D", ".dt_bias", ".gate.weight", ".gate.e_score_correction_bias")  # kept fp32

Index = slice | torch.Tensor  # a prefix/range, or explicit positions in the order wanted


# ----------------------------------------------------------------------------- sizes from the headers

def _companions(name: str) -> tuple[str, ...]:
    """The scales read with a packed weight (input scales are not used: activations stay unquantized)."""
    return (name + "_scale", name + "_scale_2")


def stored_bytes(cfg: ModelConfig, table: dict[str, TensorInfo], sub: Submodel) -> int:
    """Bytes of stored tensor data the loader reads to make `sub` resident (its slices only)."""
    return _sum_bytes(cfg, table, sub, None)


def resident_bytes_of(cfg: ModelConfig, table: dict[str, TensorInfo], sub: Submodel, dtype: torch.dtype) -> int:
    """Bytes `sub`'s weights hold once loaded with compute dtype `dtype`: packed linears as stored,
    routers and Mamba A/D/dt_bias in fp32, every other tensor in `dtype`."""
    return _sum_bytes(cfg, table, sub, torch.empty((), dtype=dtype).element_size())


def _sum_bytes(cfg, table, sub, compute_size: int | None) -> int:
    parent = expected_tensors(cfg)
    total = 0
    for name, shape in expected_tensors(cfg, sub).items():
        info = table[name]
        kept = math.prod(shape) / max(1, math.prod(parent[name]))
        packed = is_linear(name) and name + "_scale" in table
        if compute_size is None or packed:
            size = BYTES_PER_ELEMENT[info.dtype]
        else:
            size = 4 if name.endswith(FP32_NAMES) else compute_size
        total += math.prod(info.shape) * kept * size
        if packed:
            for extra in _companions(name):
                if extra in table:
                    t = table[extra]
                    total += t.nbytes * (kept if t.shape not in ((), (1,)) else 1)
    return int(total)


# ----------------------------------------------------------------------------- reading

class _Reader:
    """Reads the rows and columns asked for of a stored tensor and places them (see the module doc)."""

    def __init__(self, table: dict[str, TensorInfo], device: torch.device, dtype: torch.dtype, progress: LoadMeter):
        self.table, self.device, self.dtype, self.progress = table, device, dtype, progress
        self.shards = MappedShards()

    def stored(self, name: str, rows: Index, cols: Index | None) -> torch.Tensor:
        """The stored slice on the host: a view of the file for prefixes and ranges, a copy for positions."""
        self.progress.check()
        info = self.table[name]
        piece = self.shards.tensor(info)
        box, pick = [], []
        for index in (rows, cols)[: len(info.shape)]:
            if index is None or isinstance(index, slice):
                box.append(index or slice(None))
                pick.append(None)
            else:  # read the covering range, then take the positions in order
                lo, hi = int(index.min()), int(index.max()) + 1
                box.append(slice(lo, hi))
                pick.append(index - lo)
        if box:
            piece = piece[tuple(box)]
        box_view = piece
        for dim, p in enumerate(pick):
            if p is not None:
                piece = _select(piece, dim, p)
        if piece is not box_view:
            self.shards.release(box_view)  # the positions were copied out
        self.progress.add(piece.nbytes, Path(info.file).name)
        return piece

    def place(self, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`t` on the device in `dtype` (default: as stored). On the CPU a whole stored tensor already
        in that dtype stays a view of the file; anything else is copied and its source pages released."""
        dtype = dtype or t.dtype
        mapped = self.shards.contains(t)
        if self.device.type == "cpu" and mapped and self.shards.covers(t) and t.dtype == dtype and t.is_contiguous():
            self.shards.populate(t)
            return t
        out = t.to(device=self.device, dtype=dtype)
        if mapped and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            out = out.clone()  # a slice of a mapped tensor: keep only the slice, in private memory
        out = out.contiguous()
        if mapped:
            self.shards.release(t)
        return out

    def __call__(self, name: str, rows: Index = slice(None), cols: Index | None = None, fp32: bool = False):
        """A weight (rows, cols) of tensor `name` on the device; packed linear weights stay packed."""
        if name + "_scale" in self.table and is_linear(name):
            return self.packed(name, rows, cols)
        return self.place(self.stored(name, rows, cols), torch.float32 if fp32 else self.dtype)

    def packed(self, name: str, rows: Index, cols: Index | None, place: bool = True):
        """A packed linear in its stored form (placed on the device unless `place` is False)."""
        cols = slice(None) if cols is None else cols
        put = self.place if place else (lambda t: t)
        if self.table[name].dtype == "F8_E4M3":  # FP8: one scale per matrix
            return PackedFP8(put(self.stored(name, rows, cols)), put(self._scalar(name + "_scale")), name)
        full = self.table[name + "_scale"].shape[-1] * BLOCK
        if isinstance(cols, slice):
            start, stop, _ = cols.indices(full)
            block_slice(cols, full, name)
            byte_cols, block_cols = slice(start // 2, stop // 2), slice(start // BLOCK, stop // BLOCK)
        else:
            blocks = cols.view(-1, BLOCK)
            if not torch.equal(blocks, blocks[:, :1] + torch.arange(BLOCK)) or (blocks[:, 0] % BLOCK).any():
                raise CheckpointError(name, f"a column order that breaks NVFP4's {BLOCK}-wide blocks")
            byte_cols = (blocks[:, :1] // 2 + torch.arange(BLOCK // 2)).flatten()
            block_cols = blocks[:, 0] // BLOCK
        return PackedNVFP4(put(self.stored(name, rows, byte_cols)), put(self.stored(name + "_scale", rows, block_cols)),
                           put(self._scalar(name + "_scale_2")), name)

    def _scalar(self, name: str) -> torch.Tensor:
        return self.stored(name, None, None).float().reshape(())

    def experts(self, names: list[str], rows: Index, cols: Index | None, stack: bool):
        """The experts' weights stacked into one (E, out, in) weight on the device, or (not `stack`)
        as a list of 2-D weights."""
        if not stack:
            return [self(n, rows, cols) for n in names]
        first = self.table[names[0]]
        if names[0] + "_scale" not in self.table:
            pieces = (self.stored(n, rows, cols) for n in names)
            return _stack_into(pieces, len(names), self.device, self.dtype, self.shards)
        parts = [self.packed(n, rows, cols, place=False) for n in names]
        if first.dtype == "F8_E4M3":
            return PackedFP8(_stack_into((p.weight for p in parts), len(parts), self.device, None, self.shards),
                             torch.stack([p.scale for p in parts]).to(self.device), names[0].replace(".0.", ".*."))
        return PackedNVFP4(_stack_into((p.packed for p in parts), len(parts), self.device, None, self.shards),
                           _stack_into((p.scale for p in parts), len(parts), self.device, None, self.shards),
                           torch.stack([p.scale2 for p in parts]).to(self.device), names[0].replace(".0.", ".*."))


def _select(t: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # index_select has no float8 kernels: move bytes
        return t.view(torch.uint8).index_select(dim, index).view(t.dtype)
    return t.index_select(dim, index)


def _stack_into(pieces, count: int, device, dtype, shards: MappedShards) -> torch.Tensor:
    """Writes same-shaped pieces one by one into a new (count, ...) tensor on `device` (in `dtype`,
    default: the pieces'), releasing each piece's pages after its copy."""
    out = None
    for k, piece in enumerate(pieces):
        if out is None:
            out = torch.empty((count, *piece.shape), dtype=dtype or piece.dtype, device=device)
        if piece.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and out.dtype == piece.dtype:
            out[k].view(torch.uint8).copy_(piece.view(torch.uint8))
        else:
            out[k].copy_(piece)
        shards.release(piece)
    return out


def load_weights(cfg: ModelConfig, table: dict[str, TensorInfo], root: Submodel, device: torch.device,
                 dtype: torch.dtype, progress: ProgressFn | None = None,
                 cancelled: Callable[[], bool] | None = None) -> tuple[ModelWeights, MappedShards]:
    """Reads the `root` submodel's slices of every tensor into the internal layout.

    Args:
        progress: called after every tensor with a `reader.LoadProgress`.
        cancelled: polled between tensors; when it returns True the load stops with `LoadCancelled`.
    Returns:
        The weights, and the shard mappings whose pages the CPU weights are views of.
    """
    shards = sorted({Path(info.file).name for info in table.values()})
    count = sum(1 + sum(n + s in table for s in ("_scale", "_scale_2")) for n in expected_tensors(cfg, root))
    tracker = LoadMeter(stored_bytes(cfg, table, root), count, shards, progress, cancelled)
    read = _Reader(table, device, dtype, tracker)
    expert_bytes = sum(info.nbytes for name, info in table.items() if ".experts." in name)
    copies = any(table[n].dtype not in ("U8", "F8_E4M3") and table[n].dtype != _safetensors_dtype(dtype)
                 for n in table if ".experts." in n and n.endswith("proj.weight"))
    stack = device.type != "cpu" or copies or expert_bytes <= EXPERT_COPY_LIMIT
    h = slice(0, root.hidden_size)
    layers = []
    for i, kind in enumerate(cfg.layer_types):
        m = f"backbone.layers.{i}.mixer."
        norm = read(f"backbone.layers.{i}.norm.weight", h)
        if kind == MAMBA:
            mixer = _load_mamba(read, m, cfg, h, root.mamba_num_heads[i])
        elif kind == ATTENTION:
            mixer = AttentionWeights(q=read(m + "q_proj.weight", slice(None), h),
                                     k=read(m + "k_proj.weight", slice(None), h),
                                     v=read(m + "v_proj.weight", slice(None), h), o=read(m + "o_proj.weight", h))
        elif kind == MLP:
            mixer = _load_mlp(read, m, cfg, h, root.intermediate_size[i])
        else:
            e, f = root.n_routed_experts[i], slice(0, root.moe_intermediate_size[i])
            mixer = MoEWeights(
                router=read(m + "gate.weight", slice(0, e), h, fp32=True),
                router_bias=read(m + "gate.e_score_correction_bias", slice(0, e), fp32=True),
                up=read.experts([m + f"experts.{k}.up_proj.weight" for k in range(e)], f, h, stack),
                down=read.experts([m + f"experts.{k}.down_proj.weight" for k in range(e)], h, f, stack),
                shared=_load_mlp(read, m + "shared_experts.", cfg, h, root.moe_shared_expert_intermediate_size[i]))
        layers.append(LayerWeights(kind, norm, mixer))
    weights = ModelWeights(embed=read(EMBED_NAMES[0], slice(None), h), layers=layers,
                           norm_f=read("backbone.norm_f.weight", h), lm_head=read("lm_head.weight", slice(None), h))
    read.shards.release_unused(weights.tensors())
    return weights, read.shards


def _safetensors_dtype(dtype: torch.dtype) -> str:
    return {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}.get(dtype, "")


def _load_mlp(read, m, cfg, h: slice, f: int) -> MLPWeights:
    f = slice(0, f)
    return MLPWeights(up=read(m + "up_proj.weight", f, h), down=read(m + "down_proj.weight", h, f),
                      up_bias=read(m + "up_proj.bias", f) if cfg.mlp_bias else None,
                      down_bias=read(m + "down_proj.bias", h) if cfg.mlp_bias else None)


def _load_mamba(read, m, cfg: ModelConfig, h: slice, heads: int) -> MambaWeights:
    P, d, gn = cfg.mamba_head_dim, cfg.mamba_d_inner, cfg.n_groups * cfg.ssm_state_size
    order = mamba_head_order(cfg, heads, rank_major=True)  # internal head i -> original head id
    channels = (order[:, None] * P + torch.arange(P)).flatten()  # each head's P channels, in order
    per_head = torch.cat([channels.view(-1, P), d + channels.view(-1, P), 2 * d + 2 * gn + order[:, None]], dim=1)
    in_rows = torch.cat([torch.arange(2 * d, 2 * d + 2 * gn), per_head.flatten()])  # [B, C, per head (z, x, dt)]
    conv_rows = torch.cat([torch.arange(d, d + 2 * gn), channels])  # [B, C, per head x]
    return MambaWeights(
        in_proj=read(m + "in_proj.weight", in_rows, h),
        in_bias=read(m + "in_proj.bias", in_rows) if cfg.use_bias else None,
        conv_w=read(m + "conv1d.weight", conv_rows)[:, 0, :].contiguous(),
        conv_b=read(m + "conv1d.bias", conv_rows) if cfg.use_conv_bias else None,
        A=-torch.exp(read(m + "A_log", order, fp32=True)),
        D=read(m + "D", order, fp32=True),
        dt_bias=read(m + "dt_bias", order, fp32=True),
        norm_w=read(m + "norm.weight", channels),
        out_proj=read(m + "out_proj.weight", h, channels),
        out_bias=read(m + "out_proj.bias", h) if cfg.use_bias else None,
    )
