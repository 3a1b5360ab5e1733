"""Which submodel table a checkpoint runs with, and how far each entry can be trusted.

Every submodel is in one of three states, shown wherever submodels are (planner, `models
probe`, the model manager, the slider):

- `verified`: its widths were checked value by value against a sliced checkpoint
  (`models nesting ... --write` records the slice it was checked against in elastic.json).
  The parent is the checkpoint itself and always verified.
- `declared`: the checkpoint's own elastic.json says so (this project's `extract`, the demo,
  a file the user wrote).
- `estimated`: the folder has no elastic.json (NVIDIA's official repos have none), so the
  catalog's widths are used: numbers fitted to published parameter counts, not facts. Such a
  submodel can be chosen, but never thinks by default. When a slice is verified into such a
  folder, the elastic.json written keeps the other estimates, each with `"estimated": ORIGIN`,
  and they stay estimated.

This module reads only a folder's own elastic.json (`own_table`); the catalog's estimates come
from the model store (`runtime/store/submodel_tables.py`), which hands the engine its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import one_line
from .config import read_json

VERIFIED, DECLARED, ESTIMATED = "verified", "declared", "estimated"


@dataclass(frozen=True)
class SubmodelTable:
    elastic: dict | None  # an elastic.json object to load with; None: the folder's own (or the parent alone)
    states: dict[str, str]  # submodel name -> VERIFIED, DECLARED or ESTIMATED
    origin: str  # where the table comes from, in words

    def state(self, name: str) -> str:
        return self.states.get(name, DECLARED)

    def note(self, name: str) -> str:
        """What a user should know about trusting this submodel ('' when nothing)."""
        if self.state(name) == ESTIMATED:
            return (f"{name}'s widths are an estimate ({self.origin}), not verified against a published slice: "
                    "its replies may be poor; verify the nesting in the model manager")
        return ""


def own_table(folder) -> SubmodelTable | None:
    """The table of the folder's own elastic.json; None when it has none."""
    path = Path(folder) / "elastic.json"
    if not path.exists():
        return None
    data = read_json(path)
    entries = data.get("submodels") if isinstance(data.get("submodels"), list) else []
    states, origins = {}, []
    for i, e in enumerate(entries):
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            if i == 0 or isinstance(e.get("verified"), dict):
                states[e["name"]] = VERIFIED
            elif isinstance(e.get("estimated"), str):
                states[e["name"]] = ESTIMATED
                origins.append(one_line(e["estimated"], 200))  # text from a file: shown, never obeyed
            else:
                states[e["name"]] = DECLARED
    origin = f"{origins[0]}, kept in the checkpoint's elastic.json" if origins else "the checkpoint's elastic.json"
    return SubmodelTable(None, states, origin)


PARENT_ONLY = SubmodelTable(None, {}, "config.json alone (no nested submodels)")
