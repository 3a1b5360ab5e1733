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
  submodel can be chosen, but never thinks by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import ModelConfig, read_json

VERIFIED, DECLARED, ESTIMATED = "verified", "declared", "estimated"
# Config fields that must agree before a folder is taken for a catalog family.
FAMILY_KEYS = ("hidden_size", "layer_types", "vocab_size", "num_attention_heads", "num_key_value_heads",
               "mamba_num_heads", "n_groups", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")


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


def submodel_table(folder, cfg: ModelConfig, catalog=None) -> SubmodelTable:
    """The table `folder` runs with: its elastic.json, else the catalog family it belongs to, else
    the parent alone."""
    folder = Path(folder)
    path = folder / "elastic.json"
    if path.exists():
        data = read_json(path)
        entries = data.get("submodels") if isinstance(data.get("submodels"), list) else []
        states = {}
        for i, e in enumerate(entries):
            if isinstance(e, dict) and isinstance(e.get("name"), str):
                states[e["name"]] = VERIFIED if i == 0 or isinstance(e.get("verified"), dict) else DECLARED
        return SubmodelTable(None, states, "the checkpoint's elastic.json")
    family = _family_of(folder, cfg, catalog)
    if family is None:
        return SubmodelTable(None, {}, "config.json alone (no nested submodels)")
    entries = family.elastic["submodels"]
    states = {e["name"]: VERIFIED if i == 0 else ESTIMATED for i, e in enumerate(entries)}
    return SubmodelTable(family.elastic, states, f"the catalog's estimate for {family.title}")


def _family_of(folder: Path, cfg: ModelConfig, catalog):
    if catalog is None:
        from .catalog import load_catalog

        catalog = load_catalog()
    repo = _downloaded_from(folder)
    if repo:
        variant = catalog.for_repo(repo)
        if variant is not None and variant.family:
            return catalog.families[variant.family]
    for family in catalog.families.values():
        if all(getattr(family.config, k) == getattr(cfg, k) for k in FAMILY_KEYS):
            return family
    return None


def _downloaded_from(folder: Path) -> str | None:
    from .downloads import read_manifest

    repo = read_manifest(folder).get("repo")
    return repo if isinstance(repo, str) else None


def folder_table(folder, catalog=None) -> SubmodelTable:
    """`submodel_table` for a folder, reading its config."""
    folder = Path(folder)
    cfg = ModelConfig.from_dict(read_json(folder / "config.json"), folder / "config.json")
    return submodel_table(folder, cfg, catalog)
