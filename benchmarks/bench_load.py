"""Loading a real-layout checkpoint (tools/real_layout.py): time from a cold and from a warm page cache,
tensors and bytes per second, next to this disk's sequential read speed measured in the same run.

    python benchmarks/bench_load.py --checkpoint /work/scratch/nvfp4-full [--json out.jsonl]

The cold cache is made with posix_fadvise(DONTNEED) on every shard (dropping the kernel's caches
system-wide needs root, which this may not have); the disk's speed is a sequential read of the
largest shard with O_DIRECT 16 MiB reads and the next with ordinary reads through the page cache,
each right after dropping its pages. Each load runs in a fresh child process (peak RSS is
its own) through `ElasticModel.load` with a progress callback, after the planner's CPU check
(`check_cpu_fit`): a checkpoint the plan refuses is reported as refused, with the plan's numbers,
and not loaded (with --only-if-fits, also one the plan calls tight). Prints one JSON line.
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


def drop_pages(path: Path) -> None:
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def disk_read_speed(path: Path, direct: bool, chunk: int = 16 << 20, limit: int = 2 << 30) -> float:
    """Bytes/s of reading (up to `limit` bytes of) `path` sequentially from disk, its cached pages
    dropped first: through the page cache (the kernel's readahead), or with O_DIRECT 16 MiB reads
    (the device's own speed for large requests)."""
    import mmap

    drop_pages(path)
    buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT needs
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    total, t0 = 0, time.perf_counter()
    try:
        while total < limit and (n := os.readv(fd, [buf])):
            total += n
    finally:
        os.close(fd)
    seconds = time.perf_counter() - t0
    drop_pages(path)
    return total / seconds


def child(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from runtime.model import ElasticModel

    stamps = []
    t0 = time.perf_counter()
    model = ElasticModel.load(args.checkpoint, device="cpu", progress=lambda p: stamps.append(p))
    seconds = time.perf_counter() - t0
    last = stamps[-1]
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    kib = lambda key: int(status[key].split()[0]) * 1024  # noqa: E731
    return {"load_s": round(seconds, 2), "tensors": last.tensors_total, "bytes": last.bytes_total,
            "tensors_per_s": round(last.tensors_total / seconds), "bytes_per_s": round(last.bytes_total / seconds),
            "peak_rss": kib("VmHWM"), "file_rss": kib("RssFile"), "anon_rss": kib("RssAnon"),
            "resident_weight_bytes": model.resident_bytes(), "dtype": str(model.dtype).removeprefix("torch.")}


def run_child(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"the load failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--only-if-fits", action="store_true",
                   help="load only when the plan says 'fits' (not 'tight'): for a shared machine")
    p.add_argument("--json", help="append the result to this JSON-lines file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    from runtime.errors import UsageError
    from runtime.store.planner import check_cpu_fit

    folder = Path(args.checkpoint)
    shards = sorted(folder.glob("*.safetensors"))
    by_size = sorted(shards, key=lambda s: -s.stat().st_size)
    result = {"checkpoint": str(folder), "shards": len(shards), "file_bytes": sum(s.stat().st_size for s in shards),
              # two different shards: a virtual disk's host may cache what was just read
              "disk_direct_read_bytes_per_s": round(disk_read_speed(by_size[0], True)),
              "disk_read_bytes_per_s": round(disk_read_speed(by_size[min(1, len(by_size) - 1)], False))}
    try:
        fit = check_cpu_fit(folder, args.context)
        result["plan"] = {"verdict": fit.verdict, "reason": fit.reason, "need_bytes": fit.need_bytes,
                          "private_bytes": fit.private_bytes, "mapped_bytes": fit.mapped_bytes}
    except UsageError as e:
        result["refused"] = str(e)
    if "refused" not in result and args.only_if_fits and result["plan"]["verdict"] != "fits":
        result["refused"] = f"not loaded: the plan says {result['plan']['reason']}"
    if "refused" in result:
        emit(result, args.json)
        return
    argv = ["--checkpoint", str(folder), "--threads", str(args.threads)]
    for shard in shards:
        drop_pages(shard)
    result["cold"] = run_child(argv)
    result["warm"] = run_child(argv)
    result["load_average"] = os.getloadavg()
    emit(result, args.json)


if __name__ == "__main__":
    main()
