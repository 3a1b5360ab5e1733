"""`python -m runtime`: the engine's command line.

    score     log-probabilities of a token sequence under one submodel (full or stepwise)
    extract   write one submodel as a standalone checkpoint
    generate  stream a chat reply with elastic budget control
    serve     a local OpenAI-compatible server (runtime/server/)
    models    probe | list | download | verify | import | delete (store/models_cli.py)
    decode-check  the replayed decode step on a config alone (decode_check.py)
    kernel-check  a packed-weight kernel against the exact reference, and its GB/s (kernel_check.py)

Flags and output formats of these commands are a contract other checks rely on. Bad input
ends with a one-line `error: ...` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys

from . import options, threads
from .depth import level_names
from .errors import ElasticError, UsageError, for_approval, one_line, printable
from .options import (
    CLI_MAX_NEW_TOKENS,
    CONTEXT,
    ENGINE_CONTEXT,
    KERNEL_SHAPE,
    MAX_NEW_TOKENS,
    MAX_QUEUE,
    MAX_TOKENS,
    MAX_TOOL_CALLS,
    MIN_P,
    PORT,
    SEED,
    STEPS,
    TEMPERATURE,
    THINKING_BUDGET,
    TOOL_TIMEOUT,
    TOP_K,
    TOP_P,
    add_flag,
    refusal,
)
from .store import models_cli

TEXT_FLAGS = ("prompt", "system")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line `error: ...` on stderr and exit status 2 (argparse
    itself prints the usage first); --help is unchanged."""

    def error(self, message):
        print(f"error: {one_line(message)} (see {printable(self.prog)} --help)", file=sys.stderr)
        raise SystemExit(2)


class _OneLineLog(logging.Handler):
    """The runtime's warnings as one line each on stderr (`warning: ...`). A failure logged with its
    traceback is left out: the command reports it itself, as its one `error:` line."""

    def emit(self, record):
        if record.exc_info is None:
            print(f"{record.levelname.lower()}: {one_line(record.getMessage())}", file=sys.stderr)


def _log_one_line() -> None:
    log = logging.getLogger("runtime")
    if not any(isinstance(h, _OneLineLog) for h in log.handlers):
        log.addHandler(_OneLineLog(logging.WARNING))  # with a handler here, Python's last-resort one stays silent


