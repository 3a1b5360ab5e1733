"""The CPU kernels' compiled library: where it lives, whether it is current, building and loading it.

    python -m runtime.kernels.cpu            build it unless a current build is there
    python -m runtime.kernels.cpu --force    build it again
    python -m runtime.kernels.cpu --status   say whether it is built, and what runs

The library is a torch C++ extension built from csrc/ against the installed torch with the
system's compiler (torch.utils.cpp_extension, ninja). It lives outside git, in the environment it
was built for: `<sys.prefix>/elastic-chat-kernels/cpu-<tag>/` (ELASTIC_CHAT_KERNELS_DIR instead of
`<sys.prefix>/elastic-chat-kernels`), with a `build.json` that records the compiler and the result.
The tag hashes the sources, the torch and Python versions and the platform, so a build of other
sources or for another torch is never loaded: it is stale, and the next build replaces it (a
changed compiler also rebuilds). The engine only loads; the installers build (a minute or two).

ELASTIC_CHAT_CPU_KERNELS=0 turns the kernels off (today's PyTorch path runs);
ELASTIC_CHAT_CPU_ISA=avx512|avx2|portable picks a code path this CPU runs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

SOURCES = Path(__file__).resolve().parent / "csrc"
FILES = ("ops.cpp", "work_pool.cpp", "isa_portable.cpp", "isa_avx2.cpp", "isa_avx512.cpp", "cpu_features.cpp")
HEADERS = ("kernels.h", "work_pool.h", "isa_x86.inc")
DIR_ENV, OFF_ENV, ISA_ENV = "ELASTIC_CHAT_KERNELS_DIR", "ELASTIC_CHAT_CPU_KERNELS", "ELASTIC_CHAT_CPU_ISA"
BUILD_SECONDS = 600  # a build that takes longer is stopped (it takes 1-2 min on 2 idle cores)
RECORD = "build.json"

_loaded: dict[str, object] = {}  # "module" and "problem", decided once per process (reset() forgets)
_imported: dict[Path, types.ModuleType] = {}  # a library file is imported once per process


def tag() -> str:
    """What a build is of: the sources, torch, Python and the platform."""
    h = hashlib.sha256()
    for name in sorted(FILES + HEADERS):
        h.update(name.encode() + b"\0" + (SOURCES / name).read_bytes() + b"\0")
    h.update(f"{torch.__version__}|{sys.version_info[:2]}|{sys.platform}|{platform.machine()}".encode())
    return h.hexdigest()[:16]


def root() -> Path:
    return Path(os.environ[DIR_ENV]) if os.environ.get(DIR_ENV) else Path(sys.prefix) / "elastic-chat-kernels"


def folder() -> Path:
    return root() / f"cpu-{tag()}"


def module_name() -> str:
    return f"elastic_cpu_{tag()}"


def _library_file(where: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES + [".so", ".pyd"]:
        path = where / (module_name() + suffix)
        if path.exists():
            return path
    return None


def read_record(where: Path | None = None) -> dict | None:
    try:
        return json.loads(((where or folder()) / RECORD).read_text())
    except (OSError, ValueError):
        return None


def compiler() -> str | None:
    """The C++ compiler a build would use, with its version line; None when there is none."""
    if sys.platform == "win32":
        found = shutil.which("cl")
        return "MSVC cl" if found else None
    name = os.environ.get("CXX", "c++")
    path = shutil.which(name)
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0].strip() if out.stdout else path
    except (OSError, subprocess.SubprocessError):
        return path


# ----------------------------------------------------------------------------- loading


def load() -> types.ModuleType | None:
    """The extension module, or None (then `problem()` says why). Loaded and self-tested once."""
    if "module" not in _loaded:
        module, problem = _load()
        _loaded["module"], _loaded["problem"] = module, problem
    return _loaded["module"]


def problem() -> str | None:
    """Why the CPU kernels cannot run here (one line), or None when they can."""
    load()
    return _loaded["problem"]


def dropped() -> list[str]:
    """The code paths that failed their self-test in this process ("avx512: what failed")."""
    load()
    return list(_loaded.get("dropped", []))


def reset() -> None:
    """Forget what was loaded (tests that turn the kernels off and on)."""
    _loaded.clear()


def _load() -> tuple[types.ModuleType | None, str | None]:
    if os.environ.get(OFF_ENV, "").strip() == "0":
        return None, f"turned off by {OFF_ENV}=0"
    where = folder()
    path = _library_file(where)
    record = read_record(where)
    if path is None:
        if record and not record.get("ok"):
            return None, f"not built: {record.get('error', 'the build failed')}"
        return None, "not built (installer/setup.sh builds it; or run python -m runtime.kernels.cpu)"
    try:
        module = _import(path)
    except Exception as e:  # a library that does not load (a torch upgrade without a rebuild, say)
        return None, f"the built library does not load ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    asked = os.environ.get(ISA_ENV, "").strip().lower()
    if asked:
        if asked not in module.isas():
            runs = ", ".join(module.isas())
            return None, f"{ISA_ENV}={asked} asked for a path this CPU does not run (it runs {runs})"
        module.set_isa(asked)
    from .self_test import first_good  # the chosen path must agree with the exact reference

    failed, _loaded["dropped"] = first_good(module)
    if failed is not None:
        return None, failed
    return module, None


def _import(path: Path) -> types.ModuleType:
    if path not in _imported:
        spec = importlib.util.spec_from_file_location(module_name(), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _imported[path] = module
    module = _imported[path]
    module.set_isa(module.isas()[0])  # the best path, until told otherwise
    return module


# ----------------------------------------------------------------------------- building


def build(force: bool = False, timeout: float = BUILD_SECONDS, verbose: bool = False) -> tuple[bool, str]:
    """Builds the library unless a current one is there. Returns (usable, one line to show)."""
    where = folder()
    found = compiler()
    record = read_record(where)
    current = _library_file(where) is not None and record and record.get("ok") and record.get("compiler") == found
    if current and not force:
        return True, f"CPU kernels already built ({where})"
    if found is None:
        why = ("no C++ compiler was found (the MSVC Build Tools on Windows, Xcode's command line tools on macOS, "
               "g++ on Linux)")
        _write_record(where, {"ok": False, "error": why, "compiler": None})
        return False, f"CPU kernels not built: {why}; the PyTorch path runs instead"
    if where.exists():
        shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cmd = [sys.executable, "-m", "runtime.kernels.cpu", "--child", str(where)]
    env = {**os.environ, "MAX_JOBS": str(os.cpu_count() or 1)}
    try:
        out = subprocess.run(cmd, capture_output=not verbose, text=True, timeout=timeout, env=env,
                             cwd=Path(__file__).resolve().parents[3])
        failed = out.returncode != 0
        detail = "" if not failed else _last_error(out.stderr or out.stdout or "")
    except subprocess.TimeoutExpired:
        failed, detail = True, f"it took longer than {timeout:.0f} s"
    seconds = time.monotonic() - started
    if failed or _library_file(where) is None:
        why = f"the build failed with {found}: {detail or 'no library was written'}"
        _write_record(where, {"ok": False, "error": why, "compiler": found, "seconds": round(seconds, 1)})
        return False, f"CPU kernels not built: {why}; the PyTorch path runs instead"
    _write_record(where, {"ok": True, "compiler": found, "seconds": round(seconds, 1), "torch": torch.__version__,
                          "sources": str(SOURCES)})
    _prune(where)
    reset()
    return True, f"CPU kernels built in {seconds:.0f} s with {found} ({where})"


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[0][:300]


def _write_record(where: Path, record: dict) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / RECORD).write_text(json.dumps({"tag": tag(), **record}, indent=1))


def _prune(keep: Path) -> None:
    """Removes earlier builds of these sources' checkout (other tags, same source folder)."""
    for other in keep.parent.glob("cpu-*"):
        record = read_record(other)
        if other != keep and record and record.get("sources") == str(SOURCES):
            shutil.rmtree(other, ignore_errors=True)


def _child(where: Path) -> None:
    """Runs in a child process (so a hung compiler can be stopped): compiles and links."""
    from torch.utils import cpp_extension

    msvc = sys.platform == "win32"
    flags = ["/O2"] if msvc else ["-O3", "-fno-math-errno"]  # torch adds its own C++ standard flag
    cpp_extension.load(name=module_name(), sources=[str(SOURCES / f) for f in FILES], extra_cflags=flags,
                       extra_include_paths=[str(SOURCES)], build_directory=str(where), verbose=True)


def status() -> str:
    module = load()
    if module is None:
        return f"CPU kernels off: {problem()}"
    return f"CPU kernels on: {module.isa()} (this CPU runs {', '.join(module.isas())}); {folder()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--force", action="store_true", help="build again even if a current build is there")
    p.add_argument("--status", action="store_true", help="only say whether the kernels are built and what runs")
    p.add_argument("--verbose", action="store_true", help="show the compiler's output")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(Path(args.child))
        return 0
    if args.status:
        print(status())
        return 0
    ok, line = build(force=args.force, verbose=args.verbose)
    print(line)
    if ok:
        print(status())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
