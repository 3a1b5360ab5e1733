"""What the commands that load a checkpoint share (`generate`, cli.py; `serve`, server/runner.py):
the load itself, with the model store's submodel table and its RAM check before a CPU load, and its
progress on stderr. It joins the inference core and the store, as the commands do
(tests/test_boundaries.py lists it with them).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .engine import Engine
from .errors import UsageError
from .store.planner import check_cpu_fit
from .store.submodel_tables import folder_table


def load_engine(args) -> Engine:
    """The checkpoint of a command's `--checkpoint`, `--device`, `--dtype` and `--max-context`."""
    folder = Path(args.checkpoint)
    if not folder.is_dir():
        raise UsageError(f"--checkpoint {args.checkpoint} is not a folder; point it at a checkpoint folder")
    return Engine.load(folder, device=args.device, dtype=args.dtype, max_context=args.max_context,
                       table=folder_table(folder), progress=stderr_progress(), preflight=check_cpu_fit)


def stderr_progress(every_s: float = 1.0):
    """A load-progress callback that prints `LoadProgress.line()` on stderr at most once a second and
    when the load ends: in place on a terminal, one line each otherwise; stdout is left alone."""
    state = {"at": None}
    tty = sys.stderr.isatty()

    def report(p):
        now = time.monotonic()
        last = p.tensors_read >= p.tensors_total
        if not last and state["at"] is not None and now - state["at"] < every_s:
            return
        state["at"] = now
        if tty:
            print("\r" + p.line().ljust(78), end="\n" if last else "", file=sys.stderr, flush=True)
        else:
            print(p.line(), file=sys.stderr, flush=True)
    return report
