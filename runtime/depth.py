"""Reasoning depth: the slider's levels, read from `depth_levels.json` (data, not code). This module and
that table are the one owner of the level names, the default level and its fallback, the "nearest
usable level" rule (`usable_level`, `lower_level`), the thinking ceiling and the server's effort names;
the engine, the app's controller and settings, the CLI and the server call them.

Each stop names roles, not submodels, so the table works for any `elastic.json`: roles are
resolved over the submodels in memory sorted by active parameters (smallest, middle,
parent = the largest). Budgets are fractions of the checkpoint's thinking ceiling:
`max_thinking_tokens` in elastic.json, else a quarter of the context (at most 32k).

A row with `escalate` (roles, in order) is an Auto stop (auto_depth.py): its thinker starts and the
thought climbs those submodels when the thinker struggles, by the checkpoint's `auto_depth` policy
(elastic.json) or else the row's own `signal`, `threshold` and `window`. The policy's `start` (a
submodel on that ladder, below its top) moves where the thought starts; it climbs the rungs above it.
The table's `default` names the stop a new chat starts on, `default_fallback` where to start when it
cannot run, and `efforts` the level each of the server's `reasoning_effort` names asks for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .auto_depth import AutoPolicy, Escalation, parse_policy
from .errors import UsageError

TABLE = Path(__file__).with_name("depth_levels.json")
ROLES = ("smallest", "middle", "parent")


@dataclass(frozen=True)
class DepthLevel:
    name: str
    think: str | None  # submodel that thinks (None: thinking off)
    answer: str
    budget: int  # thinking budget in tokens (0 when thinking is off)
    about: str
    missing: str | None = None  # the thinking submodel, when it is not in memory (the stop is unavailable)
    estimated: bool = False  # the thinking submodel's widths are the catalog's estimate (checkpoint/submodel_table.py)
    escalation: Escalation | None = None  # an Auto stop: where the thought may climb, and when
    unavailable: str | None = None  # why the stop cannot run, when not for a missing submodel (a remote server's limit)

    @property
    def available(self) -> bool:
        return self.missing is None and self.unavailable is None


def _read(path: Path) -> dict:
    return json.loads(Path(path).read_text())  # the package's own data, not a file from outside


def load_table(path: Path = TABLE) -> list[dict]:
    return _read(path)["stops"]


def level_names(path: Path = TABLE) -> tuple[str, ...]:
    """The levels' names, in the table's order (the valid depths of a settings file, of `--depth`)."""
    return tuple(str(row["name"]) for row in load_table(path))


def table_default_level(path: Path = TABLE) -> str:
    """The stop the table names as the default (the one switch that makes Auto the default or not)."""
    return _read(path)["default"]


def effort_levels(path: Path = TABLE) -> dict[str, str]:
    """The server's `reasoning_effort` names -> the level each asks for (none, minimal, low, medium, high,
    xhigh, max, auto)."""
    return dict(_read(path)["efforts"])


def thinking_ceiling(max_thinking_tokens: int | None, max_context: int) -> int:
    """The longest thinking budget worth offering (the Max level's, "Think longer"'s unit): the
    checkpoint's `max_thinking_tokens` (elastic.json), else a quarter of the context (at most 32k);
    never more than half the context."""
    ceiling = max_thinking_tokens or min(32768, max_context // 4)
    return max(1, min(ceiling, max_context // 2))


def row_policy(row: dict) -> AutoPolicy:
    """An Auto row's own policy: what a checkpoint without a measured `auto_depth` uses."""
    return parse_policy({k: row[k] for k in ("signal", "threshold", "window") if k in row},
                        f"depth stop {row['name']}", TABLE)


