"""`python -m runtime`: the engine's command line.

    score     log-probabilities of a token sequence under one submodel (full or stepwise)
    extract   write one submodel as a standalone checkpoint
    generate  stream a chat reply with elastic budget control
    serve     a local OpenAI-compatible server (runtime/server/)
    models    probe | list | download | verify | import | delete (models_cli.py)

Flags and output formats of these commands are a contract other checks rely on. Bad input
ends with a one-line `error: ...` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import models_cli
from .errors import ElasticError, UsageError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime", description="Elastic Chat's inference engine.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("score", help="log-probabilities of token ids under a submodel")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--submodel", help="default: the parent")
    p.add_argument("--token-ids", required=True, help="comma-separated ids, e.g. 5,17,42")
    p.add_argument("--stepwise", action="store_true", help="one cached decode step per token")
    _device_flags(p)

    p = sub.add_parser("extract", help="write one submodel as a standalone checkpoint")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--submodel", required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("generate", help="stream a chat reply")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--submodel", help="think and answer on this submodel")
    p.add_argument("--depth", help="a reasoning-depth stop: Off, Quick, Balanced, Deep or Max")
    p.add_argument("--thinking-budget", type=int, help="thinking tokens (0: thinking off; default: unbounded)")
    p.add_argument("--think-submodel")
    p.add_argument("--answer-submodel")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--system", help="a system prompt")
    p.add_argument("--max-context", type=int, default=4096)
    p.add_argument("--json", action="store_true", help="JSON lines: token, switch and done events")
    p.add_argument("--transplant", action="store_true",
                   help="APPROXIMATE switch: reuse the thinking submodel's state instead of re-prefilling")
    _device_flags(p)

    p = sub.add_parser("serve", help="a local OpenAI-compatible server: /v1/chat/completions, /v1/models, /health")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1; any other address needs --api-key")
    p.add_argument("--port", type=int, default=8000, help="default 8000 (0: any free port)")
    p.add_argument("--api-key", help="clients must send 'Authorization: Bearer KEY'")
    p.add_argument("--max-context", type=int, default=4096)
    p.add_argument("--max-queue", type=int, default=8, help="requests that may wait for the model (more get 429)")
    _device_flags(p)

    models_cli.add_parser(sub)

    args = parser.parse_args(argv)
    try:
        return {"score": _score, "extract": _extract, "generate": _generate, "serve": _serve,
                "models": models_cli.run}[args.command](args)
    except ElasticError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _device_flags(p):
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")


def _score(args) -> int:
    from .model import ElasticModel
    from .score import score

    try:
        ids = [int(t) for t in args.token_ids.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise UsageError(f"--token-ids must be comma-separated whole numbers, got {args.token_ids!r}") from None
    if len(ids) < 2:
        raise UsageError("--token-ids needs at least two tokens (the first one is only context)")
    model = ElasticModel.load(args.checkpoint, device=args.device, dtype=args.dtype)
    logprobs = score(model, args.submodel or model.parent.name, ids, stepwise=args.stepwise)
    print(json.dumps({"logprobs": logprobs}))
    return 0


def _extract(args) -> int:
    from .extract import extract

    out = extract(args.checkpoint, args.submodel, args.out)
    print(f"wrote submodel {args.submodel!r} to {out}")
    return 0


def _serve(args) -> int:
    from .server.runner import serve_command

    return serve_command(args)


def _generate(args) -> int:
    from .depth import find_stop
    from .engine import Engine
    from .events import Done, Switch, Token
    from .generate import ChatRequest, stream_chat
    from .sampling import SamplingSettings

    if args.max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be at least 1")
    if args.thinking_budget is not None and args.thinking_budget < 0:
        raise UsageError("--thinking-budget must be 0 (off) or more")
    engine = Engine.load(args.checkpoint, device=args.device, dtype=args.dtype, max_context=args.max_context)
    parent = engine.submodels_by_size()[-1]
    think, answer, budget = args.submodel or parent, args.submodel or parent, None
    if args.depth:
        stop = find_stop(engine.depth_stops(), args.depth)
        think, answer, budget = stop.think, stop.answer, stop.budget
    think = args.think_submodel or think
    answer = args.answer_submodel or answer
    if args.thinking_budget is not None:
        budget = args.thinking_budget
    if budget == 0:
        think = None
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
        [{"role": "user", "content": args.prompt}]
    request = ChatRequest(tuple(messages), think, answer, budget, args.max_new_tokens,
                          SamplingSettings(args.temperature, args.top_p, args.top_k, args.min_p, args.seed),
                          transplant=args.transplant)
    printer = _JsonPrinter() if args.json else _TextPrinter()
    for event in stream_chat(engine, request):
        if isinstance(event, Token):
            printer.token(event)
        elif isinstance(event, Switch):
            printer.switch(event)
        elif isinstance(event, Done):
            printer.done(event)
            return 0 if event.finish_reason != "error" else 1
    return 1


class _JsonPrinter:
    @staticmethod
    def _out(obj):
        print(json.dumps(obj, ensure_ascii=False), flush=True)

    def token(self, e):
        self._out({"type": "token", "phase": e.phase, "submodel": e.submodel, "token_id": e.token_id,
                   "text": e.text, "latency_ms": round(e.latency_ms, 3)})

    def switch(self, e):
        self._out({"type": "switch", "from": e.from_submodel, "to": e.to_submodel,
                   "reprefill_tokens": e.reprefill_tokens, "ms": round(e.ms, 3)})

    def done(self, e):
        out = {"type": "done", "finish_reason": e.finish_reason, "thinking_tokens": e.thinking_tokens,
               "answer_tokens": e.answer_tokens, "budget_hit": e.budget_hit, "ttft_ms": e.ttft_ms,
               "tokens_per_s": e.tokens_per_s}
        if e.error:
            out["error"] = e.error
        self._out(out)


class _TextPrinter:
    """Readable output: a header whenever the phase or the submodel changes."""

    def __init__(self):
        self.where = None

    def token(self, e):
        if (e.phase, e.submodel) != self.where:
            self.where = (e.phase, e.submodel)
            print(f"\n[{e.phase} on {e.submodel}]", flush=True)
        print(e.text, end="", flush=True)

    def switch(self, e):
        how = "" if e.exact else " (approximate cache transplant)"
        print(f"\n[switch {e.from_submodel} -> {e.to_submodel}: re-prefilled {e.reprefill_tokens} tokens "
              f"in {e.ms:.0f} ms{how}]", end="", flush=True)

    def done(self, e):
        print()
        budget = " (thinking budget hit)" if e.budget_hit else ""
        print(f"[{e.finish_reason}: {e.thinking_tokens} thinking + {e.answer_tokens} answer tokens{budget}, "
              f"first token {e.ttft_ms:.0f} ms, {e.tokens_per_s:.1f} tokens/s]", file=sys.stderr)
        if e.error:
            print(f"error: {e.error}", file=sys.stderr)
