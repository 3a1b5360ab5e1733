"""Byte counts for people: one convention everywhere (planner reasons, the model manager, download
progress, the memory label, the CLI).

Binary units, labelled as such: 1 GiB is 2^30 bytes. Memory (RAM, VRAM), which decides what fits,
is binary in every tool a user compares with (nvidia-smi, Task Manager, torch); a download's size is
shown in the same unit so the two can be compared without converting.

    format_bytes(820)                  -> "820 bytes"
    format_bytes(48 * MiB)             -> "48.0 MiB"
    format_bytes(13.4 * GiB, "GiB")    -> "13.4 GiB"   (a fixed unit: figures compared in one line)
"""

from __future__ import annotations

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
UNITS = {"KiB": KiB, "MiB": MiB, "GiB": GiB}


def format_bytes(n: float, unit: str | None = None, digits: int = 1) -> str:
    """`n` bytes in `unit` (KiB, MiB or GiB), or in the largest unit that keeps it at 1 or more."""
    if unit is None:
        if abs(n) < KiB:
            return f"{int(n)} bytes"
        unit = "GiB" if abs(n) >= GiB else "MiB" if abs(n) >= MiB else "KiB"
    return f"{n / UNITS[unit]:.{digits}f} {unit}"