def resolve_roles(names_by_size: list[str]) -> dict[str, str]:
    """Role -> submodel name, for submodels sorted from fewest to most active parameters."""
    if not names_by_size:
        raise UsageError("no submodel is loaded")
    return {"smallest": names_by_size[0], "middle": names_by_size[(len(names_by_size) - 1) // 2],
            "parent": names_by_size[-1]}


def depth_levels(names_by_size: list[str], thinking_ceiling: int, table: list[dict] | None = None,
                loaded: set[str] | None = None, estimated: set[str] = frozenset(),
                policy: AutoPolicy | None = None) -> list[DepthLevel]:
    """The table's stops for a checkpoint whose submodels are `names_by_size` (smallest first).

    When only some submodels are in memory (`loaded`: the largest that fits and those nested in
    it), the largest loaded one answers in place of the parent, and a stop whose thinking
    submodel is not loaded is unavailable (`missing` names it); an Auto stop climbs only to loaded
    submodels. `policy` is the checkpoint's own Auto policy (elastic.json's `auto_depth`)."""
    roles = resolve_roles(names_by_size)
    loaded = set(names_by_size) if loaded is None else loaded
    largest_loaded = next((n for n in reversed(names_by_size) if n in loaded), None)
    stops = []
    for row in table if table is not None else load_table():
        think = _thinker(row, roles, policy)
        budget = max(1, round(row["budget"] * thinking_ceiling)) if think else 0
        answer = roles[row["answer"]] if roles[row["answer"]] in loaded else largest_loaded
        missing = think if think is not None and think not in loaded else None
        about = row.get("about", "")
        if think in estimated:
            about += (f" {think}'s widths are an estimate, not verified against a published slice, so its "
                      "thinking may be poor; this stop is never the default")
        escalation = None
        if think is not None and "escalate" in row:
            escalation = Escalation(_ladder(think, [roles[r] for r in row["escalate"]], names_by_size, loaded),
                                    policy or row_policy(row))
        stops.append(DepthLevel(row["name"], think, answer, budget, about, missing, think in estimated, escalation))
    return stops


def _thinker(row: dict, roles: dict[str, str], policy: AutoPolicy | None) -> str | None:
    """The submodel a stop thinks on: its role's, or for Auto the checkpoint's `start` when it names one
    (checked at load to be a rung of Auto's ladder below its top: checkpoint/submodels.py)."""
    if not row["think"]:
        return None
    if "escalate" in row and policy is not None and policy.start is not None:
        return policy.start
    return roles[row["think"]]


def auto_ladder(names_by_size: list[str], table: list[dict] | None = None) -> tuple[str, ...]:
    """The Auto stop's ladder with every submodel in memory, its thinker first (where a checkpoint's
    `auto_depth` `start` may point: any rung but the top); () when the table has no Auto stop."""
    roles = resolve_roles(names_by_size)
    for row in table if table is not None else load_table():
        if row["think"] and "escalate" in row:
            return _ladder(roles[row["think"]], [roles[r] for r in row["escalate"]], names_by_size,
                           set(names_by_size))
    return ()


def _ladder(think: str, rungs: list[str], names_by_size: list[str], loaded: set[str]) -> tuple[str, ...]:
    """The thinker, then each rung that is in memory and larger than the one before it."""
    ladder = [think]
    for name in rungs:
        if name in loaded and names_by_size.index(name) > names_by_size.index(ladder[-1]):
            ladder.append(name)
    return tuple(ladder)


def default_level(stops: list[DepthLevel], default: str | None = None) -> DepthLevel:
    """The stop to start on: the table's `default` (Balanced), unless its thinker is missing or
    estimated (then the first of the table's `default_fallback` whose thinker is in memory and
    verified or declared; Max, where the parent thinks, always is)."""
    by_name = {s.name: s for s in stops}
    for name in (default or table_default_level(), *_read(TABLE)["default_fallback"]):
        stop = by_name.get(name)
        if stop is not None and stop.available and not stop.estimated:
            return stop
    return next(s for s in stops if s.available)


def _index(stops: list[DepthLevel], name) -> int | None:
    names = [s.name.lower() for s in stops]
    return names.index(name.lower()) if isinstance(name, str) and name.lower() in names else None


def _works_like(a: DepthLevel, b: DepthLevel) -> bool:
    return (a.think is None) == (b.think is None) and (a.escalation is None) == (b.escalation is None)


def usable_level(stops: list[DepthLevel], name: str) -> DepthLevel | None:
    """Level `name` when it can run on what is in memory, else the nearest level below it in the table
    that can and that works the same way (thinks or not, climbs or not: a level never falls back to
    thinking off, nor out of Auto); None when none can or the table has no such level. Names are
    compared ignoring case. The app reopens a chat's depth with it, the server maps an effort with it."""
    index = _index(stops, name)
    if index is None:
        return None
    return next((s for s in reversed(stops[:index + 1]) if s.available and _works_like(s, stops[index])), None)


def lower_level(stops: list[DepthLevel], name: str) -> DepthLevel | None:
    """The nearest level below `name` that can run, of any kind (offered when a reply runs out of memory)."""
    index = _index(stops, name)
    return None if index is None else next((s for s in reversed(stops[:index]) if s.available), None)


def level_for_effort(stops: list[DepthLevel], effort: str) -> DepthLevel | None:
    """The level a `reasoning_effort` asks for, or the nearest usable one below it (`usable_level`);
    None when none can run. KeyError for a name that is not an effort (`effort_levels` lists them)."""
    return usable_level(stops, effort_levels()[effort])


def find_level(stops: list[DepthLevel], name: str) -> DepthLevel:
    for stop in stops:
        if stop.name.lower() == name.lower():
            if stop.unavailable:
                raise UsageError(f"depth {stop.name} cannot run here: {stop.unavailable}; choose another depth")
            if not stop.available:
                raise UsageError(f"depth {stop.name} needs submodel {stop.missing}, which is not in memory "
                                 "(it does not fit this device); choose a lower depth")
            return stop
    raise UsageError(f"unknown depth {name!r}; choose one of {', '.join(s.name for s in stops)}")
