"""The checkpoints on this PC: downloaded ones in the models folder, folders the user imported
(left where they are), and the bundled demo. List, verify, import, delete.

Every folder and every `imported.json` entry is read on its own: one that is damaged shows up as
one entry with one line saying what is wrong, and never stops the others from being listed, used
or deleted. "Ready" and `verify` run the loader's own checks (`_check_loadable`), so a folder that
passes them loads.

The models folder is `runtime.paths.models_dir()` (ELASTIC_CHAT_MODELS, else the data folder's models/).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint.check import read_model_files
from ..errors import CheckpointError, ElasticError, UsageError, one_line, show
from ..json_file import JsonFileError, read_json_file
from ..paths import models_dir
from ..units import format_bytes
from .catalog import load_catalog
from .download.hub_files import check_repo_id
from .download.record import LEGACY_MANIFEST, hash_mismatch, read_manifest, record_path
from .folder_lock import FolderBusy, FolderLock, holder
from .remote_names import is_link, open_no_follow, target_path

IMPORTED = "imported.json"
MAX_IMPORTED_BYTES = 16 << 20
LOADER_CHECKS = ("config.json, elastic.json, the quantization config and the safetensors headers "
                 "pass the loader's checks")


def download_dir(repo: str) -> Path:
    return models_dir() / check_repo_id(repo).replace("/", "--")


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
    problem: str = ""  # why it cannot be used, if it cannot (one line)


@dataclass(frozen=True)
class VerifyReport:
    folder: Path
    ok: bool
    checked: int  # files whose hash was checked
    problems: tuple[str, ...]
    recorded: int = 0  # files with a hash in the download record (0: not downloaded by Elastic Chat)

    @property
    def summary(self) -> str:
        """One line saying what was checked, for the CLI and the model manager."""
        if not self.ok:
            n = len(self.problems)
            return f"FAILED: {self.folder} ({n} problem{'s' if n != 1 else ''}; {self.checked} file hashes checked)"
        if not self.recorded:
            return (f"ok: {self.folder} (no file hashes were recorded for this folder: it was not downloaded by "
                    f"Elastic Chat, so file contents were not compared; {LOADER_CHECKS})")
        return f"ok: {self.folder} ({self.checked} of {self.recorded} recorded file hashes match; {LOADER_CHECKS})"


# ----------------------------------------------------------------------------- what loading checks

def _check_loadable(folder: Path) -> None:
    """Exactly what `ElasticModel.load` checks before it reads any tensor data (one function for
    both: checkpoint/check.py). Raises an ElasticError (one line) naming the file."""
    from ..checkpoint.check import check_checkpoint
    from .submodel_tables import folder_table

    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(folder, "not a folder")
    check_checkpoint(folder, folder_table(folder).elastic)


def _problem(fn, folder: Path) -> str:
    """'' when `fn()` passes, else one line. A damaged file may still trip an unexpected error
    in a reader; that is reported as damage, never as a traceback, and never stops the others."""
    try:
        fn()
        return ""
    except ElasticError as e:
        return one_line(str(e))
    except OSError as e:
        return one_line(f"{e.filename or folder}: cannot be read ({e.strerror or type(e).__name__})")
    except Exception as e:  # hostile bytes reaching a reader's blind spot
        return one_line(f"{folder}: its files are damaged and cannot be read ({type(e).__name__}: {e})")


# ----------------------------------------------------------------------------- listing

def describe(folder: Path, source: str, name: str | None = None) -> LocalModel:
    folder = Path(folder)
    name = one_line(name or folder.name, 200)
    try:
        manifest, record_problem = read_manifest(folder), ""
    except ElasticError as e:
        manifest, record_problem = {}, one_line(str(e))
    fmt, subs = "?", ()

    def summary():
        nonlocal fmt, subs
        _, _, quant, submodels = read_model_files(folder)
        subs = tuple(s.name for s in submodels)
        fmt = quant.algo if quant else "BF16/FP32"

    problem = _problem(summary, folder) or _problem(lambda: _check_loadable(folder), folder)
    busy = holder(folder)
    if busy:
        problem = f"a {busy} is writing to it"
    elif record_problem:
        problem = record_problem
    elif manifest and not manifest.get("complete"):
        problem = "the download is not finished; run it again to resume"
    complete = bool(manifest.get("complete", True)) and not record_problem
    return LocalModel(name, folder, source, manifest.get("repo"), fmt, _size_of(folder), complete, subs, problem)


def _size_of(folder: Path) -> int:
    total = 0
    for top, _dirs, files in os.walk(folder, onerror=lambda e: None):  # never follows links
        for n in files:
            try:
                st = os.lstat(os.path.join(top, n))
            except OSError:
                continue
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def _damaged(name: str, path: Path, source: str, problem: str) -> LocalModel:
    return LocalModel(one_line(name, 200), path, source, None, "?", 0, False, (), one_line(problem))


def list_models() -> list[LocalModel]:
    out = []
    for v in load_catalog().variants:
        if v.bundled and v.path.exists():
            out.append(_guarded(lambda v=v: describe(v.path, "bundled", v.id), v.id, v.path, "bundled"))
    root = models_dir()
    try:
        folders = sorted(p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir())
    except FileNotFoundError:
        folders = []
    except OSError as e:
        folders = []
        out.append(_damaged(root.name, root, "downloaded", f"{root}: cannot be read ({e.strerror})"))
    for folder in folders:
        if any(p.exists() or p.is_symlink() for p in (folder / "config.json", record_path(folder),
                                                      folder / LEGACY_MANIFEST)):
            out.append(_guarded(lambda f=folder: describe(f, "downloaded"), folder.name, folder, "downloaded"))
    out.extend(_imported_models())
    return out


def name_of(folder: Path | str) -> str:
    """The name the models list gives `folder` (an import may be "demo-2" for a folder called "demo"), or
    the folder's own name when it is not listed: what the window calls a loaded model everywhere."""
    folder = Path(folder).resolve()
    try:
        listed = next((m.name for m in list_models() if Path(m.path).resolve() == folder), None)
    except (ElasticError, OSError):  # a damaged catalog or models folder: the load itself went well
        listed = None
    return listed or folder.name


