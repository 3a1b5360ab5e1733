"""A checkpoint in the real layout (tools/real_layout.py) on this machine's CPU: memory against the
plan, first-token time and decode speed against the bandwidth limit measured in the same run.

    python -m tools.real_layout /work/scratch/nvfp4-e8 --experts 8
    python benchmarks/bench_real_layout.py --checkpoint /work/scratch/nvfp4-e8 [--tokens 8] [--json out.json]

Each measurement runs in a fresh child process (so peak RSS is the load's own): it loads the
checkpoint, reads its memory (peak RSS = VmHWM; resident, anonymous (private copies) and
file-backed pages from /proc/self/status), prefills a one-word chat prompt (the first token), then
decodes greedily. The bandwidth limit is this machine's streaming-read speed (a sum over a touched
1 GiB buffer, best of 3, at the run's thread count, measured in the same child before the load
and again after the decode steps: the better of the two) divided by the bytes one decode
step must read in the checkpoint's stored form: every tensor once except the embedding table (one
row) and the routed experts not chosen (k of E), read from the file headers. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from json_lines import emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def bandwidth(gib: float = 1.0, runs: int = 3) -> tuple[float, float]:
    """This machine's memory bandwidth at the current thread count (the decode's: one core reads
    less than two): bytes/s of a streaming read (torch.sum over a touched 1 GiB fp32 buffer) and of a
    copy (bytes read per second), best of `runs` each."""
    import torch

    buf = torch.ones(int(gib * (1 << 30)) // 4)
    dst = torch.empty_like(buf)
    read = copy = 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        buf.sum()
        read = max(read, buf.nbytes / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        dst.copy_(buf)
        copy = max(copy, buf.nbytes / (time.perf_counter() - t0))
    del buf, dst
    return read, copy


def step_bytes(folder: Path, checked=None) -> int:
    """Bytes of the stored tensors one decode step reads (headers only; `checked`: the folder's
    inspect_checkpoint, when the caller has it)."""
    from runtime.checkpoint.check import inspect_checkpoint

    checked = checked or inspect_checkpoint(folder)
    cfg, table = checked.config, checked.table
    total = 0
    for name, info in table.items():
        if name.startswith("backbone.embeddings"):
            total += info.nbytes // info.shape[0]  # one row
        elif ".experts." in name:
            total += info.nbytes * cfg.num_experts_per_tok // cfg.n_routed_experts
        else:
            total += info.nbytes
    return total


def prefill_bytes(folder: Path, tokens: int, touched: dict[int, int], checked=None) -> int:
    """Bytes of stored tensors a prefill of `tokens` tokens must read at least: every tensor once, but
    the embedding table (a row a token) and, per MoE layer, only the experts its tokens chose (each once).
    `touched`: the n-th MoE layer -> how many experts it ran; `checked`: as for `step_bytes`."""
    from runtime.checkpoint.check import inspect_checkpoint
    from runtime.checkpoint.config import MOE

    checked = checked or inspect_checkpoint(folder)
    cfg, table = checked.config, checked.table
    touched = {cfg.layers_of(MOE)[k]: n for k, n in touched.items()}
    total = 0
    for name, info in table.items():
        if name.startswith("backbone.embeddings"):
            total += tokens * info.nbytes // info.shape[0]
        elif ".experts." in name:
            layer = int(name.split(".")[2])
            total += info.nbytes * touched.get(layer, 0) // cfg.n_routed_experts
        else:
            total += info.nbytes
    return total


class touched_experts:
    """Counts, per MoE layer, the distinct experts the router chooses while active (by wrapping
    runtime.moe.route; layers are told apart by their router weights)."""

    def __init__(self):
        import runtime.moe as moe

        self.moe, self.route = moe, moe.route
        self.ids: dict[int, set] = {}
        self.order: dict[int, int] = {}

        def route(x, w, cfg):
            ids, weights = self.route(x, w, cfg)
            layer = self.order.setdefault(w.router.data_ptr(), len(self.order))
            self.ids.setdefault(layer, set()).update(ids.reshape(-1).tolist())
            return ids, weights

        moe.route = route

    def stop(self):
        self.moe.route = self.route

    @property
    def layers(self) -> dict[int, int]:
        """The n-th MoE layer (in order of use) -> the experts it ran."""
        return {layer: len(ids) for layer, ids in self.ids.items()}


def memory() -> dict:
    """This process's memory now (bytes): peak, resident, private and file-backed."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    rollup = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        rollup[key] = int(value.split()[0]) * 1024

    def kib(key):
        return int(status[key].split()[0]) * 1024

    # RssAnon is what the process holds privately (copies); RssFile the pages of mapped files, which
    # the kernel may drop under pressure and read again.
    return {
        "peak_rss": kib("VmHWM"),
        "rss": kib("VmRSS"),
        "file_rss": kib("RssFile"),
        "anon_rss": kib("RssAnon"),
        "anonymous": rollup.get("Anonymous", 0),
    }


