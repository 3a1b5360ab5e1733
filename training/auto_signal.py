"""Choosing the Auto depth's signal and threshold by measurement, on held-out sums.

    python -m training.auto_signal --checkpoint assets/demo [--n 60] [--out docs/results/auto-signal] [--write]

The calibration sums (held-out expressions in held-out phrasings, none of them among the questions
`training.evaluate` scores) are split in two alternate halves: the policy is fitted on the first and
checked on the second, which it never saw.
1. On the fitting half, the Auto stop's first thinker thinks alone, with Auto's budget, and the parent
   answers: Auto that never climbs. Each thinking token's signals are recorded by a logits processor
   that calls the runtime's own `token_signals` on the distribution the token is sampled from; each
   wrong thought's first slip (trace_slips.first_slip) is found, with the signals at that token.
2. Each candidate signal gets a score per thought: the entropy and the doubt (1 - top-1 probability),
   as the largest mean over any `window` consecutive tokens; the lines repeated within the thought; the
   share of the budget spent. How well a score separates thoughts that end wrong from those that end
   right is its AUROC (0.5: not at all, 1: perfectly).
3. For the runtime's signals (entropy, doubt) and each window, thresholds are set where a given share
   of those thoughts would cross them, and Auto runs with each (the thinker climbs, the larger
   submodel decides the token it was unsure of): accuracy, mean latency, how often and where it climbed.
   The fixed stops run on the same sums, taking turns with them (Runner.run_interleaved).
4. The pick: the most accurate policy ("never climb" included) that costs less CPU time per reply than
   the parent thinking alone (Max) on the same sums, since Auto exists to be cheaper than that; on a tie,
   fewer climbs per reply, then less CPU time (wall time on a shared machine is too noisy to decide by).
5. The check: the pick, never climbing and the fixed stops on the other half, taking turns.
`--write` stores the pick in the checkpoint's elastic.json as `auto_depth`, which the engine reads
(runtime/auto_depth.py); OUT.md and OUT.json say what was measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

import torch

from runtime.auto_depth import AutoPolicy, Escalation, Signals, parse_policy, token_signals
from runtime.engine import Engine
from runtime.events import THINKING, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.sampling import SamplingSettings

from .evaluate import Runner, calibration_questions, last_number
from .trace_slips import BUDGET, first_slip

DEVICE_SIGNALS = ("entropy", "doubt")
FRACTIONS = (0.05, 0.1, 0.2, 0.3)
WINDOWS = (1, 4)


# ---------------------------------------------------------------------- 1. thoughts and their signals


def watched_thoughts(engine: Engine, items: list[tuple], think: str, answer: str, budget: int,
                     max_new: int) -> list[dict]:
    """The thinker thinks alone (never climbing), the parent answers; every sampled thinking token's signals."""
    out = []
    for p, text in items:
        seen: list[Signals] = []

        def record(context, logits):
            seen.append(Signals(*token_signals(logits).tolist()))
            return logits

        request = ChatRequest(({"role": "user", "content": text},), think, answer, budget, max_new,
                              SamplingSettings(temperature=0), logits_processors=(record,))
        pieces, done = [], None
        for event in stream_chat(engine, request):
            if isinstance(event, Token) and event.phase == THINKING:
                pieces.append((event.text, BUDGET if event.forced else event.submodel))
            done = event
        sampled = sum(who != BUDGET for _, who in pieces)
        out.append({"question": text, "expected": p.result, "right": last_number(done.answer_text) == p.result,
                    "thinking": done.thinking_text, "thinking_tokens": done.thinking_tokens,
                    "signals": [list(s) for s in seen[:sampled]], "slip": first_slip(p, pieces)})
    return out


def signal_at(thought: dict, token: int, index: int, window: int) -> float | None:
    """Signal `index`'s mean over the `window` tokens that end at `token` (what Auto compares with its
    threshold before that token is kept); None past the sampled tokens."""
    values = [s[index] for s in thought["signals"][max(0, token - window + 1):token + 1]]
    return sum(values) / len(values) if token < len(thought["signals"]) and values else None


