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
from runtime.depth import load_table
from runtime.engine import Engine
from runtime.events import THINKING, Done, InvalidToolCall, Prefill, Switch, Token, ToolCall
from runtime.generate import ChatRequest, stream_chat
from runtime.mcp.client import ToolOutcome
from runtime.sampling import SamplingSettings
from runtime.threads import default_threads
from runtime.tool_calls import format_tool_call
from runtime.tool_loop import ALLOW_ONCE, TOOL_LIMIT, ToolRound, run_tool_loop

from . import tools_data
from .data import BIG, NEGATIVE, answer_text, evaluation_out_of_range, evaluation_problems, out_of_range_kind, question
from .trace_slips import BUDGET, KINDS, first_slip, who_lost

# of the checkpoint's thinking ceiling: the Quick and Balanced budgets, as the depth table sets them
BUDGET_FRACTIONS = tuple(row["budget"] for row in load_table() if row["name"] in ("Quick", "Balanced"))
NVFP4_KEYS = ("checkpoint", "stops", "stops_load_average", "in_conversation", "tool_use", "tool_use_constrained",
              "without_tools")


def last_number(text: str) -> int | None:
    found = re.findall(r"-?\d+", text)
    return int(found[-1]) if found else None


def questions(seed: int, n: int) -> list[tuple]:
    """(problem, held-out phrasing of it) pairs."""
    return phrased(seed, evaluation_problems(seed, n))


def phrased(seed: int, problems: list) -> list[tuple]:
    rng = random.Random(seed + 17)
    return [(p, question(p, rng, held_out_phrasing=True)) for p in problems]


# The sums Auto's policies were chosen on, as (seed, how many) of `calibration_questions`: auto_signal's
# refit (seed 1, 200 sums: docs/results/auto-signal.md) and auto_rungs' (seeds 1, 2 and 3, 60 each:
# docs/results/auto-rungs.json). No evaluation scores them (`pooled_questions`).
CALIBRATION_RUNS = ((1, 200), (2, 60), (3, 60))


def calibration_questions(seed: int, n: int, eval_seed: int = 0, eval_n: int = 120) -> list[tuple]:
    """(problem, held-out phrasing) pairs whose expressions the evaluation (seed 0) never asks."""
    asked = {p.expression for p, _ in questions(eval_seed, eval_n)}
    problems = [p for p in evaluation_problems(seed, n + eval_n) if p.expression not in asked][:n]
    return phrased(seed, problems)


def pooled_questions(seeds: tuple[int, ...], n: int) -> tuple[list[tuple], list[int]]:
    """n held-out sums from each seed in turn, none of them a calibration sum (CALIBRATION_RUNS) or one an
    earlier seed gave, as many with each count of numbers as `questions(seed, n)`; and each item's seed.
    A seed none of whose first n sums is excluded gives exactly `questions(seed, n)` (seed 0 does:
    calibration leaves out its first 120), so a pool that starts with the reported sample keeps it."""
    avoid = {p.expression for seed, k in CALIBRATION_RUNS for p, _ in calibration_questions(seed, k)}
    items, seed_of = [], []
    for seed in seeds:
        chosen = sums_avoiding(seed, n, avoid)
        avoid |= {p.expression for p in chosen}
        items += phrased(seed, chosen)
        seed_of += [seed] * len(chosen)
    return items, seed_of


def sums_avoiding(seed: int, n: int, avoid: set[str]) -> list:
    """evaluation_problems(seed, n), each sum in `avoid` replaced by the seed's next unused one with as many
    numbers."""
    slots = [len(p.numbers) for p in evaluation_problems(seed, n)]
    drawn = 2 * n
    while True:
        spare: dict[int, list] = {}
        for p in evaluation_problems(seed, drawn):
            if p.expression not in avoid:
                spare.setdefault(len(p.numbers), []).append(p)
        if all(len(spare.get(k, [])) >= slots.count(k) for k in set(slots)):
            taken = {k: iter(v) for k, v in spare.items()}
            return [next(taken[k]) for k in slots]
        drawn *= 2


