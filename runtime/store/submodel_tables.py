"""The submodel table a folder runs with, catalog estimates included (checkpoint/submodel_table.py says what
each state means): the folder's own elastic.json, else the catalog family it belongs to, else the
parent alone. The app, the command line and the server hand this table to the engine."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint.config import ModelConfig, read_json
from ..checkpoint.submodel_table import ESTIMATED, PARENT_ONLY, VERIFIED, SubmodelTable, own_table

# Config fields that must agree before a folder is taken for a catalog family.
FAMILY_KEYS = ("hidden_size", "layer_types", "vocab_size", "num_attention_heads", "num_key_value_heads",
               "mamba_num_heads", "n_groups", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")


def submodel_table(folder, cfg: ModelConfig, catalog=None) -> SubmodelTable:
    folder = Path(folder)
    own = own_table(folder)
    if own is not None:
        return own
    family = _family_of(folder, cfg, catalog)
    if family is None:
        return PARENT_ONLY
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
    from .download.transfer import read_manifest

    repo = read_manifest(folder).get("repo")
    return repo if isinstance(repo, str) else None


def folder_table(folder, catalog=None) -> SubmodelTable:
    """`submodel_table` for a folder, reading its config."""
    folder = Path(folder)
    cfg = ModelConfig.from_dict(read_json(folder / "config.json"), folder / "config.json")
    return submodel_table(folder, cfg, catalog)


def folder_family(folder, catalog=None):
    """The catalog family a folder is a copy of (by its download record, else its config); None if none."""
    folder = Path(folder)
    cfg = ModelConfig.from_dict(read_json(folder / "config.json"), folder / "config.json")
    return _family_of(folder, cfg, catalog)
