"""Auto's rungs and threshold side by side, on calibration sums (issue 40).

    python -m training.auto_rungs --checkpoint assets/demo --n 60 \\
        --policies "small>parent@0.35" "small>parent@0.5" "small>mid>parent@0.5" Max --out /tmp/rungs.json

A lighter companion to `training.auto_signal` (which fits one ladder's threshold on half its sums and
checks on the other half): the smallest submodel's thoughts alone with every token's entropy recorded (where
the wrong ones slipped, and what the entropy was there), then each named policy, a ladder of roles
(smallest, middle, parent, written small, mid, parent) climbed above an entropy threshold, its first role
the rung the thought starts on (elastic.json's `auto_depth` `start`: "mid>parent@0.35"), beside Max
(the parent thinking) or Balanced, taking turns question by question so their CPU times compare. The sums
are auto_signal's calibration sums (`--seed`, 1 by default: the refit's; 2 for a second look), none of
them among the evaluation's.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from runtime.auto_depth import AutoPolicy, Escalation
from runtime.engine import Engine

from .auto_signal import watched_thoughts
from .evaluate import Runner, calibration_questions

AUTO_BUDGET_FRACTION = 0.5  # of the thinking ceiling, as the depth table's Auto row


def config(spec: str, roles: dict[str, str], ceiling: int) -> tuple:
    """(think, answer, budget, escalation) for "Max", "Balanced" or "small>mid>parent@0.5"."""
    parent = roles["parent"]
    if spec == "Max":
        return parent, parent, ceiling, None
    if spec == "Balanced":
        return roles["mid"], parent, ceiling // 4, None
    rungs, threshold = spec.split("@")
    ladder = tuple(roles[r] for r in rungs.split(">"))
    return ladder[0], parent, round(AUTO_BUDGET_FRACTION * ceiling), Escalation(ladder, AutoPolicy("entropy",
                                                                                                  float(threshold), 1))


def measure(checkpoint: Path, n: int, specs: list[str], seed: int = 1, log=print) -> dict:
    engine = Engine.load(checkpoint, device="cpu", max_context=2048)
    small, mid, parent = engine.submodels_by_size()
    roles = {"small": small, "mid": mid, "parent": parent}
    items = calibration_questions(seed, n)
    runner = Runner(engine, items, log)
    thoughts = watched_thoughts(engine, items, small, parent, round(AUTO_BUDGET_FRACTION * engine.thinking_ceiling),
                                runner.max_new)
    slips = []
    for t in thoughts:
        if not t["right"] and t["slip"]:
            at = t["slip"]["token"]
            entropy = [s[0] for s in t["signals"]]
            slips.append({"question": t["question"], "kind": t["slip"]["kind"],
                          "entropy_at_slip": round(entropy[at], 3) if at < len(entropy) else None,
                          "highest_before": round(max(entropy[:at], default=0.0), 3)})
    load = os.getloadavg()[0]
    rows = runner.run_interleaved([config(s, roles, engine.thinking_ceiling) for s in specs])
    out = []
    for spec, r in zip(specs, rows):
        r.pop("replies")
        out.append({"policy": spec, "accuracy": r["accuracy"], "by_numbers": r["by_numbers"],
                    "mean_cpu_ms": r["mean_cpu_ms"], "mean_latency_ms": r["mean_latency_ms"],
                    "climbed": (r.get("auto") or {}).get("escalated"), "mean_time_ms": r["mean_time_ms"]})
    return {"checkpoint": str(checkpoint), "sums": n, "seed": seed,
            "never_climbing_right": sum(t["right"] for t in thoughts), "slips": slips, "rows": out,
            "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.auto_rungs")
    parser.add_argument("--checkpoint", type=Path, default=Path("assets/demo"))
    parser.add_argument("--n", type=int, default=60, help="calibration sums")
    parser.add_argument("--seed", type=int, default=1,
                        help="which calibration sums (1: the refit's; none is ever among the evaluation's)")
    parser.add_argument("--policies", nargs="+", default=["small>mid>parent@0.5", "small>parent@0.5", "Max"])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    result = measure(args.checkpoint, args.n, args.policies, args.seed)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in result["rows"]:
        print(f"{r['policy']}: {r['accuracy']:.1%}, {r['mean_cpu_ms']} ms CPU, climbed {r['climbed']}")


if __name__ == "__main__":
    main()
