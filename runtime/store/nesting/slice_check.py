"""Checking a checkpoint on this PC against a sliced checkpoint, and recording what was proved.

The model manager's "Verify nesting…", the check that ends a download of an official checkpoint
and `models nesting --write` share this: open the slice (a folder, or a hub repo read by Range
requests), `nesting.discover`, and for a verified slice `nesting.write_verified` with where the
slice came from and the table the folder ran with (so the catalog's other estimates are kept,
still estimated). A refused slice writes nothing.

For the app, `check_slice` never raises for a slice it cannot read (a hub that cannot be
reached, a folder that is not a checkpoint, a cancel): the verdict carries the reason, and the
folder's states stay as they were.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path

from ...checkpoint.config import ModelConfig, read_json
from ...checkpoint.submodel_table import VERIFIED
from ...checkpoint.submodels import load_elastic
from ...errors import ElasticError, one_line
from .discover import WIDTH_FIELDS, NestingReport, discover, write_verified
from .tensor_source import FolderSource, HubSource, ReadCancelled, TensorSource, open_source


@dataclass(frozen=True)
class SliceVerdict:
    slice: str  # as asked: a folder or a hub repo id
    label: str  # as read: the folder, or repo@commit ("" when it could not be opened)
    report: NestingReport | None  # None when nothing was compared
    slice_bytes: int = 0  # bytes read from the slice (the hub's share, for a repo)
    written: Path | None = None  # the elastic.json that now records the verified submodel
    error: str = ""  # why nothing was compared, in one line
    cancelled: bool = False
    hub: bool = False  # the slice was read from a hub repo

    @property
    def verified(self) -> bool:
        return self.report is not None and self.report.verified and self.written is not None


def slice_source(piece: TensorSource) -> dict:
    """Where a verified slice came from, as elastic.json records it."""
    if isinstance(piece, HubSource):
        return {"repo": piece.repo, "revision": piece.revision}
    return {"path": str(Path(piece.label).resolve())}


def record_verified(folder, report: NestingReport, piece: TensorSource, catalog=None) -> Path:
    """Writes a verified slice into the folder's elastic.json (`nesting.write_verified`), starting
    from the table the folder runs with."""
    from ..folder_lock import holder
    from ..submodel_tables import folder_table

    busy = holder(Path(folder))
    if busy:
        raise ElasticError(f"a {busy} is writing to {folder}; check the nesting again when it has finished")
    return write_verified(folder, report, slice_source(piece), folder_table(folder, catalog))


def check_slice(folder, where: str, revision: str | None = None, name: str | None = None,
                stop: threading.Event | None = None, on_read=None, catalog=None) -> SliceVerdict:
    """Verifies `where` (a folder or a hub repo id) against the checkpoint `folder` and records a
    verified submodel. Without `name`, a submodel whose widths the slice proves keeps its name.
    `stop`: set from another thread to cancel; `on_read(total_bytes)` reports progress."""
    where = str(where).strip()
    if not where or len(where) > 4096 or not where.isprintable():
        return SliceVerdict(one_line(where, 200), "", None, error="give a hub repo id (owner/name) or a folder")
    parent = piece = None
    total, lock = [0], threading.Lock()

    def counted(n: int) -> None:
        with lock:
            total[0] += n
            now = total[0]
        if on_read is not None:
            on_read(now)

    try:
        parent = FolderSource(folder)
        parent.stop, parent.on_read = stop, counted
        if stop is not None and stop.is_set():
            raise ReadCancelled("the nesting check was cancelled")
        piece = open_source(where, revision, stop)
        piece.stop, piece.on_read = stop, counted
        report = discover(parent, piece, name)
        if report.verified and name is None:
            report = _keep_known_name(folder, report, catalog)
        written = record_verified(folder, report, piece, catalog) if report.verified else None
        return SliceVerdict(where, piece.label, report, piece.bytes_read, written, hub=isinstance(piece, HubSource))
    except ReadCancelled:
        return SliceVerdict(where, piece.label if piece else "", None, piece.bytes_read if piece else 0,
                            error="cancelled; nothing was written", cancelled=True)
    except (ElasticError, OSError) as e:
        return SliceVerdict(where, piece.label if piece else "", None, piece.bytes_read if piece else 0,
                            error=one_line(str(e), 400))


def _keep_known_name(folder, report: NestingReport, catalog) -> NestingReport:
    """The report renamed after the folder's submodel with the very widths it proved, if there is one."""
    from ..submodel_tables import folder_table

    folder = Path(folder)
    try:
        cfg = ModelConfig.from_dict(read_json(folder / "config.json"), folder / "config.json")
        subs = load_elastic(folder, cfg, folder_table(folder, catalog).elastic)
    except ElasticError:
        return report
    widths = [getattr(report.submodel, f) for f in WIDTH_FIELDS]
    same = next((s for s in subs[1:] if [getattr(s, f) for f in WIDTH_FIELDS] == widths), None)
    if same is None:
        return report
    return replace(report, name=same.name, submodel=replace(report.submodel, name=same.name))


def catalog_slices(folder, catalog=None) -> tuple:
    """The catalog's published slices (`CatalogSlice`) for the family `folder` is a copy of."""
    from ..submodel_tables import folder_family

    try:
        family = folder_family(folder, catalog)
    except ElasticError:
        return ()
    return family.slices if family is not None else ()


def check_catalog_slices(folder, catalog=None, stop: threading.Event | None = None, on_read=None) -> list[SliceVerdict]:
    """Checks `folder` against each of its family's published slices whose submodel is not verified
    yet (after a download). One verdict per slice tried; a hub that cannot be reached is a verdict
    with its error, never an exception."""
    from ..submodel_tables import folder_table

    out = []
    for s in catalog_slices(folder, catalog):
        try:
            if folder_table(folder, catalog).state(s.submodel) == VERIFIED:
                continue
        except ElasticError as e:
            return out + [SliceVerdict(s.repo, "", None, error=one_line(str(e), 400))]
        out.append(check_slice(folder, s.repo, name=s.submodel, stop=stop, on_read=on_read, catalog=catalog))
        if out[-1].cancelled:
            break
    return out
