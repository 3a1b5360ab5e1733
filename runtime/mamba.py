"""The Mamba-2 mixer: in_proj, causal conv, selective state space scan, gated RMSNorm, out_proj.

Two scans compute the same thing: `ssm_step` advances the recurrent state by one token
(the obviously-right reference the tests compare against), and `ssm_chunked` processes a
whole prompt in chunks with the SSD block decomposition (prefill). `mamba_step` is the decode
step: one token, static shapes, the conv window and SSM state updated in place, no host sync
(it is what a CUDA graph replays).
Heads are in the rank-major order described in weights.py: head i reads group i % G, so the
heads viewed as (q, G) put group g in column g and B, C broadcast over q without copies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .cache import MambaState
from .checkpoint.config import ModelConfig
from .checkpoint.weights import MambaWeights
from .kernels import backend, unavailable
from .matmul import linear


def mamba_mixer(x: torch.Tensor, w: MambaWeights, state: MambaState, cfg: ModelConfig) -> torch.Tensor:
    """x: (T, hidden) -> (T, hidden), advancing `state` by T tokens."""
    T = x.shape[0]
    G, P, N = cfg.n_groups, cfg.mamba_head_dim, cfg.ssm_state_size
    H, gn = w.A.shape[0], cfg.n_groups * cfg.ssm_state_size

    proj = linear(x, w.in_proj, w.in_bias)  # (T, 2GN + H*(2P+1))
    per_head = proj[:, 2 * gn:].view(T, H, 2 * P + 1)
    z, dt = per_head[..., :P], per_head[..., 2 * P]  # (T, H, P), (T, H)
    conv_in = torch.cat([proj[:, :2 * gn], per_head[..., P:2 * P].reshape(T, H * P)], dim=1)  # (T, 2GN + H*P)
    conv_out = causal_conv(conv_in, w.conv_w, w.conv_b, state.conv)

    B = conv_out[:, :gn].float().view(T, G, N).repeat(1, H // G, 1)  # (T, H, N), head i -> group i % G
    C = conv_out[:, gn:2 * gn].float().view(T, G, N).repeat(1, H // G, 1)
    xs = conv_out[:, 2 * gn:].float().view(T, H, P)
    # transformers clamps dt at time_step_min in its prefill scan only; we clamp in both scans
    # so that decode and prefill agree (they differ only where softplus(dt) < time_step_min).
    dt = F.softplus(dt.float() + w.dt_bias).clamp(min=cfg.time_step_min)  # (T, H)

    if T == 1:
        y = ssm_step(xs[0], dt[0], w.A, B[0], C[0], w.D, state.ssm)[None]
    else:
        y = ssm_chunked(xs, dt, w.A, B, C, w.D, state.ssm, cfg.chunk_size)
    y = gated_rms_norm(y, z, w.norm_w, G, cfg.layer_norm_epsilon)  # (T, H*P)
    return linear(y.to(x.dtype), w.out_proj, w.out_bias)


def mamba_step(x: torch.Tensor, w: MambaWeights, state: MambaState, cfg: ModelConfig) -> torch.Tensor:
    """One token: x (1, hidden) -> (1, hidden), advancing `state` in place."""
    G, P, N = cfg.n_groups, cfg.mamba_head_dim, cfg.ssm_state_size
    H, gn = w.A.shape[0], cfg.n_groups * cfg.ssm_state_size
    q = H // G
    proj = linear(x, w.in_proj, w.in_bias).view(-1)  # (2GN + H*(2P+1),): [B, C, per head (z, x, dt)]
    per_head = proj[2 * gn:].view(H, 2 * P + 1)
    conv_in = torch.cat([proj[:2 * gn], per_head[:, P:2 * P].reshape(H * P)])  # (C,): [B, C, per head x]
    window = torch.cat([state.conv, conv_in.view(-1, 1)], dim=1)  # (C, K)
    state.conv.copy_(window[:, 1:])
    conv = (window * w.conv_w).sum(-1)
    if w.conv_b is not None:
        conv = conv + w.conv_b
    u = _fp32(F.silu(conv))  # (C,)
    B, C = u[:gn].view(G, 1, N), u[gn:2 * gn].view(G, 1, N)  # group g's B and C serve heads j*G + g
    xs = u[2 * gn:].view(q, G, P)
    dt = F.softplus(_fp32(per_head[:, 2 * P]) + w.dt_bias).clamp(min=cfg.time_step_min).view(q, G, 1)
    if _fused_state(state.ssm):  # one pass over the state (runtime/kernels/cpu/csrc/ops.cpp)
        y = backend("cpu").ssm_step(state.ssm, xs, dt, w.A, B, C, w.D).view(q, G, P)
    else:
        ssm = state.ssm.view(q, G, P, N)
        ssm.mul_(torch.exp(dt * w.A.view(q, G, 1)).unsqueeze(-1))
        ssm.add_((dt * xs).unsqueeze(-1) * B)
        y = (ssm * C).sum(-1) + w.D.view(q, G, 1) * xs  # (q, G, P)
    g = y * F.silu(_fp32(per_head[:, :P]).view(q, G, P))  # gated RMSNorm within each group
    g = g * torch.rsqrt(g.pow(2).mean(dim=(0, 2), keepdim=True) + cfg.layer_norm_epsilon)
    out = w.norm_w * g.view(1, H * P)
    return linear(out if out.dtype == x.dtype else out.to(x.dtype), w.out_proj, w.out_bias)


def _fused_state(ssm: torch.Tensor) -> bool:
    """Whether the CPU kernels step this state: a CPU one, where they are built."""
    return ssm.device.type == "cpu" and unavailable("cpu", ssm.device) is None


def _fp32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.float()


def causal_conv(u: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, window: torch.Tensor) -> torch.Tensor:
    """Depthwise causal conv + SiLU over u (T, C), continuing from `window` (C, K-1), which is updated.
    Returns fp32 (T, C). The K taps (4) are K shifted multiply-adds in fp32: PyTorch's grouped
    conv1d has no fast CPU kernel for BF16 (140 ms a layer for 16 tokens at the real width)."""
    full = torch.cat([window, u.T.to(window.dtype)], dim=1)  # (C, K-1+T)
    window.copy_(full[:, full.shape[1] - window.shape[1]:])
    T, K = u.shape[0], weight.shape[1]
    f, w = full.float(), weight.float()
    out = f[:, :T] * w[:, :1]  # (C, T)
    for k in range(1, K):
        out.addcmul_(f[:, k:k + T], w[:, k:k + 1])
    if bias is not None:
        out += bias.float()[:, None]
    return F.silu(out.T)


def ssm_step(x, dt, A, B, C, D, state):
    """One recurrent step. x (H, P), dt (H,), A (H,), B and C (H, N), D (H,), state (H, P, N) fp32."""
    decay = torch.exp(dt * A)  # (H,)
    state.mul_(decay[:, None, None]).add_((dt[:, None] * x)[:, :, None] * B[:, None, :])
    return torch.einsum("hpn,hn->hp", state, C) + D[:, None] * x  # (H, P)


def segsum(v: torch.Tensor) -> torch.Tensor:
    """out[..., i, j] = v[j+1] + ... + v[i] for i >= j, else -inf. Cumsum of a masked matrix:
    stable, unlike differences of one long cumsum."""
    L = v.shape[-1]
    m = v[..., :, None].expand(*v.shape, L)  # m[..., k, j] = v[k]
    m = m.masked_fill(~torch.ones(L, L, dtype=torch.bool, device=v.device).tril(-1), 0)
    out = m.cumsum(dim=-2)
    return out.masked_fill(~torch.ones(L, L, dtype=torch.bool, device=v.device).tril(0), float("-inf"))


def ssm_chunked(x, dt, A, B, C, D, state, chunk: int):
    """The same recurrence as `ssm_step` over T tokens, starting from and updating `state`.

    x (T, H, P), dt (T, H), A (H,), B and C (T, H, N), D (H,), state (H, P, N); all fp32.
    Within a chunk the output is a masked 'attention' C.B weighted by decays; across chunks
    only the states at chunk ends are carried.
    """
    T, H, P = x.shape
    chunk = min(chunk, T)  # the result does not depend on it: a short prompt is one chunk, unpadded
    pad = (-T) % chunk
    n = (T + pad) // chunk
    xd = F.pad(x * dt[..., None], (0, 0, 0, 0, 0, pad)).view(n, chunk, H, P)  # discretised input
    a = F.pad(dt * A, (0, 0, 0, pad)).view(n, chunk, H).permute(2, 0, 1)  # (H, n, L) log-decays
    Bc = F.pad(B, (0, 0, 0, 0, 0, pad)).view(n, chunk, H, -1)  # (n, L, H, N)
    Cc = F.pad(C, (0, 0, 0, 0, 0, pad)).view(n, chunk, H, -1)
    a_cum = a.cumsum(dim=-1)  # (H, n, L)

    # 1. Inside each chunk: y[l] = sum_{s<=l} (C[l].B[s]) exp(a_cum[l] - a_cum[s]) xd[s].
    scores = torch.einsum("clhn,cshn->hcls", Cc, Bc) * torch.exp(segsum(a))  # (H, n, L, L)
    y = torch.einsum("hcls,cshp->clhp", scores, xd)  # (n, L, H, P)

    # 2. The state each chunk leaves at its end, from its own tokens.
    to_end = torch.exp(a_cum[..., -1:] - a_cum)  # (H, n, L)
    own = torch.einsum("clhn,clhp->chpn", Bc * to_end.permute(1, 2, 0)[..., None], xd)  # (n, H, P, N)

    # 3. Carry states across chunks, starting from the cached state: starts[z] = state entering chunk z.
    states = torch.cat([state[None], own])  # (n+1, H, P, N)
    carry = torch.exp(segsum(F.pad(a_cum[..., -1], (1, 0))))  # (H, n+1, n+1)
    starts = torch.einsum("hzy,yhpn->zhpn", carry, states)  # (n+1, H, P, N)

    # 4. What each chunk's entering state contributes to its outputs.
    y = y + torch.einsum("clhn,chpn->clhp", Cc, starts[:-1]) * torch.exp(a_cum).permute(1, 2, 0)[..., None]
    state.copy_(starts[-1])
    return y.reshape(n * chunk, H, P)[:T] + D[:, None] * x


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """RMSNorm of y * silu(z) within each of the G groups (head i is in group i % G). y, z: (T, H, P)."""
    T, H, P = y.shape
    g = (y.float() * F.silu(z.float())).view(T, H // groups, groups, P)  # (T, q, G, P)
    g = g * torch.rsqrt(g.pow(2).mean(dim=(1, 3), keepdim=True) + eps)
    return weight.float() * g.reshape(T, H * P)
