"""For a CUDA machine: random-weight models with the real 30B-A3B shape, decoded eagerly and as
CUDA graphs, in BF16 and with NVFP4-packed weights (on the GPU's dequantizing path unless it is a
Blackwell card).

For every submodel (30B, and the catalog's 23B and 12B widths) and both formats it measures greedy
decode tokens/s eagerly and with graph replay (the engine's own DecodeStep and device sampler), the
graph speed-up, the share of the bandwidth limit (active weight bytes per token over the card's
measured copy bandwidth), and checks that graph replay chooses exactly the eager tokens. Then the
switch cost after 4k thinking tokens and peak memory. About 3 minutes on an H200 (64 GB of BF16
weights, then 18 GB of NVFP4).

    python benchmarks/cuda_30b_shape.py [--out docs/benchmarks-gpu.md]
    python benchmarks/cuda_30b_shape.py --cpu-dry-run      # a scaled-down shape, to test the script
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from runtime.checkpoint.quant import QuantSpec  # noqa: E402
from runtime.checkpoint.submodels import parse_elastic  # noqa: E402
from runtime.checkpoint.weights import MoEWeights, submodel_views  # noqa: E402
from runtime.decode_check import random_weights  # noqa: E402
from runtime.model import ElasticModel  # noqa: E402
from runtime.sampling import DeviceSampler, SamplingSettings  # noqa: E402
from runtime.store.catalog import load_catalog  # noqa: E402

GREEDY = SamplingSettings(temperature=0)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.nbytes
    if hasattr(obj, "tensors"):  # packed weights
        return obj.nbytes
    if hasattr(obj, "__dataclass_fields__"):
        return sum(nbytes(getattr(obj, f.name)) for f in fields(obj))
    if isinstance(obj, list):
        return sum(nbytes(x) for x in obj)
    return 0


def active_bytes(cfg, w) -> int:
    """Weight bytes one decode step must read: everything but the embedding table (one row is read)
    and the routed experts not chosen (k of E)."""
    total = nbytes(w.lm_head) + nbytes(w.norm_f) + w.embed.shape[1] * w.embed.element_size()
    for layer in w.layers:
        m = layer.mixer
        total += nbytes(layer.norm)
        if isinstance(m, MoEWeights):
            E = m.router.shape[0]
            total += nbytes(m.router) + nbytes(m.router_bias) + nbytes(m.shared)
            total += (nbytes(m.up) + nbytes(m.down)) * cfg.num_experts_per_tok // E
        else:
            total += nbytes(m)
    return total


def copy_bandwidth(device) -> float:
    """Bytes/s of a large device-to-device copy (reads + writes): the card's practical bandwidth."""
    if device.type != "cuda":
        return float("nan")
    n = 2 ** 30
    a, b = torch.empty(n, dtype=torch.uint8, device=device), torch.empty(n, dtype=torch.uint8, device=device)
    b.copy_(a)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    sync(device)
    rate = 2 * n * 10 / (time.perf_counter() - t0)
    del a, b
    return rate


def decode(model, name, prompt, n, warm=2):
    """Greedy tokens and tokens/s of `n` steps after `warm` untimed ones (which capture the graph)."""
    cache = model.new_cache(name, len(prompt) + warm + n + 1)
    logits = model.forward(name, cache, prompt)
    step = model.decoder(name, cache)
    sampler = DeviceSampler(GREEDY, model.device)
    tokens = []
    for _ in range(warm):
        logits = step.send(sampler.on_device(logits))
        tokens.append(step.receive())
    sync(model.device)
    t0 = time.perf_counter()
    for _ in range(n):
        logits = step.send(sampler.on_device(logits))
        tokens.append(step.receive())
    sync(model.device)
    return tokens, n / (time.perf_counter() - t0)


def prefill_ms(model, name, tokens, device, chunk=512) -> float:
    cache = model.new_cache(name, len(tokens) + 1)
    sync(device)
    t0 = time.perf_counter()
    for i in range(0, len(tokens), chunk):
        model.forward(name, cache, tokens[i:i + chunk])
    sync(device)
    return (time.perf_counter() - t0) * 1000


def build(cfg, subs, device, dtype, quant):
    weights = random_weights(cfg, device, dtype, quant)
    views = {s.name: submodel_views(cfg, weights, s) for s in subs}
    graph = ElasticModel(Path("random-30b-shape"), cfg, {s.name: s for s in subs}, subs[0], weights, views, device,
                         dtype, quant)
    eager = ElasticModel(Path("random-30b-shape"), cfg, {s.name: s for s in subs}, subs[0], weights, views, device,
                         dtype, quant)
    eager.graphs.disable("the eager baseline")
    return graph, eager


def measure(fmt, cfg, subs, device, dtype, quant, args, bandwidth, rows, log):
    t0 = time.time()
    graph, eager = build(cfg, subs, device, dtype, quant)
    log(f"{fmt}: built in {time.time() - t0:.0f} s; matmuls: {graph.compute_path()}")
    prompt = list(range(100, 164))
    for s in subs:
        eager_tokens, eager_rate = decode(eager, s.name, prompt, args.eager_tokens)
        graph_tokens, graph_rate = decode(graph, s.name, prompt, args.tokens)
        n = min(len(eager_tokens), len(graph_tokens))
        active = active_bytes(cfg, graph.views[s.name])
        limit = bandwidth / active
        rows.append({"format": fmt, "submodel": s.name, "active_weight_gb": round(active / 1e9, 3),
                     "eager_tok_s": round(eager_rate, 1), "graph_tok_s": round(graph_rate, 1),
                     "speedup": round(graph_rate / eager_rate, 2), "limit_tok_s": round(limit, 1),
                     "share_of_limit": round(graph_rate / limit, 3),
                     "same_tokens": eager_tokens[:n] == graph_tokens[:n],
                     "compared_tokens": n, "decode_path": graph.decode_path(), "matmul_path": graph.compute_path()})
        log(json.dumps(rows[-1]))
    extra = {}
    if fmt == "BF16":
        thinking = list(range(1000, 1000 + args.thinking))
        extra["switch_ms"] = prefill_ms(graph, subs[0].name, prompt * 8 + thinking, device)
        extra["switch_tokens"] = len(prompt) * 8 + args.thinking
        extra["weights_gib"] = graph.resident_bytes() / 2 ** 30
    del graph, eager
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return extra


