"""Entry point of `elastic-chat`.

The Qt window is not built yet; until it is, this runs a terminal chat on the runtime's
streaming layer, on the bundled demo checkpoint unless `--checkpoint` names another.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The default is the NVFP4 export of the demo, so the app takes the quantized path a real RTX PC
# takes; assets/demo holds the same model in fp32.
DEMO = ROOT / "assets" / "demo-nvfp4"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elastic-chat")
    parser.add_argument("--checkpoint", type=Path, default=DEMO, help="checkpoint folder (default: the bundled demo)")
    parser.add_argument("--depth", default="Balanced", help="Off, Quick, Balanced, Deep or Max")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    args = parser.parse_args(argv)

    from runtime import ElasticError
    from runtime.depth import find_stop
    from runtime.engine import Engine
    from runtime.events import Done, Switch, Token
    from runtime.generate import ChatRequest, stream_chat

    if not (args.checkpoint / "config.json").exists():
        print(f"No checkpoint at {args.checkpoint}. Pass --checkpoint with a NemotronH elastic checkpoint folder.",
              file=sys.stderr)
        return 1
    try:
        engine = Engine.load(args.checkpoint)
        stop = find_stop(engine.depth_stops(), args.depth)
    except ElasticError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status = engine.status()
    print(f"Elastic Chat (terminal) on {status.checkpoint}: {', '.join(status.submodels)} in memory, "
          f"{status.compute_path}. Depth {stop.name}: {stop.about} Empty line or Ctrl+D quits.")
    messages: list[dict] = []
    while True:
        try:
            line = input("\nyou> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if not line:
            return 0
        messages.append({"role": "user", "content": line})
        request = ChatRequest(tuple(messages), stop.think, stop.answer, stop.budget, args.max_new_tokens)
        phase = None
        for event in stream_chat(engine, request):
            if isinstance(event, Token):
                if event.phase != phase:
                    phase = event.phase
                    print(f"\n[{phase} on {event.submodel}] ", end="")
                print(event.text, end="", flush=True)
            elif isinstance(event, Switch):
                print(f"\n[switch to {event.to_submodel}: {event.reprefill_tokens} tokens in {event.ms:.0f} ms]", end="")
            elif isinstance(event, Done):
                print(f"\n[{event.finish_reason}, {event.tokens_per_s:.1f} tokens/s]")
                if event.error:
                    print(f"error: {event.error}", file=sys.stderr)
                messages.append({"role": "assistant", "content": event.answer_text,
                                 "reasoning_content": event.thinking_text})


if __name__ == "__main__":
    sys.exit(main())
