"""Download cost from the hub stand-in on 127.0.0.1. Loopback with the stand-in in the same process:
an upper bound of the downloader's own cost, not a network figure.

Two measures:

- throughput of one large file, and how much of it is the final hash of what is on disk (each file
  is read back and hashed after it arrives, so the check covers the bytes in place, not the stream);
- the cost per file of a repo of many one-byte files (`--files 2000 6000`): the bookkeeping that
  runs once per file (the download record, the checks) must stay linear in the number of files.

    python benchmarks/bench_download.py [--mb 200] [--runs 2]
    python benchmarks/bench_download.py --files 2000 6000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.pop("HF_HUB_OFFLINE", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--files", type=int, nargs="*", help="many one-byte files instead: these counts")
    args = parser.parse_args()

    import huggingface_hub.constants

    huggingface_hub.constants.HF_HUB_OFFLINE = False
    tmp = Path(tempfile.mkdtemp())
    try:
        if args.files:
            for n in args.files:
                many_small_files(tmp, n)
        else:
            one_large_file(tmp, args.mb, args.runs)
    finally:
        shutil.rmtree(tmp)


def one_large_file(tmp: Path, mb: int, runs: int) -> None:
    from runtime.store.download.transfer import VERIFYING, Download, resolve
    from tests.hub_stub import HubStub

    repo = tmp / "repo"
    repo.mkdir()
    (repo / "model.safetensors").write_bytes(os.urandom(mb << 20))
    with HubStub({"bench/repo": repo}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        remote = resolve("bench/repo")
        for i in range(runs):
            first: dict[str, float] = {}
            t0 = time.perf_counter()
            def seen(p, first=first):
                first.setdefault(p.state, time.perf_counter())
            final = Download(remote, tmp / f"dl{i}", seen).run()
            total = time.perf_counter() - t0
            hashing = t0 + total - first.get(VERIFYING, t0 + total)
            print(f"run {i + 1}: {final.state}, {mb} MB in {total:.2f} s = {mb / total:.0f} MB/s; "
                  f"of which the final hash {hashing:.2f} s ({mb / max(hashing, 1e-9):.0f} MB/s)")
            shutil.rmtree(tmp / f"dl{i}")


def many_small_files(tmp: Path, n: int) -> None:
    from runtime.store.download.transfer import Download, resolve
    from tests.hub_stub import HubStub

    (tmp / "empty").mkdir(exist_ok=True)
    files = {f"shard-{i:05d}.json": bytes([i % 256]) for i in range(n)}
    with HubStub({"bench/many": tmp / "empty"}, virtual={"bench/many": files}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        remote = resolve("bench/many")
        dest = tmp / f"many{n}"
        t0 = time.perf_counter()
        final = Download(remote, dest).run()
        total = time.perf_counter() - t0
        t1 = time.perf_counter()
        again = Download(remote, dest).run()  # everything in place: only the record and the checks
        rerun = time.perf_counter() - t1
        print(f"{n} one-byte files: {final.state} in {total:.1f} s ({1e3 * total / n:.2f} ms a file); "
              f"a second run ({again.state}, nothing fetched) {rerun:.2f} s")
        shutil.rmtree(dest)


if __name__ == "__main__":
    main()
