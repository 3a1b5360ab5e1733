"""The docs stay true to the tree: every relative link (and its #anchor) resolves, and every
backticked repository path names a file or folder that exists."""

import re

import pytest

from tests.paths import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
TOP = ("runtime", "app", "tests", "docs", "training", "benchmarks", "tools", "installer", "assets", ".ci")
# Files a script writes when it runs on a machine this project has not had yet (named on purpose).
NOT_YET = {"docs/quantization-gpu.md", "docs/benchmarks-real-gpu.md"}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {slug(h) for h in re.findall(r"^#+\s+(.*?)\s*$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(target)
    assert not bad, f"{page.name}: links that lead nowhere: {bad}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_backticked_paths_exist(page):
    text = page.read_text()
    bad = []
    for code in re.findall(r"`([^`\n]+)`", text):
        for part in re.split(r"[\s,()=]+", code):
            part = part.strip("'\".;:")
            if part.split("/")[0] not in TOP or "/" not in part or any(c in part for c in "*{}<>$~"):
                continue
            part = part.split("::")[0].rstrip("/")
            if not (ROOT / part).exists() and part not in NOT_YET:
                bad.append(part)
    assert not bad, f"{page.name}: paths that do not exist: {sorted(set(bad))}"


def test_the_probe_can_fail(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("# Title\n[a](missing.md) [b](#title) [c](#nope) `runtime/not_here.py`\n")
    assert anchors(page) == {"title"}
    with pytest.raises(AssertionError, match="missing.md"):
        test_links_resolve(page)
    with pytest.raises(AssertionError, match="not_here"):
        test_backticked_paths_exist(page)


# ---------------------------------------------------------------------- the code the pages name

CODE_PAGES = [ROOT / "docs" / "architecture.md", ROOT / "docs" / "contributing.md"]
CODE = ("runtime", "app", "training", "tools", "benchmarks")


def _code_index():
    """What the code defines: classes (their members, and their bases' names), top-level names per file
    and per module stem, and every name defined anywhere (functions, methods, classes, attributes)."""
    import ast

    classes, files, stems, anywhere = {}, {}, {}, set()
    for top in CODE:
        for path in (ROOT / top).rglob("*.py"):
            tree = ast.parse(path.read_text())
            top_level = set()
            for node in tree.body:
                top_level |= _names_bound(node)
            files[str(path.relative_to(ROOT))] = top_level
            stems.setdefault(path.stem, set()).update(top_level)
            for node in ast.walk(tree):
                anywhere |= _names_bound(node)
                if isinstance(node, ast.ClassDef):
                    members = set()
                    for item in node.body:
                        members |= _names_bound(item)
                    members |= _self_attributes(node)
                    entry = classes.setdefault(node.name, [set(), set()])
                    entry[0] |= members
                    entry[1] |= {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                    anywhere |= members
    return classes, files, stems, anywhere


def _self_attributes(cls) -> set[str]:
    """The `self.x = ...` attributes a class's methods set."""
    import ast

    found = set()
    for node in ast.walk(cls):
        for target in _targets(node):
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    found.add(t.attr)
    return found


def _targets(node) -> list:
    import ast

    return node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []


def _names_bound(node) -> set[str]:
    import ast

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    return {e.id for t in _targets(node) for e in ast.walk(t) if isinstance(e, ast.Name)}


def _members(classes, name: str) -> set[str]:
    """A class's members with those of its bases that the code defines."""
    seen, todo, out = set(), [name], set()
    while todo:
        n = todo.pop()
        if n in seen or n not in classes:
            continue
        seen.add(n)
        out |= classes[n][0]
        todo += classes[n][1]
    return out


def unknown_code_names(text: str, index=None) -> list[str]:
    """The `Class.member`, `module.name`, `function(...)` and `path.py` `function` spans of `text` that name
    nothing the code defines."""
    classes, files, stems, anywhere = index or _code_index()
    bad = []
    spans = re.findall(r"`([^`\n]+)`", text)
    for i, span in enumerate(spans):
        m = re.fullmatch(r"([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\(.*\))?", span.strip())
        if not m or m.group(2) in ("py", "json", "md", "toml"):  # a file's name
            continue
        first, second = m.groups()
        if second is not None and first[0].isupper() and first in classes:
            ok = second in _members(classes, first)
        elif second is not None and first in stems:
            ok = second in stems[first]
        elif second is None and span.strip().endswith(")"):
            ok = first in anywhere or first in dir(__builtins__)
        elif second is None and first.startswith("_"):
            ok = first in anywhere
        elif second is None and i and spans[i - 1].endswith(".py") and spans[i - 1] in files \
                and re.search(re.escape(f"`{spans[i - 1]}` `{span}`"), text):
            ok = first in files[spans[i - 1]]  # "`runtime/x.py` `name`": named in that file
        else:
            continue
        if not ok:
            bad.append(span)
    return bad


@pytest.mark.parametrize("page", CODE_PAGES, ids=lambda p: p.name)
def test_the_code_a_page_names_exists(page):
    assert unknown_code_names(page.read_text()) == []


def test_the_code_scan_can_fail():
    text = ("`Engine.catch_up(name)` `Engine.no_such_member` `runtime/engine_queue.py` `reply_in_turn` "
            "`runtime/engine_queue.py` `not_in_that_file` `stream_chat(engine)` `no_such_function()` `_no_such` "
            "`depth.usable_level` `depth.no_such_name` `ReplyRecord.tally` `--flag` `exact=False`")
    assert unknown_code_names(text) == ["Engine.no_such_member", "not_in_that_file", "no_such_function()", "_no_such",
                                        "depth.no_such_name"]