class Runner:
    """Runs configurations over the questions, once each (the stops repeat some rows)."""

    def __init__(self, engine: Engine, items: list[tuple], log=print, seed_of: list[int] | None = None):
        """`seed_of`: the seed each item was drawn from, when several were pooled (`pooled_questions`)."""
        self.engine, self.items, self.log = engine, items, log
        self.seed_of = seed_of
        self.max_new = engine.thinking_ceiling + 64
        self.done: dict[tuple, dict] = {}

    @staticmethod
    def key(think: str | None, answer: str, budget: int, escalation: Escalation | None = None) -> tuple:
        return think if budget else None, answer, budget if think else 0, escalation if think and budget else None

    def run(self, think: str | None, answer: str, budget: int, escalation: Escalation | None = None) -> dict:
        key = self.key(think, answer, budget, escalation)
        if key not in self.done:
            self._finish(key, [self._one(key, p, asked) for p, asked in self.items])
        return dict(self.done[key])

    def run_interleaved(self, configs: list[tuple]) -> list[dict]:
        """Several configurations (think, answer, budget, escalation) over the same questions, taking
        turns question by question, the order rotating: they share whatever load the machine has while
        it runs, so their wall times compare. Each reply prefills afresh (a cache scope of its own), as
        a reply in a new chat does: no configuration reuses the prompt another one just ran. One untimed
        reply per configuration first, so none pays a first run's costs."""
        keys = list(dict.fromkeys(self.key(*c) for c in configs if self.key(*c) not in self.done))
        for k in keys:
            self._one(k, *self.items[0], scope="warm-up")
        rows = {k: [] for k in keys}
        for i, (p, asked) in enumerate(self.items):
            turn = i % max(1, len(keys))
            for j, k in enumerate(keys[turn:] + keys[:turn]):
                rows[k].append(self._one(k, p, asked, scope=f"{i}/{j}"))
        for k in keys:
            self._finish(k, rows[k])
        return [dict(self.done[self.key(*c)]) for c in configs]

    def _one(self, key: tuple, p, asked, scope: str = "") -> dict:
        """One reply of configuration `key`: what it wrote, whether it is right, where its thought slipped."""
        think, answer, budget, escalation = key
        messages = asked if isinstance(asked, tuple) else ({"role": "user", "content": asked},)
        request = ChatRequest(messages, think, answer, budget, self.max_new, SamplingSettings(temperature=0),
                              escalation=escalation, cache_scope=scope)
        started, cpu_started = time.perf_counter(), time.process_time()
        done, climbed_at, pieces, prefill_ms = reply(self.engine, request)
        latency, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        right = last_number(done.answer_text) == p.result
        slip = first_slip(p, pieces) if think else None
        return {"question": messages[-1]["content"], "expected": p.result, "numbers": len(p.numbers),
                "thinking": done.thinking_text, "answer": done.answer_text, "right": right,
                "escalated_at": climbed_at, "thinking_by_submodel": dict(done.thinking_by_submodel),
                "budget_hit": done.budget_hit, "slip": slip,
                "lost": None if right or not think else who_lost(slip, right, climbed_at),
                "latency_s": latency, "cpu_s": cpu, "thinking_tokens": done.thinking_tokens,
                "time_ms": time_split(done, prefill_ms)}

    def _finish(self, key: tuple, rows: list[dict]) -> None:
        think, answer, budget, escalation = key
        by_count = {}
        for k in sorted({r["numbers"] for r in rows}):
            group = [r["right"] for r in rows if r["numbers"] == k]
            by_count[str(k)] = round(sum(group) / len(group), 4)
        out = {"think": think, "answer": answer, "budget": budget,
               "accuracy": round(sum(r["right"] for r in rows) / len(rows), 4), "by_numbers": by_count,
               "slips": slip_summary(rows) if think else None,
               "mean_latency_ms": round(1000 * statistics.mean(r.pop("latency_s") for r in rows), 1),
               "mean_cpu_ms": round(1000 * statistics.mean(r.pop("cpu_s") for r in rows), 1),
               "mean_thinking_tokens": round(statistics.mean(r.pop("thinking_tokens") for r in rows), 1),
               "mean_time_ms": {k: round(statistics.mean(r["time_ms"][k] for r in rows), 1)
                                for k in rows[0]["time_ms"]},
               "replies": rows}
        if escalation is not None:
            out["auto"] = auto_summary(rows, escalation)
        self.done[key] = out
        self.log(f"think={think} answer={answer} budget={budget}: {out['accuracy']:.1%} {by_count} "
                 f"({out['mean_latency_ms']:.0f} ms)")


def reply(engine: Engine, request: ChatRequest) -> tuple[Done, list[int], list[tuple[str, str]], float]:
    """One reply, the thinking tokens written before each escalation (Auto's climbs), the thought as
    (text, writer) per thinking token (the writer: its submodel, or trace_slips.BUDGET when forced),
    and the prompt's prefill time (ms)."""
    climbed_at, pieces, done, prefill_ms = [], [], None, None
    for event in stream_chat(engine, request):
        if isinstance(event, Token) and event.phase == THINKING:
            pieces.append((event.text, BUDGET if event.forced else event.submodel))
        elif isinstance(event, Switch) and event.reason == "escalate":
            climbed_at.append(len(pieces))
        elif isinstance(event, Prefill) and prefill_ms is None:
            prefill_ms = event.ms
        done = event
    return done, climbed_at, pieces, prefill_ms or 0.0


def time_split(done: Done, prefill_ms: float) -> dict:
    """Where one reply's time went (ms): the prompt's prefill, the thought's decoding, the re-prefills of
    Auto's climbs, the answering submodel's re-prefill of prompt and thought, and the answer's decoding."""
    climbs = sum(s.ms for s in done.switches if s.reason == "escalate")
    answer_switch = sum(s.ms for s in done.switches if s.reason == "answer")
    thinking = max(0.0, done.progress.thinking_ms - prefill_ms - climbs) if done.thinking_tokens else 0.0
    return {"prefill": prefill_ms, "thinking": thinking, "climbs": climbs, "answer_switch": answer_switch,
            "answer": max(0.0, done.progress.elapsed_ms - prefill_ms - thinking - climbs - answer_switch)}


def slip_summary(rows: list[dict]) -> dict:
    """Of the wrong replies: where their thought first left the right trace (trace_slips.KINDS), and
    who slipped there (a submodel, before or after a climb; the budget; or the answer)."""
    wrong = [r for r in rows if not r["right"]]
    kinds = {k: sum((r["slip"] or {}).get("kind", "answer") == k for r in wrong) for k in KINDS}
    lost = {}
    for r in wrong:
        lost[r["lost"]] = lost.get(r["lost"], 0) + 1
    return {"wrong": len(wrong), "kinds": {k: v for k, v in kinds.items() if v}, "lost": lost,
            "budget_hit": sum(r["budget_hit"] for r in rows),
            "right_despite_slip": sum(r["right"] and r["slip"] is not None for r in rows)}


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


EARLIER_TURNS = (0, 1, 3, 5, 9)  # sums asked before the one scored, in the same conversation (turns 1, 2, 4, 6, 10)


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
    """The default stop on a sum asked at turn 1, 2, 4, 6 and 10 of a chat (after 0 to 9 others), as
    users ask them."""
    stop = next(s for s in engine.depth_levels() if s.name == engine.default_depth())
    rows = []
    for earlier in EARLIER_TURNS:
        row = Runner(engine, conversations(seed, n, earlier), log).run(stop.think, stop.answer, stop.budget,
                                                                       stop.escalation)
        row.pop("replies")
        rows.append(dict(row, stop=stop.name, earlier=earlier, turn=earlier + 1))
    return rows


# ----------------------------------------------------------------------------- tools

MAX_CALLS = 3  # tool calls per reply, as a loop would bound them


