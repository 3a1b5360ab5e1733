"""Feed-forward layers: the dense relu2 MLP and the routed mixture of experts.

Two ways to run the routed experts: `moe` groups a prefill's tokens by expert (each expert's
weights read once per chunk, but the grouping reads the routing on the host), and
`moe_gathered`, the decode step's, which never leaves the device (static shapes, no host sync):

* dense experts: one grouped matmul (`torch._grouped_mm`) over the rows sorted by expert, with
  the group offsets computed on the device; it reads the chosen experts in place, no copy.
  Used where a self-test shows it works and captures (CPU; CUDA 9.x/10.x), else:
* packed NVFP4/FP8 experts on a GPU with the fused Triton kernels (matmul.py's choice): one
  kernel per projection reads the k chosen experts' packed bytes in place, the ids loaded on
  the device.
* else the chosen experts' weights gathered on the device and run as one batched matmul. Packed
  experts are gathered while packed so only k are dequantized (a dense mask over all E experts
  would dequantize and multiply every one of them; `benchmarks/count_ops.py` counts both).

A large checkpoint on the CPU keeps its experts as per-expert views of the file (load.py), which
cannot be gathered by a device index: there the decode step reads the k chosen ids on the host
and runs those experts one by one (`_by_expert`, as a prefill does). A CPU has no graph to break
and no device to wait for; on a GPU experts are always stacked, and the step stays sync-free.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checkpoint.config import ModelConfig
from .checkpoint.quant import PackedFP8, PackedNVFP4
from .checkpoint.weights import MLPWeights, MoEWeights
from .dequant import dequantize
from .matmul import experts_fused, fused_experts, linear


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


_GROUPED: dict[tuple[str, torch.dtype], bool] = {}


def grouped_experts(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether dense experts run as one grouped matmul on this device and dtype (tested once)."""
    key = (str(device), dtype)
    if key not in _GROUPED:
        _GROUPED[key] = _grouped_self_test(torch.device(device), dtype)
    return _GROUPED[key]


def _grouped_self_test(device: torch.device, dtype: torch.dtype) -> bool:
    if not hasattr(torch, "_grouped_mm"):
        return False
    if device.type == "meta":
        return True  # shapes only: the meta device checks the grouped path (packed weights check the gather)
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] not in (9, 10):
        return False  # no grouped GEMM kernels there; a fallback might read the offsets on the host
    try:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(4, 32, 64, generator=g).to(device, dtype)
        x = torch.randn(3, 64, generator=g).to(device, dtype)
        offs = torch.tensor([1, 1, 3, 3], dtype=torch.int32, device=device)  # rows 0 -> expert 0, 1-2 -> expert 2
        want = torch.cat([x[:1] @ w[0].T, x[1:] @ w[2].T]).float()

        def run():
            return torch._grouped_mm(x, w.transpose(1, 2), offs=offs)

        outs = [run()]
        if device.type == "cuda":  # it must also capture, or it would turn every graph off
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = run()
            graph.replay()
            outs.append(out)
        return all(torch.allclose(o.float(), want, rtol=2e-2, atol=2e-2) for o in outs)
    except Exception:  # unsupported here: gather instead
        return False


def _grouped(x: torch.Tensor, w: MoEWeights, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The routed experts of dense weights as one grouped matmul; rows sorted by expert."""
    T, k = ids.shape
    sorted_ids, order = ids.reshape(-1).sort()  # (T*k,)
    experts = torch.arange(w.up.shape[0], device=x.device)
    offs = torch.searchsorted(sorted_ids, experts, right=True, out_int32=True)  # (E,) where each expert's rows end
    token = order // k
    rows = x.index_select(0, token)  # (T*k, hidden)
    h = relu2(torch._grouped_mm(rows, w.up.transpose(1, 2), offs=offs))  # (T*k, F)
    out = torch._grouped_mm(h, w.down.transpose(1, 2), offs=offs).float()  # (T*k, hidden)
    row_weights = weights.reshape(-1).index_select(0, order)  # (T*k,)
    if T == 1:
        return row_weights[None] @ out  # (1, hidden) fp32
    return torch.zeros(T, out.shape[1], device=x.device).index_add_(0, token, out * row_weights[:, None])


def moe_gathered(x: torch.Tensor, w: MoEWeights, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) -> (T, hidden), each token's k experts run on the device without host sync."""
    ids, weights = route(x, w, cfg)  # (T, k)
    if isinstance(w.up, list):  # per-expert views of the file (a large checkpoint on the CPU): read the ids
        return _by_expert(x, w, ids, weights) + mlp(x, w.shared)
    if isinstance(w.up, torch.Tensor) and grouped_experts(x.device, x.dtype):
        return _grouped(x, w, ids, weights).to(x.dtype) + mlp(x, w.shared)
    T, k = ids.shape
    if experts_fused(w.up):  # packed, on the fused kernels (CUDA): read in place, ids stay on the device
        h = relu2(fused_experts(x, w.up, ids))  # (T, k, F)
        out = fused_experts(h, w.down, ids)  # (T, k, hidden)
    else:
        flat = ids.reshape(-1)
        xs = x[:, None, :].expand(T, k, x.shape[1]).reshape(T * k, -1, 1)  # (T*k, hidden, 1)
        h = relu2(torch.bmm(_dense(take(w.up, flat), x.dtype), xs))  # (T*k, F, 1)
        out = torch.bmm(_dense(take(w.down, flat), x.dtype), h).view(T, k, -1)  # (T, k, hidden)
    routed = torch.bmm(weights[:, None, :], out.float())[:, 0]  # (T, hidden) fp32
    return routed.to(x.dtype) + mlp(x, w.shared)


def moe(x: torch.Tensor, w: MoEWeights, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) -> (T, hidden): the weighted sum of each token's k experts, plus the shared expert."""
    if x.shape[0] == 1 or x.device.type == "meta":
        # One token (a prefill chunk of one), or the meta device, where the grouping below cannot
        # read the routing: gather (on meta no memory is used, so this is free).
        return moe_gathered(x, w, cfg)
    ids, weights = route(x, w, cfg)
    return _by_expert(x, w, ids, weights) + mlp(x, w.shared)


def _by_expert(x: torch.Tensor, w: MoEWeights, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The routed experts, each chosen expert run once on its tokens (its weights read once); reads
    the routing on the host."""
    routed = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        tokens, slot = (ids == e).nonzero(as_tuple=True)
        y = linear(relu2(linear(x[tokens], w.up[e])), w.down[e])
        routed.index_add_(0, tokens, y.float() * weights[tokens, slot, None])
    return routed.to(x.dtype)


def _dense(w, dtype: torch.dtype) -> torch.Tensor:
    """Gathered experts as a plain tensor: packed ones decoded exactly through the byte tables."""
    return w if isinstance(w, torch.Tensor) else dequantize(w, dtype)
