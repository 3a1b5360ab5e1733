"""ATen ops per decode step, per layer kind, counted with torch's dispatch mode (every op a GPU
would launch as at least one kernel). Fewer ops mean less launch overhead in eager decode and a
shorter CUDA-graph capture.

    python benchmarks/count_ops.py [--json FILE]

Models: a random model with the real 52-layer pattern (`MEMEM*EMEMEM*...`) at a small width
(about 242M parameters, the issue's "held-out" shape) and the bundled demo (fp32 and NVFP4).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from runtime.checkpoint.submodels import parse_elastic  # noqa: E402
from runtime.checkpoint.weights import submodel_views  # noqa: E402
from runtime.model import ElasticModel  # noqa: E402
from runtime.store.catalog import load_catalog  # noqa: E402

# Functions that run one layer kind, in whichever module runs the step (labels by outermost call).
LABELS = {"mamba_mixer": "Mamba", "mamba_step": "Mamba", "attention": "attention", "attention_step": "attention",
          "moe": "MoE", "moe_gathered": "MoE", "mlp": "MLP", "rms_norm": "norms"}
MODULES = ("runtime.model", "runtime.decode_step")


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()
        self.ops: Counter = Counter()
        self.label: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[self.label[0] if self.label else "rest (embedding, lm_head, sampling, glue)"] += 1
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def labelled(counter: OpCounter):
    """Patches the per-kind functions so ops are counted under their layer kind; returns an undo."""
    undo = []
    for modname in MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        for attr, label in LABELS.items():
            fn = getattr(mod, attr, None)
            if fn is None or not callable(fn):
                continue

            def wrapper(*a, _fn=fn, _label=label, **k):
                counter.label.append(_label)
                try:
                    return _fn(*a, **k)
                finally:
                    counter.label.pop()
            setattr(mod, attr, wrapper)
            undo.append((mod, attr, fn))
    return lambda: [setattr(m, a, f) for m, a, f in undo]


def random_pattern_model() -> ElasticModel:
    from runtime.decode_check import random_weights

    fam = load_catalog().families["star-elastic-30b"]
    cfg = replace(fam.config, hidden_size=512, mamba_num_heads=16, mamba_head_dim=32, ssm_state_size=64, n_groups=4,
                  n_routed_experts=32, num_experts_per_tok=6, moe_intermediate_size=256,
                  moe_shared_expert_intermediate_size=512, vocab_size=8192, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64)
    subs = parse_elastic({"format": "elastic-nemotron-h/1", "submodels": [
        {"name": "242M"},
        {"name": "mid", "hidden_size": 480, "mamba_num_heads": 12, "moe_intermediate_size": 192,
         "moe_shared_expert_intermediate_size": 384},
        {"name": "small", "hidden_size": 416, "mamba_num_heads": 8, "n_routed_experts": 24,
         "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 256}]}, cfg)
    w = random_weights(cfg, torch.device("cpu"), torch.float32)
    return ElasticModel(Path("random-242m"), cfg, {s.name: s for s in subs}, subs[0], w,
                        {s.name: submodel_views(cfg, w, s) for s in subs}, torch.device("cpu"), torch.float32)


def count_step(model: ElasticModel, name: str) -> dict:
    """Ops of one cached decode step (after a 16-token prefill), by layer kind."""
    cache = model.new_cache(name, 64)
    model.forward(name, cache, list(range(3, 19)))
    model.decoder(name, cache)  # made (and its one-off self-tests run) before counting
    counter = OpCounter()
    undo = labelled(counter)
    try:
        with counter:
            model.forward(name, cache, [7])
    finally:
        undo()
    kinds = Counter(model.config.layer_types)
    out = {"total": sum(counter.counts.values()), "by_kind": dict(counter.counts),
           "layers": dict(kinds), "top_ops": dict(counter.ops.most_common(12))}
    return out


def moe_formulations(model: ElasticModel) -> dict:
    """Ops of one decode MoE layer (NVFP4 experts): gathering the k chosen experts while packed
    against a dense mask over all E experts (every expert dequantized and multiplied, weighted by a
    mask that is zero off the chosen k)."""
    from runtime.checkpoint.quant import dense
    from runtime.moe import mlp, moe_gathered, relu2, route

    def dense_mask(x, w, cfg):
        ids, weights = route(x, w, cfg)
        gate = torch.zeros(x.shape[0], w.router.shape[0], device=x.device).scatter(1, ids, weights)  # (T, E)
        h = relu2(torch.einsum("efh,th->tef", dense(w.up, x.dtype), x))
        out = torch.einsum("ehf,tef->teh", dense(w.down, x.dtype), h)
        return (gate[..., None] * out.float()).sum(1).to(x.dtype) + mlp(x, w.shared)

    layer = next(layer for layer in model.weights.layers if layer.kind == "moe")
    x = torch.randn(1, model.config.hidden_size)
    out = {}
    for label, fn in (("gather packed experts", moe_gathered), ("dense mask over all experts", dense_mask)):
        counter = OpCounter()
        with counter, torch.inference_mode():
            fn(x, layer.mixer, model.config)
        out[label] = sum(counter.counts.values())
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    model = random_pattern_model()
    results["random 242M, real 52-layer pattern, parent"] = count_step(model, "242M")
    for folder, label in ((ROOT / "assets" / "demo", "demo fp32"), (ROOT / "assets" / "demo-nvfp4", "demo NVFP4")):
        m = ElasticModel.load(folder)
        results[f"{label}, parent"] = count_step(m, m.parent.name)
    moe = moe_formulations(ElasticModel.load(ROOT / "assets" / "demo-nvfp4"))
    results["demo NVFP4, one MoE layer"] = {"total": None, "formulations": moe}
    print(f"one NVFP4 MoE layer of the demo: {moe}")
    for label, r in list(results.items())[:3]:
        per = {k: v for k, v in sorted(r["by_kind"].items())}
        print(f"{label}: {r['total']} ops per step; by kind {per}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v["total"] for k, v in results.items()}))


if __name__ == "__main__":
    main()
