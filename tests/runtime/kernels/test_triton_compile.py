"""The fused kernels compile for real GPUs, not only in the interpreter (which never compiles: it
accepted a plain global the compiler refuses): benchmarks/triton_compile_check.py, in a process
without TRITON_INTERPRET, for an RTX 30 and an RTX 50 target, with no spills and 16-byte loads."""

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT


@pytest.mark.slow
def test_every_variant_compiles_for_rtx_30_and_50():
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "triton_compile_check.py"), "--targets", "86,120",
                          "--json"], capture_output=True, text=True, env=env, timeout=900)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0 and len(rows) == 20, out.stderr[-2000:]
    for r in rows:
        assert r["ok"] and r["ld_v4_b32"] + r["cp_async_16"] > 0, r  # the weight bytes in 16-byte loads
        assert r.get("spill_bytes", 0) == 0, r