def dry_run_shape(cfg):
    """The 30B-A3B's structure with every width divided by 16 (a CPU dry run): (config, elastic table)."""
    cfg = replace(cfg, hidden_size=176, mamba_num_heads=8, ssm_state_size=16, n_routed_experts=16,
                  num_experts_per_tok=2, moe_intermediate_size=112, moe_shared_expert_intermediate_size=224,
                  vocab_size=2048, num_attention_heads=4, head_dim=32)
    table = {"format": "elastic-nemotron-h/1", "submodels": [
        {"name": "30B"}, {"name": "23B", "hidden_size": 160, "mamba_num_heads": 8, "moe_intermediate_size": 96},
        {"name": "12B", "hidden_size": 128, "mamba_num_heads": 8, "n_routed_experts": 12,
         "moe_intermediate_size": 64}]}
    return cfg, table


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-gpu.md"))
    parser.add_argument("--cpu-dry-run", action="store_true")
    parser.add_argument("--tokens", type=int, default=128, help="timed graph steps per submodel")
    parser.add_argument("--eager-tokens", type=int, default=24, help="timed eager steps per submodel")
    parser.add_argument("--thinking", type=int, default=4096)
    parser.add_argument("--formats", default="BF16,NVFP4")
    args = parser.parse_args()
    started = time.time()
    fam = load_catalog().families["star-elastic-30b"]
    cfg, table = fam.config, fam.elastic
    if args.cpu_dry_run:  # the same structure, every width divided by 16
        device, dtype = torch.device("cpu"), torch.float32
        cfg, table = dry_run_shape(cfg)
        args.tokens, args.eager_tokens, args.thinking = 6, 4, 64
        torch.set_flush_denormal(True)  # decaying random SSM states reach subnormals, which crawl on a CPU
        torch.set_num_threads(1)  # tiny matmuls: threads only contend
        where = "CPU (dry run, scaled-down shape)"
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA GPU: this script is for a CUDA machine (or pass --cpu-dry-run)")
        device, dtype = torch.device("cuda"), torch.bfloat16
        where = torch.cuda.get_device_name(device)
        torch.cuda.reset_peak_memory_stats()
    subs = parse_elastic(table, cfg)
    bandwidth = copy_bandwidth(device)
    rows, extra = [], {}
    for fmt in args.formats.split(","):
        quant = None if fmt == "BF16" else QuantSpec(fmt, 16, ("lm_head",))
        extra.update(measure(fmt, cfg, subs, device, dtype, quant, args, bandwidth, rows, print))
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    lines = [f"# The real 30B-A3B shape on {where}: eager decode against CUDA graphs", "",
             f"Written by `python benchmarks/cuda_30b_shape.py` (run by `benchmarks/run_gpu_checks.sh`); "
             f"torch {torch.__version__}, random weights (the shape is what matters for speed), "
             f"greedy decoding through the engine's own decode step and device sampler after a 64-token prompt. "
             f"Whole run {time.time() - started:.0f} s. The 23B/12B widths are the catalog's estimates.", "",
             f"Bandwidth limit = the card's measured copy bandwidth ({bandwidth / 1e12:.2f} TB/s) / "
             "the weight bytes one step reads (lm_head, every dense weight, k of E experts; "
             "the embedding table only by one row). "
             "NVFP4 runs on this GPU's matmul path (named below); the experts are gathered packed and dequantized.", "",
             "| format | submodel | active weights | eager tok/s | graph tok/s | speed-up | limit tok/s "
             "| share of limit | graph tokens = eager |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['format']} | {r['submodel']} | {r['active_weight_gb']:.2f} GB | {r['eager_tok_s']} | "
                     f"{r['graph_tok_s']} | {r['speedup']}x | {r['limit_tok_s']} | {100 * r['share_of_limit']:.0f}% | "
                     f"{'yes' if r['same_tokens'] else 'NO'} ({r['compared_tokens']} tokens) |")
    paths = sorted({(r["format"], r["matmul_path"], r["decode_path"]) for r in rows})
    lines += [""] + [f"- {fmt}: matmuls \"{m}\", decode \"{d}\"" for fmt, m, d in paths]
    if "switch_ms" in extra:
        lines += ["", f"Switch: the parent re-prefilling {extra['switch_tokens']} tokens (prompt + thinking, chunks of "
                      f"512, BF16) took {extra['switch_ms']:.0f} ms."]
        lines += ["", f"Memory: BF16 weights {extra['weights_gib']:.1f} GiB for all three submodels (one copy); "
                      f"peak GPU memory over the run {peak / 2 ** 30:.1f} GiB."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps({"device": where, "bandwidth_bytes_s": bandwidth,
                                                               "rows": rows, **extra}, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