def slips(thoughts: list[dict], windows) -> list[dict]:
    """The wrong thoughts' first slips, with each device signal (per window) at the slipping token."""
    rows = []
    for t in thoughts:
        if t["right"] or t["slip"] is None:
            continue
        at = {f"{name}, window {w}": signal_at(t, t["slip"]["token"], i, w)
              for i, name in enumerate(Signals._fields) for w in windows}
        rows.append({"question": t["question"], **t["slip"], "signals": at})
    return rows


# ---------------------------------------------------------------------- 2. separation


def peak(values: list[float], window: int) -> float:
    """The largest mean of `window` consecutive values (of all of them, when there are fewer)."""
    if not values:
        return 0.0
    if len(values) <= window:
        return sum(values) / len(values)
    run = sum(values[:window])
    best = run
    for i in range(window, len(values)):
        run += values[i] - values[i - window]
        best = max(best, run)
    return best / window


def repeated_lines(thinking: str) -> int:
    lines = [line.strip() for line in thinking.splitlines() if line.strip()]
    return sum(1 for i, line in enumerate(lines) if line in lines[:i])


def auroc(wrong: list[float], right: list[float]) -> float | None:
    """P(a wrong thought scores higher than a right one), ties counting half."""
    if not wrong or not right:
        return None
    wins = sum((w > r) + 0.5 * (w == r) for w in wrong for r in right)
    return round(wins / (len(wrong) * len(right)), 4)


def candidate_scores(thoughts: list[dict], budget: int, windows) -> dict[str, list[float]]:
    """Per candidate signal, one score per thought (higher: more struggling)."""
    scores = {}
    for i, name in enumerate(Signals._fields):
        for w in windows:
            scores[f"{name}, window {w}"] = [peak([s[i] for s in t["signals"]], w) for t in thoughts]
    scores["repeated lines"] = [float(repeated_lines(t["thinking"])) for t in thoughts]
    scores["budget spent"] = [t["thinking_tokens"] / budget for t in thoughts]
    return scores


def separation(thoughts: list[dict], scores: dict[str, list[float]]) -> list[dict]:
    rows = []
    for name, values in scores.items():
        wrong = [v for v, t in zip(values, thoughts) if not t["right"]]
        right = [v for v, t in zip(values, thoughts) if t["right"]]
        rows.append({"signal": name, "auroc": auroc(wrong, right),
                     "mean_wrong": round(statistics.mean(wrong), 4) if wrong else None,
                     "mean_right": round(statistics.mean(right), 4) if right else None})
    return rows


def thresholds_for(peaks: list[float], fractions) -> list[float]:
    """Thresholds that about `fraction` of these thoughts' peaks exceed (midway between neighbours)."""
    ranked = sorted(peaks, reverse=True)
    out = []
    for f in fractions:
        k = min(len(ranked) - 1, max(1, round(f * len(ranked))))
        t = round((ranked[k - 1] + ranked[k]) / 2, 4)
        if ranked[k - 1] > t and t not in out:
            out.append(t)
    return out


# ---------------------------------------------------------------------- 3. Auto with each threshold


def grid_policies(thoughts: list[dict], windows, fractions) -> list[tuple[AutoPolicy, float]]:
    """For each device signal and window, the thresholds that about each fraction of these thoughts'
    peaks cross: (policy, the share that does)."""
    out = []
    for signal in DEVICE_SIGNALS:
        for w in windows:
            peaks = [peak([s[Signals._fields.index(signal)] for s in t["signals"]], w) for t in thoughts]
            for threshold in thresholds_for(peaks, fractions):
                policy = parse_policy({"signal": signal, "threshold": threshold, "window": w}, "the grid")
                out.append((policy, round(sum(p > threshold for p in peaks) / len(peaks), 4)))
    return out


def run_policies(runner: Runner, auto, fixed: list, policies: list[AutoPolicy | None]) -> tuple[list[dict], list[dict]]:
    """Auto with each policy (None: never climbing) and the fixed stops over the runner's sums, taking
    turns: (Auto's rows, the fixed stops' rows), without their replies."""
    configs = [(auto.think, auto.answer, auto.budget, Escalation(auto.escalation.ladder, p) if p else None)
               for p in policies] + [(s.think, s.answer, s.budget, None) for s in fixed]
    rows = runner.run_interleaved(configs)
    for r in rows:
        r.pop("replies")
    autos = [dict(r, auto=r.get("auto") or {"policy": None, "escalated": 0.0, "escalations_per_reply": 0.0})
             for r in rows[:len(policies)]]
    return autos, [dict(r, stop=s.name) for r, s in zip(rows[len(policies):], fixed)]


