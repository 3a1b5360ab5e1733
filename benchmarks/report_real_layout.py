"""Writes docs/benchmarks-real.md (+ .json) from the JSON lines bench_real_layout.py and bench_load.py
appended, so the page's figures are the measurements themselves.

    python benchmarks/report_real_layout.py --runs runs.jsonl [--versus vs.jsonl] [--loads loads.jsonl]
        [--full full.jsonl] [--narrow narrow.jsonl] [--first first.jsonl] [--out docs/benchmarks-real.md]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from json_lines import read
from markdown_table import table_head

ROOT = Path(__file__).resolve().parents[1]


def gb(n) -> str:
    return f"{n / 1e9:.2f} GB"


def run_rows(runs: list[dict]) -> list[str]:
    out = table_head("code", "threads", "peak RSS", "anonymous after load", "file-backed after load",
                     "plan (weights + cache + workspace)", "load", "first token", "decode step", "tok/s",
                     "bandwidth limit", "share", "load average")
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


def full_rows(runs: list[dict]) -> list[str]:
    """The full-size file: memory against the plan (private and file-backed apart), first token against
    the bytes its prefill must read."""
    out = table_head("code", "RAM left by others", "plan: private + file-backed (verdict)",
                     "anonymous after load (end)", "file-backed after load (end)", "peak RSS", "load", "first token",
                     "bound: prefill bytes / step bytes (experts touched a layer)", "decode step", "share of limit",
                     "load average")
    for r in runs:
        plan, after, end = r["plan"], r["memory_after_load"], r["memory_end"]
        planned = (f"{gb(plan['private_bytes'])} + {gb(plan['mapped_bytes'])} ({plan['verdict']})"
                   if plan.get("mapped_bytes") is not None else f"{gb(plan['need_bytes'])}, all as RAM ({plan['verdict']})")
        left = gb(r["ram_available_before_load"]) if "ram_available_before_load" in r else "-"
        bound = (f"{r['first_token_bound_steps']} steps ({r['prefill_experts_touched']} of 128)"
                 if "first_token_bound_steps" in r else "-")
        out.append(
            f"| {r['label']} | {left} | {planned} | {gb(after['anonymous'])} ({gb(end['anonymous'])}) | "
            f"{gb(after['file_rss'])} ({gb(end['file_rss'])}) | {gb(end['peak_rss'])} | {r['load_s']} s | "
            f"{r['first_token_ms'] / 1000:.1f} s ({r['first_token_in_decode_steps']} steps) | {bound} | "
            f"{r['decode_step_ms'] / 1000:.2f} s | {100 * r['share_of_limit']:.2f}% | {r['load_average'][0]:.1f} |"
        )
    return out


def full_section(runs: list[dict], narrow: list[dict], first: list[dict]) -> list[str]:
    last = runs[-1]
    lines = [
        "",
        "## The full 19.3 GB file (128 experts) on this 24 GB PC",
        "",
        "`python benchmarks/bench_real_layout.py --checkpoint DIR --tokens 3 --threads 1 --label L --json "
        "full.jsonl` on the full-size layout, once on the code before issue 34's memory work and once after. "
        "The machine's 24 GB are shared with other engineers' jobs: the RAM they left before the load is in "
        "the table, and when they took more during a run the OS dropped pages of the file (file-backed at the "
        "end below after the load) and read them again from disk, which slows that run's steps. The plan is "
        "`check_cpu_fit`'s: private memory (weights the loader copies + cache at 1k context + 0.5 GiB "
        "workspace) and the weights served from the file, planned apart; the process's own anonymous and "
        "file-backed memory are read from /proc/self/status and smaps_rollup.",
        "",
    ]
    lines += full_rows(runs)
    lines += [
        "",
        f"The first token: a one-word chat prompt is {last['prompt_tokens']} tokens, and its prefill reads each "
        f"expert its tokens chose once (`moe.py` groups a chunk's tokens by expert): "
        f"{last.get('prefill_experts_touched', '?')} of 128 per layer here, against 6 for a decode step. With the "
        f"rest of the weights read once either way, the prefill must read "
        f"{gb(last.get('prefill_read_bytes', 0))} against a step's {gb(last['step_read_bytes'])}: at the same speed "
        f"per byte the first token costs {last.get('first_token_bound_steps', '?')} steps, so 2 steps cannot be "
        "reached at 128 experts with a 16-token prompt (with 8 experts, as above, every expert is touched and "
        "the bound is lower). What is left above the bound is the decode kernels' speed per byte, which differs "
        "between a one-token step and a several-token prefill (`runtime/dequant.py`).",
    ]
    for r in first:
        lines += ["", *first_token_bound(r)]
    for r in narrow:
        step, private = r["step_s"], r["private_weight_bytes"]
        lines += [
            "",
            "Most of the private memory the code before held was fp32 copies of the BF16 weights (this CPU has no "
            "native BF16 matmuls, so it computes in fp32); they now stay as stored and each matmul widens them a "
            f"block at a time. `python benchmarks/bench_narrow.py --checkpoint {Path(r['checkpoint']).name} "
            f"--threads {r['threads']}`, both loads in one process, steps alternated: a decode step "
            f"{step['as stored']} s kept as stored against {step['fp32 copies']} s with fp32 copies (ratio "
            f"{r['ratio_as_stored_to_copies']}), logits differing by {r['max_abs_logit_diff']}, private weights "
            f"{gb(private['as stored'])} against {gb(private['fp32 copies'])} (load average "
            f"{r['load_average'][0]:.1f}).",
        ]
    return lines


def first_token_bound(r: dict) -> list[str]:
    """How short a prompt must be for its first token to come within 2 decode steps (first_token_bound.py)."""
    curve = {c["tokens"]: c for c in r["curve"]}
    shown = ", ".join(f"{n}: {curve[n]['experts_touched']} ({curve[n]['bound_steps']} steps)"
                      for n in (1, 2, 3, 4, 5, 6, 8, 12, 16) if n in curve)
    n, steps = r["longest_prompt_within_2_steps"], r["decode_step_ms"]
    return [
        f"How short a prompt must be: `python benchmarks/first_token_bound.py --checkpoint DIR --threads "
        f"{r['threads']} --json first.jsonl`. A decode step reads D = {gb(r['every_token_bytes'])} of weights every "
        f"token uses (all but the embedding table and the routed experts), one embedding row and {r['active']} "
        f"experts a layer, x = {gb(r['one_expert_every_layer_bytes'])} for one expert across the {r['moe_layers']} "
        "MoE layers; a prefill of n tokens reads D once, n rows and the t(n) experts a layer its tokens touch. At "
        "the same speed per byte its first token costs (D + n row + t(n) x) / (D + row + "
        f"{r['active']} x) steps, so 2 steps need t(n) <= {r['touched_within_2_steps']} experts a layer. The "
        "experts the first n tokens of the one-word chat prompt touch, recorded token by token in one prefill "
        "(a token's routing does not depend on later ones, so these are exactly a prompt of those n tokens), "
        f"averaged over the layers, with the bound: {shown}. The longest prompt whose first token can come "
        f"within 2 steps is {n} tokens ({r['even_routing_longest_within_2_steps']} if every token picked its "
        f"experts evenly at random)"
        + (f", shorter than any chat prompt: the template alone makes a one-word message {r['prompt_tokens']} "
           "tokens" if n < r["prompt_tokens"] else "") + f". Measured in the same process (load average {r['load_average'][0]:.1f}): a "
        f"prefill of those {n} tokens took {r['short_prompt_first_token_ms'] / 1000:.1f} s against decode steps of "
        f"{', '.join(f'{s / 1000:.1f}' for s in steps)} s, {r['short_prompt_first_token_in_steps']} of the faster step; the "
        f"whole {r['prompt_tokens']}-token prompt {r['whole_prompt_first_token_ms'] / 1000:.1f} s, "
        f"{r['whole_prompt_first_token_in_steps']} steps against its bound of {r['whole_prompt_bound_steps']}. "
        f"This process held {gb(r['memory_end']['file_rss'])} of the file's pages at the end (peak RSS "
        f"{gb(r['memory_end']['peak_rss'])}): the OS had dropped the rest for other jobs, so those runs read part "
        "of the file again from disk, which the bound does not count; it is the floor a faster kernel or a quiet "
        "machine can reach, not a prediction.",
    ]


def _need(plan: dict) -> str:
    if plan.get("mapped_bytes"):
        return f"{gb(plan['private_bytes'])} private + {gb(plan['mapped_bytes'])} of the file"
    return gb(plan["need_bytes"])


def versus_rows(rows: list[dict]) -> list[str]:
    """bench_vs_llama_cpp.py's per-setting medians: ours and llama.cpp against the same limit."""
    out = table_head("code", "threads", "busy processes beside", "rounds", "read limit (this thread count)",
                     "ours: decode", "llama.cpp: decode", "ours / llama.cpp", "prefill of 64 tokens: ours, llama.cpp",
                     "its wait in decode steps: ours, llama.cpp", "load average")
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
    out = table_head("checkpoint", "files", "disk read (buffered, direct)", "plan", "cold load", "warm load",
                     "tensors/s (cold, warm)", "peak RSS (cold)")
    for r in loads:
        name = Path(r["checkpoint"]).name
        disk = f"{r['disk_read_bytes_per_s'] / 1e9:.2f}, {r.get('disk_direct_read_bytes_per_s', 0) / 1e9:.2f} GB/s"
        if "refused" in r:
            out.append(f"| {name} | {gb(r['file_bytes'])} | {disk} | refused: {r['refused']} | - | - | - | - |")
            continue
        cold, warm = r["cold"], r["warm"]
        out.append(
            f"| {name} | {gb(r['file_bytes'])} | {disk} | {r['plan']['verdict']}: {_need(r['plan'])} | "
            f"{cold['load_s']} s ({cold['bytes_per_s'] / 1e9:.2f} GB/s) | {warm['load_s']} s "
            f"({warm['bytes_per_s'] / 1e9:.2f} GB/s) | {cold['tensors_per_s']:,}, {warm['tensors_per_s']:,} | "
            f"{gb(cold['peak_rss'])} |"
        )
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True)
    p.add_argument("--loads")
    p.add_argument("--full", help="JSON lines of bench_real_layout.py on the full-size file")
    p.add_argument("--narrow", help="JSON lines of bench_narrow.py")
    p.add_argument("--first", help="JSON lines of first_token_bound.py on the full-size file")
    p.add_argument("--versus", help="bench_vs_llama_cpp.py's JSON lines")
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-real.md"))
    args = p.parse_args()
    runs, loads, full, narrow = read(args.runs), read(args.loads), read(args.full), read(args.narrow)
    first, versus = read(args.first), read(args.versus)
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
    if full:
        lines += full_section(full, narrow, first)
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
            "planner's CPU check (`--only-if-fits` loads only what it calls fits). The full size loads here "
            "with the plan saying tight (its private memory fits; some of the file's pages are reread); "
            "`benchmarks/run_gpu_checks.sh real` loads it on a GPU machine.",
            "",
        ]
        lines += load_rows(loads)
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps({"runs": runs, "versus": versus, "loads": loads,
                                                               "full": full, "narrow": narrow, "first": first},
                                                              indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
