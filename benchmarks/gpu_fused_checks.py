"""For a CUDA machine: the fused Triton kernels against today's path, in one process and one time budget
(run by `benchmarks/run_gpu_checks.sh fused`; nothing is installed or downloaded).

    python benchmarks/gpu_fused_checks.py [--jsonl FILE] [--budget 480] [--formats NVFP4,FP8]
    python benchmarks/gpu_fused_checks.py --cpu-dry-run    # 8 layers of a scaled-down shape, interpreted

Stages, most important first; one that the remaining budget cannot fit is skipped with a line saying so:

    decode NVFP4   random weights in the real 30B-A3B layout on the GPU; per submodel, greedy tokens/s
                   eagerly and with CUDA graphs on today's path (ELASTIC_CHAT_KERNEL=torch: dequantize)
                   and on the fused kernels (=triton), and on the engine's own choice when that differs
                   (a native matmul); the share of the bandwidth limit (the weight bytes one token reads
                   over the card's streaming-read rate, measured in this process); whether graph replay
                   chose the eager tokens, and how many greedy tokens the fused kernels share with the
                   reference path, and the largest logit difference after the prompt
    kernel-check   `kernel-check --device cuda` for nvfp4 and fp8, triton and torch (the CLI contract)
    decode FP8     as for NVFP4
    plans          GB/s of a few launch plans of the one-token kernels at the real shapes, timed as
                   replayed graphs: the numbers to tune plan_rows with

Every result is one JSON line (the "stage" field says which) on stdout and in --jsonl as it is made.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if "--cpu-dry-run" in sys.argv:  # the kernels then run in Triton's interpreter: set before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from benchmarks.cuda_30b_shape import active_bytes, build, decode, dry_run_shape  # noqa: E402
from runtime import cli, kernel_check, kernels, matmul  # noqa: E402
from runtime.checkpoint.quant import QuantSpec  # noqa: E402
from runtime.checkpoint.submodels import parse_elastic  # noqa: E402
from runtime.store.catalog import load_catalog  # noqa: E402

PROMPT = list(range(100, 164))  # the dry run takes its first 8
ESTIMATE = {"decode": 150, "kernel-check": 100, "plans": 60}  # seconds a stage may take on an H200


class Report:
    def __init__(self, path: str | None, budget: float):
        self.file = open(path, "a") if path else None
        self.start, self.budget = time.time(), budget

    def __call__(self, stage: str, **row) -> None:
        line = json.dumps({"stage": stage, **row})
        print(line, flush=True)
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()

    def fits(self, stage: str, what: str) -> bool:
        left = self.budget - (time.time() - self.start)
        if left >= ESTIMATE[stage]:
            return True
        self("skipped", what=what, why=f"{left:.0f} s of the {self.budget:.0f} s budget left, the stage takes "
                                       f"about {ESTIMATE[stage]} s")
        return False


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill_logits(model, name: str, prompt: list[int]) -> torch.Tensor:
    cache = model.new_cache(name, len(prompt) + 1)
    with torch.inference_mode():
        return model.forward(name, cache, prompt).float().clone()


def leading_equal(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def decode_stage(fmt: str, cfg, subs, decoded, device, dtype, args, bandwidth: float, report: Report) -> None:
    """`decoded`: the submodels to decode (of `subs`, the model's)."""
    t0 = time.time()
    graph, eager = build(cfg, subs, device, dtype, QuantSpec(fmt, 16, ("lm_head",)))
    matmul.force("auto")
    auto = matmul.describe(device, fmt)  # runs the engine's self-tests on this GPU
    report("choice", format=fmt, path=auto.path, prefill=auto.prefill or auto.path, experts=auto.experts,
           label=auto.label, note=auto.note, built_s=round(time.time() - t0, 1))
    kinds = ["torch", "triton"] + (["auto"] if auto.path not in ("dequantize", "fused") else [])
    results = {}
    for kind in kinds:
        matmul.force(kind)
        try:
            for s in decoded:
                report("decode", **_decode_row(fmt, kind, s.name, graph, eager, cfg, args, bandwidth, results))
        except Exception as e:  # a path that fails on this GPU: its reason, then the next path
            report("decode", format=fmt, kernel=kind, error=f"{type(e).__name__}: {e}"[:300])
        finally:
            matmul.force(None)
    del graph, eager
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _decode_row(fmt, kind, name, graph, eager, cfg, args, bandwidth, results) -> dict:
    logits = prefill_logits(eager, name, args.prompt)
    eager_tokens, eager_rate = decode(eager, name, args.prompt, args.eager_tokens)
    graph_tokens, graph_rate = decode(graph, name, args.prompt, args.tokens)
    results[kind, name] = (graph_tokens, logits)
    limit = bandwidth * 1e9 / active_bytes(cfg, graph.views[name])
    row = {"format": fmt, "kernel": kind, "submodel": name, "matmul_path": graph.compute_path(),
           "decode_path": graph.decode_path(), "eager_tok_s": round(eager_rate, 1),
           "graph_tok_s": round(graph_rate, 1), "limit_tok_s": round(limit, 1),
           "share_of_limit": round(graph_rate / limit, 3),
           "graph_equals_eager": eager_tokens == graph_tokens[:len(eager_tokens)]}
    if kind != "torch" and ("torch", name) in results:
        ref_tokens, ref_logits = results["torch", name]
        row["tokens_equal_reference"] = leading_equal(graph_tokens, ref_tokens)
        row["tokens_compared"] = len(graph_tokens)
        row["prefill_logits_max_rel_diff"] = float((logits - ref_logits).abs().max() / ref_logits.abs().max())
    return row


def kernel_check_stage(device, report: Report, dry_run: bool) -> None:
    """The CLI itself (cli.main), its JSON lines captured: the contract, in this process."""
    shape = ["--rows", "64", "--cols", "2688"] if dry_run else []
    for fmt in ("nvfp4", "fp8"):
        for kernel in ("triton", "torch"):
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    cli.main(["kernel-check", "--format", fmt, "--kernel", kernel, "--device", device.type,
                              *shape, "--json"])
            except SystemExit as e:  # a refusal (e.g. a backend that cannot run here) is a result too
                report("kernel-check", format=fmt, kernel=kernel, error=f"exit {e.code}")
            for line in out.getvalue().splitlines():
                report("kernel-check", **json.loads(line))


def plans_stage(device, report: Report, deadline: float, dry_run: bool) -> None:
    """GB/s of launch plans of the one-token kernels, each timed as a replayed graph over weights
    cycled past the L2 cache: the numbers to tune plan_rows (runtime/kernels/triton_fused.py) with."""
    fused = kernels.backend("triton")
    g = torch.Generator().manual_seed(0)
    shapes = {"mamba.in_proj": (10304, 2688), "shared.down": (2688, 3712), "expert.down": (2688, 1856)}
    plans = [None] + [fused.Plan(n, bb, s) for n in (8, 16, 32) for bb in (128, 256, 512) for s in (1, 2)]
    if dry_run:
        shapes, plans = {"small": (64, 256)}, [None, fused.Plan(8, 128, 2)]
    for fmt in ("nvfp4", "fp8"):
        for case, (N, K) in shapes.items():
            one = kernel_check.random_weight(fmt, (N, K), g, device)
            ws = [one] + [kernel_check.random_weight(fmt, (N, K), g, device)
                          for _ in range(0 if dry_run else kernel_check.STREAM_BYTES // one.nbytes - 1)]
            x = torch.randn(1, K, generator=g).to(device, torch.bfloat16)
            for plan in plans:
                if time.time() > deadline:
                    report("skipped", what="the rest of the plans", why="the budget is spent")
                    return
                run = fused.run_nvfp4 if fmt == "nvfp4" else fused.run_fp8
                args = [(x, w.packed, w.scale, w.scale2, None) if fmt == "nvfp4" else (x, w.weight, w.scale, None)
                        for w in ws]
                chosen = plan or (fused.plan_rows(device, N, K // 2 if fmt == "nvfp4" else K, 1))
                try:
                    replay, timing = kernel_check.graphed(lambda: [run(*a, plan=chosen) for a in args], device)
                    seconds = _best(replay, device)
                    report("plans", format=fmt, case=case, shape=[N, K], plan=vars(chosen), default=plan is None,
                           timing=timing, gb_per_s=round(sum(w.nbytes for w in ws) / seconds / 1e9, 1))
                except Exception as e:  # a plan that does not compile or launch: its reason, and go on
                    report("plans", format=fmt, case=case, plan=vars(chosen), error=f"{type(e).__name__}: {e}"[:200])


def _best(fn, device, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jsonl", help="append every result line to this file too")
    parser.add_argument("--budget", type=float, default=480, help="seconds for all stages (default 480)")
    parser.add_argument("--formats", default="NVFP4,FP8")
    parser.add_argument("--tokens", type=int, default=64, help="timed graph steps per submodel")
    parser.add_argument("--eager-tokens", type=int, default=8, help="timed eager steps per submodel")
    parser.add_argument("--cpu-dry-run", action="store_true")
    args = parser.parse_args()
    args.prompt = PROMPT
    report = Report(args.jsonl, args.budget)
    cfg = load_catalog().families["star-elastic-30b"].config
    table = load_catalog().families["star-elastic-30b"].elastic
    if args.cpu_dry_run:
        device, dtype = torch.device("cpu"), torch.float32
        cfg, table = dry_run_shape(cfg)
        cfg = replace(cfg, layer_types=cfg.layer_types[:8])  # Mamba, MoE and attention, in the real order
        args.tokens, args.eager_tokens, args.prompt = 1, 1, PROMPT[:4]
        torch.set_flush_denormal(True)
        torch.set_num_threads(1)
        for stage in ESTIMATE:
            ESTIMATE[stage] = 0  # the dry run checks the script, not the time
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: this script is for a CUDA machine (or pass --cpu-dry-run)")
    else:
        device, dtype = torch.device("cuda"), torch.bfloat16
    subs = parse_elastic(table, cfg)
    bandwidth = kernel_check.streaming_read(device)
    report("device", name=torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)",
           capability=list(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None,
           torch=torch.__version__, triton=_version("triton"), bandwidth_gb_per_s=round(bandwidth, 1),
           budget_s=args.budget)
    formats = args.formats.split(",")
    decoded = subs[-1:] if args.cpu_dry_run else subs  # interpreted kernels are slow: the nested 12B only
    if report.fits("decode", f"decode {formats[0]}"):
        decode_stage(formats[0], cfg, subs, decoded, device, dtype, args, bandwidth, report)
    if report.fits("kernel-check", "kernel-check"):
        kernel_check_stage(device, report, args.cpu_dry_run)
    for fmt in formats[1:]:
        if report.fits("decode", f"decode {fmt}"):
            decode_stage(fmt, cfg, subs, decoded, device, dtype, args, bandwidth, report)
    if report.fits("plans", "plans"):
        plans_stage(device, report, report.start + args.budget if not args.cpu_dry_run else time.time() + 60,
                    args.cpu_dry_run)
    report("done", seconds=round(time.time() - report.start, 1))
    return 0


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
