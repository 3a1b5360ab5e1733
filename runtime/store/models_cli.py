"""`python -m runtime models ...`: probe, list, download, verify, import, delete (a contract).

`download` prints progress lines and exits 0 only when every file is complete and verified.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from ..errors import UsageError, one_line
from ..options import CONTEXT, STALL_SECONDS, add_flag
from ..placement import ExpertPlacement
from ..units import GiB, format_bytes
from .nesting import cli as nesting_cli


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="hardware probe and model manager")
    m = p.add_subparsers(dest="models_command", required=True)
    q = m.add_parser("probe", help="GPU, RAM and disk, and which checkpoints fit")
    q.add_argument("--json", action="store_true", help="the raw probe as JSON")
    add_flag(q, CONTEXT, help="context length to plan for")
    q.add_argument("--cpu-experts", default="auto", metavar="PLACEMENT",
                   help="plan this placement of routed experts in RAM on the GPU (none, all, N, nested:SUBMODEL); "
                        "auto: every candidate where the parent does not fit, the proposed one marked")
    m.add_parser("list", help="checkpoints on this PC and in the catalog")
    d = m.add_parser("download", help="download a checkpoint from the hub (resumable)")
    d.add_argument("repo")
    d.add_argument("--revision")
    d.add_argument("--dest", type=Path, help="folder (default: the models folder)")
    add_flag(d, STALL_SECONDS)
    v = m.add_parser("verify", help="check a checkpoint folder's files and tensors")
    v.add_argument("folder", type=Path)
    i = m.add_parser("import", help="register a checkpoint folder already on disk")
    i.add_argument("folder", type=Path)
    i.add_argument("--name")
    r = m.add_parser("delete", help="delete a downloaded checkpoint (imported ones are only forgotten)")
    r.add_argument("name")
    nesting_cli.add_parser(m)


def run(args) -> int:
    # Numbers were range-checked with every other flag (cli.check_values).
    return {"probe": _probe, "list": _list, "download": _download, "verify": _verify, "import": _import,
            "delete": _delete, "nesting": nesting_cli.run}[args.models_command](args)


def _probe(args) -> int:
    from ..paths import models_dir
    from .catalog import load_catalog
    from .hardware import probe
    from .planner import make_plan

    hw = probe(models_dir())
    if args.json:
        print(hw.to_json())
        return 0
    asked = None if args.cpu_experts.strip().lower() == "auto" else ExpertPlacement.parse(args.cpu_experts).spec
    plan = make_plan(hw, load_catalog(), args.context, placement=asked)
    print(hw.summary())
    print(f"Default: {plan.default}. {plan.default_reason}")
    for v in plan.variants:
        print(f"\n{v.title} [{v.variant}]: {v.compute_path}" + (f"; {v.disk_reason}" if v.disk_reason else ""))
        for f in v.submodels:
            print(f"  {f.verdict:>12}  {f.reason}")
        if v.placements:
            print("  routed experts in RAM (--cpu-experts), best first" +
                  (f"; proposed: {v.placement}" if v.placement else "; none proposed") + ":")
        for p in v.placements:
            print(f"  {p.verdict:>12}  {p.placement}: {p.reason}")
    return 0


def _list(args) -> int:
    from ..paths import models_dir
    from .catalog import load_catalog
    from .model_store import list_models

    local = list_models()
    print(f"Models folder: {one_line(str(models_dir()))}")
    for m in local:  # every field through one_line: names and problems may hold a folder's hostile text
        state = "ready" if not m.problem else m.problem
        print(one_line(f"  {m.name:40} {m.source:10} {m.format:9} {_size(m.size_bytes):>9}  "
                       f"{'/'.join(m.submodels) or '-':16} {state}", 2000))
    print("Catalog:")
    for v in load_catalog().variants:
        if not v.bundled:
            print(f"  {v.id:40} {v.repo}  ~{format_bytes(v.approx_size_bytes or 0)}  {v.licence.get('name', '')}")
    return 0


def _size(n: int) -> str:
    return format_bytes(n, digits=2)


def _download(args) -> int:
    from ..paths import models_dir
    from .download.destination import check_destination
    from .download.transfer import DONE, Download, hub_token, resolve
    from .model_store import download_dir

    dest = args.dest or download_dir(args.repo)
    if args.dest and Path(args.dest).resolve() == models_dir().resolve():
        raise UsageError(f"--dest is the models folder itself; give a folder inside it, or leave --dest out "
                         f"(it downloads to {download_dir(args.repo)})")
    check_destination(dest, models_dir())  # the user's to fill, before the hub is asked
    remote = resolve(args.repo, args.revision)
    print(f"{args.repo} at {remote.revision[:12]}: {len(remote.files)} files, {_size(remote.total_bytes)} "
          f"-> {dest}", flush=True)
    printer = _ProgressPrinter()
    job = Download(remote, dest, printer, stall_seconds=args.stall_seconds, token=hub_token())
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda *_: job.pause())  # Ctrl+C keeps the partial file for a resume
    try:
        final = job.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    printer(final, force=True)
    if final.state != DONE:
        print(f"error: download {final.state}: run the same command again to resume", file=sys.stderr)
        return 1
    return 0


class _ProgressPrinter:
    """One line per state change and at most two per second while bytes flow."""

    def __init__(self):
        self.last_state, self.last_time = None, 0.0

    def __call__(self, p, force: bool = False):
        now = time.monotonic()
        if not force and p.state == self.last_state and now - self.last_time < 0.5:
            return
        self.last_state, self.last_time = p.state, now
        speed = f"{format_bytes(p.speed_bps, 'MiB')}/s" if p.speed_bps else "-"
        eta = f"ETA {int(p.eta_s) // 60}m{int(p.eta_s) % 60:02d}s" if p.eta_s is not None else ""
        done = f"{p.done_bytes / GiB:.2f}/{format_bytes(p.total_bytes, 'GiB', 2)}"
        line = (f"{p.state:11} {100 * p.fraction:5.1f}%  {done}  "
                f"{speed:>10} {eta:>11}  {p.file}")
        print(one_line(line + (f"  ({p.message})" if p.message else ""), 2000), flush=True)


def _verify(args) -> int:
    from .model_store import verify

    if not args.folder.is_dir():
        raise UsageError(f"{one_line(str(args.folder))} is not a folder; pass a checkpoint folder")
    report = verify(args.folder)
    for problem in report.problems:
        print(f"problem: {one_line(problem)}")
    print(one_line(report.summary, 2000))
    return 0 if report.ok else 1


def _import(args) -> int:
    from .model_store import import_folder

    m = import_folder(args.folder, args.name)
    print(json.dumps({"name": m.name, "path": str(m.path), "format": m.format, "submodels": list(m.submodels)}))
    return 0


def _delete(args) -> int:
    from .model_store import delete

    if not args.name.strip():
        raise UsageError("name a model to delete")
    print(delete(args.name))
    return 0