def check_values(args) -> None:
    """Checks every number on the command line by its option's rule (runtime/options.py) and that
    text flags are valid UTF-8."""
    for dest, value in vars(args).items():
        flag = "--" + dest.replace("_", "-")
        option = options.for_flag(dest)
        if option is not None and value is not None:
            try:
                option.parse(value, flag)
            except options.OptionError as e:
                raise UsageError(str(e)) from None
        elif isinstance(value, float) and not math.isfinite(value):  # a number no option declares yet
            raise UsageError(refusal(flag, value, "a finite number"))
        if dest in TEXT_FLAGS and isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise UsageError(f"{flag} is not valid UTF-8 text (it holds undecodable bytes); "
                                 "pass it as UTF-8") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_one_line()
    try:
        check_values(args)
        return {"score": _score, "extract": _extract, "generate": _generate, "serve": _serve,
                "models": models_cli.run, "decode-check": _decode_check,
                "kernel-check": _kernel_check}[args.command](args)
    except ElasticError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m runtime", description="Elastic Chat's inference engine.")
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
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--checkpoint")
    where.add_argument("--remote", metavar="URL", help="an OpenAI-compatible server instead, e.g. http://gpu-box:8000/v1")
    p.add_argument("--api-key", help="with --remote: the server's key (sent as 'Authorization: Bearer KEY')")
    p.add_argument("--model", help="with --remote: the model id, as the server's /v1/models lists it")
    p.add_argument("--prompt", required=True)
    p.add_argument("--submodel", help="think and answer on this submodel")
    *names, last = level_names()
    p.add_argument("--depth", help=f"a reasoning-depth stop: {', '.join(names)} or {last}")
    add_flag(p, THINKING_BUDGET, help=True)
    p.add_argument("--think-submodel")
    p.add_argument("--answer-submodel")
    add_flag(p, MAX_NEW_TOKENS, default=CLI_MAX_NEW_TOKENS)
    for option in (TEMPERATURE, TOP_P, TOP_K, MIN_P, SEED):
        add_flag(p, option)
    p.add_argument("--system", help="a system prompt")
    add_flag(p, CONTEXT, "--max-context", default=ENGINE_CONTEXT)
    p.add_argument("--json", action="store_true",
                   help="JSON lines: token, switch, tool_call, invalid_tool_call and done events")
    p.add_argument("--tools", metavar="FILE", help="a JSON list of OpenAI-style tools to offer the model")
    p.add_argument("--mcp-config", metavar="FILE",
                   help="an mcp.json: start its servers and offer their tools (docs/tools.md)")
    p.add_argument("--allow-tools", action="store_true",
                   help="consent to every tool call (for scripts); without it each call is declined")
    add_flag(p, MAX_TOOL_CALLS, help=True)
    add_flag(p, TOOL_TIMEOUT, help=True)
    p.add_argument("--transplant", action="store_true",
                   help="APPROXIMATE switch: reuse the thinking submodel's state instead of re-prefilling")
    _device_flags(p)
    _cpu_experts_flag(p, "auto")

    p = sub.add_parser("serve", help="a local OpenAI-compatible server: /v1/chat/completions, /v1/models, /health")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1; any other address needs --api-key")
    add_flag(p, PORT, help=True)
    p.add_argument("--api-key", help="clients must send 'Authorization: Bearer KEY'")
    add_flag(p, CONTEXT, "--max-context", default=ENGINE_CONTEXT)
    add_flag(p, MAX_QUEUE, help=True)
    for names in options.NAME_LISTS.values():  # --allow-host, --allow-origin (server/web_rules.py)
        options.add_list_flag(p, names)
    for option in options.SERVER_LIMITS:  # --request-timeout, --keep-alive-timeout, --max-connections
        add_flag(p, option, help=True)
    _device_flags(p)
    _cpu_experts_flag(p, "auto")

    models_cli.add_parser(sub)

    p = sub.add_parser("decode-check", help="run the decode step on a model built from a config (no weights)")
    p.add_argument("--config", required=True, help="a folder with config.json and elastic.json")
    p.add_argument("--submodel", help="default: every submodel")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or meta")
    add_flag(p, STEPS)
    p.add_argument("--kernel", choices=("auto", "triton", "torch"),
                   help="packed matmuls: auto (the engine's choice), triton (the fused kernels, also on meta), "
                        "torch (dequantize on CUDA); default: ELASTIC_CHAT_KERNEL, else auto")
    _cpu_experts_flag(p, "none")

    p = sub.add_parser("kernel-check", help="a packed-weight kernel against the exact reference, and its GB/s")
    p.add_argument("--format", required=True, choices=("nvfp4", "fp8"))
    p.add_argument("--kernel", required=True, choices=("cpu", "triton", "torch"))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default cpu")
    for option in KERNEL_SHAPE:  # --rows, --cols, --experts, --active, --tokens, --threads
        add_flag(p, option, help=True)
    p.add_argument("--dtype", default="bfloat16", help="activations: bfloat16 (default), float16 or float32")
    add_flag(p, SEED)
    p.add_argument("--json", action="store_true", help="one JSON object per case (the contract: docs/cli.md)")
    return parser


def _cpu_experts_flag(p, default: str):
    p.add_argument("--cpu-experts", default=default, metavar="PLACEMENT",
                   help="routed experts kept in RAM and computed by the CPU, for a GPU that cannot hold the "
                        "file: none, all, N (the first N MoE layers'), nested:SUBMODEL (all, and that "
                        "submodel's slice of them also on the GPU, so it runs there alone)"
                        + (", or auto (the planner's choice)" if default == "auto" else ""))


