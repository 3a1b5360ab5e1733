"""Nested submodels: the widths in `elastic.json` and the rules that make them valid.

A submodel keeps a leading slice of every elastic axis of the parent (see the nesting
rule in docs): hidden channels, Mamba heads (per group), routed experts, expert FFN,
shared-expert FFN and dense-MLP FFN. Widths are stored per layer, so a file may give a
number (the same for every layer) or a list with one value per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..auto_depth import AutoPolicy, parse_policy
from ..depth import auto_ladder
from ..errors import CheckpointError, show
from .config import MAMBA, MLP, MOE, ModelConfig, count_params, read_json

FORMAT = "elastic-nemotron-h/1"

# Per-layer elastic fields, the layer kind each applies to, and the parent's value.
PER_LAYER_FIELDS = {
    "mamba_num_heads": MAMBA,
    "n_routed_experts": MOE,
    "moe_intermediate_size": MOE,
    "moe_shared_expert_intermediate_size": MOE,
    "intermediate_size": MLP,
}


@dataclass(frozen=True)
class Submodel:
    """One nested submodel: a name and its widths (per-layer tuples, parent values elsewhere)."""

    name: str
    hidden_size: int
    mamba_num_heads: tuple[int, ...]
    n_routed_experts: tuple[int, ...]
    moe_intermediate_size: tuple[int, ...]
    moe_shared_expert_intermediate_size: tuple[int, ...]
    intermediate_size: tuple[int, ...]

    def fits_within(self, other: "Submodel") -> bool:
        """True when every width is at most `other`'s, so this submodel is a slice of it."""
        if self.hidden_size > other.hidden_size:
            return False
        return all(
            a <= b
            for field in PER_LAYER_FIELDS
            for a, b in zip(getattr(self, field), getattr(other, field))
        )

    def uniform(self, field: str, cfg: ModelConfig) -> int:
        """The single value of a per-layer field over the layers it applies to.

        Raises ValueError when layers differ (such a submodel has no transformers config).
        """
        layers = cfg.layers_of(PER_LAYER_FIELDS[field])
        values = {getattr(self, field)[i] for i in layers}
        if len(values) > 1:
            raise ValueError(f"{field} differs between layers")
        return values.pop() if values else getattr(self, field)[0]

    def to_dict(self, cfg: ModelConfig) -> dict:
        out = {"name": self.name, "hidden_size": self.hidden_size}
        for field, kind in PER_LAYER_FIELDS.items():
            values = [getattr(self, field)[i] for i in cfg.layers_of(kind)]
            if len(set(values)) <= 1:
                out[field] = values[0] if values else getattr(self, field)[0]
            else:
                out[field] = list(getattr(self, field))
        return out


def parent_submodel(cfg: ModelConfig, name: str = "full") -> Submodel:
    n = cfg.num_layers
    return Submodel(
        name=name,
        hidden_size=cfg.hidden_size,
        mamba_num_heads=(cfg.mamba_num_heads,) * n,
        n_routed_experts=(cfg.n_routed_experts,) * n,
        moe_intermediate_size=(cfg.moe_intermediate_size,) * n,
        moe_shared_expert_intermediate_size=(cfg.moe_shared_expert_intermediate_size,) * n,
        intermediate_size=(cfg.intermediate_size,) * n,
    )


MAX_SUBMODELS = 64
MAX_NAME = 64


def parse_elastic(data: dict, cfg: ModelConfig, path: Path | str = "elastic.json") -> list[Submodel]:
    """Validates an `elastic.json` object against the parent config; returns parent first."""
    if not isinstance(data, dict):
        raise CheckpointError(path, "expected a JSON object")
    if data.get("format") != FORMAT:
        raise CheckpointError(path, f"unknown format {show(data.get('format'), 60)}; this version reads {FORMAT!r}")
    entries = data.get("submodels")
    if not isinstance(entries, list) or not entries:
        raise CheckpointError(path, "'submodels' must be a non-empty list, the parent first")
    if len(entries) > MAX_SUBMODELS:
        raise CheckpointError(path, f"lists {len(entries)} submodels; at most {MAX_SUBMODELS} are supported")
    max_thinking_tokens(data, path)
    policy = auto_policy(data, path)
    parent = parent_submodel(cfg)
    subs, names = [], set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise CheckpointError(path, f"submodel #{index + 1} needs a non-empty 'name'")
        name = entry["name"]
        # Names are shown in the terminal, the GUI and file names: printable text only.
        if len(name) > MAX_NAME or not name.isprintable() or name != name.strip():
            raise CheckpointError(path, f"submodel #{index + 1} has the name {show(name, 60)}; a name must be at most "
                                        f"{MAX_NAME} printable characters, without control characters")
        if name in names:
            raise CheckpointError(path, f"submodel name {name!r} appears twice")
        names.add(name)
        sub = _submodel_from_entry(entry, cfg, parent, path)
        if index == 0 and sub != parent_submodel(cfg, name):
            raise CheckpointError(path, f"the first submodel ({name!r}) must be the parent, with config.json's widths")
        subs.append(sub)
    check_auto_start(policy, subs, cfg, path)
    return subs


