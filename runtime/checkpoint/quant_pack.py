"""Quantizing to NVFP4 and FP8 (the inverse of quant.py's dequantize): used for activations on
the native FP4 path, for the kernels' self-tests, and by tests. Checkpoints themselves are
quantized by ModelOpt (training/export_quantized.py)."""

from __future__ import annotations

import torch

from .quant import BLOCK, PackedFP8, PackedNVFP4

FP8_MAX, E2M1_MAX = 448.0, 6.0
# Midpoints between neighbouring E2M1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6.
MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
ROUND_UP_AT = torch.tensor([0.75, 1.75, 3.5])  # ties that round half to even go up here


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 code (ties to even) for values already scaled into [-6, 6]; sign in bit 3."""
    mag = x.abs().clamp(max=E2M1_MAX)
    code = torch.bucketize(mag, MIDPOINTS.to(x.device), right=False)
    code = code + torch.isin(mag, ROUND_UP_AT.to(x.device)).to(code.dtype)
    return (code | ((x < 0).to(code.dtype) << 3)).to(torch.uint8)


def pack_nvfp4(w: torch.Tensor) -> PackedNVFP4:
    """Two-level NVFP4: an fp32 global scale, an E4M3 scale per 16 values, E2M1 codes."""
    w = w.float()
    if w.shape[-1] % BLOCK:
        raise ValueError(f"NVFP4 needs the last dimension to be a multiple of {BLOCK}")
    scale2 = (w.abs().amax() / (E2M1_MAX * FP8_MAX)).clamp(min=1e-12)
    blocks = w.unflatten(-1, (-1, BLOCK))  # (..., in/16, 16)
    scale = blocks.abs().amax(-1) / (E2M1_MAX * scale2)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale).clamp(2 ** -9, FP8_MAX).to(torch.float8_e4m3fn)
    codes = e2m1_codes((blocks / (scale.float() * scale2)[..., None]).flatten(-2))
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return PackedNVFP4(packed, scale, scale2)


def pack_fp8(w: torch.Tensor) -> PackedFP8:
    w = w.float()
    scale = (w.abs().amax() / FP8_MAX).clamp(min=1e-12)
    return PackedFP8((w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale)


def swizzle_block_scales(scale: torch.Tensor) -> torch.Tensor:
    """Block scales (rows, cols) in the tiled layout block-scaled matmuls read: 128-row by
    4-column tiles, each stored as 32 rows of (4 row-quarters x 4 columns)."""
    rows, cols = scale.shape
    R, C = -(-rows // 128), -(-cols // 4)
    padded = torch.zeros(R * 128, C * 4, dtype=scale.dtype, device=scale.device)
    padded[:rows, :cols] = scale
    tiles = padded.view(R, 128, C, 4).permute(0, 2, 1, 3)  # (R, C, 128, 4)
    tiles = tiles.reshape(R, C, 4, 32, 4).transpose(2, 3)  # (R, C, 32, 4, 4): row 32*i + j -> [j, i]
    return tiles.reshape(-1)