def _guarded(fn, name: str, path: Path, source: str) -> LocalModel:
    try:
        return fn()
    except Exception as e:  # one damaged folder never hides the others
        return _damaged(name, path, source, f"{path}: cannot be read ({type(e).__name__}: {e})")


def find(name: str) -> LocalModel:
    for m in list_models():
        if m.name == name or str(m.path) == name:
            return m
    raise UsageError(f"no model called {show(name)}; `python -m runtime models list` shows them")


# ----------------------------------------------------------------------------- imported folders

def _imported_file() -> Path:
    return models_dir() / IMPORTED


def _read_imported() -> list:
    """The raw list in imported.json ([] when there is none); UsageError (one line) when it is damaged
    as a whole. Entries are checked one by one by `_entry`."""
    path = _imported_file()
    try:
        return read_json_file(path, MAX_IMPORTED_BYTES, kind=list)
    except FileNotFoundError:
        return []
    except JsonFileError as e:
        raise UsageError(f"{path} is damaged ({one_line(str(e), 120)}); fix or remove it: it only lists "
                         "imported folders, whose files are untouched") from None


def _entry(i: int, e) -> tuple[str, Path | None, str]:
    """(name, folder, problem) of entry `i`; a damaged one gets a name `models delete` accepts."""
    name = e.get("name") if isinstance(e, dict) else None
    if not isinstance(name, str) or _name_problem(name):
        name = f"imported-entry-{i + 1}"
        return name, None, (f"entry {i + 1} of {_imported_file()} is damaged (no usable name); "
                            f"`models delete {name}` removes it")
    path = e.get("path")
    if not isinstance(path, str) or not path or "\0" in path or len(path) > 4096 or not os.path.isabs(path):
        return name, None, (f"entry {i + 1} of {_imported_file()} is damaged (no usable folder path); "
                            f"`models delete {name}` removes it")
    return name, Path(path), ""


def free_name(wanted: str, taken: set[str]) -> str:
    """`wanted`, or the first of "wanted-2", "wanted-3", ... no model has: a folder is named after what it
    holds, so a copy of the demo is often called "demo" (the window has no --name to ask for)."""
    if wanted not in taken:
        return wanted
    stem = wanted[:94]  # room for "-" and a number within the name's 100 characters
    return next(f"{stem}-{i}" for i in range(2, len(taken) + 3) if f"{stem}-{i}" not in taken)


def _name_problem(name: str) -> str:
    if not name.strip() or name != name.strip():
        return "is empty or starts or ends with a space"
    if len(name) > 100 or not name.isprintable():
        return "is longer than 100 characters or holds control characters"
    return ""


def _imported_models() -> list[LocalModel]:
    try:
        entries = _read_imported()
    except UsageError as e:
        return [_damaged(IMPORTED, _imported_file(), "imported", str(e))]
    out = []
    for i, e in enumerate(entries):
        name, path, problem = _entry(i, e)
        if problem:
            out.append(_damaged(name, _imported_file(), "imported", problem))
        elif not path.exists():
            out.append(_damaged(name, path, "imported",
                                "the folder no longer exists; delete the entry or import it again"))
        else:
            out.append(_guarded(lambda p=path, n=name: describe(p, "imported", n), name, path, "imported"))
    return out


def _save_imported(entries: list) -> None:
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (IMPORTED + ".tmp")
    tmp.unlink(missing_ok=True)  # never write through a link left under that name
    tmp.write_text(json.dumps(entries, indent=2) + "\n")
    os.replace(tmp, root / IMPORTED)


# ----------------------------------------------------------------------------- verify, import, delete