MAX_THINKING_TOKENS = 1 << 20


def max_thinking_tokens(data: dict, path) -> int | None:
    """elastic.json's optional `max_thinking_tokens`: a whole number or absent."""
    value = data.get("max_thinking_tokens")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not 1 <= value <= MAX_THINKING_TOKENS):
        raise CheckpointError(path, f"max_thinking_tokens is {show(value, 60)}; it must be a whole number "
                                    f"from 1 to {MAX_THINKING_TOKENS:,}")
    return value


def auto_policy(data: dict, path) -> AutoPolicy | None:
    """elastic.json's optional `auto_depth`: when the Auto stop climbs, as measured for this checkpoint
    (training/auto_signal.py); absent: the depth table's default."""
    value = data.get("auto_depth")
    return None if value is None else parse_policy(value, "auto_depth", path)


def check_auto_start(policy: AutoPolicy | None, subs: list[Submodel], cfg: ModelConfig, path) -> None:
    """`auto_depth`'s `start` names a rung of the Auto stop's ladder below its top: a submodel of this
    checkpoint, not the parent (the thought would have nowhere to climb: that is Max), nor one the ladder
    skips (the depth table's roles over these submodels, by active parameters)."""
    if policy is None or policy.start is None:
        return
    by_size = [s.name for s in sorted(subs, key=lambda s: count_params(cfg, s).active)]
    rungs = auto_ladder(by_size)[:-1]
    start = policy.start
    if start not in by_size:
        problem = f"names no submodel of this checkpoint (it has {', '.join(by_size)})"
    elif start == by_size[-1]:
        problem = "is the parent, which has nowhere to climb (that is the Max stop)"
    elif start not in rungs:
        problem = f"is not on Auto's ladder ({' > '.join(auto_ladder(by_size))})"
    else:
        return
    raise CheckpointError(path, f"auto_depth: start {show(start, 40)} {problem}; name one of {', '.join(rungs)}, "
                                "or delete it to start on the smallest")


def _submodel_from_entry(entry: dict, cfg: ModelConfig, parent: Submodel, path) -> Submodel:
    name = entry["name"]

    def fail(problem):
        raise CheckpointError(path, f"submodel {name!r}: {problem}")

    hidden = entry.get("hidden_size", cfg.hidden_size)
    if isinstance(hidden, list):
        fail("hidden_size must be one number (the residual stream has one width)")
    if not isinstance(hidden, int) or isinstance(hidden, bool) or not 0 < hidden <= cfg.hidden_size:
        fail(f"hidden_size {show(hidden, 60)} must be a whole number in 1..{cfg.hidden_size} (the parent's); "
             "a submodel is a leading slice of the parent")
    widths = {}
    for field, kind in PER_LAYER_FIELDS.items():
        value = entry.get(field, getattr(parent, field)[0])
        values = value if isinstance(value, list) else [value] * cfg.num_layers
        if len(values) != cfg.num_layers:
            fail(f"{field} lists {len(values)} values but the model has {cfg.num_layers} layers")
        if value is None:
            fail(f"{field} is null; leave it out to keep the parent's width")
        for i in cfg.layers_of(kind):
            v, limit = values[i], getattr(parent, field)[i]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= limit:
                where = f" at layer {i}" if isinstance(value, list) else ""
                fail(f"{field} {show(v, 60)}{where} must be a whole number in 1..{limit} (the parent's); "
                     "a submodel is a leading slice of the parent")
            if field == "mamba_num_heads" and v % cfg.n_groups:
                fail(f"mamba_num_heads {v} is not divisible by n_groups ({cfg.n_groups}); "
                     "heads are kept per group")
            if field == "n_routed_experts":
                _check_experts(v, cfg, fail)
        # Non-applicable layers keep the parent's value so tuples stay comparable.
        widths[field] = tuple(
            values[i] if cfg.layer_types[i] == kind else getattr(parent, field)[i] for i in range(cfg.num_layers)
        )
    return Submodel(name=name, hidden_size=hidden, **widths)


def _check_experts(e: int, cfg: ModelConfig, fail) -> None:
    if e < cfg.num_experts_per_tok:
        fail(f"n_routed_experts {e} is fewer than num_experts_per_tok ({cfg.num_experts_per_tok})")
    if e % cfg.n_group:
        fail(f"n_routed_experts {e} is not divisible by n_group ({cfg.n_group})")
    per_group = e // cfg.n_group
    if cfg.n_group > 1 and (per_group < 2 or per_group * cfg.topk_group < cfg.num_experts_per_tok):
        fail(f"n_routed_experts {e} leaves too few experts per routing group for top-{cfg.num_experts_per_tok}")


def load_elastic(folder: Path, cfg: ModelConfig, override: dict | None = None) -> list[Submodel]:
    """Submodels of a checkpoint: `override` (from the app's catalog), else `elastic.json`,
    else just the parent."""
    path = Path(folder) / "elastic.json"
    if override is not None:
        return parse_elastic(override, cfg, "elastic table from the catalog")
    if path.exists():
        return parse_elastic(read_json(path), cfg, path)
    return [parent_submodel(cfg)]
