"""Helpers the model-store and download tests share (plain functions; fixtures live in conftest.py)."""

import hashlib
from pathlib import Path


def part_of(dest: Path, name: str) -> Path:
    """Where the download keeps `name`'s partial copy (its hidden bookkeeping folder)."""
    return dest / ".elastic-chat" / "parts" / (hashlib.sha256(name.encode()).hexdigest()[:40] + ".part")
