"""`python -m runtime models nesting CHECKPOINT_DIR --slice DIR_OR_REPO_ID` (a contract).

Prints the widths learned from the slice and the verdict; the last stdout line is one JSON
object {"name", "widths", "verified", "checked_tensors", "bytes_read"}. Exit 0 when the slice
is verified, 2 (with one `error:` line on stderr) when it does not nest or the input is bad.
With --write, a verified slice's submodel is added to (or corrected in) the checkpoint's
elastic.json, with where it came from (`slice_check.record_verified`, as the app does: a folder
running on the catalog's estimates keeps the others, still estimated).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def add_parser(models_sub) -> None:
    n = models_sub.add_parser("nesting", help="learn a submodel's widths from a sliced checkpoint and verify them")
    n.add_argument("checkpoint", type=Path, help="the parent checkpoint folder")
    n.add_argument("--slice", required=True, help="a sliced checkpoint: a folder or a hub repo id (owner/name)")
    n.add_argument("--revision", help="the slice repo's revision (default: main)")
    n.add_argument("--name", help="the submodel's name (default: from its parameter count, as '12B')")
    n.add_argument("--write", action="store_true", help="record a verified submodel in the checkpoint's elastic.json")


def run(args) -> int:
    from ...errors import ElasticError
    from .discover import discover
    from .slice_check import record_verified
    from .tensor_source import FolderSource, open_source

    parent = piece = None
    try:
        if args.name is not None and (not args.name.strip() or len(args.name) > 64 or not args.name.isprintable()):
            raise ElasticError("--name must be 1 to 64 printable characters")
        parent = FolderSource(args.checkpoint)
        piece = open_source(args.slice, args.revision)
        report = discover(parent, piece, args.name)
    except ElasticError as e:
        read = (parent.bytes_read if parent else 0) + (piece.bytes_read if piece else 0)
        print(json.dumps({"name": None, "widths": {}, "verified": False, "checked_tensors": 0, "bytes_read": read}))
        print(f"error: {e}", file=sys.stderr)
        return 2

    print(f"Slice {piece.label} in {parent.label}:")
    for field, value in report.widths.items():
        print(f"  {field:38} {value}")
    if report.verified:
        print(f"Verified: {report.name} nests in the parent ({report.checked_tensors} tensors compared, "
              f"{report.comparison}; {report.bytes_read:,} bytes read)")
        if args.write:
            try:
                path = record_verified(args.checkpoint, report, piece)
            except (ElasticError, OSError) as e:
                print(json.dumps(report.summary()))
                print(f"error: could not write elastic.json: {e}", file=sys.stderr)
                return 2
            print(f"Wrote {report.name} to {path}")
    print(json.dumps(report.summary()))
    if not report.verified:
        print(f"error: {report.problems[0]}", file=sys.stderr)
        return 2
    return 0
