"""The cost of constrained decoding per token: the same engine answering freely, under a json_schema
response format, and with a forced tool call, side by side in one run.

    python benchmarks/bench_constrained.py [--runs 10] [--checkpoint DIR] [--out docs/benchmarks-constrained]

Every reply has thinking off (so every token is an answer token, and under a grammar every one is
masked), temperature 1 with the run's seed, and the cases alternate in a rotating order (never at the
same time). Per reply: the decode time per token after the first (the reply's own tokens/s), the time
spent in the grammar's logits processor per token (the matcher fed the last token, the mask computed
on the CPU, sent to the device and applied), and the grammar's build time (once per reply, when the
answer starts). Medians are reported; each constrained reply is checked to validate. Writes OUT.md and
OUT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from runtime import grammar  # noqa: E402
from runtime.engine import Engine  # noqa: E402
from runtime.generate import ChatRequest, chat  # noqa: E402
from runtime.grammar import response_format_schema  # noqa: E402
from runtime.sampling import SamplingSettings  # noqa: E402
from runtime.tool_calls import check_tools  # noqa: E402

QUESTION = ({"role": "user", "content": "What is 145 + 23? Answer with the sum."},)
TOOLS = check_tools([{"type": "function", "function": {"name": "add_numbers", "description": "Adds two numbers.",
                                                       "parameters": {"type": "object", "properties": {
                                                           "a": {"type": "integer"}, "b": {"type": "integer"},
                                                           "note": {"type": "string", "maxLength": 40}},
                                                           "required": ["a", "b"]}}}])
ANSWER = {"type": "object", "properties": {"sum": {"type": "integer"}, "words": {"type": "string", "maxLength": 60},
                                           "sure": {"type": "boolean"}},
          "required": ["sum", "words", "sure"], "additionalProperties": False}
CASES = {
    "free (no grammar)": {"free": True},
    "json_schema response format": {"response_format": response_format_schema(
        {"type": "json_schema", "json_schema": {"name": "sum", "schema": ANSWER, "strict": True}})},
    "forced tool call": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
}


class Timed:
    """Wraps grammar.Constraint so the time of its build and of each mask is recorded."""

    def __init__(self):
        self.build_ms, self.mask_ms = [], []
        original = grammar.Constraint
        timed = self

        class Constraint(original):
            def __init__(self, *args, **kwargs):
                t0 = time.perf_counter()
                super().__init__(*args, **kwargs)
                timed.build_ms.append((time.perf_counter() - t0) * 1000)

            def __call__(self, context, logits):
                t0 = time.perf_counter()
                out = super().__call__(context, logits)
                if self.at is not None:
                    timed.mask_ms.append((time.perf_counter() - t0) * 1000)
                return out

        self.cls = Constraint

    def install(self):
        import runtime.generate as generate  # the decode loop builds the constraints it imported

        generate.Constraint = self.cls


def no_end(engine):
    ends = sorted(engine.chat.special.end_of_turn)

    def process(context, logits):
        return logits.index_fill(-1, torch.tensor(ends, device=logits.device), float("-inf"))
    return process


def one(engine, case: dict, seed: int, max_tokens: int, timed: Timed):
    before_build, before_mask = len(timed.build_ms), len(timed.mask_ms)
    case = dict(case)
    if case.pop("free", False):  # it may not end early, so it runs as long as the constrained replies
        case["logits_processors"] = (no_end(engine),)
    done = chat(engine, ChatRequest(QUESTION, None, engine.submodels_by_size()[-1], max_new_tokens=max_tokens,
                                    sampling=SamplingSettings(temperature=1.0, seed=seed), **case))
    if done.finish_reason == "error":
        raise SystemExit(f"a reply failed: {done.error}")
    if "response_format" in case and done.finish_reason == "end_of_turn":
        json.loads(done.answer_text)  # a constrained answer that did not parse would void the comparison
    if "tools" in case and done.finish_reason != "tool_calls" and done.finish_reason != "length":
        raise SystemExit(f"a forced call did not come: {done.finish_reason}")
    masks = timed.mask_ms[before_mask:]
    return {"tokens": done.answer_tokens, "ms_per_token": 1000 / done.tokens_per_s if done.tokens_per_s else 0.0,
            "mask_ms": statistics.median(masks) if masks else 0.0,
            "build_ms": timed.build_ms[before_build] if len(timed.build_ms) > before_build else 0.0,
            "valid": done.finish_reason in ("end_of_turn", "tool_calls")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(ROOT / "assets" / "demo-nvfp4"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-constrained"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as bench_server.py)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    timed = Timed()
    timed.install()
    engine = Engine.load(args.checkpoint, device="cpu", max_context=2048)
    names = list(CASES)
    for name in names:  # warm every path (the tokenizer's llguidance view is built once)
        one(engine, CASES[name], 0, 32, timed)
    results = {name: [] for name in names}
    for run in range(args.runs):
        order = names[run % len(names):] + names[:run % len(names)]
        for name in order:
            results[name].append(one(engine, CASES[name], 100 + run, args.max_tokens, timed))
    rows = []
    for name in names:
        runs = results[name]
        rows.append({"case": name, "replies": len(runs), "tokens_median": statistics.median(r["tokens"] for r in runs),
                     "ms_per_token": round(statistics.median(r["ms_per_token"] for r in runs), 3),
                     "mask_ms_per_token": round(statistics.median(r["mask_ms"] for r in runs), 3),
                     "mask_share": round(statistics.median(r["mask_ms"] / r["ms_per_token"] for r in runs
                                                           if r["ms_per_token"]), 4),
                     "grammar_build_ms": round(statistics.median(r["build_ms"] for r in runs), 2),
                     "completed": sum(r["valid"] for r in runs)})
        print(rows[-1], flush=True)
    free = rows[0]["ms_per_token"]
    for r in rows:
        r["ratio_to_free"] = round(r["ms_per_token"] / free, 3) if free else 0.0
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "torch": torch.__version__,
            "threads": args.threads, "load": round(os.getloadavg()[0], 1), "checkpoint": Path(args.checkpoint).name,
            "vocab": engine.model.config.vocab_size, "runs": args.runs, "max_tokens": args.max_tokens,
            "llguidance": _version(), "date": time.strftime("%Y-%m-%d")}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    section = report(meta, rows)
    out.with_suffix(".md").write_text("# Constrained decoding benchmark\n\n" + section)
    print(section)
    return 0


def _version() -> str:
    import llguidance

    return llguidance.__version__


def report(meta, rows) -> str:
    lines = [f"Written by `python benchmarks/bench_constrained.py` on {meta['machine']} (load average {meta['load']} "
             f"at the end), torch {meta['torch']} with {meta['threads']} thread(s), llguidance {meta['llguidance']}, "
             f"{meta['checkpoint']} (a vocabulary of {meta['vocab']:,}) on the CPU: medians of {meta['runs']} replies "
             f"per case, up to {meta['max_tokens']} tokens, thinking off, temperature 1, the cases alternating. "
             "ms/token is the decode time per token after the first; the mask column is the part of it spent in the "
             "grammar's logits processor (feeding the matcher, computing the mask on the CPU, applying it); the "
             "build is once per reply (the tokenizer's llguidance view, built once per process, is not counted). "
             "The free replies may not end before the token limit (their end of turn is "
             "masked), so they run as long. \"Completed\" counts replies that ended on their own (a valid call or JSON "
             "object) rather than at the token limit. On a busy machine the absolute times drift; the columns of "
             "one run, measured side by side, are what to compare. The mask's cost grows with the vocabulary "
             "(the real checkpoints have 131,072 tokens) and the grammar, not with the model.", "",
             "| answer | replies | tokens (median) | ms/token | of which the mask (ms) | mask share | ratio to free | "
             "grammar build (ms) | completed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['replies']} | {r['tokens_median']:g} | {r['ms_per_token']} | "
                     f"{r['mask_ms_per_token']} | {100 * r['mask_share']:.1f}% | {r['ratio_to_free']:.2f} | "
                     f"{r['grammar_build_ms']} | "
                     f"{'-' if r['case'].startswith('free') else str(r['completed']) + '/' + str(r['replies'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
