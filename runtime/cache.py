"""Per-sequence state, preallocated once at its largest size.

A `SequenceCache` belongs to one submodel (its widths fix the Mamba state shapes) and
holds, per layer: a KV cache for attention layers, a conv window and an fp32 SSM state for
Mamba layers. `length` is how many tokens the state covers and `tokens` which ones, so the
engine can reuse a cached prefix on the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .checkpoint.config import ATTENTION, MAMBA, ModelConfig
from .checkpoint.submodels import Submodel


@dataclass
class KVState:
    k: torch.Tensor  # (kv_heads, max_len, head_dim)
    v: torch.Tensor


@dataclass
class MambaState:
    conv: torch.Tensor  # (conv channels, kernel - 1): the last inputs of the causal conv
    ssm: torch.Tensor  # (heads, head_dim, state) fp32


@dataclass(frozen=True)
class Snapshot:
    """The recurrent state after `tokens`. Attention KV needs no copy: positions before
    len(tokens) are never rewritten while the snapshot is valid."""
    tokens: tuple[int, ...]
    mamba: tuple[tuple[torch.Tensor, torch.Tensor] | None, ...]


@dataclass
class SequenceCache:
    submodel: str
    max_len: int
    layers: list[KVState | MambaState | None]
    tokens: list[int] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    max_snapshots: int = 4
    scope: str = ""  # whose replies the state and snapshots hold (Engine.catch_up reuses only its own)
    step: object = None  # its decode step (decode_step.DecodeStep), made on first use

    @property
    def length(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        """Forget the sequence. Mamba states are zeroed; KV entries beyond `length` are never read."""
        self.tokens.clear()
        self.snapshots.clear()  # their KV positions are about to be overwritten
        for state in self.layers:
            if isinstance(state, MambaState):
                state.conv.zero_()
                state.ssm.zero_()

    def snapshot(self) -> None:
        """Remembers the current state so a later context sharing this prefix can resume here
        (a Mamba state cannot be rewound, so this is how a follow-up turn reuses a prefix)."""
        if any(s.tokens == tuple(self.tokens) for s in self.snapshots):
            return
        mamba = tuple((s.conv.clone(), s.ssm.clone()) if isinstance(s, MambaState) else None for s in self.layers)
        self.snapshots.append(Snapshot(tuple(self.tokens), mamba))
        del self.snapshots[:-self.max_snapshots]

    def restore(self, snap: Snapshot) -> None:
        for state, saved in zip(self.layers, snap.mamba):
            if saved is not None:
                state.conv.copy_(saved[0])
                state.ssm.copy_(saved[1])
        self.tokens[:] = snap.tokens
        # Later snapshots cover positions that new tokens will overwrite.
        self.snapshots = [s for s in self.snapshots if len(s.tokens) <= len(snap.tokens)]

    def nbytes(self) -> int:
        total = 0
        for s in self.layers:
            if isinstance(s, KVState):
                total += s.k.nbytes + s.v.nbytes
            elif isinstance(s, MambaState):
                total += s.conv.nbytes + s.ssm.nbytes
        return total


def new_cache(cfg: ModelConfig, sub: Submodel, max_len: int, device, dtype) -> SequenceCache:
    layers = []
    gn = cfg.n_groups * cfg.ssm_state_size
    for i, kind in enumerate(cfg.layer_types):
        if kind == ATTENTION:
            shape = (cfg.num_key_value_heads, max_len, cfg.head_dim)
            layers.append(KVState(torch.zeros(shape, device=device, dtype=dtype),
                                  torch.zeros(shape, device=device, dtype=dtype)))
        elif kind == MAMBA:
            heads = sub.mamba_num_heads[i]
            layers.append(MambaState(
                conv=torch.zeros(2 * gn + heads * cfg.mamba_head_dim, cfg.conv_kernel - 1, device=device, dtype=dtype),
                ssm=torch.zeros(heads, cfg.mamba_head_dim, cfg.ssm_state_size, device=device, dtype=torch.float32)))
        else:
            layers.append(None)
    return SequenceCache(sub.name, max_len, layers)


def cache_bytes(cfg: ModelConfig, sub: Submodel, max_len: int, dtype_bytes: int) -> int:
    """What `new_cache` would allocate, without allocating it (for the fit planner)."""
    total, gn = 0, cfg.n_groups * cfg.ssm_state_size
    for i, kind in enumerate(cfg.layer_types):
        if kind == ATTENTION:
            total += 2 * cfg.num_key_value_heads * max_len * cfg.head_dim * dtype_bytes
        elif kind == MAMBA:
            heads = sub.mamba_num_heads[i]
            total += (2 * gn + heads * cfg.mamba_head_dim) * (cfg.conv_kernel - 1) * dtype_bytes
            total += heads * cfg.mamba_head_dim * cfg.ssm_state_size * 4
    return total