def run_sum_tool(arguments: dict) -> str:
    """The evaluation's arithmetic tool: evaluates "145+23-7" (whole numbers, + and -) given as its one
    argument, or says why it cannot."""
    if len(arguments) != 1:
        return "error: give one expression"
    text = str(next(iter(arguments.values()))).replace(" ", "")
    if not re.fullmatch(r"-?\d+([+-]\d+)*", text):
        return f"error: not a sum of whole numbers: {text[:40]}"
    return str(sum(int(t) for t in re.findall(r"[+-]?\d+", text)))


class _SumToolbox:
    """The tools of one question, for runtime.tool_loop: the arithmetic one evaluates the sum, any other
    answers that it is not available here."""

    def __init__(self, arithmetic: str | None):
        self.arithmetic = arithmetic

    def tool(self, name):
        return None

    def call(self, name, arguments, cancelled=None, timeout_s=None) -> ToolOutcome:
        if name != self.arithmetic:
            return ToolOutcome(f"error: {name} is not available", True)
        content = run_sum_tool(arguments)
        return ToolOutcome(content, content.startswith("error"))


def tool_reply(engine: Engine, messages: tuple, tools: list[dict] | None, stop, max_new: int,
               arithmetic: str | None, constrained: bool = False) -> dict:
    """One reply with tools offered, run by the app's tool loop (runtime/tool_loop.py, every call
    allowed, at most MAX_CALLS): `constrained` as the app runs it (calls kept to the tools' schemas
    once the model opens one), or not, to measure the model's own calls."""
    started = time.perf_counter()
    request = ChatRequest(tuple(messages), stop.think, stop.answer, stop.budget, max_new,
                          SamplingSettings(temperature=0), escalation=stop.escalation,
                          tools=tuple(tools) if tools else None)
    calls, errors, rounds, done = [], [], [], None
    for event in run_tool_loop(lambda r, c: stream_chat(engine, r, c), request, _SumToolbox(arithmetic),
                               lambda pending: ALLOW_ONCE, max_calls=MAX_CALLS, constrain=constrained):
        if isinstance(event, ToolCall):
            calls.append({"name": event.name, "arguments": event.arguments})
        elif isinstance(event, InvalidToolCall):
            errors.append({"reason": event.error, "text": event.text})
        elif isinstance(event, ToolRound):
            d = event.done
            written = [format_tool_call(c.name, c.arguments) for c in d.tool_calls] + \
                [c.text for c in d.invalid_tool_calls]
            rounds.append({"thinking": d.thinking_text, "answer": (d.answer_text + "".join(written)).strip(),
                           "results": [r.content for r in event.results]})
        elif isinstance(event, Done):
            done = event
    if done.finish_reason != TOOL_LIMIT and not done.tool_calls:
        rounds.append({"thinking": done.thinking_text, "answer": done.answer_text})
    return {"calls": calls, "errors": errors, "rounds": rounds, "final": done.answer_text,
            "final_calls": done.finish_reason == TOOL_LIMIT or bool(done.tool_calls or done.invalid_tool_calls),
            "latency_ms": 1000 * (time.perf_counter() - started)}


def default_level(engine: Engine):
    return next(s for s in engine.depth_levels() if s.name == engine.default_depth())


def tool_use(engine: Engine, n: int, seed: int, log=print, constrained: bool = False) -> dict:
    """Held-out tools (tools_data.HELD_OUT_TOOLS: names, parameter names and descriptions never trained),
    alone or beside another held-out tool, at the default stop: on held-out sums the demo cannot do, how
    often it calls, how many calls are valid (a tool offered, its required parameter, nothing else), how
    many name the arithmetic tool with the sum's expression, and how often the final answer is right;
    on held-out sums it can do, how often it calls anyway and how often it is right. `constrained`: the
    calls kept to the tools' schemas, as the app's tool loop runs them (else the model's own calls)."""
    stop = default_level(engine)
    max_new = engine.thinking_ceiling + 64
    rng = random.Random(seed + 31)
    offers = tools_data.held_out_tools(seed, 2 * n)
    out_of_range = evaluation_out_of_range(seed, n)
    in_range = [p for p in evaluation_problems(seed + 5, 3 * n) if p.expression not in
                {q.expression for q, _ in questions(seed, n)}][:n]
    rows = {"out_of_range": [], "in_range": []}
    for kind, problems, tool_lists in (("out_of_range", out_of_range, offers[:n]), ("in_range", in_range, offers[n:])):
        for p, (tools, k) in zip(problems, tool_lists):
            text = question(p, rng, held_out_phrasing=True)
            name = tools_data.tool_name(tools[k])
            r = tool_reply(engine, ({"role": "user", "content": text},), tools, stop, max_new, name, constrained)
            right_call = any(c["name"] == name and run_sum_tool(c["arguments"]) == str(p.result) for c in r["calls"])
            rows[kind].append({"question": text, "expected": p.result, "numbers": len(p.numbers),
                               "kind": out_of_range_kind(p) or "in range", "tool": name, "offered": len(tools),
                               "called": bool(r["calls"] or r["errors"]), "valid": bool(r["calls"]) and not r["errors"],
                               "calls": len(r["calls"]) + len(r["errors"]), "right_call": right_call,
                               "right": not r["final_calls"] and last_number(r["final"]) == p.result,
                               "latency_ms": round(r["latency_ms"], 1), "rounds": r["rounds"], "errors": r["errors"]})
    summary = {"stop": stop.name, "tools": [t[0] for t in tools_data.HELD_OUT_TOOLS], "constrained": constrained}
    for kind, group in rows.items():
        summary[kind] = tool_summary(group)
    right = [r for r in rows["out_of_range"] if r["right"]]
    wrong = [r for r in rows["out_of_range"] if not r["right"]]
    summary["samples"] = [dict(r) for r in right[:2] + wrong[:max(2, 4 - len(right[:2]))]][:4]
    o, i = summary["out_of_range"], summary["in_range"]
    log(f"tools ({stop.name}, calls {'constrained' if constrained else 'free'}): out of range called "
        f"{o['called']:.0%}, valid {o['valid_of_called']}, right call "
        f"{o['right_call']:.0%}, answer right {o['right']:.0%}; "
        f"in range called {i['called']:.0%}, right {i['right']:.0%}")
    return summary


