"""Where the model runs and in what precision, decided in one place.

Default: CUDA in bfloat16 when an NVIDIA GPU is usable, else the CPU in float32
(bfloat16 matmuls on CPU are slow and fp32 keeps the CPU path an exact reference).
"""

from __future__ import annotations

import torch

from .errors import UsageError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def pick_device(device: str | None = None, dtype: str | None = None) -> tuple[torch.device, torch.dtype]:
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UsageError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("device cuda was asked for, but no CUDA GPU is usable by this PyTorch build")
    if dtype in (None, "auto"):
        return dev, torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return dev, DTYPES[dtype]
