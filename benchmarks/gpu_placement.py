"""For a CUDA machine: the real layout with its routed experts in RAM (runtime/placement.py), measured per
submodel for the plain load, `--cpu-experts all` and the nested placement (the smallest submodel's experts
on the GPU), next to what the planner expects of each on this machine (its probe: NVML's bandwidth, a RAM
read measured here), with device and host memory and how each step ran (graph or eager).

    python benchmarks/gpu_placement.py --folder /tmp/real-layout/nvfp4 [--out docs/benchmarks-placement-gpu.md]
    python benchmarks/gpu_placement.py --cpu-dry-run      # toy widths, both sides on the CPU: tests the script

run_gpu_checks.sh runs it after `real` wrote the checkpoint (about 2 minutes on a 19 GB file: a few tokens per
submodel, since the CPU's experts still go through today's CPU path); it writes the .md and a .json beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from benchmarks.cuda_30b_shape import cuda_device, decode, sync  # noqa: E402
from benchmarks.gpu_real_layout import host_memory  # noqa: E402
from runtime.chat_format import ChatFormat  # noqa: E402
from runtime.checkpoint.check import inspect_checkpoint  # noqa: E402
from runtime.checkpoint.weights import has_host_experts  # noqa: E402
from runtime.model import ElasticModel  # noqa: E402
from runtime.placement import ExpertPlacement  # noqa: E402
from tools.real_layout import Options, generate  # noqa: E402


def measure(folder: Path, spec: str, device: torch.device, hw, context: int, tokens: int, log) -> list[dict]:
    """Loads `folder` with placement `spec`; one row per submodel."""
    from runtime.store.planner import plan_checkpoint

    plan = plan_checkpoint(folder, hw, context, placement=spec) if hw.gpu is not None else None
    expected = {s.name: s for s in plan.proposed().speeds} if plan is not None and plan.proposed() else {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    model = ElasticModel.load(folder, device=str(device), placement=ExpertPlacement.parse(spec))
    sync(device)
    load_s = time.perf_counter() - t0
    memory = host_memory()
    on_device = torch.cuda.memory_allocated() if device.type == "cuda" else model.resident_bytes()
    prompt = ChatFormat(folder).prompt_ids([{"role": "user", "content": "Hello"}], False)
    rows = []
    for name in model.views:
        in_ram = has_host_experts(model.views[name])
        t0 = time.perf_counter()
        int(model.forward(name, model.new_cache(name, len(prompt) + 1), prompt).argmax())
        sync(device)
        first_ms = (time.perf_counter() - t0) * 1000
        ids, rate = decode(model, name, prompt, max(2, tokens // 3) if in_ram else tokens, warm=1)
        e = expected.get(name)
        rows.append({"placement": spec, "submodel": name, "experts_in_ram": in_ram, "load_s": round(load_s, 1),
                     "first_token_ms": round(first_ms, 1), "tok_s": round(rate, 2),
                     "expected_tok_s": round(e.tokens_per_s, 1) if e and e.tokens_per_s else None,
                     "device_read_gb": round(e.device_read_bytes / 1e9, 3) if e else None,
                     "host_read_gb": round(e.host_read_bytes / 1e9, 3) if e else None,
                     "device_bytes": on_device, "host_anon": memory["anon_rss"], "host_file": memory["file_rss"],
                     "decode_path": model.decode_path(), "where": model.placement_status(), "tokens": ids[:4]})
        log(json.dumps(rows[-1]))
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", type=Path, default=Path("/tmp/real-layout/nvfp4"))
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-placement-gpu.md"))
    p.add_argument("--tokens", type=int, default=12, help="timed steps per submodel on the GPU alone (a third "
                                                          "of them where experts are in RAM)")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--cpu-dry-run", action="store_true")
    args = p.parse_args()
    started = time.time()
    dry = args.cpu_dry_run
    device = cuda_device(dry)
    folder = args.folder
    if not (folder / "model.safetensors.index.json").exists():
        generate(folder, Options("nvfp4", "tiny" if dry else "full"), log=print)
    from runtime.store.hardware import probe

    hw = probe(folder)
    smallest = inspect_checkpoint(folder).submodels[-1].name
    rows = []
    for spec in ("none", "all", f"nested:{smallest}"):
        rows += measure(folder, spec, device, hw, args.context, 3 if dry else args.tokens, print)
    where = "CPU (dry run, toy widths)" if dry else torch.cuda.get_device_name(device)
    gpu = hw.gpu
    bandwidths = (f"GPU {gpu.memory_bandwidth_bytes_per_s / 1e9:.0f} GB/s (NVML), RAM "
                  f"{hw.ram_read_bytes_per_s / 1e9:.1f} GB/s (measured now)" if gpu else "no GPU: no plan")
    lines = [
        f"# Routed experts in RAM on {where}",
        "",
        f"Written by `python benchmarks/gpu_placement.py` (run by `benchmarks/run_gpu_checks.sh real`); torch "
        f"{torch.__version__}, {os.cpu_count()} CPU threads. The real NVFP4 layout ({folder}), loaded three ways: "
        "plainly, with every layer's routed experts in RAM (`--cpu-experts all`), and with the smallest submodel's "
        f"experts on the GPU and the rest in RAM (`--cpu-experts nested:{smallest}`). Greedy tokens of a one-word "
        "chat prompt; where a submodel's experts are in RAM the CPU computes them (today's CPU path) and the step "
        f"runs eagerly. Expected: the planner's bandwidth bound from this machine's probe ({bandwidths}).",
        "",
        "| placement | submodel | experts in RAM | load | first token | tok/s | expected tok/s "
        "| GPU / RAM read a token | GPU memory | host private / file-backed | decode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reads = f"{r['device_read_gb']} / {r['host_read_gb']} GB" if r["device_read_gb"] is not None else "-"
        lines.append(f"| {r['placement']} | {r['submodel']} | {'yes' if r['experts_in_ram'] else 'no'} | "
                     f"{r['load_s']} s | {r['first_token_ms']:.0f} ms | {r['tok_s']} | {r['expected_tok_s'] or '-'} | "
                     f"{reads} | {r['device_bytes'] / 1e9:.2f} GB | {r['host_anon'] / 1e9:.2f} / "
                     f"{r['host_file'] / 1e9:.2f} GB | {r['decode_path']} |")
    plain = {r["submodel"]: r["tokens"] for r in rows if r["placement"] == "none"}
    same = all(r["tokens"][:3] == plain[r["submodel"]][:3] for r in rows)  # greedy on random weights: ties may split
    lines += ["", f"Same first 3 greedy tokens under every placement: {'yes' if same else 'no'} (random weights: a "
              "near tie may break either way when the CPU sums in another order). Where each part "
              f"lived under `all`: {next(r['where'] for r in rows if r['placement'] == 'all')}.",
              "", f"({round(time.time() - started)} s in all.)"]
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps({"device": where, "rows": rows}, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
