"""The runtime's benchmarks, side by side in one process (medians of several runs):

1. decode and prefill tokens/s of the runtime against transformers' `generate` (greedy, same
   prompt, same number of new tokens), on the demo checkpoint and on a ~93M-parameter random
   NemotronH with nested widths shaped like the real 30B / 23B / 12B;
2. decode speed of each submodel relative to the parent, against the ideal ratio of active parameters;
3. the switch: re-prefill time after 128, 512 and 2048 thinking tokens, as a share of the reply;
4. memory: all submodels ready from one resident copy, against separately extracted models;
5. where the time goes in one decode step (Mamba, attention, MoE, MLP, norms, lm_head, sampling,
   the rest being Python overhead);
6. elastic against standard budget control on the demo task (from docs/results/demo-eval.json).

    python benchmarks/bench_runtime.py [--quick] [--out docs/benchmarks]

Writes OUT.md, OUT.json and OUT.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from markdown_table import table_head, table_row

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from runtime import ElasticModel  # noqa: E402
from runtime.checkpoint.config import count_params  # noqa: E402
from runtime.checkpoint.weights import resident_bytes  # noqa: E402

DEMO = ROOT / "assets" / "demo"
RANDOM_CONFIG = dict(
    vocab_size=8192, hidden_size=768, hybrid_override_pattern="MEM*EMEM*E", num_attention_heads=12,
    num_key_value_heads=2, head_dim=64, mamba_num_heads=24, mamba_head_dim=32, ssm_state_size=64, n_groups=4,
    chunk_size=64, n_routed_experts=20, num_experts_per_tok=4, moe_intermediate_size=512,
    moe_shared_expert_intermediate_size=1024, routed_scaling_factor=2.5, bos_token_id=1, eos_token_id=4,
    pad_token_id=0)
# Width ratios of the catalog's 23B and 12B against the 30B (hidden .95/.81, heads .75/.63, ...).
RANDOM_SUBMODELS = [
    {"name": "93M"},
    {"name": "72M", "hidden_size": 736, "mamba_num_heads": 20, "n_routed_experts": 20, "moe_intermediate_size": 384,
     "moe_shared_expert_intermediate_size": 784},
    {"name": "44M", "hidden_size": 624, "mamba_num_heads": 16, "n_routed_experts": 16, "moe_intermediate_size": 288,
     "moe_shared_expert_intermediate_size": 576},
]


def random_checkpoint(folder: Path) -> Path:
    from transformers import NemotronHConfig, NemotronHForCausalLM

    from tests.checkpoints import CORPUS
    from training.tokenizer import build_tokenizer

    torch.manual_seed(0)
    model = NemotronHForCausalLM(NemotronHConfig(**RANDOM_CONFIG))
    model.save_pretrained(folder)
    (folder / "elastic.json").write_text(json.dumps({"format": "elastic-nemotron-h/1", "submodels": RANDOM_SUBMODELS}))
    build_tokenizer(CORPUS, 512, folder)
    return folder


# ----------------------------------------------------------------------------- 1, 2: speed

def runtime_speed(model, name, prompt, n):
    cache = model.new_cache(name, len(prompt) + n + 1)
    t0 = time.perf_counter()
    logits = model.forward(name, cache, prompt)
    t1 = time.perf_counter()
    for _ in range(n):
        logits = model.forward(name, cache, [int(logits.argmax())])
    t2 = time.perf_counter()
    return len(prompt) / (t1 - t0), n / (t2 - t1)


def transformers_speed(ref, prompt, n):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        t0 = time.perf_counter()
        ref(ids)
        t1 = time.perf_counter()
        ref.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
        t2 = time.perf_counter()
    return len(prompt) / (t1 - t0), n / ((t2 - t1) - (t1 - t0))


def speed_table(folder: Path, label: str, prompt_len: int, new: int, runs: int) -> list[dict]:
    from transformers import NemotronHForCausalLM

    model = ElasticModel.load(folder)
    ref = NemotronHForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    prompt = torch.randint(5, min(300, model.config.vocab_size), (prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    samples = {"transformers": []} | {n: [] for n in model.views}
    for run in range(runs + 1):
        results = {"transformers": transformers_speed(ref, prompt, new)}
        for name in model.views:
            results[name] = runtime_speed(model, name, prompt, new)
        if run:  # run 0 warms up
            for k, v in results.items():
                samples[k].append(v)
    parent = next(iter(model.views))
    active = {n: count_params(model.config, model.submodels[n]).active for n in model.views}
    ref_pre = statistics.median(p for p, _ in samples["transformers"])
    ref_dec = statistics.median(d for _, d in samples["transformers"])
    rows = [{"model": label, "engine": "transformers generate", "submodel": parent, "prefill_tok_s": round(ref_pre, 1),
             "decode_tok_s": round(ref_dec, 1)}]
    parent_dec = statistics.median(d for _, d in samples[parent])
    for name in model.views:
        pre = statistics.median(p for p, _ in samples[name])
        dec = statistics.median(d for _, d in samples[name])
        ideal = active[parent] / active[name]
        rows.append({"model": label, "engine": "runtime", "submodel": name, "active_params": active[name],
                     "prefill_tok_s": round(pre, 1), "decode_tok_s": round(dec, 1),
                     "decode_vs_transformers": round(dec / ref_dec, 2),
                     "prefill_vs_transformers": round(pre / ref_pre, 2),
                     "speedup_vs_parent": round(dec / parent_dec, 3), "ideal_speedup": round(ideal, 3),
                     "share_of_ideal": round((dec / parent_dec) / ideal, 3)})
    return rows


# ----------------------------------------------------------------------------- 3: the switch

def switch_table(folder: Path, thinking_lengths, answer_tokens: int) -> list[dict]:
    from runtime.engine import Engine
    from runtime.events import Done, Switch
    from runtime.generate import ChatRequest, stream_chat
    from runtime.sampling import SamplingSettings

    engine = Engine.load(folder, max_context=max(thinking_lengths) + answer_tokens + 512)
    names = engine.submodels_by_size()
    sp = engine.chat.special

    def no_end(context, logits):
        logits = logits.clone()
        logits[..., [sp.think_end, *sp.end_of_turn]] = float("-inf")
        return logits

    rows = []
    for t in thinking_lengths:
        request = ChatRequest(({"role": "user", "content": "Think about this for a long while, then answer."},),
                              names[1], names[-1], t, t + answer_tokens + 40, SamplingSettings(temperature=0),
                              logits_processors=(no_end,))
        engine.caches.clear()
        started = time.perf_counter()
        switch = done = None
        for event in stream_chat(engine, request):
            if isinstance(event, Switch):
                switch = event
            elif isinstance(event, Done):
                done = event
        total = (time.perf_counter() - started) * 1000
        rows.append({"thinking_tokens": done.thinking_tokens, "answer_tokens": done.answer_tokens,
                     "reprefill_tokens": switch.reprefill_tokens, "switch_ms": round(switch.ms, 1),
                     "reply_ms": round(total, 1), "switch_share": round(switch.ms / total, 4),
                     "think": names[1], "answer": names[-1]})
    return rows


# ----------------------------------------------------------------------------- 4: memory

def memory_table(folder: Path, label: str) -> dict:
    model = ElasticModel.load(folder)
    parent_alone = resident_bytes(model.weights)
    all_ready = model.resident_bytes()
    separate = {n: resident_bytes(ElasticModel.load(folder, resident=n).weights) for n in model.views}
    return {"model": label, "parent_alone_bytes": parent_alone, "all_submodels_one_copy_bytes": all_ready,
            "one_copy_vs_parent": round(all_ready / parent_alone, 4), "separate_models_bytes": sum(separate.values()),
            "separate_vs_parent": round(sum(separate.values()) / parent_alone, 3), "per_submodel_bytes": separate}


# ----------------------------------------------------------------------------- 5: profile

def profile_step(folder: Path, steps: int = 200) -> dict:
    from runtime.sampling import DeviceSampler, SamplingSettings

    model = ElasticModel.load(folder)
    name = next(iter(model.views))
    spent: dict[str, float] = {}
    originals = {}

    def timed(label, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
            return out
        return wrapper

    import runtime.decode_step as step  # decode runs the step's functions; prefill runs model.py's

    for attr, label in (("mamba_step", "Mamba-2 mixer"), ("attention_step", "attention"), ("moe_gathered", "MoE"),
                        ("mlp", "dense MLP"), ("rms_norm", "RMSNorms"), ("linear", "lm_head")):
        originals[attr] = getattr(step, attr)
        setattr(step, attr, timed(label, originals[attr]))
    sample = timed("sampling", DeviceSampler(SamplingSettings(temperature=0.7, top_p=0.95, seed=0)))
    try:
        cache = model.new_cache(name, steps + 64)
        logits = model.forward(name, cache, list(range(5, 37)))
        spent.clear()
        t0 = time.perf_counter()
        for _ in range(steps):
            logits = model.forward(name, cache, [sample(logits)])
        total = time.perf_counter() - t0
    finally:
        for attr, fn in originals.items():
            setattr(step, attr, fn)
    parts = {k: round(1000 * v / steps, 4) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
    parts["Python overhead (the rest)"] = round(1000 * total / steps - sum(parts.values()), 4)
    return {"submodel": name, "ms_per_step": round(1000 * total / steps, 3), "parts_ms": parts}


# ----------------------------------------------------------------------------- report

def write_plot(rows, path: Path) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    groups = {}
    for r in rows:
        groups.setdefault(r["model"], []).append(r)
    W, H = 1000, 400
    image = QImage(W, H, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.setFont(QFont("Sans", 9))
    for k, (model, rs) in enumerate(groups.items()):
        x0, y0, w, h = 60 + k * W / 2, 40, W / 2 - 100, H - 110
        top = max(r["decode_tok_s"] for r in rs) * 1.15
        p.setPen(QColor("#333"))
        p.drawText(QRectF(x0, 8, w, 24), Qt.AlignmentFlag.AlignCenter, f"decode tokens/s: {model}")
        p.drawLine(int(x0), int(y0 + h), int(x0 + w), int(y0 + h))
        bw = w / len(rs)
        for i, r in enumerate(rs):
            bh = h * r["decode_tok_s"] / top
            color = "#9ca3af" if r["engine"] != "runtime" else "#76b900"
            p.fillRect(QRectF(x0 + i * bw + 6, y0 + h - bh, bw - 12, bh), QColor(color))
            label = ("transformers" if r["engine"] != "runtime" else r["submodel"])
            p.drawText(QRectF(x0 + i * bw, y0 + h + 4, bw, 16), Qt.AlignmentFlag.AlignCenter, label)
            p.drawText(QRectF(x0 + i * bw, y0 + h - bh - 18, bw, 16), Qt.AlignmentFlag.AlignCenter,
                       f"{r['decode_tok_s']:.0f}")
    p.drawText(QRectF(0, H - 40, W, 20), Qt.AlignmentFlag.AlignCenter,
               "grey: transformers generate (parent); green: this runtime, parent and nested submodels")
    p.end()
    image.save(str(path))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer tokens and runs (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    runs = 1 if args.quick else args.runs
    work = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    random_folder = random_checkpoint(work / "random-93m")
    speed = speed_table(DEMO, "demo (1.5M)", 256, 32 if args.quick else 128, runs)
    speed += speed_table(random_folder, "random 93M", 256, 16 if args.quick else 64, runs)
    lengths = (32, 64) if args.quick else (128, 512, 2048)
    switch = switch_table(random_folder, lengths, 32 if args.quick else 128)
    memory = [memory_table(DEMO, "demo (1.5M)"), memory_table(random_folder, "random 93M")]
    profile = {"demo (1.5M)": profile_step(DEMO, 50 if args.quick else 200),
               "random 93M": profile_step(random_folder, 20 if args.quick else 60)}
    demo_eval = json.loads((ROOT / "docs" / "results" / "demo-eval.json").read_text())
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}", "runs": runs,
            "quick": args.quick}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "speed": speed, "switch": switch,
                                                    "memory": memory, "profile": profile}, indent=2) + "\n")
    write_plot(speed, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(report(meta, speed, switch, memory, profile, demo_eval))
    print(out.with_suffix(".md").read_text())


def report(meta, speed, switch, memory, profile, demo_eval) -> str:
    L = ["# Runtime benchmarks", "",
         f"Written by `python benchmarks/bench_runtime.py` on {meta['machine']} (fp32, CPU); medians of "
         f"{meta['runs']} runs measured side by side in one process. "
         "Targets from the issue are quoted with each table.",
         "", "![decode speed](benchmarks.png)", "",
         "## Decode and prefill against transformers `generate` (target: faster; aim 2x)", "",
         "256-token prompt, greedy. transformers' decode rate is its `generate` time minus its own prefill.", "",
         *table_head("model", "engine", "submodel", "prefill tok/s", "decode tok/s", "decode vs transformers",
                     "prefill vs transformers")]
    for r in speed:
        L.append(table_row(r["model"], r["engine"], r["submodel"], r["prefill_tok_s"], r["decode_tok_s"],
                           r.get("decode_vs_transformers", "–"), r.get("prefill_vs_transformers", "–")))
    L += ["", "## Each submodel against its ideal (target: at least 70% of the ideal speed-up)", "",
          "Ideal speed-up = the parent's active parameters / the submodel's. "
          "Share of ideal = measured speed-up / ideal.", "",
          *table_head("model", "submodel", "active params", "speed-up vs parent", "ideal", "share of ideal")]
    for r in speed:
        if r["engine"] == "runtime":
            L.append(table_row(r["model"], r["submodel"], f"{r['active_params'] / 1e6:.2f}M",
                               f"{r['speedup_vs_parent']}x", f"{r['ideal_speedup']}x",
                               f"{100 * r['share_of_ideal']:.0f}%"))
    L += ["", "## The switch (target: under 5% of the reply for 512 thinking tokens)", "",
          "Random 93M model: the middle submodel thinks for T tokens, the parent re-prefills prompt + thinking, then "
          "answers 128 tokens; one real reply each.", "",
          *table_head("thinking tokens", "re-prefilled tokens", "switch (ms)", "whole reply (ms)", "switch share")]
    for r in switch:
        L.append(table_row(r["thinking_tokens"], r["reprefill_tokens"], r["switch_ms"], r["reply_ms"],
                           f"{100 * r['switch_share']:.2f}%"))
    L += ["", "## Memory: one resident copy (target: within 5% of the parent alone)", "",
          *table_head("model", "parent alone", "all submodels ready, one copy", "ratio", "separately extracted models",
                      "ratio")]
    for m in memory:
        L.append(table_row(m["model"], f"{m['parent_alone_bytes'] / 1e6:.1f} MB",
                           f"{m['all_submodels_one_copy_bytes'] / 1e6:.1f} MB", f"{m['one_copy_vs_parent']}x",
                           f"{m['separate_models_bytes'] / 1e6:.1f} MB", f"{m['separate_vs_parent']}x"))
    L += ["", "## Where one decode step goes (the parent)", ""]
    for label, p in profile.items():
        L += [f"**{label}**: {p['ms_per_step']} ms per step.", "", *table_head("part", "ms per step", "share")]
        for part, ms in p["parts_ms"].items():
            L.append(table_row(part, f"{ms:.3f}", f"{100 * ms / p['ms_per_step']:.0f}%"))
        L.append("")
    L += ["## Elastic against standard budget control (demo task)", "",
          "From `docs/results/demo-eval.json` (`python -m training.evaluate`); the parent answers in every row.", "",
          *table_head("budget", "thinks", "kind", "accuracy", "mean reply latency (ms)")]
    for r in demo_eval["budget_control"]:
        L.append(table_row(r["budget"], r["think"], r["kind"], f"{100 * r['accuracy']:.1f}%", r["mean_latency_ms"]))
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
