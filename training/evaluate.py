"""The paper's experiment in miniature, on the demo model's held-out sums.

    python -m training.evaluate --checkpoint assets/demo --out docs/results/demo-eval [--n 120]
    python -m training.evaluate --checkpoint assets/demo-nvfp4 --stops-only --out /tmp/nvfp4-eval
    python -m training.evaluate --checkpoint /tmp/run --quick 60      # the parent thinking only

Every question is a held-out sum (its expression never trains) asked in a held-out phrasing (the
wording never trains either); as many with two, three and four numbers. Greedy decoding on this
machine. Measures:
- each submodel answering alone with thinking off and on (up to the checkpoint's ceiling);
- each stop of the app's depth slider, as the app runs it (runtime/depth_levels.json), Auto included:
  how often its thought climbed to a larger submodel, at which thinking token, and how many
  thinking tokens each submodel wrote;
- standard budget control (the parent thinks with budget B and answers) against elastic budget
  control (a smaller submodel thinks with budget B, the parent answers), per budget;
- accuracy per count of numbers for all of the above, and sample replies verbatim.
Writes OUT.json, OUT.md and OUT.png (drawn with Qt, which the app already depends on): accuracy
and latency against budget, and every stop on an accuracy-latency plane with Auto marked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from runtime.auto_depth import Escalation
from runtime.engine import Engine
from runtime.events import THINKING, Done, Switch, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.sampling import SamplingSettings

from .data import answer_text, evaluation_problems, question

BUDGET_FRACTIONS = (1 / 8, 1 / 4)  # of the checkpoint's thinking ceiling: the Quick and Balanced budgets


def last_number(text: str) -> int | None:
    found = re.findall(r"-?\d+", text)
    return int(found[-1]) if found else None


def questions(seed: int, n: int) -> list[tuple]:
    """(problem, held-out phrasing of it) pairs."""
    rng = random.Random(seed + 17)
    return [(p, question(p, rng, held_out_phrasing=True)) for p in evaluation_problems(seed, n)]


class Runner:
    """Runs configurations over the questions, once each (the stops repeat some rows)."""

    def __init__(self, engine: Engine, items: list[tuple], log=print):
        self.engine, self.items, self.log = engine, items, log
        self.max_new = engine.thinking_ceiling + 64
        self.done: dict[tuple, dict] = {}

    def run(self, think: str | None, answer: str, budget: int, escalation: Escalation | None = None) -> dict:
        key = (think if budget else None, answer, budget if think else 0, escalation if think and budget else None)
        if key in self.done:
            return dict(self.done[key])
        think, _, budget, escalation = key
        rows, latencies, cpu, thinking_tokens = [], [], [], []
        for p, asked in self.items:  # asked: the question, or a whole conversation ending with it
            messages = asked if isinstance(asked, tuple) else ({"role": "user", "content": asked},)
            text = messages[-1]["content"]
            request = ChatRequest(messages, think, answer, budget, self.max_new,
                                  SamplingSettings(temperature=0), escalation=escalation)
            started, cpu_started = time.perf_counter(), time.process_time()
            done, climbed_at = reply(self.engine, request)
            latencies.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            thinking_tokens.append(done.thinking_tokens)
            rows.append({"question": text, "expected": p.result, "numbers": len(p.numbers),
                         "thinking": done.thinking_text, "answer": done.answer_text,
                         "right": last_number(done.answer_text) == p.result, "escalated_at": climbed_at,
                         "thinking_by_submodel": dict(done.thinking_by_submodel)})
        by_count = {}
        for k in sorted({r["numbers"] for r in rows}):
            group = [r["right"] for r in rows if r["numbers"] == k]
            by_count[str(k)] = round(sum(group) / len(group), 4)
        out = {"think": think, "answer": answer, "budget": budget,
               "accuracy": round(sum(r["right"] for r in rows) / len(rows), 4), "by_numbers": by_count,
               "mean_latency_ms": round(1000 * statistics.mean(latencies), 1),
               "mean_cpu_ms": round(1000 * statistics.mean(cpu), 1),
               "mean_thinking_tokens": round(statistics.mean(thinking_tokens), 1), "replies": rows}
        if escalation is not None:
            out["auto"] = auto_summary(rows, escalation)
        self.done[key] = out
        self.log(f"think={think} answer={answer} budget={budget}: {out['accuracy']:.1%} {by_count} "
                 f"({out['mean_latency_ms']:.0f} ms)")
        return dict(out)


def reply(engine: Engine, request: ChatRequest) -> tuple[Done, list[int]]:
    """One reply, and the thinking tokens written before each escalation (Auto's climbs)."""
    thought, climbed_at, done = 0, [], None
    for event in stream_chat(engine, request):
        if isinstance(event, Token) and event.phase == THINKING:
            thought += 1
        elif isinstance(event, Switch) and event.reason == "escalate":
            climbed_at.append(thought)
        done = event
    return done, climbed_at


def auto_summary(rows: list[dict], escalation: Escalation) -> dict:
    """How an Auto stop climbed: how often, where (the thinking token of the first climb), and how
    many thinking tokens each submodel of its ladder wrote, on average over every reply."""
    first = [r["escalated_at"][0] for r in rows if r["escalated_at"]]
    return {"ladder": list(escalation.ladder), "policy": escalation.policy.as_dict(),
            "escalated": round(len(first) / len(rows), 4),
            "escalations_per_reply": round(sum(len(r["escalated_at"]) for r in rows) / len(rows), 3),
            "first_escalation_mean": round(statistics.mean(first), 1) if first else None,
            "first_escalation_median": statistics.median(first) if first else None,
            "mean_thinking_by_submodel": {name: round(sum(r["thinking_by_submodel"].get(name, 0) for r in rows)
                                                      / len(rows), 1) for name in escalation.ladder},
            "accuracy_escalated": round(statistics.mean(r["right"] for r in rows if r["escalated_at"]), 4)
            if first else None,
            "accuracy_not_escalated": round(statistics.mean(r["right"] for r in rows if not r["escalated_at"]), 4)
            if len(first) < len(rows) else None}


EARLIER_TURNS = (0, 1, 3)  # sums asked before the one scored, in the same conversation


def conversations(seed: int, n: int, earlier: int) -> list[tuple]:
    """(problem, conversation) pairs: `earlier` held-out sums with their answers (their thinking dropped,
    as the chat template does), then the held-out sum that is scored; every question in a held-out
    phrasing, none of them among `questions(seed, ...)`'s sums."""
    rng = random.Random(seed + 29)
    asked = {p.expression for p, _ in questions(seed, n)}
    problems = [p for p in evaluation_problems(seed + 2, 4 * n * (earlier + 1)) if p.expression not in asked]
    out = []
    for i in range(n):
        group = problems[i * (earlier + 1):(i + 1) * (earlier + 1)]
        messages = ()
        for p in group[:-1]:
            messages += ({"role": "user", "content": question(p, rng, held_out_phrasing=True)},
                         {"role": "assistant", "content": answer_text(p)})
        out.append((group[-1], messages + ({"role": "user", "content": question(group[-1], rng, True)},)))
    return out


def in_conversation(engine: Engine, n: int, seed: int, log=print) -> list[dict]:
    """The default stop on a sum asked after 0, 1 and 3 others in the same chat, as users ask them."""
    stop = next(s for s in engine.depth_levels() if s.name == engine.default_depth())
    rows = []
    for earlier in EARLIER_TURNS:
        row = Runner(engine, conversations(seed, n, earlier), log).run(stop.think, stop.answer, stop.budget,
                                                                       stop.escalation)
        row.pop("replies")
        rows.append(dict(row, stop=stop.name, earlier=earlier))
    return rows


def evaluate(checkpoint: Path, n: int, seed: int = 0, stops_only: bool = False, log=print) -> dict:
    engine = Engine.load(checkpoint, device="cpu", max_context=2048)
    names = engine.submodels_by_size()  # smallest first
    parent, ceiling = names[-1], engine.thinking_ceiling
    runner = Runner(engine, questions(seed, n), log)
    result = {"checkpoint": str(checkpoint), "problems": n, "submodels": names, "thinking_ceiling": ceiling,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
              "per_submodel": [], "stops": [], "budget_control": [],
              "auto_policy_from": "the checkpoint's elastic.json (auto_depth)" if engine.auto_policy
              else "the depth table's default (depth_levels.json)"}
    for stop in engine.depth_levels():
        row = runner.run(stop.think, stop.answer, stop.budget, stop.escalation)
        row["stop"] = stop.name
        result["stops"].append(row)
    if not stops_only:
        for name in reversed(names):
            for budget in (0, ceiling):
                row = runner.run(name if budget else None, name, budget)
                row["submodel"] = name
                result["per_submodel"].append(row)
        for fraction in BUDGET_FRACTIONS:
            budget = max(1, round(fraction * ceiling))
            for thinker in reversed(names):
                row = runner.run(thinker, parent, budget)
                row["kind"] = "standard" if thinker == parent else "elastic"
                result["budget_control"].append(row)
    result["samples"] = samples(result)
    result["in_conversation"] = in_conversation(engine, n, seed, log)
    for section in ("per_submodel", "stops", "budget_control"):
        for row in result[section]:
            row.pop("replies")
    return result


def samples(result: dict, k: int = 3) -> list[dict]:
    """A few replies verbatim, right and wrong, from the default stop (Balanced), the parent thinking
    and Auto."""
    out = []
    for row in result["stops"]:
        if row["stop"] in ("Balanced", "Max", "Auto"):
            right = [r for r in row["replies"] if r["right"]][:k]
            wrong = [r for r in row["replies"] if not r["right"]][:k]
            out += [{k: v for k, v in dict(r, stop=row["stop"]).items() if k != "thinking_by_submodel"}
                    for r in right + wrong]
    return out


def quick(checkpoint: Path, n: int, seed: int = 0) -> dict:
    """The parent thinking up to the ceiling: the number the small runs compare."""
    engine = Engine.load(checkpoint, device="cpu", max_context=2048)
    parent = engine.submodels_by_size()[-1]
    row = Runner(engine, questions(seed, n), log=lambda *_: None).run(parent, parent, engine.thinking_ceiling)
    wrong = [r for r in row.pop("replies") if not r["right"]]
    return dict(row, wrong_examples=wrong[:3])


def conversation_lines(result: dict, nvfp4: dict | None, head: str, rule: str, by_numbers) -> list[str]:
    if not result.get("in_conversation"):
        return []
    lines = ["", "## A sum asked after others in the same chat", "",
             "Each question here comes after 0, 1 or 3 other held-out sums and their answers in the same "
             "conversation (thinking dropped from them, as the chat template does), at the default stop, as a "
             f"user asks them in one chat: {result['problems']} conversations each, other sums than above.", "",
             f"| checkpoint | earlier sums | stop | accuracy | {head} | mean latency (ms) |",
             f"|---|---|---|---{rule}|---|"]
    for name, rows in (("fp32", result["in_conversation"]), ("NVFP4", (nvfp4 or {}).get("in_conversation", []))):
        for r in rows:
            lines.append(f"| {name} | {r['earlier']} | {r['stop']} | {r['accuracy']:.1%} | {by_numbers(r)} | "
                         f"{r['mean_latency_ms']} |")
    return lines


def write_markdown(result: dict, path: Path, nvfp4: dict | None = None) -> None:
    names = result["submodels"]
    counts = sorted(next(iter(result["stops"]))["by_numbers"])

    def by_numbers(r):
        return " | ".join(f"{r['by_numbers'][c]:.0%}" for c in counts)

    head = " | ".join(f"{c} numbers" for c in counts)
    rule = "|---" * len(counts)
    lines = ["# The demo model: elastic budget control in miniature", "",
             f"Written by `python -m training.evaluate` on {result['machine']}: {result['problems']} held-out "
             f"sums ({', '.join(counts)} numbers, as many of each; every expression and every phrasing unseen in "
             "training), greedy decoding, one reply at a time. A reply is right when its last number is the "
             f"result. Latency is the mean wall time of a whole reply on this machine's CPU; CPU time is the "
             "processor time the reply used, which other work on a shared machine disturbs less. Thinking ceiling "
             f"(`max_thinking_tokens`): {result['thinking_ceiling']} tokens.", "",
             "## The depth slider's stops, as the app runs them", "",
             f"| stop | thinks | answers | budget | accuracy | {head} | mean latency (ms) | mean CPU time (ms) | "
             "mean thinking tokens |",
             f"|---|---|---|---|---{rule}|---|---|---|"]
    for r in result["stops"]:
        thinks = r["think"] or "-"
        if r.get("auto"):
            thinks = " → ".join(r["auto"]["ladder"])
        lines.append(f"| {r['stop']} | {thinks} | {r['answer']} | {r['budget']} | {r['accuracy']:.1%} | "
                     f"{by_numbers(r)} | {r['mean_latency_ms']} | {r.get('mean_cpu_ms', '-')} | "
                     f"{r['mean_thinking_tokens']} |")
    lines += auto_lines(result)
    if nvfp4:
        lines += ["", f"The app's default checkpoint is the NVFP4 export (`{nvfp4['checkpoint']}`), on the same "
                  "questions:", "",
                  f"| stop | budget | accuracy | {head} | mean latency (ms) |", f"|---|---|---{rule}|---|"]
        for r in nvfp4["stops"]:
            lines.append(f"| {r['stop']} | {r['budget']} | {r['accuracy']:.1%} | {by_numbers(r)} | "
                         f"{r['mean_latency_ms']} |")
    lines += conversation_lines(result, nvfp4, head, rule, by_numbers)
    lines += ["", "## Each submodel alone, thinking off and on", "",
              f"| submodel | thinking | accuracy | {head} | mean latency (ms) | mean thinking tokens |",
              f"|---|---|---{rule}|---|---|"]
    for r in result["per_submodel"]:
        lines.append(f"| {r['submodel']} | {'on (budget ' + str(r['budget']) + ')' if r['budget'] else 'off'} | "
                     f"{r['accuracy']:.1%} | {by_numbers(r)} | {r['mean_latency_ms']} | {r['mean_thinking_tokens']} |")
    lines += ["", f"## Budget control: who thinks, with budget B; the parent ({names[-1]}) always answers", "",
              f"| B | thinks | kind | accuracy | {head} | mean latency (ms) | mean thinking tokens |",
              f"|---|---|---|---{rule}|---|---|"]
    for r in result["budget_control"]:
        lines.append(f"| {r['budget']} | {r['think']} | {r['kind']} | {r['accuracy']:.1%} | {by_numbers(r)} | "
                     f"{r['mean_latency_ms']} | {r['mean_thinking_tokens']} |")
    lines += ["", "![accuracy and latency against budget](demo-eval.png)", "", "## Sample replies, verbatim", ""]
    for s in result["samples"]:
        verdict = "right" if s["right"] else f"wrong (expected {s['expected']})"
        climbed = (f", climbed at thinking token{'s' if len(s['escalated_at']) > 1 else ''} "
                   f"{', '.join(map(str, s['escalated_at']))}" if s.get("escalated_at") else "")
        lines += [f"**{s['stop']}**, {verdict}{climbed}: *{s['question']}*", "", "```", "<think>",
                  s["thinking"].strip(), "</think>", s["answer"].strip(), "```", ""]
    if result.get("notes"):
        lines += ["## Notes", "", result["notes"].strip(), ""]
    path.write_text("\n".join(lines) + "\n")


def auto_lines(result: dict) -> list[str]:
    """The Auto stop's own table: how often and where its thought climbed, and who wrote it."""
    autos = [r for r in result["stops"] if r.get("auto")]
    if not autos:
        return []
    ladder = autos[0]["auto"]["ladder"]
    lines = ["", "### Auto: where the thought climbed", "",
             f"Auto's thought starts on {ladder[0]} and climbs {' then '.join(ladder[1:]) or 'nowhere'} when the "
             f"thinker struggles; its policy comes from {result.get('auto_policy_from', 'the depth table')}. "
             "A climb happens before the token the thinker was unsure of, which the larger submodel then decides.",
             "", "| stop | signal > threshold (window) | replies that climbed | climbs per reply | first climb at "
             "thinking token (mean / median) | accuracy when it climbed / did not | "
             + " | ".join(f"mean thinking tokens on {n}" for n in ladder) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(ladder)]
    for r in autos:
        a, pol = r["auto"], r["auto"]["policy"]
        where = (f"{a['first_escalation_mean']} / {a['first_escalation_median']}"
                 if a["first_escalation_mean"] is not None else "-")
        acc = " / ".join("-" if v is None else f"{v:.0%}"
                         for v in (a["accuracy_escalated"], a["accuracy_not_escalated"]))
        lines.append(f"| {r['stop']} | {pol['signal']} > {pol['threshold']:g} ({pol['window']}) | "
                     f"{a['escalated']:.0%} | {a['escalations_per_reply']} | {where} | {acc} | "
                     + " | ".join(str(a["mean_thinking_by_submodel"].get(n, 0)) for n in ladder) + " |")
    return lines


def write_plot(result: dict, path: Path) -> None:
    """Three panels: accuracy and latency against budget, one line per thinking submodel; and every
    depth stop as a point on accuracy against latency, Auto marked. Qt draws it."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter, QPen

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (fonts need it)
    W, H, pad = 1500, 420, 60
    third = W / 3
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
        x0, y0, w, h = k * third + pad, 40, third - 1.5 * pad, H - 110
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
    _stops_panel(p, result, 2 * third + pad, 40, third - 1.5 * pad, H - 110, pad)
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


def _stops_panel(p, result: dict, x0: float, y0: float, w: float, h: float, pad: float) -> None:
    """Every depth stop as a point, accuracy against mean latency; Auto a red diamond, the others grey dots."""
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QBrush, QColor, QPen, QPolygonF

    stops = result["stops"]
    hi = max(r["mean_latency_ms"] for r in stops) * 1.15 or 1.0
    p.setPen(QPen(QColor("#333"), 1))
    p.drawRect(QRectF(x0, y0, w, h))
    p.drawText(QRectF(x0, 8, w, 24), Qt.AlignmentFlag.AlignCenter, "the slider's stops: accuracy against latency")
    for t in range(5):
        y = y0 + h - h * t / 4
        p.drawText(QRectF(x0 - pad, y - 8, pad - 6, 16), Qt.AlignmentFlag.AlignRight, f"{t / 4:.0%}")
        x = x0 + w * t / 4
        p.drawText(QRectF(x - 30, y0 + h + 4, 60, 16), Qt.AlignmentFlag.AlignCenter, f"{hi * t / 4:.0f}")
    p.drawText(QRectF(x0, y0 + h + 20, w, 16), Qt.AlignmentFlag.AlignCenter, "mean reply latency (ms)")
    for i, r in enumerate(stops):
        q = QPointF(x0 + w * r["mean_latency_ms"] / hi, y0 + h - h * r["accuracy"])
        if r.get("auto"):
            p.setPen(QPen(QColor("#d62728"), 1.5))
            p.setBrush(QBrush(QColor("#d62728")))
            p.drawPolygon(QPolygonF([q + QPointF(0, -7), q + QPointF(7, 0), q + QPointF(0, 7), q + QPointF(-7, 0)]))
        else:
            p.setPen(QPen(QColor("#555"), 1.5))
            p.setBrush(QBrush(QColor("#555")))
            p.drawEllipse(q, 4, 4)
        p.setBrush(QBrush())
        p.setPen(QColor("#222"))
        p.drawText(q + QPointF(8, -6 if i % 2 else 14), r["stop"])  # alternate, so neighbours' names do not collide


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.evaluate")
    parser.add_argument("--checkpoint", type=Path, default=Path("assets/demo"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/demo-eval"))
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stops-only", action="store_true", help="only the depth slider's stops")
    parser.add_argument("--with-nvfp4", type=Path, default=None,
                        help="the NVFP4 export to score on the same questions: its folder, "
                             "or the OUT.json of an earlier --stops-only run")
    parser.add_argument("--notes", type=Path, default=None, help="a Markdown file to append as the notes")
    parser.add_argument("--quick", type=int, default=0, metavar="N", help="print the parent's accuracy on N sums")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="only rewrite OUT.md and OUT.png from an earlier OUT.json (with --with-nvfp4, --notes)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.render:
        result = json.loads(args.render.read_text())
        if args.notes:
            result["notes"] = args.notes.read_text()
        nvfp4 = json.loads(args.with_nvfp4.read_text()) if args.with_nvfp4 else result.get("nvfp4")
        if nvfp4:
            result["nvfp4"] = {k: nvfp4[k] for k in ("checkpoint", "stops", "in_conversation") if k in nvfp4}
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        write_markdown(result, args.out.with_suffix(".md"), nvfp4)
        write_plot(result, args.out.with_suffix(".png"))
        print(f"wrote {args.out}.md, .json and .png")
        return
    if not args.checkpoint.is_dir():
        print(f"error: no checkpoint folder at {args.checkpoint}", file=sys.stderr)
        raise SystemExit(2)
    if args.quick:
        print(json.dumps(quick(args.checkpoint, args.quick, args.seed), indent=1))
        return
    notes = args.notes.read_text() if args.notes else None  # read before the long run: a bad path fails now
    if args.with_nvfp4 and not args.with_nvfp4.is_dir():
        nvfp4 = json.loads(args.with_nvfp4.read_text())
    result = evaluate(args.checkpoint, args.n, args.seed, args.stops_only)
    if notes:
        result["notes"] = notes
    if args.with_nvfp4 and args.with_nvfp4.is_dir():  # a checkpoint folder: run its stops on the same questions
        nvfp4 = evaluate(args.with_nvfp4, args.n, args.seed, stops_only=True)
    elif not args.with_nvfp4:
        nvfp4 = None
    if nvfp4:
        result["nvfp4"] = {k: nvfp4[k] for k in ("checkpoint", "stops", "in_conversation") if k in nvfp4}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    if not args.stops_only:
        write_markdown(result, args.out.with_suffix(".md"), nvfp4)
        write_plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out}.json" + ("" if args.stops_only else ", .md and .png"))


if __name__ == "__main__":
    main()