def child(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from runtime.chat_format import ChatFormat
    from runtime.engine import Engine

    folder = Path(args.checkpoint)
    read_bw, copy_bw = bandwidth()
    try:  # the bandwidth buffers are gone: restart the peak (VmHWM) so it is the load's own
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    plan = None
    try:
        from runtime.store.planner import check_cpu_fit

        fit = check_cpu_fit(folder, 1024)
        plan = {
            "verdict": fit.verdict,
            "reason": fit.reason,
            "need_bytes": fit.need_bytes,
            "weight_bytes": fit.weight_bytes,
            "cache_bytes": fit.cache_bytes,
            "workspace_bytes": fit.workspace_bytes,
            "mapped_bytes": getattr(fit, "mapped_bytes", None),  # file-backed (the code before had no such figure)
            "private_bytes": getattr(fit, "private_bytes", None),
        }
    except ImportError:  # the code before the planner sized checkpoints from their headers
        pass
    base = memory()
    import psutil

    available = psutil.virtual_memory().available  # what the other programs on this PC left
    t0 = time.perf_counter()
    engine = Engine.load(folder, device="cpu", max_context=1024)
    load_s = time.perf_counter() - t0
    after_load = memory()
    name = args.submodel or engine.submodels_by_size()[-1]
    prompt = ChatFormat(folder).prompt_ids([{"role": "user", "content": "Hello"}], False)
    touched = touched_experts()
    t0 = time.perf_counter()
    _, logits = engine.catch_up(name, prompt)
    token = int(logits.argmax())
    first_ms = (time.perf_counter() - t0) * 1000
    touched.stop()
    step = engine.decoder(name)
    times = []
    for _ in range(args.tokens):
        t0 = time.perf_counter()
        token = int(step.forward_token(token).argmax())
        times.append(time.perf_counter() - t0)
    times.sort()
    step_s = times[len(times) // 2]
    end = memory()  # before any profiling, which allocates for itself
    where = {}
    if args.profile:  # where one more decode step's time goes, by ATen op (self time)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step.forward_token(token)
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        where = {e.key: round(e.self_cpu_time_total / 1000, 1) for e in ops[:6]}
    read_bw = max(read_bw, bandwidth()[0])  # again after the decode (the load changes); after `end`: peaks stay the run's
    reads = step_bytes(folder)
    prefill_reads = prefill_bytes(folder, len(prompt), touched.layers)
    limit = read_bw / reads
    return {
        "checkpoint": str(folder),
        "submodel": name,
        "plan": plan,
        "threads": args.threads,
        "prompt_tokens": len(prompt),
        "load_s": round(load_s, 2),
        "file_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
        "resident_weight_bytes": engine.status().weight_bytes,
        "compute_path": engine.status().compute_path,
        "memory_before_load": base,
        "ram_available_before_load": available,
        "memory_after_load": after_load,
        "memory_end": end,
        "first_token_ms": round(first_ms, 1),
        "decode_step_ms": round(step_s * 1000, 1),
        "first_token_in_decode_steps": round(first_ms / 1000 / step_s, 2),
        "tokens_per_s": round(1 / step_s, 4),
        "step_read_bytes": reads,
        "prefill_read_bytes": prefill_reads,
        "prefill_experts_touched": round(sum(touched.layers.values()) / max(1, len(touched.layers)), 1),
        "first_token_bound_steps": round(prefill_reads / reads, 2),
        "read_bandwidth": round(read_bw),
        "copy_bandwidth": round(copy_bw),
        "bandwidth_limit_tokens_per_s": round(limit, 2),
        "share_of_limit": round(1 / step_s / limit, 4),
        "step_ms_by_op": where,
        "load_average": os.getloadavg(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--submodel")
    p.add_argument("--tokens", type=int, default=8, help="decode steps (the median one is reported)")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--profile", action="store_true", help="also record one decode step's time by ATen op")
    p.add_argument("--json", help="append the result to this JSON-lines file")
    p.add_argument("--label", default="", help="a name for this run in the JSON (e.g. before/after)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    cmd = [sys.executable, __file__, "--child", *sys.argv[1:]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"the measurement failed:\n{out.stderr[-2000:]}")
    result = {"label": args.label, **json.loads(out.stdout.strip().splitlines()[-1])}
    emit(result, args.json)


if __name__ == "__main__":
    main()