def pick(candidates: list[dict], max_cpu_ms: float) -> dict:
    """The most accurate of the rows that cost less CPU time per reply than `max_cpu_ms` (the parent
    thinking alone; the cheapest row when none does); then fewer climbs per reply; then less CPU time."""
    affordable = [r for r in candidates if r["mean_cpu_ms"] < max_cpu_ms] or \
        [min(candidates, key=lambda r: r["mean_cpu_ms"])]
    return min(affordable, key=lambda r: (-r["accuracy"], r["auto"]["escalations_per_reply"], r["mean_cpu_ms"]))


# ---------------------------------------------------------------------- the run


def measure(checkpoint: Path, n: int, seed: int, windows=WINDOWS, fractions=FRACTIONS, eval_n: int = 120,
            log=print) -> dict:
    engine = Engine.load(checkpoint, device="cpu", max_context=2048)
    stops = engine.depth_levels()
    auto = next((s for s in stops if s.escalation is not None and s.available), None)
    if auto is None or len(auto.escalation.ladder) < 2:
        raise SystemExit("error: this checkpoint has no Auto stop with a larger submodel to climb to "
                         "(it needs at least two submodels in memory)")
    items = calibration_questions(seed, n, eval_n=eval_n)
    fit, check = items[0::2], items[1::2]
    fixed = [s for s in stops if s.escalation is None and s.available]
    parent = engine.submodels_by_size()[-1]
    log(f"{len(fit)} calibration sums to fit on, {len(check)} to check on; Auto starts on {auto.think}, "
        f"climbs {' then '.join(auto.escalation.ladder[1:])}, budget {auto.budget}")
    load = os.getloadavg()[0]
    runner = Runner(engine, fit, log)
    thoughts = watched_thoughts(engine, fit, auto.think, auto.answer, auto.budget, runner.max_new)
    scores = candidate_scores(thoughts, auto.budget, windows)
    grid_of = grid_policies(thoughts, windows, fractions)
    autos, fixed_rows = run_policies(runner, auto, fixed, [None] + [p for p, _ in grid_of])
    never, grid = autos[0], [dict(r, would_cross=share) for r, (_, share) in zip(autos[1:], grid_of)]
    max_row = next((r for r in fixed_rows if r["think"] == parent), None)
    chosen = pick([never] + grid, max_row["mean_cpu_ms"] if max_row else float("inf"))
    policy = (AutoPolicy(**chosen["auto"]["policy"]) if chosen["auto"]["policy"] else
              AutoPolicy("entropy", 64.0, 1))  # never climbing won: a threshold no entropy reaches
    log(f"picked {policy.as_dict()}; checking it on the other {len(check)} sums")
    checked, check_fixed = run_policies(Runner(engine, check, log), auto, fixed,
                                        [None, policy] if chosen["auto"]["policy"] else [None])
    weights = checkpoint / "model.safetensors"
    return {"checkpoint": str(checkpoint), "model_sha256_16": _digest(weights) if weights.exists() else None,
            "calibration": {"n": len(items), "fit": len(fit), "check": len(check), "seed": seed,
                            "excluded": f"the first {eval_n} evaluation questions"},
            "thinker": auto.think, "ladder": list(auto.escalation.ladder), "budget": auto.budget,
            "right_without_climbing": sum(t["right"] for t in thoughts),
            "separation": separation(thoughts, scores), "slips": slips(thoughts, windows),
            "never": never, "grid": grid, "fixed_stops": fixed_rows,
            "chosen": policy.as_dict(), "chosen_row": chosen,
            "check": {"never": checked[0], "chosen": checked[-1], "fixed_stops": check_fixed},
            "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
            "machine": f"{os.cpu_count()} cores, torch {torch.__version__}"}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def note(result: dict) -> str:
    """The one-line provenance stored beside the policy in elastic.json."""
    chosen, cal, check = result["chosen"], result["calibration"], result["check"]
    name = f"{chosen['signal']}, window {chosen['window']}"
    auroc = next((r["auroc"] for r in result["separation"] if r["signal"] == name), None)
    c = check["chosen"]
    parent = next((r for r in check["fixed_stops"] if r["think"] == result["ladder"][-1]), None)
    return (f"python -m training.auto_signal, {cal['n']} calibration sums (seed {cal['seed']}), fitted on "
            f"{cal['fit']}: {name} (AUROC {auroc}) above {chosen['threshold']:g}; on the other {cal['check']}: "
            f"Auto {c['accuracy']:.1%} (never climbing {check['never']['accuracy']:.1%}"
            + (f", the parent thinking {parent['accuracy']:.1%}" if parent else "") + "), climbing in "
            f"{c['auto']['escalated']:.0%} of replies, {c['mean_cpu_ms']:.0f} ms CPU per reply"
            + (f" ({parent['mean_cpu_ms']:.0f})" if parent else ""))