def verify(folder: Path) -> VerifyReport:
    """Checks a checkpoint folder: the hashes recorded at download (when it was downloaded here),
    then exactly what loading checks (`_check_loadable`). Never raises for a damaged folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return VerifyReport(folder, False, 0, (f"{folder} is not a folder",))
    problems, checked, recorded = [], 0, 0
    busy = holder(folder)
    if busy:
        problems.append(f"a {busy} is writing to it; verify again when it has finished")
    try:
        manifest = read_manifest(folder)
    except ElasticError as e:
        manifest = {}
        problems.append(one_line(str(e)))
    for path, entry in manifest.get("files", {}).items():
        recorded += bool(entry.get("sha256") or entry.get("git_sha1"))
        checked_one, problem = _verify_file(folder, path, entry)
        checked += checked_one
        if problem:
            problems.append(one_line(problem))
    if manifest and not manifest.get("complete"):
        problems.append("the download is not finished; run it again to resume")
    loadable = _problem(lambda: _check_loadable(folder), folder)
    if loadable:
        problems.append(loadable)
    return VerifyReport(folder, not problems, checked, tuple(problems), recorded)


def _verify_file(folder: Path, name: str, entry: dict) -> tuple[int, str]:
    """(1 if a hash was compared, the problem or '') for one file the record lists."""
    try:
        f = target_path(folder, name)  # refuses a link in the way: a check never reads outside the folder
        st = os.lstat(f)
    except FileNotFoundError:
        return 0, f"{show(name)} is missing"
    except (OSError, ElasticError) as e:
        return 0, str(e)
    if not stat.S_ISREG(st.st_mode):
        return 0, f"{show(name)} is not a plain file"
    if st.st_size != entry["size"]:
        return 0, f"{show(name)} has {st.st_size} bytes, expected {entry['size']}"
    if not (entry.get("sha256") or entry.get("git_sha1")):
        return 0, ""
    try:
        with os.fdopen(open_no_follow(f, os.O_RDONLY), "rb") as src:
            wrong = hash_mismatch(src, st.st_size, entry.get("sha256"), entry.get("git_sha1"))
    except (OSError, ElasticError) as e:
        return 0, f"{show(name)} cannot be read ({getattr(e, 'strerror', None) or e})"
    return 1, f"{show(name)} does not match its {wrong}: the file is damaged; download it again" if wrong else ""
    return 0, ""


def import_folder(folder: Path, name: str | None = None) -> LocalModel:
    """Registers a checkpoint folder already on disk (it stays where it is) after verifying it."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise CheckpointError(folder, "is not a folder")
    if not (folder / "config.json").exists():
        raise CheckpointError(folder, "has no config.json: not a checkpoint folder")
    if name is not None and _name_problem(name):
        raise UsageError(f"--name {show(name)} {_name_problem(name)}; choose a short plain name")
    report = verify(folder)
    if not report.ok:
        raise CheckpointError(folder, "cannot be imported: " + "; ".join(report.problems))
    entries = _read_imported()  # a damaged file is reported, never overwritten
    for i, e in enumerate(entries):
        n, path, problem = _entry(i, e)
        if not problem and path == folder:
            return describe(folder, "imported", n)
    taken = {m.name for m in list_models()}
    if name in taken:
        raise UsageError(f"a model called {show(name)} already exists; pass another name with --name")
    name = name or free_name(one_line(folder.name, 99), taken)  # with its "…", at most 100
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
        if model.name == IMPORTED and model.path == _imported_file():
            raise UsageError(f"{model.path} is damaged as a whole; fix or remove it yourself (it only lists "
                             "imported folders; their files are untouched)")
        entries = _read_imported()
        keep = [e for i, e in enumerate(entries) if _entry(i, e)[0] != model.name]
        _save_imported(keep)
        return f"forgot {model.name}; its files in {model.path} were left untouched"
    return _delete_download(model)


def _delete_download(model: LocalModel) -> str:
    path = model.path
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UsageError(f"{path} cannot be deleted: {e.strerror}") from None
    if is_link(st):
        raise UsageError(f"{path} is a link to a folder elsewhere; remove the link yourself (its target is not "
                         "deleted by Elastic Chat)")
    if path.resolve().parent != models_dir().resolve():
        raise UsageError(f"{path} is not inside the models folder; refusing to delete it")
    try:
        lock = FolderLock(path, "delete", wait_s=0.2).acquire()
    except FolderBusy as e:
        raise UsageError(f"{path} cannot be deleted now: {e}") from None
    except (OSError, ElasticError):
        lock = None  # an unwritable or damaged bookkeeping folder: nobody can be downloading into it
    try:
        if lock is not None and os.name == "nt":
            lock.release()  # Windows cannot delete a file that is open
        shutil.rmtree(path)
    except OSError as e:
        raise UsageError(f"{path} could not be deleted completely ({e.strerror or e}); close programs using it "
                         "and try again") from None
    finally:
        if lock is not None:
            lock.release()
    return f"deleted {model.name} ({format_bytes(model.size_bytes, digits=2)}) from {path}"
