"""The paper's experiment in miniature, on the demo model's held-out arithmetic problems.

    python -m training.evaluate --checkpoint assets/demo --out docs/results/demo-eval [--n 200]

Measures, with greedy decoding on this machine:
- accuracy and mean reply latency of each submodel with thinking off and on;
- standard budget control (the parent thinks with budget B and answers) against elastic
  budget control (a smaller submodel thinks with budget B, the parent answers), per budget.
Writes OUT.json, OUT.md and OUT.png (drawn with Qt, which the app already depends on).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from runtime.engine import Engine
from runtime.generate import ChatRequest, chat
from runtime.sampling import SamplingSettings

from .data import evaluation_problems, question

BUDGETS = (8, 16, 32, 64)


def last_number(text: str) -> int | None:
    found = re.findall(r"-?\d+", text)
    return int(found[-1]) if found else None


def run(engine: Engine, problems, think: str | None, answer: str, budget: int, max_new_tokens: int) -> dict:
    correct, latencies, thinking_tokens = 0, [], []
    for p in problems:
        request = ChatRequest(({"role": "user", "content": question(p)},), think, answer, budget,
                              max_new_tokens, SamplingSettings(temperature=0))
        started = time.perf_counter()
        done = chat(engine, request)
        latencies.append(time.perf_counter() - started)
        correct += last_number(done.answer_text) == p.result
        thinking_tokens.append(done.thinking_tokens)
    return {"think": think, "answer": answer, "budget": budget, "accuracy": round(correct / len(problems), 4),
            "mean_latency_ms": round(1000 * statistics.mean(latencies), 1),
            "mean_thinking_tokens": round(statistics.mean(thinking_tokens), 1)}


def evaluate(checkpoint: Path, n: int, seed: int = 0, log=print) -> dict:
    engine = Engine.load(checkpoint, device="cpu", max_context=1024)
    names = engine.submodels_by_size()  # smallest first
    parent = names[-1]
    ceiling = engine.thinking_ceiling
    problems = evaluation_problems(seed, n)
    max_new = ceiling + 64
    result = {"checkpoint": str(checkpoint), "problems": n, "submodels": names, "thinking_ceiling": ceiling,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
              "per_submodel": [], "budget_control": []}
    for name in reversed(names):
        for budget in (0, ceiling):
            row = run(engine, problems, name if budget else None, name, budget, max_new)
            row["submodel"] = name
            result["per_submodel"].append(row)
            log(f"{name} thinking {'on' if budget else 'off'}: {row}")
    for budget in BUDGETS:
        for thinker in reversed(names):
            row = run(engine, problems, thinker, parent, budget, max_new)
            row["kind"] = "standard" if thinker == parent else "elastic"
            result["budget_control"].append(row)
            log(f"B={budget} {thinker} thinks: {row}")
    return result


def write_markdown(result: dict, path: Path) -> None:
    names = result["submodels"]
    lines = ["# The demo model: elastic budget control in miniature", "",
             f"Written by `python -m training.evaluate` on {result['machine']}: {result['problems']} held-out "
             "problems (chains of two to four additions and subtractions), greedy decoding, one reply at a time. "
             "Latency is the mean wall time of a whole reply on this machine's CPU.", "",
             "## Each submodel, thinking off and on", "",
             "| submodel | thinking | accuracy | mean latency (ms) | mean thinking tokens |", "|---|---|---|---|---|"]
    for r in result["per_submodel"]:
        lines.append(f"| {r['submodel']} | {'on (budget ' + str(r['budget']) + ')' if r['budget'] else 'off'} | "
                     f"{r['accuracy']:.1%} | {r['mean_latency_ms']} | {r['mean_thinking_tokens']} |")
    lines += ["", f"## Budget control: who thinks, with budget B; the parent ({names[-1]}) always answers", "",
              "| B | thinks | kind | accuracy | mean latency (ms) | mean thinking tokens |", "|---|---|---|---|---|---|"]
    for r in result["budget_control"]:
        lines.append(f"| {r['budget']} | {r['think']} | {r['kind']} | {r['accuracy']:.1%} | {r['mean_latency_ms']} | "
                     f"{r['mean_thinking_tokens']} |")
    lines += ["", "![accuracy and latency against budget](demo-eval.png)", ""]
    path.write_text("\n".join(lines) + "\n")


def write_plot(result: dict, path: Path) -> None:
    """Two panels, accuracy and latency against budget, one line per thinking submodel. Qt draws it."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter, QPen

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (fonts need it)
    W, H, pad = 1000, 420, 60
    image = QImage(W, H, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setFont(QFont("Sans", 9))
    colors = ["#76b900", "#1f77b4", "#d62728", "#9467bd"]
    thinkers = list(dict.fromkeys(r["think"] for r in result["budget_control"]))
    budgets = sorted({r["budget"] for r in result["budget_control"]})
    panels = [("accuracy", "accuracy", lambda v: f"{v:.0%}"), ("mean_latency_ms", "mean reply latency (ms)",
                                                               lambda v: f"{v:.0f}")]
    for k, (key, title, fmt) in enumerate(panels):
        x0, y0, w, h = k * W / 2 + pad, 40, W / 2 - 1.5 * pad, H - 110
        values = [r[key] for r in result["budget_control"]]
        lo, hi = (0.0, 1.0) if key == "accuracy" else (0.0, max(values) * 1.1)
        p.setPen(QPen(QColor("#333"), 1))
        p.drawRect(QRectF(x0, y0, w, h))
        p.drawText(QRectF(x0, 8, w, 24), Qt.AlignmentFlag.AlignCenter, title + " against thinking budget B")
        for t in range(5):
            v = lo + (hi - lo) * t / 4
            y = y0 + h - h * t / 4
            p.drawText(QRectF(x0 - pad, y - 8, pad - 6, 16), Qt.AlignmentFlag.AlignRight, fmt(v))
        for i, b in enumerate(budgets):
            x = x0 + w * (i + 0.5) / len(budgets)
            p.drawText(QRectF(x - 30, y0 + h + 4, 60, 16), Qt.AlignmentFlag.AlignCenter, f"B={b}")
        for c, thinker in enumerate(thinkers):
            rows = {r["budget"]: r[key] for r in result["budget_control"] if r["think"] == thinker}
            pts = [QPointF(x0 + w * (i + 0.5) / len(budgets), y0 + h - h * (rows[b] - lo) / (hi - lo or 1))
                   for i, b in enumerate(budgets)]
            p.setPen(QPen(QColor(colors[c % len(colors)]), 2.5))
            for a, b in zip(pts, pts[1:]):
                p.drawLine(a, b)
            for q in pts:
                p.drawEllipse(q, 3.5, 3.5)
    for c, thinker in enumerate(thinkers):
        kind = "standard: parent thinks" if thinker == result["submodels"][-1] else f"elastic: {thinker} thinks"
        p.setPen(QPen(QColor(colors[c % len(colors)]), 3))
        x = pad + c * 300
        p.drawLine(QPointF(x, H - 30), QPointF(x + 24, H - 30))
        p.setPen(QColor("#222"))
        p.drawText(QPointF(x + 30, H - 26), kind)
    p.setPen(QColor("#555"))
    p.drawText(QPointF(pad, H - 6), "The parent writes the answer in every case; B is the thinking budget in tokens.")
    p.end()
    image.save(str(path))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.evaluate")
    parser.add_argument("--checkpoint", type=Path, default=Path("assets/demo"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/demo-eval"))
    parser.add_argument("--n", type=int, default=120)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    result = evaluate(args.checkpoint, args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out.with_suffix(".md"))
    write_plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out}.md, .json and .png")


if __name__ == "__main__":
    main()
