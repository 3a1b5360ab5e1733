"""Milliseconds per decode step of every submodel of both demo checkpoints, side by side in one run.

    python benchmarks/bench_submodel_step.py [--threads 1 2] [--steps 200] [--rounds 7]

Issue 40 asked why a smaller submodel's thinking token was no cheaper than the parent's (demo-eval.md's
"per thinking token" column: fp32 0.5M 2.26 ms against the parent's 1.52; NVFP4 parent 3.25 against the
0.5M's 1.68). Every (checkpoint, submodel) runs `--steps` cached decode steps per round, the order
rotating round by round so all share the machine's load; the median round is printed, wall and CPU time.
Beside it: ATen ops per step (benchmarks/count_ops.py's counter), which is what a step costs at these
widths (6 MB of fp32 weights, 0.9 MB NVFP4: nothing here waits on memory).

Measured on the project's 2-core machine (torch 2.13.0+cpu), shared with other sessions' tests, 200
steps a round, 7 rounds; ms per step, wall (CPU); ATen ops per step are the same for every submodel:

    load 2.1 to 2.7       ops   1 thread      2 threads
    fp32   1.5M           433   1.28 (1.28)   1.81 (3.41)
    fp32   1.0M           433   1.21 (1.21)   1.46 (2.90)
    fp32   0.5M           433   1.11 (1.10)   1.25 (2.44)
    NVFP4  1.5M           501   1.23 (1.22)   1.86 (3.68)
    NVFP4  1.0M           501   1.30 (1.20)   1.82 (3.30)
    NVFP4  0.5M           501   1.08 (1.08)   1.80 (3.55)

A run that began quiet (load 0.75) and ended under other sessions' tests (3.7): 1 thread 1.25, 1.19, 1.08
(fp32 1.5M, 1.0M, 0.5M) and 1.17, 1.14, 1.09 (NVFP4); 2 threads 6.83, 8.01, 6.66 and 8.79, 5.37, 1.68.

No submodel's step costs more than its parent's: the smaller ones dispatch the same ops on narrower
tensors and read the parent's weights in place (tests/runtime/test_submodel_step.py: no op of any
submodel's step copies a weight; none dispatches more ops than its parent). A step is about 1.1 ms of
per-op framework work (some 2 us an op), so a third of the width saves about a tenth of the time, and
the NVFP4 parent's step is no dearer than fp32's. The table's 2.26 and 3.25 ms came from how it was
run, not from the submodels: two torch threads on two cores that other sessions' work shared (load up
to 2.4), where a parallel op waits for whichever thread another process holds (runtime/threads.py).
With one thread (the app's count here) the same steps cost 1.1 to 1.3 ms under load; with two they
cost more even on a quiet machine, twice the CPU, and up to seven times the wall time under load.
Nothing in the step was found to fix, so there is no "after": this is the engine as it stands.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.count_ops import OpCounter  # noqa: E402
from runtime import ElasticModel  # noqa: E402

CHECKPOINTS = (("fp32", ROOT / "assets" / "demo"), ("NVFP4", ROOT / "assets" / "demo-nvfp4"))
PROMPT = list(range(5, 25))  # 20 tokens prefilled before the steps: a short question's length
TOKEN = 7


class Stepper:
    """One submodel's cached decode step, held at a fixed length so every round reads the same span."""

    def __init__(self, model: ElasticModel, name: str, steps: int):
        self.cache = model.new_cache(name, len(PROMPT) + steps + 1)
        model.forward(name, self.cache, PROMPT)
        self.step = model.decoder(name, self.cache)
        self.steps = steps

    def ops(self) -> int:
        """ATen ops one step dispatches (after a step has run: one-off self-tests are not counted)."""
        self.run(1)
        counter = OpCounter()
        with counter:
            self.step.forward_token(TOKEN)
        return sum(counter.counts.values())

    def run(self, steps: int | None = None) -> tuple[float, float]:
        """ms per step, wall and CPU."""
        del self.cache.tokens[len(PROMPT):]
        wall, cpu = time.perf_counter(), time.process_time()
        n = steps or self.steps
        for _ in range(n):
            self.step.forward_token(TOKEN)
        return 1000 * (time.perf_counter() - wall) / n, 1000 * (time.process_time() - cpu) / n


def measure(threads: int, steps: int, rounds: int, models: dict) -> dict:
    torch.set_num_threads(threads)
    steppers = {key: Stepper(models[key[0]], key[1], steps) for key in keys(models)}
    for s in steppers.values():
        s.run()  # warm-up: first-call costs (tables, allocator) out of the rounds
    times = {key: [] for key in steppers}
    order = list(steppers)
    for r in range(rounds):
        turn = r % len(order)
        for key in order[turn:] + order[:turn]:
            times[key].append(steppers[key].run())
    return {key: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for key, ts in times.items()}


def keys(models: dict) -> list[tuple[str, str]]:
    return [(label, name) for label, model in models.items() for name in model.views]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_submodel_step.py")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200, help="decode steps per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    models = {label: ElasticModel.load(folder, device="cpu") for label, folder in CHECKPOINTS}
    ops = {key: Stepper(models[key[0]], key[1], 2).ops() for key in keys(models)}
    load = os.getloadavg()[0]
    results = {t: measure(t, args.steps, args.rounds, models) for t in args.threads}
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load {load:.2f} to {os.getloadavg()[0]:.2f} "
          "(1-minute average); "
          f"{args.steps} steps a round, median of {args.rounds} rounds; ms per step, wall (CPU)")
    head = f"{'checkpoint':<11} {'submodel':<9} {'ops/step':<9} " + " ".join(
        f"{f'{t} thread' + ('s' if t > 1 else ''):<14}" for t in args.threads)
    print(head)
    for key in keys(models):
        cells = " ".join(f"{f'{results[t][key][0]:.2f} ({results[t][key][1]:.2f})':<14}" for t in args.threads)
        print(f"{key[0]:<11} {key[1]:<9} {ops[key]:<9} {cells}")


if __name__ == "__main__":
    main()
