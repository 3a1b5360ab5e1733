"""Download throughput from the hub stand-in on 127.0.0.1, and how much of it is the final hash of
what is on disk (each file is read back and hashed after it arrives, so the check covers the bytes
in place, not the stream). Loopback with the stand-in in the same process: an upper bound of the
downloader's own cost, not a network figure.

    python tests/benchmarks/bench_download.py [--mb 200] [--runs 2]
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
    args = parser.parse_args()

    import huggingface_hub.constants

    from runtime.store.download.transfer import VERIFYING, Download, resolve
    from tests.hub_stub import HubStub

    huggingface_hub.constants.HF_HUB_OFFLINE = False
    tmp = Path(tempfile.mkdtemp())
    try:
        repo = tmp / "repo"
        repo.mkdir()
        (repo / "model.safetensors").write_bytes(os.urandom(args.mb << 20))
        with HubStub({"bench/repo": repo}) as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            remote = resolve("bench/repo")
            for i in range(args.runs):
                first: dict[str, float] = {}
                t0 = time.perf_counter()
                final = Download(remote, tmp / f"dl{i}", lambda p: first.setdefault(p.state, time.perf_counter())).run()
                total = time.perf_counter() - t0
                hashing = t0 + total - first.get(VERIFYING, t0 + total)
                print(f"run {i + 1}: {final.state}, {args.mb} MB in {total:.2f} s = {args.mb / total:.0f} MB/s; "
                      f"of which the final hash {hashing:.2f} s ({args.mb / max(hashing, 1e-9):.0f} MB/s)")
                shutil.rmtree(tmp / f"dl{i}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