def _device_flags(p):
    p.add_argument("--device", default="auto", type=_computing_device, help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")


def _computing_device(value: str) -> str:
    """--device of the commands that compute values: torch's meta device holds shapes and no numbers,
    so a reply on it is empty and a score meaningless (decode-check, which checks shapes, takes it)."""
    if value.strip().lower().split(":")[0] == "meta":
        raise argparse.ArgumentTypeError("meta holds no values (it is for decode-check); use auto, cpu, cuda "
                                         "or cuda:N")
    return value


def _decode_check(args) -> int:
    from .decode_check import main as decode_check

    return decode_check(args)


def _kernel_check(args) -> int:
    from .kernel_check import main as kernel_check

    return kernel_check(args)


def _score(args) -> int:
    from .model import ElasticModel
    from .score import score

    parts = args.token_ids.replace(" ", "").split(",")
    if len(parts) > MAX_TOKENS or not all(p.isascii() and p.isdigit() and len(p) <= 12 for p in parts if p):
        shown = args.token_ids if len(args.token_ids) <= 40 else args.token_ids[:37] + "..."
        raise UsageError(f"--token-ids must be comma-separated whole numbers (at most {MAX_TOKENS:,}), got {shown!r}")
    ids = [int(t) for t in parts if t != ""]
    if len(ids) < 2:
        raise UsageError("--token-ids needs at least two tokens (the first one is only context)")
    threads.apply()  # the rule and why: runtime/threads.py
    model = ElasticModel.load(args.checkpoint, device=args.device, dtype=args.dtype)
    name = args.submodel or model.parent.name
    logprobs = score(model, name, ids, stepwise=args.stepwise)
    bad = [i for i, v in enumerate(logprobs) if not math.isfinite(v)]
    if bad:  # JSON has no NaN: say what is wrong instead of printing an invalid line
        raise UsageError(f"submodel {name!r} gives non-finite log-probabilities (NaN or infinity) for {len(bad)} "
                         f"of {len(logprobs)} tokens, first at token {bad[0] + 1}: the checkpoint's weights hold "
                         "NaN or infinity, or overflow in this dtype (try --dtype float32)")
    print(json.dumps({"logprobs": logprobs}, allow_nan=False))
    return 0


def _extract(args) -> int:
    from .checkpoint.extract import extract

    out = extract(args.checkpoint, args.submodel, args.out)
    print(f"wrote submodel {args.submodel!r} to {printable(out)}")
    return 0


def _serve(args) -> int:
    from .server.runner import serve_command

    return serve_command(args)


def _generate(args) -> int:
    from .command_load import load_engine
    from .depth import find_level
    from .events import Done, InvalidToolCall, Switch, Token, ToolCall
    from .generate import ChatRequest
    from .sampling import SamplingSettings

    tools, strict = _read_tools(args.tools) if args.tools else (None, False)  # before the load: fail fast
    if args.mcp_config:
        if args.remote:
            raise UsageError("--mcp-config works on a local checkpoint only for now (the remote client does not "
                             "pass tools)")
        from .mcp.command import generate_with_tools, read_servers

        servers = read_servers(args.mcp_config)
    if args.remote:
        engine = _remote_engine(args)
    else:
        if args.model or args.api_key:
            raise UsageError("--model and --api-key go with --remote; a local checkpoint is chosen by --checkpoint")
        engine = load_engine(args)
    parent = engine.submodels_by_size()[-1]
    think, answer, budget, escalation = args.submodel or parent, args.submodel or parent, None, None
    if args.depth:
        stop = find_level(engine.depth_levels(), args.depth)
        think, answer, budget, escalation = stop.think, stop.answer, stop.budget, stop.escalation
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
                          transplant=args.transplant, escalation=escalation, tools=tools, strict_tools=strict)
    printer = _JsonPrinter() if args.json else _TextPrinter()
    if args.mcp_config:
        return generate_with_tools(engine.stream, request, servers, args, printer)
    for event in engine.stream(request):
        if isinstance(event, Token):
            printer.token(event)
        elif isinstance(event, Switch):
            printer.switch(event)
        elif isinstance(event, (ToolCall, InvalidToolCall)):
            printer.tool_call(event)
        elif isinstance(event, Done):
            printer.done(event)
            return 0 if event.finish_reason != "error" else 1
    return 1


MAX_TOOLS_FILE = 4 << 20


