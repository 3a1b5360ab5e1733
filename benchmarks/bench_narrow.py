"""What keeping BF16 weights as stored costs a CPU decode step (runtime/widen.py, device.keeps_narrow):
the same checkpoint loaded twice in one process, its BF16 linears and embeddings kept as views of the
file (widened a block at a time at each matmul) and as fp32 copies, decode steps timed alternately so
both see the same machine, with each load's private (copied) weight bytes.

    python benchmarks/bench_narrow.py --checkpoint /work/scratch/nvfp4-e8 [--steps 5] [--threads 1]

Prints one JSON line: median step time of each, their ratio, logits' largest difference (exact widening:
0 up to the order of sums), private bytes of each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def private_bytes(model) -> int:
    storages = {t.untyped_storage().data_ptr(): t for t in model.weights.tensors()}
    return sum(t.untyped_storage().nbytes() for t in storages.values() if not model.mapped.contains(t))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch

    from runtime import device
    from runtime.model import ElasticModel

    torch.set_num_threads(args.threads)
    models = {}
    for name, limit in (("as stored", 0), ("fp32 copies", 1 << 60)):
        device.CPU_FP32_LIMIT = limit  # what keeps_narrow compares with: 0 keeps every BF16 weight as stored
        models[name] = ElasticModel.load(args.checkpoint, device="cpu", dtype="float32")
    sub = next(iter(models["as stored"].views))
    times = {name: [] for name in models}
    logits = {}
    with torch.inference_mode():
        steps = {}
        for name, m in models.items():
            cache = m.new_cache(sub, args.steps + 8)
            m.forward(sub, cache, [1, 2, 3])
            steps[name] = m.decoder(sub, cache)
        for i in range(args.steps + 1):  # alternate, the first step of each untimed
            for name, step in steps.items():
                t0 = time.perf_counter()
                logits[name] = step.forward_token(5 + i).clone()
                if i:
                    times[name].append(time.perf_counter() - t0)
    median = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    print(json.dumps({
        "checkpoint": args.checkpoint, "threads": args.threads, "submodel": sub,
        "step_s": {n: round(v, 3) for n, v in median.items()},
        "ratio_as_stored_to_copies": round(median["as stored"] / median["fp32 copies"], 3),
        "max_abs_logit_diff": float((logits["as stored"] - logits["fp32 copies"]).abs().max()),
        "private_weight_bytes": {n: private_bytes(m) for n, m in models.items()},
        "load_average": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
