"""Grouped-query attention over a preallocated KV cache. NemotronH attention has no
positional encoding (no RoPE): order reaches it only through the Mamba layers.

`attention` runs a prefill chunk at a host-known position; `attention_step` is the decode step:
the position lives on the device and the keys after it are hidden by a mask, so the same
step (and one CUDA graph per key span) serves every position."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .cache import KVState
from .checkpoint.config import ModelConfig
from .checkpoint.weights import AttentionWeights
from .matmul import linear


def attention(x: torch.Tensor, w: AttentionWeights, kv: KVState, pos: int, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) for positions pos..pos+T-1 -> (T, hidden); writes their keys and values."""
    T, D = x.shape[0], cfg.head_dim
    q = linear(x, w.q).view(T, -1, D).transpose(0, 1)  # (heads, T, D)
    kv.k[:, pos:pos + T] = linear(x, w.k).view(T, -1, D).transpose(0, 1)  # (kv_heads, T, D)
    kv.v[:, pos:pos + T] = linear(x, w.v).view(T, -1, D).transpose(0, 1)
    keys, values = kv.k[:, :pos + T], kv.v[:, :pos + T]
    mask, causal = None, False
    if T > 1 and pos == 0:
        causal = True
    elif T > 1:  # a continued prefill: query i sees every cached key and new keys up to itself
        mask = torch.arange(pos + T, device=x.device)[None, :] <= torch.arange(pos, pos + T, device=x.device)[:, None]
    out = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask, is_causal=causal,
                                         scale=D ** -0.5, enable_gqa=True)[0]  # (heads, T, D)
    return linear(out.transpose(0, 1).reshape(T, -1), w.o)


def attention_step(x: torch.Tensor, w: AttentionWeights, kv: KVState, pos: torch.Tensor, mask: torch.Tensor,
                   cfg: ModelConfig) -> torch.Tensor:
    """One token x (1, hidden) at device position `pos` ((1,) long): writes its key and value there and
    attends over the first `span` cached positions; `mask` (1, span) is True up to pos."""
    D, groups = cfg.head_dim, cfg.num_key_value_heads
    span = mask.shape[-1]
    kv.k.index_copy_(1, pos, linear(x, w.k).view(groups, 1, D))
    kv.v.index_copy_(1, pos, linear(x, w.v).view(groups, 1, D))
    q = linear(x, w.q).view(1, groups, -1, D)  # (1, kv_heads, heads per kv head, D): query heads sharing a KV head
    out = F.scaled_dot_product_attention(q, kv.k[None, :, :span], kv.v[None, :, :span], attn_mask=mask,
                                         scale=D ** -0.5)  # (1, kv_heads, heads per kv head, D)
    return linear(out.reshape(1, -1), w.o)
