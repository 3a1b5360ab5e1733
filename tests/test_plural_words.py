"""No text for people hedges its number with "(s)" or "(ies)" ("1 reply(ies)", issue 38 item 8): a count
says its noun in the right number (runtime/units.py `counted`)."""

import io
import re
import tokenize

import pytest

from tests.paths import ROOT

HEDGED = re.compile(r"[A-Za-z]\((?:s|es|ies)\)")
REPLACEMENT = re.compile(r"\{[^{}]*\}")
SOURCES = sorted(p for folder in ("app", "runtime") for p in (ROOT / folder).rglob("*.py"))


def hedged_strings(source: str) -> list[str]:
    """The string literals (f-strings' text included) of `source` that hedge a plural; http(s) is a scheme."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)):
            text = REPLACEMENT.sub("", token.string)  # an f-string's {code} (one token before Python 3.12)
            found += HEDGED.findall(text.replace("http(s)", ""))
    return found


@pytest.mark.parametrize("source,found", [
    ('x = f"{n} reply(ies) it was writing"', 1), ("log.info('%d token(s)', n)", 1), ('s = "model(s) listed"', 1),
    ('s = "an http(s) address"', 0), ("f(s)  # len(s) is code, not text", 0), ('s = "1 reply"', 0),
    ('t = f"{tip(s)} and {show(repr(s))}"', 0), ('t = f"{n} file(s) in {where(s)}"', 1)])
def test_the_scan_finds_a_hedged_plural_in_text_only(source, found):
    assert len(hedged_strings(source)) == found


def test_no_text_for_people_hedges_a_plural():
    hedged = {str(p.relative_to(ROOT)): h for p in SOURCES if (h := hedged_strings(p.read_text()))}
    assert not hedged, f"say the count's noun in its number (runtime.api.counted): {hedged}"
