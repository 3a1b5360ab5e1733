"""The local server's overhead: the same reply in-process (`stream_chat`) and through the server
(`python -m runtime serve` in its own process, as users run it, read by the official `openai` client
streaming over HTTP on 127.0.0.1), side by side.

    python benchmarks/bench_server.py [--runs 15] [--checkpoint assets/demo-nvfp4] [--out docs/benchmarks-server]

Both paths run the same request (greedy, so the replies are identical, which the script checks), in
alternating order (never at the same time), each engine warmed on it first; medians are reported. Time to first
token runs from the call (in-process) or from sending the request (server) to the first token; tokens/s
counts the tokens after the first over the time after the first. Writes OUT.md and OUT.json and
replaces the server section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
import torch  # noqa: E402

from runtime.engine import Engine  # noqa: E402
from runtime.events import Token  # noqa: E402
from runtime.generate import stream_chat  # noqa: E402
from runtime.server.openai_api import parse_chat  # noqa: E402
from runtime.server.serving import ServedModel  # noqa: E402

BEGIN, END = "<!-- bench_server: begin -->", "<!-- bench_server: end -->"
CASES = {  # name: request body fields (greedy)
    "thinking off": {"reasoning_effort": "none"},
    "low effort (0.5M thinks, 1.5M answers)": {"reasoning_effort": "low"},
    "high effort (1.5M thinks and answers)": {"reasoning_effort": "high"},
}


def body_for(model: str, fields: dict) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "What is 45 + 23 - 17 + 9?"}],
            "temperature": 0, "max_tokens": 256, **fields}


def in_process(engine, request):
    t0 = time.perf_counter()
    times, text = [], []
    for event in stream_chat(engine, request):
        if isinstance(event, Token):
            times.append(time.perf_counter())
            text.append(event.text)
    return t0, times, "".join(text)


def through_server(client, body):
    t0 = time.perf_counter()
    times, text = [], []
    extra = {k: v for k, v in body.items() if k not in ("model", "messages", "temperature", "max_tokens",
                                                         "reasoning_effort")}
    for chunk in client.chat.completions.create(model=body["model"], messages=body["messages"], stream=True,
                                                temperature=body["temperature"], max_tokens=body["max_tokens"],
                                                reasoning_effort=body["reasoning_effort"], extra_body=extra or None):
        if chunk.choices and chunk.choices[0].finish_reason is None:
            times.append(time.perf_counter())
            d = chunk.choices[0].delta
            text.append((d.model_extra or {}).get("reasoning_content") or d.content or "")
    return t0, times, "".join(text)


def summarize(t0, times):
    ttft = (times[0] - t0) * 1000
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return ttft, rate, len(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(ROOT / "assets" / "demo-nvfp4"))
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-server"))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the demo's matrices are tiny, and on a shared machine "
                             "two threads waiting on each other at every barrier swamp what is measured)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    engine = Engine.load(args.checkpoint, device="cpu", max_context=1024)
    server = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--checkpoint", args.checkpoint, "--port", "0",
                               "--max-context", "1024", "--device", "cpu"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    address = server.stdout.readline().split()[2]  # "listening on http://127.0.0.1:PORT/v1 ..."
    if not server.stdout.readline().startswith("ready"):
        raise SystemExit("the server did not start")
    client = openai.OpenAI(base_url=address, api_key="unused", max_retries=0)
    served = ServedModel.from_engine(engine)
    rows = []
    try:
        for name, fields in CASES.items():
            body = body_for(served.id, fields)
            request = parse_chat(body, served).request  # the very request the server builds
            for _ in range(2):  # warm both paths (and the engine's prefix snapshot)
                in_process(engine, request)
                through_server(client, body)
            local, remote = [], []
            for i in range(args.runs):
                pair = [("local", lambda: in_process(engine, request)),
                        ("server", lambda: through_server(client, body))]
                for kind, run in (pair if i % 2 == 0 else pair[::-1]):
                    t0, times, text = run()
                    (local if kind == "local" else remote).append((summarize(t0, times), text))
            # the server drops the line break that starts the answer; otherwise the same text, token for token
            texts = {(t.replace("\n", ""), n) for (_, _, n), t in local + remote}
            if len(texts) != 1:
                raise SystemExit(f"{name}: the replies differ between the two paths; the comparison is void")
            med = {k: [statistics.median(r[0][j] for r in runs) for j in range(3)]
                   for k, runs in (("local", local), ("server", remote))}
            rows.append({"case": name, "tokens": int(med["local"][2]),
                         "ttft_ms_in_process": round(med["local"][0], 2), "ttft_ms_server": round(med["server"][0], 2),
                         "tokens_per_s_in_process": round(med["local"][1], 1),
                         "tokens_per_s_server": round(med["server"][1], 1)})
            print(rows[-1], flush=True)
    finally:
        server.terminate()
        server.wait(30)
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "torch": torch.__version__,
            "threads": args.threads, "load": round(os.getloadavg()[0], 1),
            "checkpoint": Path(args.checkpoint).name, "runs": args.runs, "date": time.strftime("%Y-%m-%d")}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    section = report(meta, rows)
    out.with_suffix(".md").write_text("# Local server benchmark\n\n" + section)
    bench = ROOT / "docs" / "benchmarks.md"
    if bench.exists():
        text = bench.read_text()
        block = f"{BEGIN}\n## Through the local server (its overhead)\n\n{section}{END}\n"
        if BEGIN in text and END in text:
            text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END) + 1:]
        else:
            text = text.rstrip("\n") + "\n\n" + block
        bench.write_text(text)
    print(section)
    return 0


def report(meta, rows) -> str:
    lines = [f"Written by `python benchmarks/bench_server.py` on {meta['machine']} (load average "
             f"{meta['load']} at the end), torch {meta['torch']} with {meta['threads']} thread(s), "
             f"{meta['checkpoint']} on the CPU; medians of {meta['runs']} alternating runs of the same greedy reply, "
             "in-process (`stream_chat`) and streamed by `python -m runtime serve` (its own process) to the `openai` "
             "client over 127.0.0.1. Both sides are timed at the reader, so the server's column includes HTTP, SSE "
             "and the client's own parsing. On a busy machine the absolute speeds drop; the added milliseconds "
             "and the ratio, measured side by side, are what to read.", "",
             "| reply | tokens | first token in-process (ms) | first token via server (ms) | added (ms) "
             "| tokens/s in-process | tokens/s via server | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        added = r["ttft_ms_server"] - r["ttft_ms_in_process"]
        ratio = r["tokens_per_s_server"] / r["tokens_per_s_in_process"] if r["tokens_per_s_in_process"] else 0
        lines.append(f"| {r['case']} | {r['tokens']} | {r['ttft_ms_in_process']} | {r['ttft_ms_server']} | "
                     f"{added:+.1f} | {r['tokens_per_s_in_process']} | {r['tokens_per_s_server']} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
