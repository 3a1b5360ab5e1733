"""Nemotron Elastic's ranking step, in small: measure how much each hidden channel, Mamba head,
expert and FFN channel is used on calibration data, then permute the parent's weights so the
important ones come first. Every permutation here leaves the parent's function unchanged
(RMSNorm, grouped norms, routing and FFNs are all equivariant to it); it only decides which
components the nested submodels keep.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.checkpoint.config import ATTENTION, MAMBA, MLP
from runtime.model import rms_norm
from runtime.moe import relu2, route

from .model import TrainableModel, attention_batched, mamba_batched


@torch.no_grad()
def measure(tm: TrainableModel, batches) -> dict:
    """Mean absolute activations per component over the masked tokens of `batches` [(ids, mask)]."""
    cfg, w = tm.cfg, tm.views(next(iter(tm.submodels)))  # the parent
    stats = {"hidden": torch.zeros(cfg.hidden_size)}
    for ids, mask in batches:
        m = mask.float()[..., None]  # (B, T, 1)
        x = F.embedding(ids, w.embed)
        for i, layer in enumerate(w.layers):
            y = rms_norm(x, layer.norm, cfg.layer_norm_epsilon)
            stats["hidden"] += (y.abs() * m).sum((0, 1))
            mix = layer.mixer
            if layer.kind == MAMBA:
                heads = []
                out = mamba_batched(y, mix, cfg, record=heads.append)
                P = cfg.mamba_head_dim
                act = heads[0].view(*ids.shape, -1, P).abs().mean(-1)  # (B, T, H)
                _add(stats, ("heads", i), (act * m).sum((0, 1)))
            elif layer.kind == ATTENTION:
                out = attention_batched(y, mix, cfg)
            elif layer.kind == MLP:
                inner = relu2(F.linear(y, mix.up, mix.up_bias))
                _add(stats, ("ffn", i), (inner.abs() * m).sum((0, 1)))
                out = F.linear(inner, mix.down, mix.down_bias)
            else:
                flat, fm = y.reshape(-1, y.shape[-1]), m.reshape(-1)
                expert_ids, weights = route(flat, mix, cfg)
                use = torch.zeros(mix.up.shape[0]).index_add_(0, expert_ids.flatten(),
                                                               (weights * fm[:, None]).flatten())
                _add(stats, ("experts", i), use)
                channel = torch.zeros(mix.up.shape[:2])
                routed = torch.zeros_like(flat)
                for e in expert_ids.unique().tolist():
                    tok, slot = (expert_ids == e).nonzero(as_tuple=True)
                    inner = relu2(F.linear(flat[tok], mix.up[e]))
                    channel[e] += (inner.abs() * fm[tok, None]).sum(0)
                    routed.index_add_(0, tok, F.linear(inner, mix.down[e]) * weights[tok, slot, None])
                _add(stats, ("expert_ffn", i), channel)
                shared = relu2(F.linear(flat, mix.shared.up, mix.shared.up_bias))
                _add(stats, ("shared_ffn", i), (shared.abs() * fm[:, None]).sum(0))
                out = (routed + F.linear(shared, mix.shared.down, mix.shared.down_bias)).view_as(y)
            x = x + out
    return stats


def _add(stats, key, value):
    stats[key] = stats.get(key, 0) + value


def _order(scores: torch.Tensor) -> torch.Tensor:
    return torch.argsort(scores, descending=True, stable=True)


@torch.no_grad()
def permute_by_importance(tm: TrainableModel, stats: dict) -> None:
    """Reorders the parent's weights in place, most important components first."""
    w = tm.weights
    h = _order(stats["hidden"])
    for t in (w.embed, w.lm_head):
        t.copy_(t[:, h])
    w.norm_f.copy_(w.norm_f[h])
    for i, layer in enumerate(w.layers):
        layer.norm.copy_(layer.norm[h])
        x = layer.mixer
        if layer.kind == MAMBA:
            _permute_mamba(tm, i, h, stats[("heads", i)])
        elif layer.kind == ATTENTION:
            for t in (x.q, x.k, x.v):
                t.copy_(t[:, h])
            x.o.copy_(x.o[h])
        elif layer.kind == MLP:
            _permute_mlp(x, h, _order(stats[("ffn", i)]))
        else:
            e = _order(stats[("experts", i)])
            x.router.copy_(x.router[e][:, h])
            x.router_bias.copy_(x.router_bias[e])
            channel = stats[("expert_ffn", i)][e]
            up, down = x.up[e][:, :, h], x.down[e][:, h, :]
            for k in range(up.shape[0]):
                c = _order(channel[k])
                up[k], down[k] = up[k][c], down[k][:, c]
            x.up.copy_(up)
            x.down.copy_(down)
            _permute_mlp(x.shared, h, _order(stats[("shared_ffn", i)]))


def _permute_mlp(x, h, c):
    x.up.copy_(x.up[c][:, h])
    x.down.copy_(x.down[h][:, c])
    if x.up_bias is not None:
        x.up_bias.copy_(x.up_bias[c])
        x.down_bias.copy_(x.down_bias[h])


def _permute_mamba(tm: TrainableModel, i: int, h: torch.Tensor, head_scores: torch.Tensor) -> None:
    """Heads are reordered within their group (group-aware): head i = j*G + g stays in group g."""
    cfg, x = tm.cfg, tm.weights.layers[i].mixer
    G, P, gn = cfg.n_groups, cfg.mamba_head_dim, cfg.n_groups * cfg.ssm_state_size
    H = x.D.shape[0]
    by_rank = head_scores.view(H // G, G)  # (rank j, group g)
    new_heads = torch.empty(H, dtype=torch.long)
    for g in range(G):
        for new_j, old_j in enumerate(_order(by_rank[:, g]).tolist()):
            new_heads[new_j * G + g] = old_j * G + g

    def rows(unit, offset=0):
        return (offset + new_heads[:, None] * unit + torch.arange(unit)[None]).flatten()

    in_rows = torch.cat([torch.arange(2 * gn), rows(2 * P + 1, 2 * gn)])
    x.in_proj.copy_(x.in_proj[in_rows][:, h])
    if x.in_bias is not None:
        x.in_bias.copy_(x.in_bias[in_rows])
        x.out_bias.copy_(x.out_bias[h])
    conv_rows = torch.cat([torch.arange(2 * gn), rows(P, 2 * gn)])
    x.conv_w.copy_(x.conv_w[conv_rows])
    if x.conv_b is not None:
        x.conv_b.copy_(x.conv_b[conv_rows])
    for t in (x.D, x.dt_bias, tm.a_logs[i]):
        t.copy_(t[new_heads])
    x.norm_w.copy_(x.norm_w[rows(P)])
    x.out_proj.copy_(x.out_proj[h][:, rows(P)])