def tool_summary(rows: list[dict]) -> dict:
    def share(key, group):
        return round(sum(r[key] for r in group) / len(group), 4) if group else None

    called = [r for r in rows if r["called"]]
    out = {"questions": len(rows), "called": share("called", rows),
           "valid_of_called": share("valid", called), "right_call": share("right_call", rows),
           "right": share("right", rows), "mean_latency_ms": round(statistics.mean(r["latency_ms"] for r in rows), 1),
           "by_kind": {}, "by_offered": {}}
    for key, field in (("by_kind", "kind"), ("by_offered", "offered")):
        for value in sorted({r[field] for r in rows}, key=str):
            group = [r for r in rows if r[field] == value]
            out[key][str(value)] = {"questions": len(group), "called": share("called", group),
                                    "right_call": share("right_call", group), "right": share("right", group)}
    return out


DECLINE = re.compile(r"can't|cannot|can not", re.IGNORECASE)


def decline_reason_right(p, answer: str) -> bool:
    """Whether a reply that says it cannot gives the right reason: a number of the question that is over 99
    (and no number that is not in the question), or, for a sum that goes below 0, that it does."""
    if out_of_range_kind(p) == BIG:
        named = [int(n) for n in re.findall(r"(\d+) is over 99", answer)]
        return bool(named) and all(n in p.numbers and n > 99 for n in named)
    return "below 0" in answer


def without_tools(engine: Engine, n: int, seed: int, log=print) -> list[dict]:
    """Held-out sums the demo cannot do, with no tool offered and with only other (held-out, not
    arithmetic) tools offered, at the default stop: does it say it cannot (and what it can do), answer
    anyway (right or wrong), or write a tool call it was not offered?"""
    stop = default_level(engine)
    max_new = engine.thinking_ceiling + 64
    problems = evaluation_out_of_range(seed + 3, n)
    rng = random.Random(seed + 37)
    out = []
    for offered in ("no tools", "other tools only"):
        rows = []
        for i, p in enumerate(problems):
            text = question(p, rng, held_out_phrasing=True)
            tools = ([tools_data.tool_definition(*tools_data.HELD_OUT_OTHER[i % len(tools_data.HELD_OUT_OTHER)])]
                     if offered != "no tools" else None)
            r = tool_reply(engine, ({"role": "user", "content": text},), tools, stop, max_new, None)
            answer = r["rounds"][0]["answer"]
            wrote_call = r["calls"] or r["errors"] or "<tool_call>" in answer  # (no tools: the text holds it)
            verdict = ("tool call" if wrote_call else "declined" if DECLINE.search(answer)
                       else "right" if last_number(answer) == p.result else "wrong")
            rows.append({"question": text, "expected": p.result, "kind": out_of_range_kind(p), "verdict": verdict,
                         "reason_right": verdict == "declined" and decline_reason_right(p, answer),
                         "answer": answer, "latency_ms": r["latency_ms"]})
        row = {"offered": offered, "stop": stop.name, "questions": len(rows),
               **{v: round(sum(r["verdict"] == v for r in rows) / len(rows), 4)
                  for v in ("declined", "right", "wrong", "tool call")},
               "reason_right_of_declined": round(sum(r["reason_right"] for r in rows)
                                                 / max(1, sum(r["verdict"] == "declined" for r in rows)), 4),
               "by_kind": {k: round(sum(r["verdict"] == "declined" for r in rows if r["kind"] == k)
                                    / max(1, sum(r["kind"] == k for r in rows)), 4) for k in (BIG, NEGATIVE)},
               "samples": [r for r in rows if r["verdict"] != "declined"][:3] + rows[:1]}
        log(f"without an arithmetic tool ({offered}): declined {row['declined']:.0%}, wrong {row['wrong']:.0%}, "
            f"right {row['right']:.0%}, tool call {row['tool call']:.0%}")
        out.append(row)
    return out


