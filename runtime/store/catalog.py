"""The models the app knows how to get: `assets/catalog.json` (data, not code).

Each variant is one downloadable checkpoint (NVFP4, FP8, BF16 of the same family) or the
bundled demo. A family carries the parent's config and an elastic table, so the fit planner
can size every submodel before anything is downloaded, and the sliced checkpoints published
for it (`slices`: a hub repo and the submodel it is), which the model manager checks a
downloaded parent against (`store/nesting/slice_check.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint.config import ATTENTION, MAMBA, ModelConfig
from ..checkpoint.submodels import Submodel, parse_elastic

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "assets" / "catalog.json"


@dataclass(frozen=True)
class Variant:
    id: str
    title: str
    format: str  # NVFP4, FP8, BF16
    repo: str | None  # hub repo id (None for the bundled demo)
    path: Path | None  # bundled checkpoint folder
    approx_size_bytes: int | None
    licence: dict
    fast_path: str
    fast_min_cc: tuple[int, int]
    fallback_path: str
    family: str | None
    default: bool = False

    @property
    def bundled(self) -> bool:
        return self.path is not None


class CatalogError(ValueError):
    """assets/catalog.json says something this version cannot use (a bug in the data)."""


@dataclass(frozen=True)
class CatalogSlice:
    repo: str  # hub repo id of a sliced checkpoint of this family's parent
    submodel: str  # the family's submodel it is (its name in the elastic table)
    about: str  # who made it and how, in one line


@dataclass(frozen=True)
class Family:
    id: str
    title: str
    about: str
    config: ModelConfig
    raw_config: dict
    elastic: dict
    submodels: tuple[Submodel, ...]
    note: str
    slices: tuple[CatalogSlice, ...] = ()


@dataclass(frozen=True)
class Catalog:
    variants: tuple[Variant, ...]
    families: dict[str, Family]

    def variant(self, key: str) -> Variant:
        for v in self.variants:
            if key in (v.id, v.repo):
                return v
        raise KeyError(key)

    def for_repo(self, repo: str) -> Variant | None:
        return next((v for v in self.variants if v.repo == repo), None)


def load_catalog(path: Path = CATALOG) -> Catalog:
    data = json.loads(Path(path).read_text())
    families = {}
    for fid, f in data["families"].items():
        cfg = ModelConfig.from_dict(f["config"], f"{path} ({fid})")
        subs = parse_elastic(f["elastic"], cfg, f"{path} ({fid})")
        families[fid] = Family(fid, f["title"], f.get("about", ""), cfg, f["config"], f["elastic"], tuple(subs),
                               f.get("elastic_note", ""), _slices(f.get("slices", []), subs, f"{path} ({fid})"))
    variants = []
    for v in data["variants"]:
        fam = families.get(v.get("family"))
        variants.append(Variant(
            id=v["id"], title=v.get("title") or f"{fam.title} ({v['format']})", format=v["format"], repo=v.get("repo"),
            path=(ROOT / "assets" / v["path"]) if v.get("path") else None, approx_size_bytes=v.get("approx_size_bytes"),
            licence=v.get("licence", {}), fast_path=v["fast_path"]["label"],
            fast_min_cc=tuple(v["fast_path"]["min_compute_capability"]), fallback_path=v["fallback_path"],
            family=v.get("family"), default=bool(v.get("default"))))
    return Catalog(tuple(variants), families)


def _slices(raw, subs: list[Submodel], where: str) -> tuple[CatalogSlice, ...]:
    """A family's `slices`, checked: each names a valid repo id and one of the family's nested
    submodels (not the parent), each repo once."""
    from .download.hub_files import DownloadError, check_repo_id

    if not isinstance(raw, list):
        raise CatalogError(f"{where}: 'slices' must be a list")
    names = [s.name for s in subs[1:]]
    out, seen = [], set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("repo", "submodel")):
            raise CatalogError(f"{where}: slice #{i + 1} needs 'repo' and 'submodel' strings")
        try:
            check_repo_id(entry["repo"])
        except DownloadError as e:
            raise CatalogError(f"{where}: slice #{i + 1}: {e}") from None
        if "/" not in entry["repo"] or entry["repo"] in seen:
            raise CatalogError(f"{where}: slice #{i + 1}: {entry['repo']!r} must be owner/name, listed once")
        if entry["submodel"] not in names:
            raise CatalogError(f"{where}: slice #{i + 1} is {entry['submodel']!r}, not one of the nested "
                               f"submodels {names}")
        seen.add(entry["repo"])
        out.append(CatalogSlice(entry["repo"], entry["submodel"], str(entry.get("about", ""))))
    return tuple(out)


def bf16_modules(cfg: ModelConfig) -> list[str]:
    """Module patterns NVIDIA's NemotronH exports keep in BF16: lm_head, the attention
    projections and the Mamba projections next to attention layers."""
    out = ["*lm_head*"]
    for i, kind in enumerate(cfg.layer_types):
        if kind == ATTENTION:
            out.append(f"*layers.{i}.mixer.*_proj*")
            for j in (i - 1, i + 1):
                if 0 <= j < cfg.num_layers and cfg.layer_types[j] == MAMBA:
                    out += [f"*layers.{j}.mixer.in_proj*", f"*layers.{j}.mixer.out_proj*"]
    return out
