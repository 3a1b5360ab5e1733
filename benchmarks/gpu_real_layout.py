"""For a CUDA machine: the full-size checkpoint in the real layout (tools/real_layout.py), written on
that machine, then loaded and run there: load time from a cold page cache, host memory during the
load (a GPU load streams tensors, so it should stay far below the file), device memory against the
planner's figure, first-token time of a one-word prompt, and greedy tokens/s per submodel eagerly
and with CUDA graphs, against the bandwidth limit (the card's copy bandwidth measured in the same run
over the weight bytes one step reads).

    python benchmarks/gpu_real_layout.py [--folder /tmp/real-nvfp4] [--format nvfp4] [--out docs/benchmarks-real-gpu.md]
    python benchmarks/gpu_real_layout.py --cpu-dry-run      # the toy widths on the CPU, to test the script

run_gpu_checks.sh runs it (`real`); it writes the .md and a .json beside it.
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
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from benchmarks.cuda_30b_shape import active_bytes, copy_bandwidth, cuda_device, decode, sync  # noqa: E402
from runtime.chat_format import ChatFormat  # noqa: E402
from runtime.model import ElasticModel  # noqa: E402
from tools.real_layout import Options, generate  # noqa: E402


def host_memory() -> dict:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    kib = lambda key: int(status[key].split()[0]) * 1024  # noqa: E731
    return {"peak_rss": kib("VmHWM"), "rss": kib("VmRSS"), "file_rss": kib("RssFile"), "anon_rss": kib("RssAnon")}


def drop_pages(folder: Path) -> None:
    for shard in folder.glob("*.safetensors"):
        with open(shard, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def first_token_ms(model, name: str, prompt: list[int]) -> float:
    cache = model.new_cache(name, len(prompt) + 2)
    sync(model.device)
    t0 = time.perf_counter()
    int(model.forward(name, cache, prompt).argmax())
    return (time.perf_counter() - t0) * 1000


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", type=Path, default=Path("/tmp/real-layout"))
    p.add_argument("--format", default="nvfp4", choices=("nvfp4", "fp8", "bf16"))
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-real-gpu.md"))
    p.add_argument("--tokens", type=int, default=64, help="timed graph steps per submodel")
    p.add_argument("--eager-tokens", type=int, default=16, help="timed eager steps per submodel")
    p.add_argument("--cpu-dry-run", action="store_true")
    args = p.parse_args()
    started = time.time()
    dry = args.cpu_dry_run
    device = cuda_device(dry)
    folder = args.folder / args.format
    t0 = time.time()
    if not (folder / "model.safetensors.index.json").exists():
        generate(folder, Options(args.format, "tiny" if dry else "full"), log=print)
    write_s = time.time() - t0
    from runtime.store.hardware import probe
    from runtime.store.planner import plan_checkpoint

    plan = plan_checkpoint(folder, probe(folder), 4096)
    print(plan.compute_path, [f.reason for f in plan.submodels])
    drop_pages(folder)
    try:  # the peak host memory of the load alone
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    before = host_memory()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    model = ElasticModel.load(folder, device=str(device))
    sync(device)
    load_s = time.perf_counter() - t0
    loaded = host_memory()
    device_bytes = torch.cuda.memory_allocated() if device.type == "cuda" else model.resident_bytes()
    eager = ElasticModel(
        model.folder,
        model.config,
        model.submodels,
        model.resident,
        model.weights,
        model.views,
        model.device,
        model.dtype,
        model.quant,
        model.mapped,
    )
    eager.graphs.disable("the eager baseline")
    bandwidth = copy_bandwidth(device) if device.type == "cuda" else float("nan")
    prompt = ChatFormat(folder).prompt_ids([{"role": "user", "content": "Hello"}], False)
    rows = []
    for fit in plan.submodels:
        name = fit.name
        ttft = [first_token_ms(model, name, prompt) for _ in range(3)]  # the first also warms up
        eager_tokens, eager_rate = decode(eager, name, prompt, args.eager_tokens if not dry else 3)
        graph_tokens, graph_rate = decode(model, name, prompt, args.tokens if not dry else 3)
        active = active_bytes(model.config, model.views[name])
        limit = bandwidth / active
        n = min(len(eager_tokens), len(graph_tokens))
        rows.append(
            {
                "submodel": name,
                "first_token_ms_cold": round(ttft[0], 1),
                "first_token_ms": round(min(ttft[1:]), 1),
                "eager_tok_s": round(eager_rate, 2),
                "graph_tok_s": round(graph_rate, 2),
                "active_weight_gb": round(active / 1e9, 3),
                "limit_tok_s": round(limit, 1),
                "share_of_limit": round(graph_rate / limit, 4),
                "same_tokens": eager_tokens[:n] == graph_tokens[:n],
                "plan_weight_bytes": fit.weight_bytes,
                "plan_need_bytes": fit.need_bytes,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    where = "CPU (dry run, toy widths)" if dry else torch.cuda.get_device_name(device)
    peak_device = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    files = sum(s.stat().st_size for s in folder.glob("*.safetensors"))
    result = {
        "device": where,
        "format": args.format,
        "file_bytes": files,
        "write_s": round(write_s, 1),
        "load_s": round(load_s, 2),
        "host_before_load": before,
        "host_after_load": loaded,
        "device_weight_bytes": device_bytes,
        "plan_weight_bytes": plan.submodels[0].weight_bytes,
        "peak_device_bytes": peak_device,
        "compute_path": model.compute_path(),
        "decode_path": model.decode_path(),
        "bandwidth_bytes_s": bandwidth,
        "rows": rows,
        "seconds": round(time.time() - started),
    }
    gb = lambda n: f"{n / 1e9:.2f} GB"  # noqa: E731
    lines = [
        f"# The real layout at full size on {where}",
        "",
        (
            f"Written by `python benchmarks/gpu_real_layout.py` (run by `benchmarks/run_gpu_checks.sh real`); torch "
            f"{torch.__version__}. A {args.format.upper()} checkpoint in the real Nemotron 3 Nano layout with random "
            f"valid values ({gb(files)} of shards, written on this machine in {write_s:.0f} s), loaded from a cold page "
            f"cache in {load_s:.1f} s. Matmuls: {model.compute_path()}; decode: {model.decode_path()}."
        ),
        "",
        (
            f"Memory: device {gb(device_bytes)} after the load against the planner's "
            f"{gb(plan.submodels[0].weight_bytes)} of weights (peak {gb(peak_device)} over the run); host peak RSS "
            f"during the load {gb(loaded['peak_rss'])} ({gb(before['rss'])} before it)."
        ),
        "",
        (
            f"Bandwidth limit = the card's copy bandwidth measured here ({bandwidth / 1e12:.2f} TB/s) / the weight "
            f"bytes one step reads. First token: a one-word chat prompt ({len(prompt)} tokens), best of two after a "
            "warm-up."
        ),
        "",
        "| submodel | first token (ms) | eager tok/s | graph tok/s | limit tok/s | share of limit | graph = eager tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['submodel']} | {r['first_token_ms']} | {r['eager_tok_s']} | {r['graph_tok_s']} | "
            f"{r['limit_tok_s']} | {100 * r['share_of_limit']:.1f}% | {'yes' if r['same_tokens'] else 'NO'} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
