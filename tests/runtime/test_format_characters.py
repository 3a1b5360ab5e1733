"""What the user approves is shown as it is (issue 37, item 6): every format character (Unicode Cf:
bidirectional overrides and isolates, zero-width characters, the BOM, tags...) is escaped, so Qt or a
terminal cannot reorder or hide part of a command, an argument, a name or a description."""

import sys
import unicodedata

import pytest

from runtime.errors import for_approval, printable
from runtime.mcp.config import ServerConfig

FORMAT = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
SPOOF = "/home/me/notes/todo.txt\u202e\u2066 (read-only)\u2069"


def hidden(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in ("Cf", "Cc", "Cn", "Cs")]


def test_there_are_format_characters_to_test():
    assert len(FORMAT) > 150 and {"\u202e", "\u2066", "\u200b", "\ufeff", "\u061c", "\U000e0041"} <= set(FORMAT)


@pytest.mark.parametrize("c", FORMAT, ids=[f"U+{ord(c):04X}" for c in FORMAT])
def test_every_format_character_is_escaped_for_approval(c):
    for text in (f"a{c}b", c, f"{c}{c}x", f"{SPOOF}{c}"):
        shown = for_approval(text)
        assert not hidden(shown), (text, shown)
        escape = f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
        assert escape in shown


def test_the_spoofed_argument_shows_every_character_in_order():
    assert for_approval(SPOOF) == "/home/me/notes/todo.txt\\u202e\\u2066 (read-only)\\u2069"


@pytest.mark.parametrize("text", ["plain", "é ü 日本語 Ελληνικά عربي", "emoji 🙂", "tab\there", "x" * 10_000])
def test_ordinary_text_is_unchanged(text):
    assert for_approval(text) == printable(text) == text


def test_controls_are_still_escaped_and_newlines_kept_only_when_asked():
    assert for_approval("a\x1b[31mb\nc") == "a\\x1b[31mb\\x0ac"
    assert for_approval("a\nb\u202ec", keep_newlines=True) == "a\nb\\u202ec"


def test_an_unassigned_code_point_is_escaped_too():
    """A format character of a newer Unicode than this Python knows is unassigned here."""
    unassigned = next(chr(c) for c in range(0x0870, 0x10FFFF) if unicodedata.category(chr(c)) == "Cn")
    assert not hidden(for_approval(f"a{unassigned}b"))


@pytest.mark.parametrize("where", ["args", "env", "command"])
def test_a_servers_command_line_shows_format_characters_escaped(where):
    payload = "".join(FORMAT)
    fields = {"args": {"command": "python3", "args": ("-m", f"tool{payload}")},
              "env": {"command": "python3", "env": (("NOTE", payload),)},
              "command": {"command": f"python3{payload}"}}[where]
    shown = for_approval(ServerConfig("s", **fields).command_line())
    assert not hidden(shown) and shown.count("\\u") + shown.count("\\U") >= len(FORMAT)
