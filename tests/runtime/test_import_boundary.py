"""runtime/ is the engine: it must never import Qt or the GUI package."""

import ast
import subprocess
import sys

from tests.paths import ROOT

FORBIDDEN = ("PySide6", "app", "shiboken6")


def test_runtime_sources_do_not_import_the_gui():
    offenders = []
    for path in (ROOT / "runtime").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders


def test_importing_every_runtime_module_loads_no_qt():
    code = (
        "import importlib, pkgutil, sys, runtime\n"
        "for m in pkgutil.iter_modules(runtime.__path__):\n"
        "    if m.name != '__main__': importlib.import_module('runtime.' + m.name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'app')]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
