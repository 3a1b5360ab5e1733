"""For a CUDA machine: check the FP8 and NVFP4 matmul paths against the dequantizing reference
and measure their speed. A few minutes end to end.

    python benchmarks/cuda_quant_check.py [--out docs/quantization-gpu.md]

For each format it prints which path the runtime chose (and why, if not the fast one), the
relative error of that path against the reference on the real 30B's matmul shapes, and the
median time of one decode-sized (1 token) and one prefill-sized (512 tokens) matmul for:
dense BF16, the chosen quantized path, and the dequantize path. Then it runs the shipped NVFP4
demo end to end on the GPU and compares its logits with the CPU reference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.cuda_30b_shape import cuda_device  # noqa: E402
from runtime import matmul  # noqa: E402
from runtime.checkpoint.quant_pack import pack_fp8, pack_nvfp4  # noqa: E402

# (out, in) of the 30B's main matmuls: expert up/down, shared expert, Mamba in/out projections.
SHAPES = [(1856, 2688), (2688, 1856), (3712, 2688), (10304, 2688), (2688, 4096)]


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats=20):
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "quantization-gpu.md"))
    parser.add_argument("--cpu-dry-run", action="store_true", help="exercise the script on the CPU (small shapes)")
    args = parser.parse_args()
    global SHAPES
    if args.cpu_dry_run:
        dev, name, cc, SHAPES = torch.device("cpu"), "CPU (dry run)", (0, 0), [(64, 128)]
    else:
        dev = cuda_device(dry_run=False)
        name, cc = torch.cuda.get_device_name(dev), torch.cuda.get_device_capability(dev)
    lines = [f"# Quantized matmul paths on {name} (compute capability {cc[0]}.{cc[1]})", "",
             f"Written by `python benchmarks/cuda_quant_check.py`; torch {torch.__version__}. "
             "Times are medians of 20 runs in microseconds.", ""]
    for fmt, pack in (("FP8", pack_fp8), ("NVFP4", pack_nvfp4)):
        choice = matmul.describe(dev, fmt)
        lines += [f"## {fmt}: {choice.label}" + (f" ({choice.note})" if choice.note else ""), "",
                  "| shape (out x in) | rel. error vs reference | bf16 1 tok | path 1 tok | dequant 1 tok | "
                  "bf16 512 tok | path 512 tok | dequant 512 tok |", "|---|---|---|---|---|---|---|---|"]
        for out, inp in SHAPES:
            w = (torch.randn(out, inp, device=dev) / inp ** 0.5)
            packed = pack(w.cpu()).to(dev)
            dense = packed.dequantize(torch.bfloat16)
            row = [f"{out} x {inp}"]
            x1 = torch.randn(1, inp, device=dev, dtype=torch.bfloat16)
            x512 = torch.randn(512, inp, device=dev, dtype=torch.bfloat16)
            ref = F.linear(x512.float(), packed.dequantize(torch.float32))
            got = matmul.linear(x512, packed).float()
            row.append(f"{((got - ref).norm() / ref.norm()).item():.4f}")
            for x in (x1, x512):
                row.append(f"{timed(lambda: F.linear(x, dense)):.1f}")
                row.append(f"{timed(lambda: matmul.linear(x, packed)):.1f}")
                row.append(f"{timed(lambda: F.linear(x, packed.dequantize(x.dtype))):.1f}")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")

    from runtime import ElasticModel
    from runtime.chat_format import ChatFormat
    from runtime.score import score

    demo = ROOT / "assets" / "demo-nvfp4"
    ids = ChatFormat(demo).prompt_ids([{"role": "user", "content": "What is 12 + 7 - 5?"}], True)
    gpu = ElasticModel.load(demo, device=str(dev), dtype="float32")
    cpu = ElasticModel.load(demo, device="cpu")
    diff = max(abs(a - b) for a, b in zip(score(gpu, "1.5M", ids), score(cpu, "1.5M", ids)))
    lines += ["## The NVFP4 demo end to end", "",
              f"GPU path: {gpu.compute_path()}. Largest |logprob| difference to the CPU reference over a "
              f"{len(ids)}-token prompt: {diff:.4f}.", ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
