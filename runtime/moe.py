"""Feed-forward layers: the dense relu2 MLP and the routed mixture of experts.

Two ways to run the routed experts: `moe` groups a prefill's tokens by expert (each expert's
weights read once per chunk, but the grouping reads the routing on the host), and
`moe_gathered` gathers every token's k experts on the device (no host sync, static shapes: the
decode step). Packed NVFP4/FP8 experts are gathered while packed and only the k chosen are
dequantized; a dense-mask formulation would dequantize and multiply all E experts.
`tests/benchmarks/count_ops.py` counts both."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .matmul import linear
from .quant import PackedFP8, PackedNVFP4, dense
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


def take(w, ids: torch.Tensor):
    """Experts `ids` of a stacked (E, out, in) weight, dense or packed, gathered on the device."""
    if isinstance(w, PackedNVFP4):
        return PackedNVFP4(w.packed.index_select(0, ids), w.scale.index_select(0, ids),
                           w.scale2.index_select(0, ids), w.name)
    if isinstance(w, PackedFP8):
        return PackedFP8(w.weight.index_select(0, ids), w.scale.index_select(0, ids), w.name)
    return w.index_select(0, ids)


def moe_gathered(x: torch.Tensor, w: MoEWeights, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) -> (T, hidden), each token's k experts gathered and run as one batch."""
    ids, weights = route(x, w, cfg)  # (T, k)
    T, k = ids.shape
    flat = ids.reshape(-1)
    xs = x[:, None, :].expand(T, k, x.shape[1]).reshape(T * k, -1, 1)  # (T*k, hidden, 1)
    h = relu2(torch.bmm(dense(take(w.up, flat), x.dtype), xs))  # (T*k, F, 1)
    out = torch.bmm(dense(take(w.down, flat), x.dtype), h).view(T, k, -1)  # (T, k, hidden)
    routed = torch.bmm(weights[:, None, :], out.float())[:, 0]  # (T, hidden) fp32
    return routed.to(x.dtype) + mlp(x, w.shared)


def moe(x: torch.Tensor, w: MoEWeights, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) -> (T, hidden): the weighted sum of each token's k experts, plus the shared expert."""
    if x.shape[0] == 1 or x.device.type == "meta":
        # One token (a prefill chunk of one), or the meta device, where the grouping below cannot
        # read the routing: gather (on meta no memory is used, so this is free).
        return moe_gathered(x, w, cfg)
    ids, weights = route(x, w, cfg)
    routed = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        tokens, slot = (ids == e).nonzero(as_tuple=True)
        y = linear(relu2(linear(x[tokens], w.up[e])), w.down[e])
        routed.index_add_(0, tokens, y.float() * weights[tokens, slot, None])
    return routed.to(x.dtype) + mlp(x, w.shared)
