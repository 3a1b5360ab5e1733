"""The result lines the benchmarks append and the report scripts read back: one JSON object a line, so
runs on several machines or days add up in one file. Imported as a sibling (the scripts run as files)."""

from __future__ import annotations

import json
from pathlib import Path


def emit(result: dict, path: str | None) -> None:
    """Print the result as one JSON line and, when a file is named, append the same line to it."""
    line = json.dumps(result)
    print(line)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def read(path) -> list[dict]:
    """Every result a JSON-lines file holds (none when no file is named), blank lines skipped."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()] if path else []