def _read_tools(path: str) -> tuple[tuple[dict, ...], bool]:
    """The --tools file: a JSON list of OpenAI-style tools, checked as a request's are (and its
    schemas too when a tool is `strict`); the tools and whether any is strict."""
    from .grammar import GrammarError, answer_grammar, check_grammar
    from .json_file import JsonFileError, read_json_file
    from .tool_calls import ToolSpecError, check_tools, strict_tools

    try:
        raw = read_json_file(path, MAX_TOOLS_FILE, kind=list)
        tools, strict = check_tools(raw), strict_tools(raw)
        check_grammar(answer_grammar(None, tools, strict=strict))
        return tools, strict
    except GrammarError as e:
        raise UsageError(f"--tools {printable(path)}: {e}") from None
    except FileNotFoundError:
        raise UsageError(f"--tools {printable(path)}: no such file") from None
    except JsonFileError as e:
        raise UsageError(f"--tools {printable(path)}: {e}; give a JSON list of tools") from None
    except ToolSpecError as e:
        raise UsageError(f"--tools {printable(path)}: {e}") from None
def _remote_engine(args):
    """The `--remote` server's model (probed with /v1/models), held like a local engine."""
    from .remote.client import RemoteServer
    from .remote.engine import RemoteEngine, list_models
    from .remote.models import choices

    if args.transplant:
        raise UsageError("--transplant works on a local checkpoint only (a remote server re-prefills)")
    if args.tools:
        raise UsageError("--tools works on a local checkpoint only for now (the remote client does not pass tools)")
    server = RemoteServer(args.remote, args.api_key)
    if not args.model:
        ids = ", ".join(printable(i) for i in choices(list_models(server))[:12])
        raise UsageError(f"--remote needs --model: the server at {server.address} has {ids}")
    return RemoteEngine.connect(server, args.model)


class _JsonPrinter:
    """One line per event, its `to_dict` (the prefill is not printed)."""

    @staticmethod
    def _out(event):
        print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)

    token = switch = done = _out

    @staticmethod
    def tool_call(event):
        """A tool call's line also says `"event"` (the key the tool lines' contract names, docs/tools.md)."""
        print(json.dumps({"event": event.type, **event.to_dict()}, ensure_ascii=False), flush=True)

    tool_result = tool_call


class _TextPrinter:
    """Readable output: a header whenever the phase or the submodel changes."""

    def __init__(self):
        self.where = None

    def token(self, e):
        if (e.phase, e.submodel) != self.where:
            self.where = (e.phase, e.submodel)
            print(f"\n[{e.phase} on {printable(e.submodel)}]", flush=True)
        # The text comes from the checkpoint's vocabulary: show control characters, never obey them.
        print(printable(e.text, keep_newlines=True), end="", flush=True)

    def switch(self, e):
        how = "" if e.exact else " (approximate cache transplant)"
        why = "" if e.reason == "answer" else f" ({printable(e.reason)})"  # e.g. "escalate": Auto climbed
        print(f"\n[switch {printable(e.from_submodel)} -> {printable(e.to_submodel)}{why}: re-prefilled "
              f"{e.reprefill_tokens} tokens in {e.ms:.0f} ms{how}]", end="", flush=True)

    def tool_call(self, e):
        if e.type == "tool_call":
            print(f"\n[tool call {for_approval(e.name)} {for_approval(json.dumps(e.arguments, ensure_ascii=False))}]",
                  flush=True)
        else:
            print(f"\n[invalid tool call: {printable(e.error)}]", flush=True)

    def tool_result(self, e):
        mark = "" if not e.is_error else f" ({printable(e.status)})"
        print(f"[tool result{mark}: {one_line(e.content, 300)}]", flush=True)

    def done(self, e):
        print()
        budget = " (thinking budget hit)" if e.budget_hit else ""
        print(f"[{e.finish_reason}: {e.thinking_tokens} thinking + {e.answer_tokens} answer tokens{budget}, "
              f"first token {e.ttft_ms:.0f} ms, {e.tokens_per_s:.1f} tokens/s]", file=sys.stderr)
        if e.error:
            print(f"error: {one_line(e.error)}", file=sys.stderr)
