"""Counts for people: bytes in one convention everywhere (planner reasons, the model manager, download
progress, the memory label, the CLI), and a count of things with its noun in the right number.

Binary units, labelled as such: 1 GiB is 2^30 bytes. Memory (RAM, VRAM), which decides what fits,
is binary in every tool a user compares with (nvidia-smi, Task Manager, torch); a download's size is
shown in the same unit so the two can be compared without converting.

    format_bytes(820)                  -> "820 bytes"
    format_bytes(48 * MiB)             -> "48.0 MiB"
    format_bytes(13.4 * GiB, "GiB")    -> "13.4 GiB"   (a fixed unit: figures compared in one line)
    format_part(3 * GiB, 16.8 * GiB)   -> "3.0 of 16.8 GiB"  (a load's progress line)
    counted(1, "reply", "replies")     -> "1 reply"   (never "1 reply" hedged with "(ies)")
"""

from __future__ import annotations

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
UNITS = {"KiB": KiB, "MiB": MiB, "GiB": GiB}


def unit_for(n: float) -> str:
    """The largest unit (KiB, MiB or GiB) that keeps `n` bytes at 1 or more (KiB below that)."""
    return "GiB" if abs(n) >= GiB else "MiB" if abs(n) >= MiB else "KiB"


def format_bytes(n: float, unit: str | None = None, digits: int = 1) -> str:
    """`n` bytes in `unit` (KiB, MiB or GiB), or in the largest unit that keeps it at 1 or more."""
    if unit is None:
        if abs(n) < KiB:
            return counted(int(n), "byte")
        unit = unit_for(n)
    return f"{n / UNITS[unit]:.{digits}f} {unit}"


def format_part(done: float, total: float, digits: int = 1) -> str:
    """`done` of `total` bytes in the total's unit: "3.0 of 16.8 GiB"."""
    unit = unit_for(total)
    return f"{done / UNITS[unit]:.{digits}f} of {format_bytes(total, unit, digits)}"


def counted(n: int, noun: str, plural: str = "") -> str:
    """`n` and `noun` in the number `n` asks for: "1 reply", "0 replies", "2 models"; `plural` for a
    noun that does not just take an "s"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
