"""Serves the demo for Codex CLI with its first reply steered into a tool call, so that `codex exec`
runs a whole tool round against the real server: its request (every field and hosted tool Codex
sends), the call (`exec_command` with `ls`), Codex running it, the output sent back as items, and the
model's own answer. The demo cannot choose a coding agent's tools itself; the steering writes the
call's tokens through the real decode loop, parser and routes, as the tests' `spell_replies` does.

    python tools/codex_tool_round.py --port 18931 &
    CODEX_HOME=DIR codex exec --skip-git-repo-check "List the files here."

with DIR/config.toml naming the server (docs/server.md, Codex CLI). Codex's instructions and tools
take about 16,500 of the demo's tokens, so the demo is served with a 32,768-token context.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import replace
from pathlib import Path

import torch

import runtime.generate
from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.server.runner import ServerThread

ROOT = Path(__file__).resolve().parents[1]
CALL = "<tool_call>\n<function=exec_command>\n<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>\n"


def steer_first_reply(call: str) -> None:
    """The first reply the server starts writes `call` then ends its turn; the others run free."""
    real, replies = runtime.generate.stream_chat, [0]

    def stream_chat(engine, request, controls=None):
        replies[0] += 1
        print(f"request {replies[0]}: {len(request.messages)} messages, {len(request.tools or ())} tools", flush=True)
        if replies[0] > 1:
            return real(engine, request, controls)
        target = engine.chat.encode(call) + [min(engine.chat.special.end_of_turn)]
        start: list[int] = []

        def speller(context, logits):
            start[:] = start or [len(context)]  # the first call is for the answer's first token
            out = torch.full_like(logits, float("-inf"))
            out[..., target[min(len(context) - start[0], len(target) - 1)]] = 0
            return out

        return real(engine, replace(request, think_submodel=None, logits_processors=(speller,)), controls)

    runtime.generate.stream_chat = stream_chat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=18931)
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "assets" / "demo-nvfp4")
    args = parser.parse_args()
    steer_first_reply(CALL)
    queue = EngineQueue()
    queue.set_engine(Engine.load(args.checkpoint, device="cpu", max_context=32768))
    server = ServerThread(queue, "127.0.0.1", args.port).start()
    print(f"ready: {server.address} (Ctrl+C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