def evaluate(checkpoint: Path, n: int, seed: int = 0, stops_only: bool = False, log=print,
             n_tools: int | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    """Every table on `n` held-out sums (n from each of `seeds` when given); the turn-by-turn, tool and
    no-tool tables on `n_tools` (default n) of `seed`."""
    n_tools = n_tools or n
    engine = Engine.load(checkpoint, device="cpu", max_context=2048)
    names = engine.submodels_by_size()  # smallest first
    parent, ceiling = names[-1], engine.thinking_ceiling
    items, seed_of = stop_questions(seed, n, seeds)
    runner = Runner(engine, items, log, seed_of)
    result = dict(run_stops(engine, runner, checkpoint), per_submodel=[], budget_control=[])
    if seeds:
        result["seeds"] = list(seeds)
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
    result["problems_tools"] = n_tools
    result["in_conversation"] = in_conversation(engine, n_tools, seed, log)
    result["tool_use"] = tool_use(engine, n_tools, seed, log)
    result["tool_use_constrained"] = tool_use(engine, n_tools, seed, log, constrained=True)
    result["without_tools"] = without_tools(engine, n_tools, seed, log)
    for section in ("per_submodel", "stops", "budget_control"):
        for row in result[section]:
            row.pop("replies")
    return result


def run_stops(engine: Engine, runner: Runner, checkpoint: Path) -> dict:
    """The depth slider's stops as the app runs them (depth_levels.json, Auto with the checkpoint's policy),
    taking turns over the runner's questions: the part of the result a change of the table or of the Auto
    policy changes."""
    result = {"checkpoint": str(checkpoint), "problems": len(runner.items), "submodels": engine.submodels_by_size(),
              "thinking_ceiling": engine.thinking_ceiling,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
                         f"{torch.get_num_threads()} torch thread{'s' if torch.get_num_threads() > 1 else ''}",
              "stops": [],
              "auto_policy_from": "the checkpoint's elastic.json (auto_depth)" if engine.auto_policy
              else "the depth table's default (depth_levels.json)"}
    stops = engine.depth_levels()
    load = os.getloadavg()[0]
    for stop, row in zip(stops, runner.run_interleaved([(s.think, s.answer, s.budget, s.escalation) for s in stops])):
        row["stop"] = stop.name
        if runner.seed_of and len(set(runner.seed_of)) > 1:
            row["by_seed"] = accuracy_by_seed(row["replies"], runner.seed_of)
        result["stops"].append(row)
    result["stops_load_average"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return result


def accuracy_by_seed(replies: list[dict], seed_of: list[int]) -> dict[str, float]:
    """Accuracy on each pooled seed's sums, in pool order (so a pool's first sample reads as it did alone)."""
    out = {}
    for seed in dict.fromkeys(seed_of):
        right = [r["right"] for r, s in zip(replies, seed_of) if s == seed]
        out[str(seed)] = round(sum(right) / len(right), 4)
    return out


def stop_questions(seed: int, n: int, seeds: tuple[int, ...] | None) -> tuple[list[tuple], list[int] | None]:
    """The stops' sums: `questions(seed, n)`, or n from each of `seeds` (`pooled_questions`), and their seeds."""
    if not seeds:
        return questions(seed, n), None
    return pooled_questions(seeds, n)


STOP_KEYS = ("stops", "stops_load_average", "auto_policy_from", "machine", "thinking_ceiling")


def update_stops(earlier: dict, checkpoint: Path, n: int, seed: int, nvfp4: Path | None = None,
                 log=print, seeds: tuple[int, ...] | None = None) -> dict:
    """An earlier run's result with only the slider's stops measured again (fp32, and the NVFP4 export's
    when `nvfp4` names its folder) on `n` sums (n from each of `seeds` when given): what a change of the
    depth table or the Auto policy needs, on the same weights. The other tables (each submodel alone, budget
    control, the chat turns, tools) stay the earlier run's: none of them runs a stop other than the default,
    which such a change leaves alone."""
    result = dict(earlier)
    result.setdefault("problems_submodels", earlier["problems"])
    result.setdefault("problems_tools", earlier["problems"])
    items, seed_of = stop_questions(seed, n, seeds)
    result.pop("seeds", None)
    if seeds:
        result["seeds"] = list(seeds)
    for key, folder in (("", checkpoint), ("nvfp4", nvfp4)):
        if folder is None:
            continue
        engine = Engine.load(folder, device="cpu", max_context=2048)
        stops = run_stops(engine, Runner(engine, items, log, seed_of), folder)
        if key:
            result[key] = dict(result.get(key) or {}, **{k: stops[k] for k in ("checkpoint", *STOP_KEYS[:2])})
        else:
            result.update({k: stops[k] for k in ("checkpoint", "problems", *STOP_KEYS)})
            result["samples"] = samples(result)
        for row in stops["stops"]:
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


def quick_tools(checkpoint: Path, n: int, seed: int = 0) -> dict:
    """Tools, no tools and turn 10 on n questions each: the numbers the runs in progress compare."""
    engine = Engine.load(checkpoint, device="cpu", max_context=2048)
    quiet = lambda *_: None  # noqa: E731
    turn10 = Runner(engine, conversations(seed, n, 9), quiet).run(*(lambda s: (s.think, s.answer, s.budget,
                                                                              s.escalation))(default_level(engine)))
    tools = tool_use(engine, n, seed, quiet)
    constrained = tool_use(engine, n, seed, quiet, constrained=True)
    return {"tool_use": {k: tools[k] for k in ("out_of_range", "in_range")},
            "tool_use_constrained": {k: constrained[k] for k in ("out_of_range", "in_range")},
            "without_tools": [{k: v for k, v in r.items() if k != "samples"}
                              for r in without_tools(engine, n, seed, quiet)],
            "turn_10": turn10["accuracy"], "tool_samples": tools["samples"][:2]}


def conversation_lines(result: dict, nvfp4: dict | None, head: str, rule: str, by_numbers) -> list[str]:
    if not result.get("in_conversation"):
        return []
    earlier = ", ".join(str(r["earlier"]) for r in result["in_conversation"])
    lines = ["", "## Accuracy by turn: a sum asked after others in the same chat", "",
             f"Each question here comes after {earlier} other held-out sums and their answers in the same "
             "conversation (thinking dropped from them, as the chat template does), at the default stop, as a "
             f"user asks them in one chat: {result.get('problems_tools', result['problems'])} conversations each, "
             f"other sums than the first {result.get('problems_tools', result['problems'])} above. "
             "Turn 10 is the tenth question of the chat.", "",
             f"| checkpoint | turn | earlier sums | stop | accuracy | {head} | mean latency (ms) |",
             f"|---|---|---|---|---{rule}|---|"]
    for name, rows in (("fp32", result["in_conversation"]), ("NVFP4", (nvfp4 or {}).get("in_conversation", []))):
        for r in rows:
            lines.append(f"| {name} | {r.get('turn', r['earlier'] + 1)} | {r['earlier']} | {r['stop']} | "
                         f"{r['accuracy']:.1%} | {by_numbers(r)} | {r['mean_latency_ms']} |")
    return lines


def tool_lines(result: dict, nvfp4: dict | None) -> list[str]:
    """The tool-use and no-tool tables."""
    if not result.get("tool_use"):
        return []
    t = result["tool_use"]

    def pct(v):
        return "-" if v is None else f"{v:.0%}"

    lines = ["", "## Tools: held-out tool names", "",
             f"A held-out arithmetic tool is offered ({', '.join(f'`{n}`' for n in t['tools'])}: names, parameter "
             "names and descriptions never in training), alone or beside a held-out other tool, at any position, "
             f"at the default stop ({t['stop']}). The question is a held-out sum in a held-out phrasing. The loop "
             "runs the call (the tool evaluates the expression it is given), appends the call and its result as "
             "the chat template renders them, and the model goes on. *Called*: the reply wrote a call; *valid*: "
             "every call parsed and fit the tool's schema (runtime/tool_calls.py); *right call*: the arithmetic "
             "tool with an expression worth the sum; *answer right*: the final answer's last number is the sum.", "",
             "*Calls*: *free* are the model's own; *constrained* as the app's tool loop runs them (runtime/"
             "tool_loop.py: once the model opens a call, the grammar keeps it to the offered tools' schemas).", "",
             "| checkpoint | calls | sums | questions | called | valid (of called) | right call | answer right | "
             "big / below 0: answer right | alone / beside another: answer right | mean latency (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    nv = nvfp4 or {}
    for name, calls, tu in (("fp32", "free", t), ("fp32", "constrained", result.get("tool_use_constrained")),
                            ("NVFP4", "free", nv.get("tool_use")),
                            ("NVFP4", "constrained", nv.get("tool_use_constrained"))):
        if not tu:
            continue
        for kind, label in (("out_of_range", "out of range"), ("in_range", "in range (no call needed)")):
            r = tu[kind]
            kinds = " / ".join(pct(r["by_kind"].get(k, {}).get("right")) for k in (BIG, NEGATIVE)) \
                if kind == "out_of_range" else "-"
            offered = " / ".join(pct(r["by_offered"].get(k, {}).get("right")) for k in ("1", "2"))
            lines.append(f"| {name} | {calls} | {label} | {r['questions']} | {pct(r['called'])} | "
                         f"{pct(r['valid_of_called'])} | {pct(r['right_call'])} | {pct(r['right'])} | {kinds} | "
                         f"{offered} | {r['mean_latency_ms']} |")
    lines += ["", "## Sums out of range with no arithmetic tool", "",
              "Held-out sums the demo cannot do, with no tool offered, or with only a held-out tool that is not "
              "arithmetic. *Said it cannot*: the answer says it cannot (and what it can do); *with the right reason*: "
              "of those, the ones that name a number of the question over 99, or say the sum goes below 0, as it "
              "does; *right* / *wrong*: it answered with a number anyway; *tool call*: it wrote a call it was not "
              "offered.", "",
              "| checkpoint | offered | questions | said it cannot | with the right reason | big / below 0: said it "
              "cannot | answered right | answered wrong | tool call |", "|---|---|---|---|---|---|---|---|---|"]
    for name, rows in (("fp32", result.get("without_tools", [])), ("NVFP4", (nvfp4 or {}).get("without_tools", []))):
        for r in rows:
            lines.append(f"| {name} | {r['offered']} | {r['questions']} | {pct(r['declined'])} | "
                         f"{pct(r.get('reason_right_of_declined'))} | "
                         f"{pct(r['by_kind'][BIG])} / {pct(r['by_kind'][NEGATIVE])} | {pct(r['right'])} | "
                         f"{pct(r['wrong'])} | {pct(r['tool call'])} |")
    lines += ["", "### A tool loop, verbatim (calls constrained, as the app runs them)", ""]
    for s in (result.get("tool_use_constrained") or t).get("samples", [])[:3]:
        verdict = "right" if s["right"] else f"wrong (expected {s['expected']})"
        lines += [f"**{s['tool']}** offered ({s['offered']} tool{'s' if s['offered'] > 1 else ''}), {verdict}: "
                  f"*{s['question']}*", "", "```"]
        for rnd in s["rounds"]:
            lines += ["<think>", folded(rnd["thinking"]), "</think>", folded(rnd["answer"])]
            for given in rnd.get("results", []):
                lines.append(f"(the loop runs the call; the tool's result goes back: {given!r}; the model goes on)")
        lines += ["```", ""]
    for r in result.get("without_tools", []):  # the first reply, and the first one that did not say it cannot
        shown = r["samples"][-1:] + [x for x in r["samples"][:-1] if x["verdict"] != "declined"][:1]
        for s in shown:
            lines += [f"**{r['offered'].capitalize()} offered**, {s['verdict']} (expected {s['expected']}): "
                      f"*{s['question']}*", "", "```", folded(s["answer"]), "```", ""]
    return lines


def folded(text: str, keep: int = 12) -> str:
    """A reply's text for the verbatim samples, its lines after the first `keep` folded into a count
    (a reply that loops until its token limit would fill pages)."""
    lines = text.strip().split("\n")
    if len(lines) <= keep + 2:
        return "\n".join(lines)
    return "\n".join(lines[:keep] + [f"[... {len(lines) - keep} more lines, to the reply's token limit]"])


def write_markdown(result: dict, path: Path, nvfp4: dict | None = None) -> None:
    names = result["submodels"]
    counts = sorted(next(iter(result["stops"]))["by_numbers"])

    def by_numbers(r):
        return " | ".join("-" if r["by_numbers"].get(c) is None else f"{r['by_numbers'][c]:.0%}" for c in counts)

    head = " | ".join(f"{c} numbers" for c in counts)
    rule = "|---" * len(counts)
    lines = ["# The demo model: elastic budget control in miniature", "",
             f"Written by `python -m training.evaluate` on {result['machine']}: {result['problems']} held-out "
             f"sums ({sample_words(result)}{', '.join(counts)} numbers, as many of each; every expression and every "
             "phrasing unseen in training), greedy decoding, one reply at a time. A reply is right when its last "
             "number is the "
             f"result. Latency is the mean wall time of a whole reply on this machine's CPU; CPU time is the "
             "processor time the reply used, which other work on a shared machine disturbs less. Thinking ceiling "
             f"(`max_thinking_tokens`): {result['thinking_ceiling']} tokens.{submodel_count_note(result)}", "",
             "## The depth slider's stops, as the app runs them", "", *interleaving_lines(result),
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
    lines += seed_lines(result, nvfp4)
    lines += auto_lines(result)
    if nvfp4:
        lines += ["", f"The app's default checkpoint is the NVFP4 export (`{nvfp4['checkpoint']}`), on the same "
                  "questions:", "", *interleaving_lines(nvfp4),
                  f"| stop | budget | accuracy | {head} | mean latency (ms) | mean CPU time (ms) |",
                  f"|---|---|---{rule}|---|---|"]
        for r in nvfp4["stops"]:
            lines.append(f"| {r['stop']} | {r['budget']} | {r['accuracy']:.1%} | {by_numbers(r)} | "
                         f"{r['mean_latency_ms']} | {r.get('mean_cpu_ms', '-')} |")
    lines += time_lines(result, nvfp4)
    lines += slip_lines(result, nvfp4)
    lines += conversation_lines(result, nvfp4, head, rule, by_numbers)
    lines += tool_lines(result, nvfp4)
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
        lines += notes_lines(result["notes"])
    path.write_text("\n".join(lines) + "\n")


def sample_words(result: dict) -> str:
    """Where the sums come from, when several seeds were pooled (--seeds)."""
    seeds = result.get("seeds")
    if not seeds:
        return ""
    each = result["problems"] // len(seeds)
    return (f"{each} from each of seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}, none of them a sum "
            "Auto's policies were calibrated on; ")


def seed_lines(result: dict, nvfp4: dict | None) -> list[str]:
    """Each stop's accuracy on each pooled seed's sums, so a change of sample shows beside the pooled figure."""
    seeds = result.get("seeds")
    rows = [("fp32", r) for r in result["stops"] if r.get("by_seed")]
    rows += [("NVFP4", r) for r in (nvfp4 or {}).get("stops", []) if r.get("by_seed")]
    if not seeds or not rows:
        return []
    each = result["problems"] // len(seeds)
    lines = ["", "### Accuracy by seed", "",
             f"The same stops on each seed's {each} sums (one sum is {1 / each:.1%} of a seed, "
             f"{1 / result['problems']:.1%} of all); seed {seeds[0]}'s are the sums this page reported before it "
             "pooled seeds.", "",
             "| checkpoint | stop | " + " | ".join(f"seed {s}" for s in seeds) + f" | all {result['problems']} |",
             "|---|---|" + "---|" * (len(seeds) + 1)]
    for name, r in rows:
        lines.append(f"| {name} | {r['stop']} | " + " | ".join(f"{r['by_seed'][str(s)]:.1%}" for s in seeds)
                     + f" | {r['accuracy']:.1%} |")
    return lines


def submodel_count_note(result: dict) -> str:
    """When the stops were rerun on more sums than the per-submodel and budget tables (the same weights; only
    the stops depend on the Auto policy), say on how many those two tables were measured."""
    m = result.get("problems_submodels", result["problems"])
    return ("" if m == result["problems"] else
            f" The tables of each submodel alone and of budget control come from an earlier run on the same weights, "
            f"on {m} held-out sums of the same kind; the stops, on the {result['problems']} sums above.")


def notes_lines(notes: str) -> list[str]:
    """The notes under one "## Notes" heading: a notes file that starts with its own keeps it alone."""
    text = notes.strip()
    if re.match(r"##\s+Notes\s*(\n|$)", text):
        text = text.split("\n", 1)[1].strip() if "\n" in text else ""
    return ["## Notes", "", text, ""] if text else ["## Notes", ""]


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


def interleaving_lines(result: dict) -> list[str]:
    """How the stops were run, so their wall times compare: taking turns, and the machine's load meanwhile."""
    load = result.get("stops_load_average")
    if not load:
        return []
    return [f"The stops took turns question by question (the order rotating, each reply prefilled afresh), so "
            f"they shared the machine's load, which was {load[0]:g} at the start and {load[1]:g} at the end "
            "(1-minute load average).", ""]


def time_lines(result: dict, nvfp4: dict | None) -> list[str]:
    """Where a reply's time goes, per thinking stop: what Auto saves by thinking small, and what it pays."""
    rows = [("fp32", r) for r in result["stops"] if r.get("mean_time_ms") and r["think"]]
    rows += [("NVFP4", r) for r in (nvfp4 or {}).get("stops", []) if r.get("mean_time_ms") and r["think"]]
    if not rows:
        return []
    lines = ["", "### Where a reply's time goes", "",
             "Mean milliseconds per reply, from the reply's own events: the prompt's prefill, the thought's decoding "
             "(its time less the prefill and Auto's climbs), the re-prefills of Auto's climbs, the answering "
             "submodel's re-prefill of prompt and thought at the switch (none when the thinker answers), and the "
             "rest (the answer's decoding).", "",
             "| checkpoint | stop | latency | prefill | thinking | per thinking token | climbs | answer's re-prefill "
             "| answer |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        t = r["mean_time_ms"]
        per = t["thinking"] / r["mean_thinking_tokens"] if r["mean_thinking_tokens"] else 0.0
        lines.append(f"| {name} | {r['stop']} | {r['mean_latency_ms']} | {t['prefill']} | {t['thinking']} | "
                     f"{per:.2f} | {t['climbs']} | {t['answer_switch']} | {t['answer']} |")
    return lines


def slip_lines(result: dict, nvfp4: dict | None) -> list[str]:
    """Where each thinking stop's wrong replies first left the right trace, and who slipped there."""
    rows = [("fp32", r) for r in result["stops"] if r.get("slips")]
    rows += [("NVFP4", r) for r in (nvfp4 or {}).get("stops", []) if r.get("slips")]
    if not rows:
        return []
    lines = ["", "### Where the thought went wrong", "",
             "Each wrong reply's thought against the right trace (`training/trace_slips.py`): the first token that "
             "leaves it, what kind of slip that is (*copy*: the question rewritten as an expression; *running "
             "value*: the number carried from the line before; *next number*: the operator or number taken from "
             "the question; *column*: a column's digits, carry or borrow; *result*: the value the columns give; "
             "*ran on*: more lines than operations; *cut*: the thought ended before the trace did; *answer*: the "
             "trace was right and the answer was not), and who wrote it: a submodel, before or after Auto's first "
             "climb, or the budget (which cut the thought).", "",
             "| checkpoint | stop | wrong | " + " | ".join(KINDS) + " | who slipped | budget cut (all replies) |",
             "|---|---|---|" + "---|" * len(KINDS) + "---|---|"]
    for name, r in rows:
        sl = r["slips"]
        who = ", ".join(f"{k}: {v}" for k, v in sorted(sl["lost"].items(), key=lambda kv: -kv[1])) or "-"
        lines.append(f"| {name} | {r['stop']} | {sl['wrong']} | "
                     + " | ".join(str(sl["kinds"].get(k, 0)) for k in KINDS) + f" | {who} | {sl['budget_hit']} |")
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


def write_result(result: dict, out: Path, nvfp4: dict | None) -> None:
    """OUT.json, OUT.md and OUT.png of a whole result."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, out.with_suffix(".md"), nvfp4)
    write_plot(result, out.with_suffix(".png"))
    print(f"wrote {out}.md, .json and .png")


def seed_list(text: str) -> tuple[int, ...]:
    """--seeds "0,4,6,7": distinct whole numbers, in the order given (the first sample's sums come first)."""
    try:
        seeds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give seeds as whole numbers separated by commas, e.g. 0,4,6,7") \
            from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give each seed once, none below 0, e.g. 0,4,6,7")
    return seeds


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.evaluate")
    parser.add_argument("--checkpoint", type=Path, default=Path("assets/demo"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/demo-eval"))
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--n-tools", type=int, default=None, metavar="N",
                        help="questions per cell of the turn-by-turn, tool and no-tool tables (default: --n)")
    sample = parser.add_mutually_exclusive_group()
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--seeds", type=seed_list, default=None, metavar="S,S,...",
                        help="pool --n sums from each of these seeds for the stops (and the tables of each submodel "
                             "and of budget control), none a calibration sum or another seed's; e.g. 0,4,6,7")
    parser.add_argument("--stops-only", action="store_true", help="only the depth slider's stops")
    parser.add_argument("--with-nvfp4", type=Path, default=None,
                        help="the NVFP4 export to score on the same questions: its folder, "
                             "or the OUT.json of an earlier --stops-only run")
    parser.add_argument("--notes", type=Path, default=None, help="a Markdown file to append as the notes")
    parser.add_argument("--quick", type=int, default=0, metavar="N", help="print the parent's accuracy on N sums")
    parser.add_argument("--quick-tools", type=int, default=0, metavar="N",
                        help="print tool use, no-tool behaviour and turn-10 accuracy on N questions each")
    parser.add_argument("--threads", type=int, default=default_threads(),
                        help="torch threads (default: the app's count on this machine, runtime/threads.py)")
    parser.add_argument("--update", type=Path, default=None, metavar="JSON",
                        help="measure only the slider's stops again (and --with-nvfp4 FOLDER's) on --n sums and "
                             "keep an earlier OUT.json's other tables: after a change of the depth table or the "
                             "Auto policy on the same weights")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="only rewrite OUT.md and OUT.png from an earlier OUT.json (with --with-nvfp4, --notes)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.render:
        result = json.loads(args.render.read_text())
        if args.notes:
            result["notes"] = args.notes.read_text()
        if args.with_nvfp4 and not args.with_nvfp4.is_file():
            raise SystemExit(f"error: with --render, --with-nvfp4 names an earlier run's JSON, and {args.with_nvfp4} "
                             "is not a file; leave it out to keep the NVFP4 rows the JSON already holds")
        nvfp4 = json.loads(args.with_nvfp4.read_text()) if args.with_nvfp4 else result.get("nvfp4")
        if nvfp4:
            result["nvfp4"] = {k: nvfp4[k] for k in NVFP4_KEYS if k in nvfp4}
        write_result(result, args.out, nvfp4)
        return
    if not args.checkpoint.is_dir():
        print(f"error: no checkpoint folder at {args.checkpoint}", file=sys.stderr)
        raise SystemExit(2)
    if args.update:
        earlier = json.loads(args.update.read_text())
        nvfp4_folder = args.with_nvfp4 if args.with_nvfp4 and args.with_nvfp4.is_dir() else None
        result = update_stops(earlier, args.checkpoint, args.n, args.seed, nvfp4_folder, seeds=args.seeds)
        if args.notes:
            result["notes"] = args.notes.read_text()
        write_result(result, args.out, result.get("nvfp4"))
        return
    if args.quick:
        print(json.dumps(quick(args.checkpoint, args.quick, args.seed), indent=1))
        return
    if args.quick_tools:
        print(json.dumps(quick_tools(args.checkpoint, args.quick_tools, args.seed), indent=1))
        return
    notes = args.notes.read_text() if args.notes else None  # read before the long run: a bad path fails now
    if args.with_nvfp4 and not args.with_nvfp4.is_dir():
        nvfp4 = json.loads(args.with_nvfp4.read_text())
    result = evaluate(args.checkpoint, args.n, args.seed, args.stops_only, n_tools=args.n_tools, seeds=args.seeds)
    if notes:
        result["notes"] = notes
    if args.with_nvfp4 and args.with_nvfp4.is_dir():  # a checkpoint folder: run its stops on the same questions
        nvfp4 = evaluate(args.with_nvfp4, args.n, args.seed, stops_only=True, n_tools=args.n_tools, seeds=args.seeds)
    elif not args.with_nvfp4:
        nvfp4 = None
    if nvfp4:
        result["nvfp4"] = {k: nvfp4[k] for k in NVFP4_KEYS if k in nvfp4}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    if not args.stops_only:
        write_markdown(result, args.out.with_suffix(".md"), nvfp4)
        write_plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out}.json" + ("" if args.stops_only else ", .md and .png"))


if __name__ == "__main__":
    main()
