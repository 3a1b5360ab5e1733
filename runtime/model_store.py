"""The checkpoints on this PC: downloaded ones in the models folder, folders the user imported
(left where they are), and the bundled demo. List, verify, import, delete.

Folders: ELASTIC_CHAT_HOME overrides the user data folder (tests use it), ELASTIC_CHAT_MODELS
the models folder; otherwise the platform's standard place.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .catalog import load_catalog
from .config import ModelConfig, read_json
from .downloads import MANIFEST, git_blob_sha1, read_manifest, sha256_of
from .elastic import load_elastic
from .errors import CheckpointError, ElasticError, UsageError
from .quant import read_quant_spec
from .safetensors_io import tensor_table
from .weights import check_tensor_table

IMPORTED = "imported.json"


def data_dir() -> Path:
    if os.environ.get("ELASTIC_CHAT_HOME"):
        return Path(os.environ["ELASTIC_CHAT_HOME"])
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "ElasticChat"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "Elastic Chat"
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "elastic-chat"


def models_dir() -> Path:
    return Path(os.environ["ELASTIC_CHAT_MODELS"]) if os.environ.get("ELASTIC_CHAT_MODELS") else data_dir() / "models"


def download_dir(repo: str) -> Path:
    return models_dir() / repo.replace("/", "--")


@dataclass(frozen=True)
class LocalModel:
    name: str
    path: Path
    source: str  # "downloaded", "imported" or "bundled"
    repo: str | None
    format: str  # "NVFP4", "FP8" or "BF16/FP32"
    size_bytes: int
    complete: bool  # every file present (a download may be partial)
    submodels: tuple[str, ...]
    problem: str = ""  # why it cannot be used, if it cannot


@dataclass(frozen=True)
class VerifyReport:
    folder: Path
    ok: bool
    checked: int  # files whose hash was checked
    problems: tuple[str, ...]


def describe(folder: Path, source: str, name: str | None = None) -> LocalModel:
    folder = Path(folder)
    manifest = read_manifest(folder)
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    complete = manifest.get("complete", True) if manifest else True
    try:
        raw = read_json(folder / "config.json")
        cfg = ModelConfig.from_dict(raw, folder / "config.json")
        quant = read_quant_spec(folder, raw)
        subs = tuple(s.name for s in load_elastic(folder, cfg))
        fmt, problem = (quant.algo if quant else "BF16/FP32"), ""
    except ElasticError as e:
        subs, fmt, problem = (), "?", str(e)
    if manifest and not manifest.get("complete"):
        problem = problem or "the download is not finished; run it again to resume"
    return LocalModel(name or folder.name, folder, source, manifest.get("repo"), fmt, size, complete, subs, problem)


def list_models() -> list[LocalModel]:
    out = []
    for v in load_catalog().variants:
        if v.bundled and v.path.exists():
            out.append(describe(v.path, "bundled", v.id))
    root = models_dir()
    if root.exists():
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if (folder / "config.json").exists() or (folder / MANIFEST).exists():
                out.append(describe(folder, "downloaded"))
    for entry in _imported():
        path = Path(entry["path"])
        if path.exists():
            out.append(describe(path, "imported", entry["name"]))
        else:
            out.append(LocalModel(entry["name"], path, "imported", None, "?", 0, False, (),
                                  "the folder no longer exists; delete the entry or import it again"))
    return out


def find(name: str) -> LocalModel:
    for m in list_models():
        if m.name == name or str(m.path) == name:
            return m
    raise UsageError(f"no model called {name!r}; `python -m runtime models list` shows them")


def verify(folder: Path) -> VerifyReport:
    """Checks a checkpoint folder: hashes recorded at download (or the hub's, if known), the
    config, the tensors against it, and the elastic table."""
    folder = Path(folder)
    problems, checked = [], 0
    manifest = read_manifest(folder)
    for path, entry in manifest.get("files", {}).items():
        f = folder / path
        if not f.exists():
            problems.append(f"{path} is missing")
            continue
        if f.stat().st_size != entry.get("size"):
            problems.append(f"{path} has {f.stat().st_size} bytes, expected {entry.get('size')}")
            continue
        if entry.get("sha256"):
            checked += 1
            if sha256_of(f) != entry["sha256"]:
                problems.append(f"{path} does not match its SHA-256: the file is damaged; download it again")
        elif entry.get("git_sha1"):
            checked += 1
            if git_blob_sha1(f) != entry["git_sha1"]:
                problems.append(f"{path} does not match its git hash: the file is damaged; download it again")
    if manifest and not manifest.get("complete"):
        problems.append("the download is not finished; run it again to resume")
    try:
        raw = read_json(folder / "config.json")
        cfg = ModelConfig.from_dict(raw, folder / "config.json")
        quant = read_quant_spec(folder, raw)
        check_tensor_table(cfg, tensor_table(folder), folder, quant)
        load_elastic(folder, cfg)
    except ElasticError as e:
        problems.append(str(e))
    return VerifyReport(folder, not problems, checked, tuple(problems))


def import_folder(folder: Path, name: str | None = None) -> LocalModel:
    """Registers a checkpoint folder already on disk (it stays where it is) after verifying it."""
    folder = Path(folder).resolve()
    if not (folder / "config.json").exists():
        raise CheckpointError(folder, "has no config.json: not a checkpoint folder")
    report = verify(folder)
    if not report.ok:
        raise CheckpointError(folder, "cannot be imported: " + "; ".join(report.problems))
    name = name or folder.name
    taken = {m.name for m in list_models()}
    entries = _imported()
    if any(Path(e["path"]) == folder for e in entries):
        return describe(folder, "imported", next(e["name"] for e in entries if Path(e["path"]) == folder))
    if name in taken:
        raise UsageError(f"a model called {name!r} already exists; pass another name")
    entries.append({"name": name, "path": str(folder)})
    _save_imported(entries)
    return describe(folder, "imported", name)


def delete(name: str) -> str:
    """Deletes a downloaded model's folder, or forgets an imported one (its files are kept).
    The caller has asked the user to confirm."""
    model = find(name)
    if model.source == "bundled":
        raise UsageError("the bundled demo model cannot be deleted")
    if model.source == "imported":
        _save_imported([e for e in _imported() if e["name"] != model.name])
        return f"forgot {model.name}; its files in {model.path} were left untouched"
    if model.path.resolve().parent != models_dir().resolve():
        raise UsageError(f"{model.path} is not inside the models folder; refusing to delete it")
    shutil.rmtree(model.path)
    return f"deleted {model.name} ({model.size_bytes / 1e9:.2f} GB) from {model.path}"


def _imported() -> list[dict]:
    path = models_dir() / IMPORTED
    try:
        data = json.loads(path.read_text())
        return [e for e in data if isinstance(e, dict) and "name" in e and "path" in e]
    except FileNotFoundError:
        return []
    except (OSError, json.JSONDecodeError, TypeError):
        raise UsageError(f"{path} is damaged; fix or remove it (it only lists imported folders)") from None


def _save_imported(entries: list[dict]) -> None:
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (IMPORTED + ".tmp")
    tmp.write_text(json.dumps(entries, indent=2) + "\n")
    os.replace(tmp, root / IMPORTED)
