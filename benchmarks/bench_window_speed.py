"""The window's reply speed against `python -m runtime generate`'s, on the same prompts, in one run.

The real window (app/main_window.py) runs in a child process: offscreen, or on the X server DISPLAY
names when it is set (`--platform`). For each prompt the window gets it typed and Enter pressed, and
the CLI answers it in a process of its own, one after the other, so both see the same machine. Both
speeds are the runtime's own decode speed after the first token (Done's `tokens_per_s`, one
definition for both); the window's "shown" speed is the tokens over the time between the first and
the last text the view got, which counts any lag of the GUI thread too. Greedy sampling, so both
produce the same tokens (the token counts are printed side by side).

`--busy N` runs every prompt a second time with N processes spinning (`while True: pass`) beside it;
they are ended, by pid, before the script exits.

    python benchmarks/bench_window_speed.py [--busy 2] [--platform offscreen|xcb] [--out docs/benchmarks-gui.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = ("What is 45 + 23 - 17 + 9?", "What is 12 + 30 - 8 + 5 - 11?", "What is 7 + 8 + 9 - 6 + 14 - 3?",
           "What is 81 - 27 + 16 - 9 + 33?")
BEGIN, END = "<!-- window-speed: begin -->", "<!-- window-speed: end -->"  # the part of the page it writes


# ---------------------------------------------------------------------------------------------- the window


def window_child(args) -> None:
    """Builds the window in this process, then answers one prompt per line of stdin with one JSON line."""
    os.environ.setdefault("QT_QPA_PLATFORM", args.platform)
    home = Path(tempfile.mkdtemp(prefix="elastic-window-speed-"))
    os.environ["ELASTIC_CHAT_HOME"] = str(home)  # a private data folder: never the user's chats
    from PySide6.QtCore import QEventLoop, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.state.settings import Sampling, Settings

    app = QApplication([])
    settings = Settings(max_new_tokens=args.max_new_tokens, sampling=Sampling(temperature=0.0), depth=args.depth)
    w = MainWindow(home / "data", settings, home / "data" / "settings.json", checkpoint=args.checkpoint or None)
    w.resize(1280, 720)
    w.show()
    _pump(app, lambda: w.loaded is not None and _engine_idle(w), 600)
    w.controller.set_depth(args.depth)
    shown: list[float] = []
    w.controller.sig_stream.connect(lambda *a: shown.append(time.perf_counter()) if (a[2] or a[3]) else None)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        prompt = json.loads(line)["prompt"]
        w.new_chat()
        shown.clear()
        w.input.setPlainText(prompt)
        loop = QEventLoop()
        w.controller.sig_busy.connect(lambda busy: None if busy else loop.quit())
        gui_cpu, cpu, started = time.thread_time(), time.process_time(), time.perf_counter()
        QTest.keyClick(w.input, Qt.Key.Key_Return)
        if w.controller.replies.busy:
            loop.exec()  # as the app waits: in its event loop, until the reply ends
        ended = time.perf_counter()
        gui_cpu, cpu = time.thread_time() - gui_cpu, time.process_time() - cpu
        w.controller.sig_busy.disconnect()
        last = [m for m in w.controller.history.messages(w.controller.chats.current) if m.role == "assistant"][-1]
        meta = last.meta
        tokens = meta.get("thinking_tokens", 0) + meta.get("answer_tokens", 0)
        span = (shown[-1] - shown[0]) if len(shown) > 1 else 0.0
        print(json.dumps({"tokens": tokens, "tokens_per_s": meta.get("tokens_per_s", 0.0),
                          "ttft_ms": meta.get("ttft_ms", 0.0), "wall_s": ended - started,
                          "shown_tokens_per_s": (tokens - 1) / span if span > 0 else 0.0,
                          "gui_cpu_ms_per_token": 1000 * gui_cpu / max(tokens, 1),
                          "cpu_ms_per_token": 1000 * cpu / max(tokens, 1),
                          "finish_reason": meta.get("finish_reason")}), flush=True)
    w.close()


def _engine_idle(w) -> bool:
    """The model is loaded and warmed up: nobody holds the engine."""
    state = w.controller.worker.queue.snapshot()
    return state.state == "ready" and state.running is None


def _pump(app, done, limit_s: float) -> None:
    end = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > end:
            raise SystemExit("the window did not finish in time")
        app.processEvents()
        time.sleep(0.001)


# ---------------------------------------------------------------------------------------------- the CLI


def bundled_demo() -> Path:
    from runtime.api import load_catalog

    return Path(next(v.path for v in load_catalog().variants if v.bundled))


def cli_reply(args, prompt: str) -> dict:
    folder = args.checkpoint or bundled_demo()  # the checkpoint the window loads
    cmd = [sys.executable, "-m", "runtime", "generate", "--checkpoint", str(folder), "--prompt", prompt,
           "--depth", args.depth, "--temperature", "0", "--max-new-tokens", str(args.max_new_tokens), "--json"]
    for attempt in (1, 2):  # once more on a failure (on a crowded machine a load can fail for memory)
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if run.returncode == 0:
            break
        print(f"runtime generate failed (exit {run.returncode}, attempt {attempt}): {run.stderr.strip()[-400:]}",
              file=sys.stderr, flush=True)
    else:
        raise SystemExit("runtime generate failed twice: see above")
    done = json.loads(run.stdout.strip().splitlines()[-1])
    return {"tokens": done["thinking_tokens"] + done["answer_tokens"], "tokens_per_s": done["tokens_per_s"],
            "ttft_ms": done["ttft_ms"], "finish_reason": done["finish_reason"]}


# ---------------------------------------------------------------------------------------------- the run


def spin(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def run(args) -> list[dict]:
    child = subprocess.Popen([sys.executable, __file__, "--window-child", "--platform", args.platform,
                              "--depth", args.depth, "--max-new-tokens", str(args.max_new_tokens),
                              "--checkpoint", args.checkpoint],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                                  **dict(kv.split("=", 1) for kv in args.window_env)})
    rows = []
    busy: list[subprocess.Popen] = []
    try:
        json.loads(child.stdout.readline())  # ready
        for n in [0] + ([args.busy] if args.busy else []):
            busy = spin(n)
            try:
                for rep in range(args.repeat):
                    for prompt in PROMPTS[:args.prompts]:
                        window_first = (rep + len(rows)) % 2 == 0  # neither side always goes first
                        cli = None if window_first else cli_reply(args, prompt)
                        child.stdin.write(json.dumps({"prompt": prompt}) + "\n")
                        child.stdin.flush()
                        window = json.loads(child.stdout.readline())
                        cli = cli or cli_reply(args, prompt)
                        rows.append({"busy": n, "prompt": prompt, "window": window, "cli": cli,
                                     "load": os.getloadavg()[0]})
                        print(f"busy {n} | window {window['tokens']:>4} tok {window['tokens_per_s']:7.1f} tok/s "
                              f"(GUI {window['gui_cpu_ms_per_token']:.2f} of {window['cpu_ms_per_token']:.2f} "
                              "CPU ms/token) "
                              f"(shown {window['shown_tokens_per_s']:7.1f}) | cli {cli['tokens']:>4} tok "
                              f"{cli['tokens_per_s']:7.1f} tok/s | ratio "
                              f"{window['tokens_per_s'] / max(cli['tokens_per_s'], 1e-9):.2f} | load "
                              f"{os.getloadavg()[0]:.1f}", flush=True)
            finally:
                end(busy)
    finally:
        child.stdin.close()
        child.wait(timeout=120)
    return rows


def summary(rows: list[dict]) -> list[str]:
    lines = ["| condition | window tok/s | window shown tok/s | CLI tok/s | window / CLI | load average (1 min) |",
             "|---|---|---|---|---|---|"]
    for n in sorted({r["busy"] for r in rows}):
        part = [r for r in rows if r["busy"] == n]
        w = statistics.median(r["window"]["tokens_per_s"] for r in part)
        s = statistics.median(r["window"]["shown_tokens_per_s"] for r in part)
        c = statistics.median(r["cli"]["tokens_per_s"] for r in part)
        loads = [r["load"] for r in part]
        what = "quiet (nothing added)" if n == 0 else f"{n} busy processes beside it"
        lines.append(f"| {what} | {w:.1f} | {s:.1f} | {c:.1f} | {w / c:.2f}x | {min(loads):.1f}-{max(loads):.1f} |")
    return lines


def write_section(path: Path, args, table: list[str]) -> None:
    """Replaces this script's part of the page (or appends it), leaving the rest of the page as it is."""
    import platform

    import torch

    command = (f"python benchmarks/bench_window_speed.py --busy {args.busy} --platform {args.platform} "
               f"--prompts {args.prompts} --repeat {args.repeat} --max-new-tokens {args.max_new_tokens}")
    body = [BEGIN, "## The window's reply speed against `runtime generate`", "",
            f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
            f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, the bundled demo at "
            f"depth {args.depth}, greedy, the same prompts in one run, window and CLI taking turns. "
            "tok/s is the runtime's decode speed after the first token (the median over the prompts); "
            "\"shown\" is the rate at which the text reached the view. The machine is shared: the load "
            "average column says how busy it was, and the ratio is the number to read.", "", *table, "", END]
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + "\n".join(body) + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=0, help="also run every prompt with N spinning processes")
    parser.add_argument("--platform", default="xcb" if os.environ.get("DISPLAY") else "offscreen")
    parser.add_argument("--checkpoint", default="", help="a checkpoint folder (default: the bundled demo, as the "
                        "window loads it at first start)")
    parser.add_argument("--depth", default="Max")
    parser.add_argument("--max-new-tokens", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", help="write the table into this markdown file's window-speed section")
    parser.add_argument("--window-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--window-env", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.window_child:
        return window_child(args)
    rows = run(args)
    table = summary(rows)
    print("\n".join(table))
    if args.out:
        write_section(Path(args.out), args, table)


if __name__ == "__main__":
    main()
