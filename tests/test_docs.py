"""The docs stay true to the tree: every relative link (and its #anchor) resolves, and every
backticked repository path names a file or folder that exists."""

import re

import pytest

from tests.paths import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
TOP = ("runtime", "app", "tests", "docs", "training", "benchmarks", "tools", "installer", "assets", ".ci")
# Files a script writes when it runs on a machine this project has not had yet (named on purpose).
NOT_YET = {"docs/quantization-gpu.md", "docs/benchmarks-real-gpu.md", "docs/benchmarks-placement-gpu.md"}


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
