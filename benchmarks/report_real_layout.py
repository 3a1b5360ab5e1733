"""Writes docs/benchmarks-real.md (+ .json) from the JSON lines bench_real_layout.py, bench_vs_llama_cpp.py
and bench_load.py appended, so the page's figures are the measurements themselves.

    python benchmarks/report_real_layout.py --runs runs.jsonl [--versus vs.jsonl] [--loads loads.jsonl]
        [--out docs/benchmarks-real.md]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gb(n) -> str:
    return f"{n / 1e9:.2f} GB"


def read(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()] if path else []


def run_rows(runs: list[dict]) -> list[str]:
    out = [
        "| code | threads | peak RSS | anonymous after load | file-backed after load | plan (weights + cache + workspace) "
        "| load | first token | decode step | tok/s | bandwidth limit | share | load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        end, after = r["memory_end"], r["memory_after_load"]
        plan = gb(r["plan"]["need_bytes"]) if r.get("plan") else "(none: sized per parameter)"
        out.append(
            f"| {r['label']} | {r['threads']} | {gb(end['peak_rss'])} | {gb(after['anon_rss'])} | "
            f"{gb(after['file_rss'])} | {plan} | {r['load_s']} s | {r['first_token_ms'] / 1000:.1f} s "
            f"({r['first_token_in_decode_steps']} steps) | {r['decode_step_ms'] / 1000:.2f} s | "
            f"{r['tokens_per_s']:.3f} | {r['bandwidth_limit_tokens_per_s']} tok/s "
            f"({r['read_bandwidth'] / 1e9:.1f} GB/s) | {100 * r['share_of_limit']:.1f}% | "
            f"{r['load_average'][0]:.1f} |"
        )
    return out


def versus_rows(rows: list[dict]) -> list[str]:
    """bench_vs_llama_cpp.py's per-setting medians: ours and llama.cpp against the same limit."""
    out = [
        "| code | threads | busy processes beside | rounds | read limit (this thread count) | ours: decode "
        "| llama.cpp: decode "
        "| ours / llama.cpp | prefill of 64 tokens: ours, llama.cpp | its wait in decode steps: ours, llama.cpp "
        "| load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "summary" not in r:
            continue
        rounds = sum(1 for o in rows if "summary" not in o and all(o[k] == r[k] for k in ("label", "threads", "busy")))
        limit = f"{r['read_limit_gb_per_s']:.1f} GB/s"
        ours = f"{r['ours_decode_tok_per_s']:.2f} tok/s ({100 * r['ours_share_of_limit']:.0f}%)"
        llama = (f"{r['llama_decode_tok_per_s']:.2f} tok/s ({100 * r['llama_share_of_limit']:.0f}%)"
                 if "llama_decode_tok_per_s" in r else "-")
        ratio = f"{r['decode_ratio']:.2f}x" if "decode_ratio" in r else "-"
        prefill = f"{r['ours_prefill_tok_per_s']:.1f}, " + (f"{r['llama_prefill_tok_per_s']:.1f} tok/s"
                                                             if "llama_prefill_tok_per_s" in r else "-")
        steps = ", ".join(f"{r[key]:.1f}" if key in r else "-"
                          for key in ("ours_first_token_in_decode_steps", "llama_first_token_in_decode_steps"))
        out.append(f"| {r['label']} | {r['threads']} | {r['busy']} | {rounds} | {limit} | {ours} | {llama} | {ratio} | {prefill} | "
                   f"{steps} | {r['load_average']:.1f} |")
    return out


def ratio_spread(rounds: list[dict]) -> str:
    """The widest range of ours / llama.cpp among rounds of one setting (label, threads, busy)."""
    groups: dict[tuple, list[float]] = {}
    for r in rounds:
        if "decode_ratio" in r:
            groups.setdefault((r["label"], r["threads"], r["busy"]), []).append(r["decode_ratio"])
    lo, hi = max(((min(v), max(v)) for v in groups.values()), key=lambda p: p[1] - p[0], default=(0, 0))
    return f"{lo:.2f}x-{hi:.2f}x"


def load_rows(loads: list[dict]) -> list[str]:
    out = [
        "| checkpoint | files | disk read (buffered, direct) | plan | cold load | warm load | tensors/s (cold, warm) "
        "| peak RSS (cold) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in loads:
        name = Path(r["checkpoint"]).name
        disk = f"{r['disk_read_bytes_per_s'] / 1e9:.2f}, {r.get('disk_direct_read_bytes_per_s', 0) / 1e9:.2f} GB/s"
        if "refused" in r:
            out.append(f"| {name} | {gb(r['file_bytes'])} | {disk} | refused: {r['refused']} | - | - | - | - |")
            continue
        cold, warm = r["cold"], r["warm"]
        out.append(
            f"| {name} | {gb(r['file_bytes'])} | {disk} | {r['plan']['verdict']}: {gb(r['plan']['need_bytes'])} | "
            f"{cold['load_s']} s ({cold['bytes_per_s'] / 1e9:.2f} GB/s) | {warm['load_s']} s "
            f"({warm['bytes_per_s'] / 1e9:.2f} GB/s) | {cold['tensors_per_s']:,}, {warm['tensors_per_s']:,} | "
            f"{gb(cold['peak_rss'])} |"
        )
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True)
    p.add_argument("--loads")
    p.add_argument("--versus", help="bench_vs_llama_cpp.py's JSON lines")
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-real.md"))
    args = p.parse_args()
    runs, loads, versus = read(args.runs), read(args.loads), read(args.versus)
    last = runs[-1]
    lines = [
        "# The real layout on this CPU: memory, first token, decode cost, load",
        "",
        f"Written by `python benchmarks/report_real_layout.py` from the JSON lines of the runs below ({platform.machine()}, "
        f"{platform.processor() or 'CPU'}, 2 cores shared with other work: the load average is each run's). "
        "Checkpoints made by `python -m tools.real_layout DIR --experts 8` (the real layout and widths with 8 "
        "routed experts: 3.82 GB, the same 6 active experts per token, so the same bytes per decoded token as "
        "128) and `python -m tools.real_layout DIR` (full size: 24,147 tensors, 19.34 GB).",
        "",
        "## Memory, first token and decode (8 experts)",
        "",
        "`python benchmarks/bench_real_layout.py --checkpoint DIR --tokens 6 --threads N --label L --profile "
        "--json runs.jsonl`: PyTorch's path (`ELASTIC_CHAT_CPU_KERNELS=0`, what ran before the CPU kernels) and "
        "the CPU kernels (`runtime/kernels/cpu/`). A one-word chat prompt, greedy; the decode step is the median "
        "of the timed ones. The bandwidth limit is this machine's streaming read (a sum over a touched 1 GiB "
        "buffer) at the run's own thread count, measured in the same process before the load and after the "
        f"decode (the better of the two), over the {gb(last['step_read_bytes'])} of stored weights one step reads "
        "(every tensor but the embedding table, of which one row, and 6 of the 8 experts). This page used to "
        "divide by 4.3 GB/s, a two-core figure taken while other work held the cores; one core alone reads "
        "14-21 GB/s here, and two cores add little (this virtual machine's memory is the bound).",
        "",
    ]
    lines += run_rows(runs)
    lines += [
        "",
        "Where the last run's decode step went (self time by ATen op, ms; the CPU kernels are not ATen ops, "
        "so this is what is left around them): "
        + ", ".join(f"{k} {v}" for k, v in last.get("step_ms_by_op", {}).items())
        + ".",
    ]
    if versus:
        lines += [
            "",
            "## Decode and prefill against the read limit and llama.cpp (8 experts)",
            "",
            "`python benchmarks/bench_vs_llama_cpp.py --checkpoint DIR --gguf FILE --llama-bin BIN --threads 1 2 "
            "--rounds R [--busy N] --label L --json vs.jsonl`: the same weights in both engines (llama.cpp's own "
            "`convert_hf_to_gguf.py` of the checkpoint keeps NVFP4 as GGML type NVFP4 and BF16 as BF16: 3.82 GB "
            "either way), built from the sources vendored in the llama-cpp-python 0.3.36 sdist "
            "(`-DGGML_NATIVE=ON`). Per round, alternately: the read limit at that thread count, this engine's "
            "prefill of 64 random tokens and 8 greedy decode steps (the median step), then `llama-bench -p 0 -n 8` "
            "and `-p 64 -n 0` (one repetition after its warm-up). Medians of the rounds; the share of the limit "
            "is tok/s times the bytes a step reads over the limit. `busy` processes are `python3 -c 'while True: "
            "pass'` beside the run.",
            "",
        ]
        lines += versus_rows(versus)
        rounds = [r for r in versus if "summary" not in r]
        load_avgs = [r["load_average"] for r in rounds]
        limits = [r["read_limit_gb_per_s"] for r in rounds]
        lines += [
            "",
            f"These rounds ran at load averages {min(load_avgs):.0f}-{max(load_avgs):.0f} on the 2 cores (other work beside "
            f"them), and the read limit itself moved between {min(limits):.1f} and {max(limits):.1f} GB/s from round "
            f"to round: rows taken minutes apart differ by the load as much as by the code; even the ratio to "
            f"llama.cpp (measured a minute after ours in the same round) spanned {ratio_spread(rounds)} between "
            "rounds of one setting. A quiet rerun decides the rest.",
            "",
            "What bounds it now: reading, at about two thirds of a plain sum's speed for the packed weights and "
            "three quarters for BF16 ones (each byte is decoded and multiplied, not just added), plus the "
            "Python and small PyTorch ops of 52 layers per token. The kernels prefetch a page ahead: the "
            "hardware prefetchers stop at 4 KiB page boundaries, and without it the NVFP4 product read memory "
            "at a third of a sum's speed. The kernels' work is handed out in chunks from a shared counter to their own workers "
            "(`csrc/work_pool.cpp`): a call returns when its chunks are done, never waiting at a barrier for a "
            "thread that a busy process holds back, and idle workers sleep. Prefill chunks take the decode's "
            "int8 arithmetic, each row decoded once per 4 tokens and read once per 64.",
        ]
    if loads:
        lines += [
            "",
            "## Loading",
            "",
            "`python benchmarks/bench_load.py --checkpoint DIR [--only-if-fits] --json loads.jsonl`: the disk's "
            "sequential read of the largest shard with O_DIRECT 16 MiB reads and of the next one through the "
            "page cache (pages dropped first with posix_fadvise; dropping the kernel's caches system-wide is "
            "not allowed here; this virtual disk's host may cache too), then a load from a cold page cache "
            "(every shard's pages dropped) and one from a warm one, each in a fresh process, after the "
            "planner's CPU check. The full size runs only where the plan says it fits: on this shared "
            "machine it says tight (or, with less memory free, does not fit), so it was not loaded here; "
            "`benchmarks/run_gpu_checks.sh real` loads it on a GPU machine.",
            "",
        ]
        lines += load_rows(loads)
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps({"runs": runs, "versus": versus, "loads": loads},
                                                              indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
