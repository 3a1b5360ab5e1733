"""No class in app/ is over MAX_LINES lines: a class that long holds more than one concern (ChatController
held eight in 893 lines), so it is split by concern before it grows there (docs/contributing.md)."""

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

MAX_LINES = 400


def long_classes(files) -> dict[str, int]:
    """`path:Class` -> its lines (decorators included), for every class of `files` over MAX_LINES, nested
    classes too."""
    found = {}
    for path in files:
        for node in ast.walk(ast.parse(Path(path).read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - first + 1
                if lines > MAX_LINES:
                    found[f"{Path(path).relative_to(ROOT)}:{node.name}"] = lines
    return found


def test_no_class_in_app_is_over_400_lines():
    assert long_classes(sorted((ROOT / "app").rglob("*.py"))) == {}


def test_the_check_finds_a_long_class_even_nested(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_class_size.ROOT", tmp_path)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "a.py").write_text(f"class Short:\n    pass\n\n\nclass Long:\n{body}\n")
    (tmp_path / "b.py").write_text(f"def f():\n    class Inner:\n    {body.replace(chr(10), chr(10) + '    ')}\n")
    (tmp_path / "c.py").write_text("class Fits:\n" + "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1)))
    assert long_classes(sorted(tmp_path.glob("*.py"))) == {"a.py:Long": MAX_LINES + 1, "b.py:Inner": MAX_LINES + 1}


@pytest.mark.parametrize("lines", [MAX_LINES - 1, MAX_LINES + 5])
def test_a_decorated_class_counts_its_decorators(tmp_path, monkeypatch, lines):
    monkeypatch.setattr("tests.test_class_size.ROOT", tmp_path)
    body = "\n".join(f"    x{i} = {i}" for i in range(lines - 2))
    (tmp_path / "d.py").write_text(f"import dataclasses\n\n\n@dataclasses.dataclass\nclass D:\n{body}\n")
    assert long_classes([tmp_path / "d.py"]) == ({"d.py:D": lines} if lines > MAX_LINES else {})
