"""Where the model runs and in what precision, decided in one place.

Default: CUDA in bfloat16 when an NVIDIA GPU is usable, else the CPU in float32 (fp32 keeps the
CPU path an exact reference), except for a large checkpoint whose dense weights are stored in BF16
on a CPU that multiplies BF16 at speed: native BF16 matmuls (AVX512-BF16/AMX), or the project's CPU
kernels (runtime/kernels/cpu/, whose BF16 matvec and panel product read BF16 weights as stored).
It runs in bfloat16, so those weights stay as stored, views of the file, instead of fp32 copies
twice their size that every token would read. On a CPU without either such a checkpoint runs in
float32 but keeps those weights as stored all the same (`keeps_narrow`): each matmul widens them
block by block (widen.py), which is exact.
"""

from __future__ import annotations

import torch

from .errors import UsageError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


CPU_FP32_LIMIT = 1 << 30  # bytes the dense weights may take as fp32 copies before the CPU keeps BF16


def cpu_runs_bf16() -> bool:
    """Whether this CPU has native BF16 matmuls (oneDNN's check for AVX512-BF16 or AMX)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def keeps_narrow(device: torch.device, dtype: torch.dtype, stored_bf16_bytes: int) -> bool:
    """Whether linears and embeddings stored in BF16/FP16 stay as stored under this compute dtype
    (views of the file) instead of being copied into it: a large checkpoint computed in fp32 on the CPU."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and 2 * stored_bf16_bytes > CPU_FP32_LIMIT


def cpu_keeps_bf16() -> bool:
    """Whether BF16 weights can stay BF16 on this CPU at speed (see the module doc)."""
    if cpu_runs_bf16():
        return True
    from .kernels import unavailable  # the CPU kernels' library loads on first use

    return unavailable("cpu", torch.device("cpu")) is None


def pick_device(device: str | None = None, dtype: str | None = None, stored_bf16_bytes: int = 0
                ) -> tuple[torch.device, torch.dtype]:
    """The device and compute dtype. `stored_bf16_bytes`: the checkpoint's dense weights stored in BF16
    (for the CPU's automatic choice, see the module doc)."""
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UsageError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("device cuda was asked for, but no CUDA GPU is usable by this PyTorch build")
    if dtype in (None, "auto"):
        if dev.type == "cpu":
            large = 2 * stored_bf16_bytes > CPU_FP32_LIMIT
            return dev, torch.bfloat16 if large and cpu_keeps_bf16() else torch.float32
        return dev, torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return dev, DTYPES[dtype]
