"""Model management lives in runtime/store/; the inference core never imports it (issue 15)."""

import ast
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT

RUNTIME = ROOT / "runtime"
# The command line is the one place that joins the two: `models ...` and the table a checkpoint runs with.
GLUE = {"cli.py", "__main__.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in `path` names, relative imports resolved, lazy ones included."""
    package = ["runtime"] + list(path.relative_to(RUNTIME).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def core_files() -> list[Path]:
    return [p for p in RUNTIME.glob("*.py") if p.name not in GLUE]


def test_no_core_module_imports_the_store():
    offenders = {p.name: sorted(m for m in imported_modules(p) if m == "runtime.store" or m.startswith("runtime.store."))
                 for p in core_files()}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_an_import_of_the_store(tmp_path):
    # the scan itself must catch relative, absolute and lazy imports (a check that cannot fail is no check)
    for text in ("from .store import planner\n", "import runtime.store.catalog\n",
                 "def f():\n    from .store.downloads import Download\n"):
        probe = RUNTIME / "_probe_boundary.py"
        probe.write_text(text)
        try:
            assert any(m.startswith("runtime.store") for m in imported_modules(probe)), text
        finally:
            probe.unlink()


def test_loading_and_decoding_leave_the_store_unimported():
    names = sorted(p.stem for p in core_files() if p.stem != "__init__")
    code = ("import sys, importlib\n"
            f"for n in {names!r}: importlib.import_module('runtime.' + n)\n"
            "from runtime.engine import Engine\n"
            "e = Engine.load('assets/demo', device='cpu', max_context=256)\n"
            "print(sorted(m for m in sys.modules if m.startswith('runtime.store')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=RUNTIME.parent, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