def write_policy(checkpoint: Path, result: dict) -> Path:
    path = checkpoint / "elastic.json"
    data = json.loads(path.read_text())
    data["auto_depth"] = dict(result["chosen"], measured=note(result))
    parse_policy(data["auto_depth"], "auto_depth", path)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def markdown(result: dict) -> str:
    ladder, cal = result["ladder"], result["calibration"]
    load = result.get("load_average", ["?", "?"])
    lines = ["# The Auto depth's signal, measured", "",
             f"Written by `python -m training.auto_signal --checkpoint {result['checkpoint']}` (model.safetensors "
             f"sha256 {result['model_sha256_16']}...) on {result['machine']}: {cal['n']} held-out "
             f"sums in held-out phrasings (seed {cal['seed']}; none of them is one of {cal['excluded']}), greedy "
             f"decoding, split in two alternate halves: the policy is fitted on {cal['fit']} and checked on the "
             f"other {cal['check']}. Auto starts thinking on {ladder[0]} with a budget of {result['budget']} tokens "
             f"and may climb to {' then '.join(ladder[1:])}; the parent answers. The configurations of each table "
             f"took turns question by question, so their times compare (1-minute load average {load[0]} at the "
             f"start, {load[1]} at the end).", "",
             "## How well each signal tells a thought that ends wrong from one that ends right", "",
             f"{ladder[0]} thinking alone (never climbing): {result['right_without_climbing']} of "
             f"{cal['fit']} right. A thought's score is its peak (the largest mean over the window).", "",
             "| signal | AUROC | mean score, wrong | mean score, right |", "|---|---|---|---|"]
    for r in result["separation"]:
        lines.append(f"| {r['signal']} | {r['auroc']} | {r['mean_wrong']} | {r['mean_right']} |")
    lines += slip_table(result)
    lines += ["", "## Auto with each threshold", "",
              "A threshold is set where a share of the thoughts above would cross it; the thinker climbs at the first "
              "token whose windowed signal exceeds it, and the larger submodel decides that token.", "",
              "| signal | window | threshold | thoughts that would cross | accuracy | mean latency (ms) "
              "| mean CPU time (ms) | replies that climbed | first climb at token (median) | "
              + " | ".join(f"thinking on {n}" for n in ladder) + " |",
              "|---|---|---|---|---|---|---|---|---|" + "---|" * len(ladder)]
    never = result["never"]
    lines.append(f"| (never climbs) | - | - | 0% | {never['accuracy']:.1%} | {never['mean_latency_ms']} | "
                 f"{never['mean_cpu_ms']} | 0% | - | "
                 + " | ".join(str(never["mean_thinking_tokens"]) if i == 0 else "0" for i in range(len(ladder))) + " |")
    for r in result["grid"]:
        a, pol = r["auto"], r["auto"]["policy"]
        lines.append(f"| {pol['signal']} | {pol['window']} | {pol['threshold']:g} | {r['would_cross']:.0%} | "
                     f"{r['accuracy']:.1%} | {r['mean_latency_ms']} | {r['mean_cpu_ms']} | {a['escalated']:.0%} | "
                     f"{a['first_escalation_median'] if a['first_escalation_median'] is not None else '-'} | "
                     + " | ".join(str(a["mean_thinking_by_submodel"].get(n, 0)) for n in ladder) + " |")
    lines += ["", "## The fixed stops on the same sums", ""] + stop_rows(result["fixed_stops"])
    c = result["chosen"]
    lines += ["", "## Chosen", "", f"`auto_depth`: `{json.dumps(c)}`: the most accurate policy that costs less CPU "
              "time per reply than the parent thinking alone (Max) on these sums; on a tie, fewer climbs, then less "
              "CPU time.", "", "## The check, on the other half", "",
              f"The chosen policy, never climbing, and the fixed stops on the {cal['check']} sums it was not fitted "
              "on.", ""]
    check = result["check"]
    rows = [dict(check["chosen"], stop="Auto (chosen)")] if check["chosen"] is not check["never"] else []
    lines += stop_rows(rows + [dict(check["never"], stop="Auto, never climbing")] + check["fixed_stops"])
    lines += ["", note(result), ""]
    return "\n".join(lines)


