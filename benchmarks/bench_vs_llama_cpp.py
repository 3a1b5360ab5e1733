"""This engine against llama.cpp on the same NVFP4 weights, side by side in one run, and both against
the streaming-read limit measured in the same process at the same thread count.

    python benchmarks/bench_vs_llama_cpp.py --checkpoint /work/scratch/nvfp4-e8 \\
        --gguf /work/scratch/nvfp4-e8.gguf --llama-bin DIR [--threads 1 2] [--rounds 5] [--busy 1] [--json out.jsonl]
    python benchmarks/bench_vs_llama_cpp.py --build-llama SDIST_DIR   # builds llama-bench there first (optional)

The GGUF is llama.cpp's own conversion of the checkpoint (its convert_hf_to_gguf.py keeps NVFP4 as
GGML type NVFP4 and BF16 as BF16, so both engines read the same bytes per token). Per thread count
and round, alternately: the streaming-read limit (a sum over a touched 1 GiB buffer, this process,
these threads), our decode (the median of --tokens steps after a --prompt-tokens prefill, greedy;
the first token's wait in decode steps is the prefill's time over the median step),
then `llama-bench -p 0 -n N -t T` (decode) and `-p P -n 0` (prefill), each one repetition after its
warm-up. A round prints one JSON line: tok/s of each, the share of the limit (its GB/s divided by
the bytes one decode step reads, from the checkpoint's headers), the ratio ours / llama.cpp and the
load average; the last line gives the medians. --busy N runs N busy-looping processes beside it,
ended by PID after the run (a user's PC always has something running).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads libgomp (runtime/__init__.py says why)

import torch  # noqa: E402

from benchmarks.bench_real_layout import step_bytes  # noqa: E402

LIMIT_BYTES = 1 << 30


def read_limit(buf: torch.Tensor, runs: int = 3) -> float:
    """GB/s of a sum over the touched buffer, best of `runs`, at the current thread count."""
    best = 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        buf.sum()
        best = max(best, buf.nbytes / (time.perf_counter() - t0))
    return best / 1e9


class Ours:
    """The engine on the checkpoint: a prefill of P random tokens, then greedy decode steps."""

    def __init__(self, folder: Path, prompt_tokens: int):
        from runtime.engine import Engine

        self.engine = Engine.load(folder, device="cpu", max_context=4096)
        self.model = self.engine.model
        self.name = self.engine.submodels_by_size()[-1]
        g = torch.Generator().manual_seed(0)
        self.prompt = torch.randint(10, self.model.config.vocab_size, (prompt_tokens,), generator=g).tolist()
        self.path = self.engine.status().compute_path

    def run(self, tokens: int) -> tuple[float, float]:
        """(prefill tok/s, decode tok/s: the median step)."""
        cache = self.model.new_cache(self.name, len(self.prompt) + tokens + 8)
        t0 = time.perf_counter()
        logits = self.model.forward(self.name, cache, self.prompt)
        prefill = len(self.prompt) / (time.perf_counter() - t0)
        step = self.model.decoder(self.name, cache)
        token, times = int(logits.argmax()), []
        for _ in range(tokens):
            t0 = time.perf_counter()
            token = int(step.forward_token(token).argmax())
            times.append(time.perf_counter() - t0)
        return prefill, 1 / statistics.median(times)


def llama_bench(binary: Path, gguf: Path, threads: int, prompt: int, gen: int) -> float:
    """tok/s of one llama-bench test (its warm-up run first, then one timed repetition)."""
    cmd = [str(binary), "-m", str(gguf), "-p", str(prompt), "-n", str(gen), "-t", str(threads), "-r", "1", "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=3600)
    return float(json.loads(out.stdout)[0]["avg_ts"])


def build_llama(sdist: Path) -> Path:
    """Builds llama-bench from a llama-cpp-python sdist's vendored llama.cpp (about 25 min on 2 cores)."""
    src = sdist / "vendor" / "llama.cpp"
    build = src / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-bench", "-j", str(os.cpu_count() or 1)],
                   check=True)
    return build / "bin"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--gguf", type=Path, help="llama.cpp's conversion of the same checkpoint")
    p.add_argument("--llama-bin", type=Path, help="the folder holding llama-bench")
    p.add_argument("--build-llama", type=Path, help="a llama-cpp-python sdist folder: build llama-bench there first")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=8, help="decode steps per round (ours: the median one)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="the prefill's length")
    p.add_argument("--busy", type=int, default=0, help="busy-looping processes to run beside it")
    p.add_argument("--json", type=Path, help="append every line to this JSON-lines file")
    p.add_argument("--label", default="")
    args = p.parse_args()
    binary = None
    if args.build_llama:
        args.llama_bin = build_llama(args.build_llama)
    if args.llama_bin:
        binary = args.llama_bin / "llama-bench"
    if args.checkpoint is None:
        return
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        run(args, binary)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def run(args, binary: Path | None) -> None:
    ours = Ours(args.checkpoint, args.prompt_tokens)
    reads = step_bytes(args.checkpoint)
    buf = torch.ones(LIMIT_BYTES // 4)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        ours.run(2)  # warm-up: first touches, the kernels' buffers
        for r in range(args.rounds):
            limit_gbs = read_limit(buf)
            prefill, decode = ours.run(args.tokens)
            row = {"label": args.label, "threads": threads, "round": r, "busy": args.busy, "compute_path": ours.path,
                   "read_limit_gb_per_s": round(limit_gbs, 2), "limit_tok_per_s": round(limit_gbs * 1e9 / reads, 3),
                   "step_read_bytes": reads, "ours_decode_tok_per_s": round(decode, 3),
                   "ours_prefill_tok_per_s": round(prefill, 2),
                   "ours_first_token_in_decode_steps": round(args.prompt_tokens * decode / prefill, 2),
                   "ours_share_of_limit": round(decode * reads / (limit_gbs * 1e9), 4)}
            if binary is not None and args.gguf:
                llama = llama_bench(binary, args.gguf, threads, 0, args.tokens)
                llama_pp = llama_bench(binary, args.gguf, threads, args.prompt_tokens, 0)
                row.update({"llama_decode_tok_per_s": round(llama, 3), "llama_prefill_tok_per_s": round(llama_pp, 2),
                            "llama_first_token_in_decode_steps": round(args.prompt_tokens * llama / llama_pp, 2),
                            "llama_share_of_limit": round(llama * reads / (limit_gbs * 1e9), 4),
                            "decode_ratio": round(decode / llama, 3), "prefill_ratio": round(prefill / llama_pp, 3)})
            row["load_average"] = round(os.getloadavg()[0], 2)
            emit(row, args.json)
            rows.append(row)
    for threads in args.threads:
        mine = [r for r in rows if r["threads"] == threads]
        summary = {"label": args.label, "threads": threads, "busy": args.busy, "summary": "median of rounds"}
        for key in ("read_limit_gb_per_s", "ours_decode_tok_per_s", "ours_share_of_limit", "ours_prefill_tok_per_s",
                    "ours_first_token_in_decode_steps", "llama_decode_tok_per_s", "llama_share_of_limit",
                    "llama_prefill_tok_per_s", "llama_first_token_in_decode_steps", "decode_ratio", "prefill_ratio",
                    "load_average"):
            if key in mine[0]:
                summary[key] = statistics.median(r[key] for r in mine)
        emit(summary, args.json)


def emit(row: dict, path: Path | None) -> None:
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
