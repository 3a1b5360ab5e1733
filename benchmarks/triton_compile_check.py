"""Compiles every fused Triton kernel variant the engine launches for RTX 30/40/50 and Hopper targets,
without a GPU (Triton's compiler and its bundled ptxas), and prints what the GPU would run: registers,
spills and the width of the global loads (16-byte vector loads or cp.async copies of the weight bytes).

    python benchmarks/triton_compile_check.py [--targets 86,89,90,120] [--json]

The interpreter (how the tests run the kernels) does not compile: this is what catches a kernel that
only the compiler refuses (a plain global in a kernel, an op with no lowering for a target). Run it
without TRITON_INTERPRET in the environment. Prints one line (or JSON object) per (target, kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from runtime.kernels import fused_kernels as fk  # noqa: E402

TARGETS = {86: "RTX 30 (Ampere)", 89: "RTX 40 (Ada)", 90: "H100/H200 (Hopper)", 120: "RTX 50 (Blackwell)"}
POINTERS = {"x_ptr": "*bf16", "codes_ptr": "*u8", "scale_ptr": "*u8", "w_ptr": "*u8", "scale2_ptr": "*fp32",
            "ids_ptr": "*i64", "out_ptr": "*bf16"}
# Arguments that are multiples of 16 at the 30B-A3B's shapes (Triton specializes on that at launch):
# the base pointers, code bytes a row (1344, 928, 1856, 2048) and the splits (whole loop steps).
ALIGNED = {"x_ptr", "codes_ptr", "scale_ptr", "w_ptr", "out_ptr", "KB", "K", "stride_x", "stride_cn", "stride_wn",
           "stride_ce", "stride_we", "split_bytes", "split_cols"}
# (name, kernel, constexprs, activation dtype): the variants plan_rows/plan_dot launch on a GPU.
VARIANTS = [
    ("nvfp4 linear, 1 token", fk.nvfp4_rows, dict(ACTIVE=0, X_PER_ROW=False, BLOCK_N=16, BB=256, SPLIT=1), "bf16"),
    ("nvfp4 linear, 1 token, split K", fk.nvfp4_rows, dict(ACTIVE=0, X_PER_ROW=False, BLOCK_N=16, BB=256, SPLIT=2),
     "bf16"),
    ("nvfp4 experts up", fk.nvfp4_rows, dict(ACTIVE=6, X_PER_ROW=False, BLOCK_N=16, BB=256, SPLIT=1), "bf16"),
    ("nvfp4 experts down", fk.nvfp4_rows, dict(ACTIVE=6, X_PER_ROW=True, BLOCK_N=16, BB=256, SPLIT=1), "bf16"),
    ("nvfp4 linear, fp32", fk.nvfp4_rows, dict(ACTIVE=0, X_PER_ROW=False, BLOCK_N=16, BB=256, SPLIT=1), "fp32"),
    ("nvfp4 2-16 tokens", fk.nvfp4_dot, dict(BLOCK_T=16, BLOCK_N=32, BB=128, SPLIT=1, F32_DOT=False), "bf16"),
    ("nvfp4 2-16 tokens, fp16", fk.nvfp4_dot, dict(BLOCK_T=16, BLOCK_N=32, BB=128, SPLIT=2, F32_DOT=False), "fp16"),
    ("fp8 linear, 1 token", fk.fp8_rows, dict(ACTIVE=0, X_PER_ROW=False, BLOCK_N=16, BK=256, SPLIT=1), "bf16"),
    ("fp8 experts down", fk.fp8_rows, dict(ACTIVE=6, X_PER_ROW=True, BLOCK_N=16, BK=256, SPLIT=1), "bf16"),
    ("fp8 2-16 tokens", fk.fp8_dot, dict(BLOCK_T=16, BLOCK_N=32, BK=128, SPLIT=1, F32_DOT=False), "bf16"),
]


def compile_variant(kernel, consts: dict, dtype: str, cc: int):
    types = {**POINTERS, "x_ptr": f"*{dtype}", "out_ptr": "*fp32" if consts.get("SPLIT", 1) > 1 else f"*{dtype}"}
    signature = {a: "constexpr" if a in consts else types.get(a, "i32") for a in kernel.arg_names}
    attrs = {(kernel.arg_names.index(a),): [["tt.divisibility", 16]] for a in kernel.arg_names if a in ALIGNED}
    t0 = time.perf_counter()
    compiled = triton.compile(ASTSource(kernel, signature, consts, attrs), target=GPUTarget("cuda", cc, 32),
                              options={"num_warps": 4})
    return compiled, time.perf_counter() - t0


def ptxas_info(ptx: str, cc: int) -> dict:
    """Registers and spills from the ptxas Triton bundles (absent where it cannot target `cc`)."""
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    ptxas = bin_dir / ("ptxas-blackwell" if cc >= 100 and (bin_dir / "ptxas-blackwell").exists() else "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        arch = f"sm_{cc}a" if cc >= 90 else f"sm_{cc}"
        out = subprocess.run([str(ptxas), "-v", f"--gpu-name={arch}", f.name, "-o", os.devnull],
                             capture_output=True, text=True, timeout=120).stderr
    finally:
        os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", out)
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", out)
    if regs is None:
        return {"ptxas": out.strip().splitlines()[-1][:160] if out.strip() else "no output"}
    return {"registers": int(regs.group(1)), "spill_bytes": sum(map(int, spills))}


def loads(ptx: str) -> dict:
    """Global loads by width: 16-byte vectors (ld.global.v4.b32) and 16-byte cp.async copies."""
    kinds = Counter(re.findall(r"ld\.global(?:\.[\w]+)*", ptx))
    return {"ld_v4_b32": sum(n for k, n in kinds.items() if k.endswith("v4.b32")),
            "cp_async_16": len(re.findall(r"cp\.async\.\w+\.shared\.global \[[^]]*\], \[[^]]*\], 0x10", ptx)),
            "narrow": sum(n for k, n in kinds.items() if not k.endswith("v4.b32"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="86,89,90,120", help="compute capabilities, e.g. 86,120")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0").lower() not in ("", "0", "false", "off"):
        raise SystemExit("unset TRITON_INTERPRET: the interpreter does not compile")
    failed = 0
    for cc in (int(t) for t in args.targets.split(",")):
        for name, kernel, consts, dtype in VARIANTS:
            row = {"target": f"sm_{cc}", "card": TARGETS.get(cc, ""), "kernel": name, "triton": triton.__version__}
            try:
                compiled, seconds = compile_variant(kernel, consts, dtype, cc)
                ptx = compiled.asm["ptx"]
                row.update(ok=True, compile_s=round(seconds, 2), **loads(ptx), **ptxas_info(ptx, cc))
            except Exception as e:  # a variant that does not compile: the reason, and go on
                failed += 1
                row.update(ok=False, error=f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")
            print(json.dumps(row) if args.json else _line(row), flush=True)
    return 1 if failed else 0


def _line(r: dict) -> str:
    if not r["ok"]:
        return f"{r['target']} {r['kernel']:<34} FAILED {r['error']}"
    regs = f"{r['registers']} registers, {r['spill_bytes']} B spilled" if "registers" in r else r.get("ptxas", "")
    return (f"{r['target']} {r['kernel']:<34} {r['compile_s']:5.1f} s  16-byte loads {r['ld_v4_b32']} + "
            f"cp.async {r['cp_async_16']}, narrow {r['narrow']}  {regs}")


if __name__ == "__main__":
    sys.exit(main())