def stop_rows(rows: list[dict]) -> list[str]:
    lines = ["| stop | accuracy | mean latency (ms) | mean CPU time (ms) | mean thinking tokens | "
             "replies that climbed |", "|---|---|---|---|---|---|"]
    for r in rows:
        climbed = r.get("auto", {}).get("escalated")
        lines.append(f"| {r['stop']} | {r['accuracy']:.1%} | {r['mean_latency_ms']} | {r['mean_cpu_ms']} | "
                     f"{r['mean_thinking_tokens']} | {'-' if climbed is None else f'{climbed:.0%}'} |")
    return lines


def slip_table(result: dict) -> list[str]:
    """The wrong thoughts' first slips and each device signal at the slipping token, against the pick."""
    if not result.get("slips"):
        return []
    chosen = result["chosen"]
    key = f"{chosen['signal']}, window {chosen['window']}"
    names = list(result["slips"][0]["signals"])
    caught = sum((r["signals"].get(key) or 0) > chosen["threshold"] for r in result["slips"])
    lines = ["", "## Where the wrong thoughts slip, and what the signals said there", "",
             f"Each wrong thought of {result['ladder'][0]} alone, at its first slip (`training/trace_slips.py`: the "
             "first token that leaves the right trace): the kind of slip, and each signal over the window that ends "
             f"at that token, which is what Auto compares with its threshold. {caught} of {len(result['slips'])} "
             f"are above the chosen threshold ({key} > {chosen['threshold']:g}): there, Auto climbs before the "
             "token and the larger submodel decides it; the others the thinker writes while confident.", "",
             "| question | slip | line | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for r in result["slips"]:
        lines.append(f"| {r['question']} | {r['kind']} | {r['line']} | "
                     + " | ".join("-" if r["signals"][n] is None else f"{r['signals'][n]:.3f}" for n in names) + " |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.auto_signal")
    parser.add_argument("--checkpoint", type=Path, default=Path("assets/demo"))
    parser.add_argument("--n", type=int, default=60, help="calibration sums")
    parser.add_argument("--seed", type=int, default=1, help="calibration seed (the evaluation uses 0)")
    parser.add_argument("--eval-n", type=int, default=120, help="evaluation questions to keep out of calibration")
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.json")
    parser.add_argument("--write", action="store_true", help="store the chosen policy in the checkpoint's elastic.json")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    if not args.checkpoint.is_dir() or not (args.checkpoint / "elastic.json").is_file():
        print(f"error: no checkpoint folder with an elastic.json at {args.checkpoint}", file=sys.stderr)
        raise SystemExit(2)
    if args.n < 4 or not all(1 <= w <= 256 for w in args.windows) or not all(0 < f < 1 for f in args.fractions):
        print("error: --n must be at least 4, --windows from 1 to 256, --fractions between 0 and 1", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(max(1, args.threads))
    result = measure(args.checkpoint, args.n, args.seed, tuple(args.windows), tuple(args.fractions), args.eval_n)
    text = markdown(result)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
        print(f"wrote {args.out}.md and .json")
    if args.write:
        print(f"wrote auto_depth {json.dumps(result['chosen'])} into {write_policy(args.checkpoint, result)}")


if __name__ == "__main__":
    main()
