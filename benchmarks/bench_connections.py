"""What a client that holds connections gets from the server (issue 24): `--clients` raw connections
that each send a request line and then one header every `--dribble` seconds, never finishing, against
a server with its default limits (runtime/options.py SERVER_LIMITS). Prints how many were accepted,
how many refused at once (503), and how long the accepted ones were held before the server closed them.

    python benchmarks/bench_connections.py [--clients 100] [--dribble 1.0]

No model is loaded (the server answers 503 `model_loading`; the limits apply before any route).
"""

from __future__ import annotations

import argparse
import select
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.engine_queue import EngineQueue  # noqa: E402
from runtime.options import SERVER_LIMITS  # noqa: E402
from runtime.server.runner import ServerThread  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--dribble", type=float, default=1.0, help="seconds between a client's headers")
    parser.add_argument("--give-up", type=float, default=120.0, help="stop waiting for the server after this")
    args = parser.parse_args()
    queue = EngineQueue()
    queue.set_loading()
    server = ServerThread(queue, "127.0.0.1", 0).start()
    try:
        start = time.monotonic()
        open_, refused, held = {}, 0, []
        for _ in range(args.clients):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.setblocking(False)
            open_[s] = time.monotonic()
        time.sleep(0.2)  # the server answers one too many at once
        for s in list(open_):
            readable, _, _ = select.select([s], [], [], 0)
            if readable and b" 503 " in s.recv(65536)[:20]:
                refused += 1
                s.close()
                del open_[s]
        for s in open_:
            s.send(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        statuses: dict[str, int] = {}
        next_header = time.monotonic() + args.dribble
        while open_ and time.monotonic() - start < args.give_up:
            readable, _, _ = select.select(list(open_), [], [], max(0.0, next_header - time.monotonic()))
            for s in readable:
                try:
                    data = s.recv(65536)
                except ConnectionResetError:
                    data = b""
                status = data.split(b" ")[1].decode() if data.startswith(b"HTTP/") else "closed"
                statuses[status] = statuses.get(status, 0) + 1
                held.append(time.monotonic() - open_.pop(s))
                s.close()
            if time.monotonic() >= next_header:
                for s in open_:
                    try:
                        s.send(b"X-Slow: 1\r\n")
                    except OSError:
                        pass
                next_header += args.dribble
        limits = ", ".join(f"{o.name} {server.limits[o.name]:g}" for o in SERVER_LIMITS)
        print(f"limits: {limits}")
        print(f"clients {args.clients}: accepted {args.clients - refused}, refused at once {refused}, "
              f"still open after {args.give_up:g} s: {len(open_)}")
        if held:
            print(f"held before the server closed them: min {min(held):.1f} s, median {statistics.median(held):.1f} s, "
                  f"max {max(held):.1f} s; answers {statuses}")
        for s in open_:
            s.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
