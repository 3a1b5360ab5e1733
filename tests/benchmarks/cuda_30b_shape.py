"""For a CUDA machine: a random-weight model with the real 30B-A3B shape in BF16 on the GPU.

Measures decode tokens/s of the parent and two nested widths (the catalog's 23B and 12B), the
switch cost after 4k thinking tokens (the parent re-prefilling prompt + thinking) as a share of
a reply, and peak GPU memory. Under 10 minutes on an H200-class GPU (about 64 GB of weights).

    python tests/benchmarks/cuda_30b_shape.py [--out docs/benchmarks-gpu.md]
    python tests/benchmarks/cuda_30b_shape.py --cpu-dry-run      # a scaled-down shape, to test the script
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from runtime.catalog import load_catalog  # noqa: E402
from runtime.config import ATTENTION, MAMBA, MLP  # noqa: E402
from runtime.elastic import count_params, parse_elastic  # noqa: E402
from runtime.model import ElasticModel  # noqa: E402
from runtime.weights import (AttentionWeights, LayerWeights, MambaWeights, MLPWeights, ModelWeights,  # noqa: E402
                             MoEWeights, submodel_views)


def rand(shape, fan_in, device, dtype, gen):
    return (torch.randn(shape, device=device, dtype=torch.float32, generator=gen) / math.sqrt(fan_in)).to(dtype)


def random_weights(cfg, device, dtype, seed=0) -> ModelWeights:
    """The parent's weights in the runtime's internal layout, random (shapes are what matter here)."""
    g = torch.Generator(device=device).manual_seed(seed)
    h, V = cfg.hidden_size, cfg.vocab_size
    G, P, N, K = cfg.n_groups, cfg.mamba_head_dim, cfg.ssm_state_size, cfg.conv_kernel
    layers = []
    for kind in cfg.layer_types:
        if kind == MAMBA:
            H = cfg.mamba_num_heads
            mixer = MambaWeights(
                in_proj=rand((2 * G * N + H * (2 * P + 1), h), h, device, dtype, g), in_bias=None,
                conv_w=rand((2 * G * N + H * P, K), K, device, dtype, g), conv_b=torch.zeros(2 * G * N + H * P, device=device, dtype=dtype),
                A=-torch.rand(H, device=device, generator=g) * 8 - 0.5, D=torch.ones(H, device=device),
                dt_bias=torch.full((H,), -2.0, device=device), norm_w=torch.ones(H * P, device=device, dtype=dtype),
                out_proj=rand((h, H * P), H * P, device, dtype, g), out_bias=None)
        elif kind == ATTENTION:
            q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
            mixer = AttentionWeights(rand((q, h), h, device, dtype, g), rand((kv, h), h, device, dtype, g),
                                     rand((kv, h), h, device, dtype, g), rand((h, q), q, device, dtype, g))
        elif kind == MLP:
            f = cfg.intermediate_size
            mixer = MLPWeights(rand((f, h), h, device, dtype, g), rand((h, f), f, device, dtype, g), None, None)
        else:
            E, F, Fs = cfg.n_routed_experts, cfg.moe_intermediate_size, cfg.moe_shared_expert_intermediate_size
            mixer = MoEWeights(router=rand((E, h), h, device, torch.float32, g),
                               router_bias=torch.zeros(E, device=device),
                               up=rand((E, F, h), h, device, dtype, g), down=rand((E, h, F), F, device, dtype, g),
                               shared=MLPWeights(rand((Fs, h), h, device, dtype, g), rand((h, Fs), Fs, device, dtype, g),
                                                 None, None))
        layers.append(LayerWeights(kind, torch.ones(h, device=device, dtype=dtype), mixer))
    return ModelWeights(rand((V, h), 1, device, dtype, g) * 0.02, layers, torch.ones(h, device=device, dtype=dtype),
                        rand((V, h), h, device, dtype, g))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_rate(model, name, prompt, n, device) -> float:
    cache = model.new_cache(name, len(prompt) + n + 1)
    logits = model.forward(name, cache, prompt)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        logits = model.forward(name, cache, [int(logits.argmax())])
    sync(device)
    return n / (time.perf_counter() - t0)


def prefill_ms(model, name, tokens, device, chunk=512) -> float:
    cache = model.new_cache(name, len(tokens) + 1)
    sync(device)
    t0 = time.perf_counter()
    for i in range(0, len(tokens), chunk):
        model.forward(name, cache, tokens[i:i + chunk])
    sync(device)
    return (time.perf_counter() - t0) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-gpu.md"))
    parser.add_argument("--cpu-dry-run", action="store_true")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--thinking", type=int, default=4096)
    args = parser.parse_args()
    started = time.time()
    fam = load_catalog().families["star-elastic-30b"]
    cfg, table = fam.config, fam.elastic
    if args.cpu_dry_run:  # the same structure, every width divided by 16
        device, dtype = torch.device("cpu"), torch.float32
        cfg = replace(cfg, hidden_size=168, mamba_num_heads=8, ssm_state_size=16, n_routed_experts=16,
                      num_experts_per_tok=2, moe_intermediate_size=112, moe_shared_expert_intermediate_size=224,
                      vocab_size=2048, num_attention_heads=4, head_dim=32)
        table = {"format": "elastic-nemotron-h/1", "submodels": [
            {"name": "30B"}, {"name": "23B", "hidden_size": 160, "mamba_num_heads": 8, "moe_intermediate_size": 96},
            {"name": "12B", "hidden_size": 128, "mamba_num_heads": 8, "n_routed_experts": 12, "moe_intermediate_size": 64}]}
        args.tokens, args.thinking = 8, 256
        name = "CPU (dry run, scaled-down shape)"
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA GPU: this script is for a CUDA machine (or pass --cpu-dry-run)")
        device, dtype = torch.device("cuda"), torch.bfloat16
        name = torch.cuda.get_device_name(device)
        torch.cuda.reset_peak_memory_stats()
    subs = parse_elastic(table, cfg)
    weights = random_weights(cfg, device, dtype)
    model = ElasticModel(Path("random-30b-shape"), cfg, {s.name: s for s in subs}, subs[0], weights,
                         {s.name: submodel_views(cfg, weights, s) for s in subs}, device, dtype)
    build_s = time.time() - started
    prompt = list(range(100, 612))
    rates = {}
    for s in subs:
        decode_rate(model, s.name, prompt[:64], 4, device)  # warm-up
        rates[s.name] = statistics.median(decode_rate(model, s.name, prompt, args.tokens, device) for _ in range(3))
    thinking = list(range(1000, 1000 + args.thinking))
    switch = statistics.median(prefill_ms(model, subs[0].name, prompt + thinking, device) for _ in range(2))
    middle, parent = subs[1].name, subs[0].name
    reply_ms = 1000 * (args.thinking / rates[middle] + 256 / rates[parent]) + switch
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else model.resident_bytes()
    active = {s.name: count_params(cfg, s).active for s in subs}
    lines = [f"# A random model with the real 30B-A3B shape on {name}", "",
             f"Written by `python tests/benchmarks/cuda_30b_shape.py`; torch {torch.__version__}, "
             f"{str(dtype).removeprefix('torch.')} weights, random values (the shape is what matters for speed). "
             f"Built in {build_s:.0f} s; whole run {time.time() - started:.0f} s. The 23B/12B widths are the catalog's "
             "estimates.", "",
             "| submodel | active params | decode tok/s | speed-up vs parent | ideal (active params) |", "|---|---|---|---|---|"]
    for s in subs:
        lines.append(f"| {s.name} | {active[s.name] / 1e9:.2f}B | {rates[s.name]:.1f} | "
                     f"{rates[s.name] / rates[parent]:.2f}x | {active[parent] / active[s.name]:.2f}x |")
    lines += ["", f"Switch after {args.thinking} thinking tokens ({middle} thinks, {parent} answers 256 tokens): "
              f"re-prefilling {len(prompt) + args.thinking} tokens took {switch:.0f} ms, "
              f"{100 * switch / reply_ms:.1f}% of a {reply_ms / 1000:.1f} s reply.", "",
              f"Peak GPU memory: {peak / 2**30:.1f} GiB (weights {model.resident_bytes() / 2**30:.1f} GiB, one copy "
              "for all three submodels).", ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
