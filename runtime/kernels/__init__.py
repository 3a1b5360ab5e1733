"""Kernels that multiply activations by packed weights (NVFP4, FP8) without unpacking them whole.

Backends share one small interface, so `matmul.py` and `moe.py` pick one per device and
`python -m runtime kernel-check` (kernel_check.py) measures any of them against the exact reference:

    torch   plain PyTorch (dequant.py): weights decoded through byte tables, then a matmul.
            Runs everywhere; the fallback whenever another backend is unavailable.
    cpu     the project's C++ extension: codes decoded in registers (CPUs where it was built).
    triton  fused dequantize-and-multiply kernels in Triton (CUDA; on CPU tensors in Triton's
            interpreter, TRITON_INTERPRET=1, which is how the tests run them without a GPU).

A backend is a module with:

    unavailable(device: torch.device) -> str | None
        None when it runs on `device`, else one line saying why not (the engine status shows it).
    linear(x, w) -> Tensor
        x (T, K) bf16/fp16/fp32; w a PackedNVFP4 or PackedFP8 of logical shape (N, K).
        Returns x @ w.T, (T, N) in x.dtype, accumulated in fp32.
    experts(x, w, ids) -> Tensor
        w a stacked packed weight (E, N, K); ids (T, k) integer expert ids on x's device;
        x (T, K), one input for all k chosen experts (an up projection), or (T, k, K), one per
        chosen expert (a down projection). Returns out[t, j] = x[t(, j)] @ w[ids[t, j]].T as
        (T, k, N) in x.dtype, reading only the chosen experts' bytes.
    tolerance(fmt: str, dtype: torch.dtype) -> float
        the largest max_rel_err (kernel_check.py's definition) the backend promises against the
        exact reference for weights of format `fmt` and activations of `dtype`.
"""

from __future__ import annotations

import importlib
import types

import torch

BACKENDS = {"torch": "runtime.kernels.torch_path", "cpu": "runtime.kernels.cpu",
            "triton": "runtime.kernels.triton_fused"}


def backend(name: str) -> types.ModuleType:
    """The backend module called `name` (imported on first use: the C++ and Triton ones are heavy)."""
    return importlib.import_module(BACKENDS[name])


def unavailable(name: str, device: torch.device) -> str | None:
    """Why backend `name` cannot run on `device`, or None when it can (a backend that fails to import
    is unavailable, with the import's error as the reason)."""
    try:
        module = backend(name)
    except ImportError as e:
        return f"{name} kernels cannot be imported ({e})"
    return module.unavailable(torch.device(device))
