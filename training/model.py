"""A batched, differentiable forward pass for training, over the runtime's own weight layout.

Training holds the parent's weights as leaf tensors in the runtime's internal layout
(runtime/weights.py), so a submodel is `submodel_views(...)` of them: gradients from every
submodel land in the one shared copy, exactly as the nested models share weights at
inference. The mixers reuse the runtime's pieces (the chunked scan, the gated norm, MoE
routing); only the batch dimension is new here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from runtime.checkpoint.config import ATTENTION, MAMBA, MLP, ModelConfig
from runtime.checkpoint.submodels import Submodel
from runtime.checkpoint.weights import AttentionWeights, MambaWeights, ModelWeights, submodel_views
from runtime.mamba import gated_rms_norm, ssm_chunked
from runtime.model import ElasticModel, rms_norm
from runtime.moe import mlp, moe


class TrainableModel:
    """The parent's weights as trainable leaves, plus `A_log` (the runtime stores -exp(A_log))."""

    def __init__(self, cfg: ModelConfig, weights: ModelWeights, submodels: dict[str, Submodel]):
        self.cfg, self.weights, self.submodels = cfg, weights, submodels
        self.a_logs = {}
        for i, layer in enumerate(weights.layers):
            if layer.kind == MAMBA:
                self.a_logs[i] = torch.log(-layer.mixer.A).detach().clone().requires_grad_(True)
        for t in self.parameters():
            t.requires_grad_(True)

    @classmethod
    def from_checkpoint(cls, folder) -> "TrainableModel":
        model = ElasticModel.load(folder, device="cpu", dtype="float32")
        for t in model.weights.tensors():
            t.data = t.data.clone()  # own the memory: no views into the file reader's buffers
        return cls(model.config, model.weights, model.submodels)

    def parameters(self) -> list[torch.Tensor]:
        params = [t for t in self.weights.tensors() if t is not None]
        mamba_A = {id(layer.mixer.A) for layer in self.weights.layers if layer.kind == MAMBA}
        return [t for t in params if id(t) not in mamba_A] + list(self.a_logs.values())

    def views(self, name: str) -> ModelWeights:
        for i, a_log in self.a_logs.items():
            self.weights.layers[i].mixer.A = -torch.exp(a_log)
        return submodel_views(self.cfg, self.weights, self.submodels[name])

    def forward(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, vocab) of submodel `name`."""
        return forward(self.cfg, self.views(name), ids)


def forward(cfg: ModelConfig, w: ModelWeights, ids: torch.Tensor) -> torch.Tensor:
    x = F.embedding(ids, w.embed)  # (B, T, hidden)
    for layer in w.layers:
        y = rms_norm(x, layer.norm, cfg.layer_norm_epsilon)
        if layer.kind == MAMBA:
            y = mamba_batched(y, layer.mixer, cfg)
        elif layer.kind == ATTENTION:
            y = attention_batched(y, layer.mixer, cfg)
        elif layer.kind == MLP:
            y = mlp(y, layer.mixer)
        else:
            y = moe(y.reshape(-1, y.shape[-1]), layer.mixer, cfg).view_as(y)
        x = x + y
    return F.linear(rms_norm(x, w.norm_f, cfg.layer_norm_epsilon), w.lm_head)


def mamba_batched(x: torch.Tensor, w: MambaWeights, cfg: ModelConfig, record=None) -> torch.Tensor:
    """`record`, if given, receives the gated-norm output (B*T, H*P) (for importance ranking)."""
    Bsz, T, _ = x.shape
    G, P, N, K = cfg.n_groups, cfg.mamba_head_dim, cfg.ssm_state_size, cfg.conv_kernel
    H, gn = w.A.shape[0], G * N
    proj = F.linear(x, w.in_proj, w.in_bias)
    per_head = proj[..., 2 * gn:].view(Bsz, T, H, 2 * P + 1)
    z, dt = per_head[..., :P], per_head[..., 2 * P]
    conv_in = torch.cat([proj[..., :2 * gn], per_head[..., P:2 * P].reshape(Bsz, T, H * P)], dim=-1)  # (B, T, C)
    conv = F.conv1d(F.pad(conv_in.transpose(1, 2), (K - 1, 0)), w.conv_w[:, None, :], w.conv_b,
                    groups=w.conv_w.shape[0])
    conv = F.silu(conv).transpose(1, 2)  # (B, T, C)
    Bm = conv[..., :gn].reshape(Bsz, T, G, N).repeat(1, 1, H // G, 1)  # head i -> group i % G
    Cm = conv[..., gn:2 * gn].reshape(Bsz, T, G, N).repeat(1, 1, H // G, 1)
    xs = conv[..., 2 * gn:].reshape(Bsz, T, H, P)
    dt = F.softplus(dt + w.dt_bias).clamp(min=cfg.time_step_min)  # (B, T, H)

    # Fold the batch into the head axis: sequences are independent, like heads.
    def fold(t):  # (B, T, H, ...) -> (T, B*H, ...)
        return t.transpose(0, 1).reshape(T, Bsz * H, *t.shape[3:])

    state = torch.zeros(Bsz * H, P, N, dtype=torch.float32)
    y = ssm_chunked(fold(xs), fold(dt), w.A.repeat(Bsz), fold(Bm), fold(Cm), w.D.repeat(Bsz), state, cfg.chunk_size)
    y = y.view(T, Bsz, H, P).transpose(0, 1).reshape(Bsz * T, H, P)
    y = gated_rms_norm(y, z.reshape(Bsz * T, H, P), w.norm_w, G, cfg.layer_norm_epsilon)
    if record is not None:
        record(y)
    return F.linear(y.view(Bsz, T, H * P), w.out_proj, w.out_bias)


def attention_batched(x: torch.Tensor, w: AttentionWeights, cfg: ModelConfig) -> torch.Tensor:
    Bsz, T, _ = x.shape
    D = cfg.head_dim
    q = F.linear(x, w.q).view(Bsz, T, -1, D).transpose(1, 2)  # (B, heads, T, D)
    k = F.linear(x, w.k).view(Bsz, T, -1, D).transpose(1, 2)
    v = F.linear(x, w.v).view(Bsz, T, -1, D).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=D ** -0.5, enable_gqa=True)
    return F.linear(out.transpose(1, 2).reshape(Bsz, T, -1), w.o)


# ----------------------------------------------------------------------------- hub layout

def _hub_order(t: torch.Tensor, groups: int, unit: int) -> torch.Tensor:
    """Inverse of weights._rank_major: rows ordered head i = j*G + g -> head h = g*Q + j."""
    q = t.shape[0] // (groups * unit)
    return t.reshape(q, groups, unit, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def hub_tensors(cfg: ModelConfig, w: ModelWeights, a_logs: dict[int, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parent's weights in the hub layout that transformers and `ElasticModel.load` read."""
    G, P, gn = cfg.n_groups, cfg.mamba_head_dim, cfg.n_groups * cfg.ssm_state_size
    out = {"backbone.embeddings.weight": w.embed, "backbone.norm_f.weight": w.norm_f, "lm_head.weight": w.lm_head}
    for i, layer in enumerate(w.layers):
        p, m = f"backbone.layers.{i}.", f"backbone.layers.{i}.mixer."
        out[p + "norm.weight"] = layer.norm
        x = layer.mixer
        if layer.kind == MAMBA:
            H = x.A.shape[0]

            def in_rows(t):
                per_head = t[2 * gn:].reshape(H, 2 * P + 1, *t.shape[1:])
                z = _hub_order(per_head[:, :P].reshape(H * P, *t.shape[1:]), G, P)
                xs = _hub_order(per_head[:, P:2 * P].reshape(H * P, *t.shape[1:]), G, P)
                dt = _hub_order(per_head[:, 2 * P], G, 1)
                return torch.cat([z, xs, t[:2 * gn], dt])

            out[m + "in_proj.weight"] = in_rows(x.in_proj)
            conv = torch.cat([_hub_order(x.conv_w[2 * gn:], G, P), x.conv_w[:2 * gn]])
            out[m + "conv1d.weight"] = conv[:, None, :]
            if x.conv_b is not None:
                out[m + "conv1d.bias"] = torch.cat([_hub_order(x.conv_b[2 * gn:], G, P), x.conv_b[:2 * gn]])
            out[m + "A_log"] = _hub_order(a_logs[i], G, 1)
            out[m + "D"] = _hub_order(x.D, G, 1)
            out[m + "dt_bias"] = _hub_order(x.dt_bias, G, 1)
            out[m + "norm.weight"] = _hub_order(x.norm_w, G, P)
            out[m + "out_proj.weight"] = _hub_order(x.out_proj.T, G, P).T
            if x.in_bias is not None:
                out[m + "in_proj.bias"] = in_rows(x.in_bias)
                out[m + "out_proj.bias"] = x.out_bias
        elif layer.kind == ATTENTION:
            out.update({m + "q_proj.weight": x.q, m + "k_proj.weight": x.k, m + "v_proj.weight": x.v,
                        m + "o_proj.weight": x.o})
        elif layer.kind == MLP:
            out.update(_mlp_tensors(m, x))
        else:
            out[m + "gate.weight"] = x.router
            out[m + "gate.e_score_correction_bias"] = x.router_bias
            for k in range(x.up.shape[0]):
                out[m + f"experts.{k}.up_proj.weight"] = x.up[k]
                out[m + f"experts.{k}.down_proj.weight"] = x.down[k]
            out.update(_mlp_tensors(m + "shared_experts.", x.shared))
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def _mlp_tensors(m, x):
    out = {m + "up_proj.weight": x.up, m + "down_proj.weight": x.down}
    if x.up_bias is not None:
        out.update({m + "up_proj.bias": x.up_bias, m + "down_proj.bias": x.down_bias})
    return out


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="elastic-train-"))
