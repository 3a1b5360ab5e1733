"""The check a CPU kernel path passes before the engine uses it: small random problems of every
format, one token and several, against quant.py's exact decoder. A path that disagrees (a compiler
or CPU fault; a path no machine of the project's could run before it shipped) is dropped for the
next one this CPU runs, and the reason is kept for the engine status."""

from __future__ import annotations

import torch

from ...checkpoint.quant import PackedFP8, PackedNVFP4
from ...units import counted
from .calls import call

ROWS, COLS = 37, 208  # odd rows; 208 inputs = 128 + 64 + 16, every tail of the NVFP4 kernel
LIMIT = 0.03  # of the output's largest magnitude: int8 activations stay well within (see tolerance())


def _problems(g: torch.Generator):
    packed = torch.randint(0, 256, (ROWS, COLS // 2), generator=g, dtype=torch.uint8)
    scale = (torch.rand(ROWS, COLS // 16, generator=g) * 400 + 1).to(torch.float8_e4m3fn)
    yield "NVFP4", PackedNVFP4(packed, scale, torch.tensor(3e-3))
    codes = torch.randint(0, 256, (ROWS, COLS), generator=g, dtype=torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0
    yield "FP8", PackedFP8(codes.view(torch.float8_e4m3fn), torch.tensor(2e-2))
    yield "BF16", torch.randn(ROWS, COLS, generator=g).to(torch.bfloat16)


def check(module) -> str | None:
    """None when the module's current path agrees with the reference, else what went wrong."""
    g = torch.Generator().manual_seed(7)
    for fmt, w in _problems(g):
        want_w = w.float() if isinstance(w, torch.Tensor) else w.dequantize(torch.float32)
        for tokens in (1, 6):  # 6: the several-token kernel's 4-token tile and a 2-token tail
            x = torch.randn(tokens, COLS, generator=g)
            want = x @ want_w.T
            for exact in (False, True):
                got = call(module, x, w, exact)
                err = ((got - want).abs().max() / want.abs().max()).item()
                if not err <= LIMIT:
                    return (f"{fmt}, {counted(tokens, 'token')}{' exact' if exact else ''}: error {err:.3g} "
                            "against the reference")
    return None


def first_good(module) -> tuple[str | None, list[str]]:
    """Keeps the module on the best path from its current one down that passes `check`. Returns
    (None, or why no path passes; "path: what failed" for each path dropped)."""
    names = list(module.isas())
    dropped = []
    for name in names[names.index(module.isa()):]:
        module.set_isa(name)
        problem = check(module)
        if problem is None:
            return None, dropped
        dropped.append(f"{name}: {problem}")
    return "no kernel path passed its self-test (" + "; ".join(dropped) + ")", dropped
