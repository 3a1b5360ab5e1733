"""How many CPU threads the engine computes with: the rule, and the measurements behind it.

    one fewer than the physical cores, at least one (ELASTIC_CHAT_THREADS=N chooses N; a user's
    OMP_NUM_THREADS is left as it is)

Measured at the real shape on the project's 2-core machine (benchmarks/bench_vs_llama_cpp.py with
`--threads 1 2 1 2 1 2`, docs/benchmarks-real.md): with the cores to itself, two threads decode no
faster than one (one core already reads memory about as fast as two here); with one busy process
beside it, two threads decode at half the speed of one. Nothing spins (OMP_WAIT_POLICY=PASSIVE, set
in runtime/__init__.py before torch loads; the CPU kernels hand out work in chunks from a shared
counter), but every parallel region ends when its last thread does, and a thread that another
process holds back mid-chunk holds the region until the scheduler runs it again: a few hundred
regions a token. So one core is left to the rest of the machine (the app's window, the OS, whatever
else the user runs), and the count is not the core count alone. Machines with more cores were not
measured here; decode reads memory, which a few cores already saturate.

The commands that run an engine for a user call `apply()` (`generate`, `score`, `serve`, the app);
tests and benchmarks set their own counts.
"""

from __future__ import annotations

import os

import torch

ENV = "ELASTIC_CHAT_THREADS"


def physical_cores() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        return os.cpu_count() or 1


def default_threads() -> int:
    return max(1, physical_cores() - 1)


def chosen() -> int | None:
    """The thread count ELASTIC_CHAT_THREADS asks for (None: the default rule)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        from .errors import UsageError

        raise UsageError(f"{ENV} must be a whole number of threads from 1, not {value!r}")
    return int(value)


def apply() -> int:
    """Sets the engine's thread count by the rule (see the module doc); returns it."""
    n = chosen()
    if n is None and not os.environ.get("OMP_NUM_THREADS"):
        n = default_threads()
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)
    return torch.get_num_threads()
