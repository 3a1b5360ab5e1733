"""Feed-forward layers: the dense relu2 MLP and the routed mixture of experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .matmul import linear
from .quant import dense
from .weights import MLPWeights, MoEWeights


def relu2(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x).square()


def mlp(x: torch.Tensor, w: MLPWeights) -> torch.Tensor:
    return linear(relu2(linear(x, w.up, w.up_bias)), w.down, w.down_bias)


def route(x: torch.Tensor, w: MoEWeights, cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid router with correction bias. Returns expert ids (T, k) and their weights (T, k) fp32.
    The bias only chooses experts; weights come from the unbiased scores."""
    scores = F.linear(x.float(), w.router).sigmoid()  # (T, E)
    choice = scores + w.router_bias
    if cfg.n_group > 1:  # keep the topk_group groups whose two best experts score highest
        T, E = choice.shape
        grouped = choice.view(T, cfg.n_group, E // cfg.n_group)
        best_groups = grouped.topk(2, dim=-1).values.sum(-1).topk(cfg.topk_group, dim=-1).indices  # (T, topk_group)
        keep = torch.zeros(T, cfg.n_group, dtype=torch.bool, device=x.device).scatter_(1, best_groups, True)
        choice = choice.masked_fill(~keep[:, :, None].expand_as(grouped).reshape(T, E), float("-inf"))
    ids = choice.topk(cfg.num_experts_per_tok, dim=-1, sorted=False).indices  # (T, k)
    weights = scores.gather(1, ids)
    if cfg.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return ids, weights * cfg.routed_scaling_factor


def moe(x: torch.Tensor, w: MoEWeights, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) -> (T, hidden): the weighted sum of each token's k experts, plus the shared expert."""
    ids, weights = route(x, w, cfg)
    if x.shape[0] == 1 and x.is_cuda:
        # Decode on a GPU: gather the k experts' weights and run them as one batch (no host sync).
        e = ids[0]
        h = relu2(torch.einsum("kfh,h->kf", dense(w.up[e], x.dtype), x[0]))  # (k, F)
        out = torch.einsum("khf,kf->kh", dense(w.down[e], x.dtype), h)  # (k, hidden)
        routed = (weights[0, :, None] * out.float()).sum(0, keepdim=True)
    elif x.shape[0] == 1:
        # Decode on the CPU: read each chosen expert in place (a gather would copy its weights).
        routed = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for j, e in enumerate(ids[0].tolist()):
            routed += weights[0, j] * linear(relu2(linear(x, w.up[e])), w.down[e]).float()
    else:
        routed = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in ids.unique().tolist():
            tokens, slot = (ids == e).nonzero(as_tuple=True)
            y = linear(relu2(linear(x[tokens], w.up[e])), w.down[e])
            routed.index_add_(0, tokens, y.float() * weights[tokens, slot, None])
    return routed.to(x.dtype) + mlp(x, w.shared)
