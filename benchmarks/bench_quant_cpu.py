"""The shipped demo in fp32, FP8 and NVFP4 on this machine's CPU: resident weight memory,
how far each quantized model's log-probabilities are from the fp32 one, and decode speed.

    python benchmarks/bench_quant_cpu.py [--out docs/quantization-cpu.md]

The FP8 export is made on the fly with ModelOpt (the NVFP4 one is shipped in assets/).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from runtime import ElasticModel  # noqa: E402
from runtime.chat_format import ChatFormat  # noqa: E402
from runtime.score import score  # noqa: E402
from training.data import evaluation_problems, question, thinking_text  # noqa: E402

DEMO = ROOT / "assets" / "demo"


def decode_rate(model, name, prompt, n=64, runs=3):
    rates = []
    for _ in range(runs):
        cache = model.new_cache(name, len(prompt) + n + 1)
        logits = model.forward(name, cache, prompt)
        t0 = time.perf_counter()
        for _ in range(n):
            logits = model.forward(name, cache, [int(logits.argmax())])
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "quantization-cpu.md"))
    args = parser.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    from training.export_quantized import export

    fp8 = export(DEMO, "FP8", Path(tempfile.mkdtemp()) / "demo-fp8")
    variants = {"fp32": DEMO, "FP8": fp8, "NVFP4": ROOT / "assets" / "demo-nvfp4"}
    models = {k: ElasticModel.load(v) for k, v in variants.items()}
    chat = ChatFormat(DEMO)
    texts = [chat.prompt_ids([{"role": "user", "content": question(p)}], True) + chat.encode(thinking_text(p))
             for p in evaluation_problems(0, 20)]
    lines = ["# The demo model quantized (CPU)", "",
             "Written by `python benchmarks/bench_quant_cpu.py`. Log-probability differences are taken "
             "over 20 held-out prompts with their worked thinking (every position), against the fp32 model. "
             "Decode speed: 64 greedy tokens, median of 3 runs, this machine's CPU; quantized weights are "
             "dequantized per matmul (the CPU reference path), which is why they decode slower here.", "",
             "| variant | compute path | resident weights | submodel | mean abs logprob diff | max abs diff "
             "| decode tok/s |",
             "|---|---|---|---|---|---|---|"]
    for key, model in models.items():
        for name in model.views:
            diffs = []
            if key != "fp32":
                for ids in texts:
                    a, b = torch.tensor(score(model, name, ids)), torch.tensor(score(models["fp32"], name, ids))
                    diffs.append((a - b).abs())
            d = torch.cat(diffs) if diffs else torch.zeros(1)
            lines.append(f"| {key} | {model.compute_path()} | {model.resident_bytes() / 1e6:.2f} MB | {name} | "
                         f"{d.mean():.3f} | {d.max():.3f} | {decode_rate(model, name, texts[0]):.0f} |")
    lines += ["", "Resident weights count every submodel together (they are views of one copy). Packed linear "
              "weights take 0.5625 bytes per parameter (NVFP4) or 1 (FP8); embeddings, norms, routers, convs "
              "and the BF16-excluded layers are held in the compute dtype (fp32 on the CPU)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
