"""The import boundaries that keep the layers apart, each checked twice: a scan of the sources (every
import statement, lazy ones included, relative ones resolved), which probes prove can fail, and a fresh
interpreter that imports the modules and looks at sys.modules (which also sees what the imported
modules import in turn).

1. runtime/, the engine, never imports Qt or app/.
2. The inference core (runtime/ outside runtime/store/ and the commands that join the two) never
   imports runtime.store: a checkpoint runs with the submodel table its caller gives it.
3. app/state/, the app's Qt-free state, never imports Qt nor the widgets.
4. app/ reaches the runtime through `runtime.api` alone, its one import surface.
5. No import cycle in runtime/, through module-level or function-level imports alike (an import that
   only type checkers run, under `if TYPE_CHECKING:`, is no edge: it never executes).
6. No class in runtime/ is longer than MAX_CLASS_LINES (app/'s: tests/test_class_size.py, with the
   ChatController split).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

QT = ("PySide6", "shiboken6")
# The commands join the core and the store: `models ...`, and the table a checkpoint runs with.
GLUE = ("runtime/__main__.py", "runtime/cli.py", "runtime/command_load.py",
        "runtime/api.py")  # (the app's surface: it joins the two for the app)


def gui(name: str) -> bool:
    return name.split(".")[0] in (*QT, "app")


def store(name: str) -> bool:
    return name == "runtime.store" or name.startswith("runtime.store.")


def qt_or_widgets(name: str) -> bool:
    return name.split(".")[0] in QT or name == "app.widgets" or name.startswith("app.widgets.")


def module_of(path: Path, root: Path = ROOT) -> tuple[str, bool]:
    """(dotted name, is a package) of a source file under `root`."""
    parts = path.relative_to(root).with_suffix("").parts
    return (".".join(parts[:-1]), True) if parts[-1] == "__init__" else (".".join(parts), False)


def imports_of(source: str, module: str, package: bool = False, typing: bool = True) -> set[str]:
    """Every module that `source` (the text of `module`) names in an import statement or an
    importlib.import_module/__import__ call with a literal name; a from-import also adds each
    name it imports as a submodule (`from runtime import store` names runtime.store). `typing`
    False leaves out the imports under `if TYPE_CHECKING:` (they never run)."""
    here = module.split(".") if package else module.split(".")[:-1]
    found = set()
    tree = ast.parse(source)
    for node in ast.walk(tree) if typing else _run_time_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            found.add(node.args[0].value)
    return found


def _run_time_nodes(tree: ast.AST):
    """The nodes of `tree`, less the bodies of `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if test is not None and getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
                todo += child.orelse
            else:
                todo.append(child)


def offenders(files, forbidden) -> dict[str, list[str]]:
    found = {}
    for path in files:
        module, package = module_of(path)
        bad = sorted(n for n in imports_of(path.read_text(), module, package) if forbidden(n))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def runtime_files() -> list[Path]:
    return sorted((ROOT / "runtime").rglob("*.py"))


def core_files() -> list[Path]:
    return [p for p in runtime_files()
            if "store" not in p.relative_to(ROOT / "runtime").parts[:1] and str(p.relative_to(ROOT)) not in GLUE]


def state_files() -> list[Path]:
    return sorted((ROOT / "app" / "state").rglob("*.py"))


def test_runtime_sources_import_neither_qt_nor_the_app():
    assert offenders(runtime_files(), gui) == {}


def test_core_sources_do_not_import_the_store():
    assert offenders(core_files(), store) == {}


def test_app_state_sources_import_neither_qt_nor_the_widgets():
    assert offenders(state_files(), qt_or_widgets) == {}


def test_the_file_lists_are_what_the_rules_say():
    core = {str(p.relative_to(ROOT)) for p in core_files()}
    assert "runtime/engine.py" in core and "runtime/checkpoint/weights.py" in core and "runtime/server/jobs.py" in core
    assert not any(p.startswith("runtime/store/") for p in core) and not core & set(GLUE)
    assert {p.name for p in state_files()} >= {"history.py", "settings.py", "data_files.py", "window_state.py"}


@pytest.mark.parametrize(("rule", "module", "package", "source"), [
    (gui, "runtime.engine", False, "from PySide6.QtCore import QObject\n"),
    (gui, "runtime.engine", False, "import app.main_window\n"),
    (gui, "runtime.checkpoint.weights", False, "def f():\n    from app import controller\n"),
    (gui, "runtime.engine", False, "import importlib\nimportlib.import_module('shiboken6')\n"),
    (store, "runtime.engine", False, "from .store import planner\n"),
    (store, "runtime.engine", False, "import runtime.store.catalog\n"),
    (store, "runtime.engine", False, "def f():\n    from .store.download.transfer import Download\n"),
    (store, "runtime.checkpoint.weights", False, "from ..store import catalog\n"),
    (store, "runtime.server", True, "from .. import store\n"),
    (store, "runtime.server.jobs", False, "__import__('runtime.store.planner')\n"),
    (qt_or_widgets, "app.state.history", False, "from ..widgets.chat_view import ChatView\n"),
    (qt_or_widgets, "app.state.history", False, "from .. import widgets\n"),
    (qt_or_widgets, "app.state.settings", False, "def f():\n    from PySide6.QtGui import QFont\n"),
    (qt_or_widgets, "app.state", True, "import shiboken6\n"),
])
def test_the_scan_catches_a_forbidden_import(rule, module, package, source):
    # a check that cannot fail is no check: each way of writing the import is seen
    assert any(rule(n) for n in imports_of(source, module, package)), source


@pytest.mark.parametrize(("rule", "module", "source"), [
    (store, "runtime.engine", "from .storage import x\nimport runtime.stores\n"),
    (gui, "runtime.engine", "from .app_like import x\nimport application\n"),
    (qt_or_widgets, "app.state.history", "from .settings import Settings\nfrom ..widgets_doc import x\n"),
])
def test_the_scan_passes_names_that_only_look_alike(rule, module, source):
    assert not any(rule(n) for n in imports_of(source, module))


def fresh_interpreter(code: str) -> list[str]:
    """Runs `code` in a new Python at the repository root; returns the last line it printed, split."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().splitlines()[-1].split()


def modules_of(files) -> list[str]:
    return [module_of(p)[0] for p in files if p.name != "__main__.py"]


def loaded(modules: list[str], then: str = "") -> str:
    return (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n{then}"
            "print(' '.join(sorted(sys.modules)))\n")


def test_importing_all_of_runtime_loads_neither_qt_nor_the_app():
    assert [m for m in fresh_interpreter(loaded(modules_of(runtime_files()))) if gui(m)] == []


def test_loading_and_decoding_leave_the_store_unimported():
    then = ("from runtime.engine import Engine\n"
            "e = Engine.load('assets/demo', device='cpu', max_context=256)\n"
            "e.model.forward(e.submodels_by_size()[0], e.cache(e.submodels_by_size()[0]), [1, 2, 3])\n")
    assert [m for m in fresh_interpreter(loaded(modules_of(core_files()), then)) if store(m)] == []


def test_importing_and_using_app_state_loads_neither_qt_nor_the_widgets(tmp_path):
    then = ("from app.state.history import History\n"
            "from app.state.settings import Settings\n"
            f"h = History({str(tmp_path / 'history.sqlite3')!r})\n"
            "h.add_message(h.new_conversation('t').id, 'user', 'hello')\n"
            f"from pathlib import Path\nSettings().save(Path({str(tmp_path / 'settings.json')!r}))\n"
            f"Settings.load(Path({str(tmp_path / 'settings.json')!r}))\n")
    assert [m for m in fresh_interpreter(loaded(modules_of(state_files()), then)) if qt_or_widgets(m)] == []


# ---------------------------------------------------------------------- 4. no import cycle


def import_graph(files, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules among `files` it imports, at any level (type checkers' imports aside)."""
    modules = {module_of(p, root): p for p in files}
    graph = {}
    for (name, package), path in modules.items():
        found = imports_of(path.read_text(), name, package, typing=False)
        graph[name] = {m for m in found if m in {n for n, _ in modules} and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (each holds a cycle), Tarjan's way."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_runtime_has_no_import_cycle():
    assert cycles(import_graph(runtime_files())) == []


@pytest.mark.parametrize(("sources", "cycle"), [
    ({"a": "from . import b\n", "b": "def f():\n    from .a import x\n"}, ["p.a", "p.b"]),  # function level
    ({"a": "import p.b\n", "b": "import p.c\n", "c": "from .a import y\n"}, ["p.a", "p.b", "p.c"]),
    ({"a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n", "b": "from .a import A\n"},
     None),  # a type checker's import never runs
    ({"a": "import typing\nif typing.TYPE_CHECKING:\n    import p.b\nelse:\n    import p.b\n", "b": "import p.a\n"},
     ["p.a", "p.b"]),  # (its else branch does)
])
def test_the_cycle_scan_finds_cycles_at_any_level(tmp_path, sources, cycle):
    package = tmp_path / "p"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in sources.items():
        (package / f"{name}.py").write_text(text)
    assert cycles(import_graph(sorted(package.glob("*.py")), tmp_path)) == ([cycle] if cycle else [])


# ---------------------------------------------------------------------- 5. app/ through runtime.api

NOT_YET_THROUGH_API: set[str] = set()  # every app/ file goes through runtime.api


def around_the_api(name: str) -> bool:
    return name.split(".")[0] == "runtime" and name != "runtime.api" and not name.startswith("runtime.api.")


def app_files() -> list[Path]:
    return sorted((ROOT / "app").rglob("*.py"))


def test_the_app_reaches_the_runtime_through_its_api_alone():
    found = offenders(app_files(), around_the_api)
    assert sorted(set(found) - NOT_YET_THROUGH_API) == []


def test_the_api_names_what_it_exports():
    import runtime.api

    assert sorted(runtime.api.__all__) == sorted(set(runtime.api.__all__))
    assert all(hasattr(runtime.api, name) for name in runtime.api.__all__)
    assert around_the_api("runtime.engine") and not around_the_api("runtime.api") and not around_the_api("runtimes")


# ---------------------------------------------------------------------- 6. no class too long to read

MAX_CLASS_LINES = 400


def long_classes(files, limit: int = MAX_CLASS_LINES, root: Path = ROOT) -> dict[str, int]:
    """`path::Class` -> its lines, for every class (nested ones too) longer than `limit` lines."""
    found = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > limit:
                found[f"{path.relative_to(root)}::{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_no_class_in_runtime_is_too_long_to_read():
    assert long_classes(runtime_files()) == {}


def test_the_class_scan_measures_classes_nested_ones_too(tmp_path):
    source = tmp_path / "x.py"
    nested = "    class B:\n" + "        y = 2\n" * 3
    source.write_text("class A:\n" + "    x = 1\n" * 5 + nested + "\nclass C:\n    z = 3\n")
    assert long_classes([source], 4, tmp_path) == {"x.py::A": 10}
    assert long_classes([source], 1, tmp_path) == {"x.py::A": 10, "x.py::B": 4, "x.py::C": 2}
