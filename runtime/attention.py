"""Grouped-query attention over a preallocated KV cache. NemotronH attention has no
positional encoding (no RoPE): order reaches it only through the Mamba layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .cache import KVState
from .config import ModelConfig
from .matmul import linear
from .weights import AttentionWeights


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
