"""Streaming markdown, split into blocks (no Qt).

A reply is rendered block by block. The blocks are markdown-it-py's top-level block tokens (CommonMark
plus tables), found from their line maps, so a list with blank lines or a code fence inside it, or a
table, stays one block. While the reply streams, a block is final once the next top-level block has
begun (a closed code fence at once); the last, unfinished block is the tail, shown as plain text. Each
final block is rendered exactly once, and parsing resumes at the first line not yet final
(`split_blocks(text, start)`), so a long reply is not parsed again at every flush. Code blocks become
their own widget (highlighted, with a copy button); inline math is rewritten into readable Unicode
since Qt's markdown has no math.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

CODE_TOKENS = {"fence", "code_block"}


@dataclass(frozen=True)
class Block:
    kind: str  # "text" or "code"
    text: str  # markdown source (text) or the code itself (code)
    language: str = ""
    end: int = 0  # the line after the block in the reply's text (where parsing resumes)


@functools.lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table")


def _tops(lines: list[str]):
    """The top-level block tokens of `lines` (each opening or self-contained token with its line map)."""
    return [t for t in _parser().parse("\n".join(lines)) if t.level == 0 and t.nesting >= 0 and t.map]


def _block(token, lines: list[str], offset: int) -> Block:
    first, last = token.map
    if token.type in CODE_TOKENS:
        language = token.info.split()[0] if token.info.strip() else ""
        return Block("code", token.content.rstrip("\n"), language, offset + last)
    return Block("text", "\n".join(lines[first:last]), "", offset + last)


def _closed_fence(token, lines: list[str]) -> bool:
    if token.type != "fence" or token.map[1] - token.map[0] < 2:
        return False
    marker = token.markup
    return re.fullmatch(rf" {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*", lines[token.map[1] - 1]) is not None


def split_blocks(text: str, start: int = 0) -> tuple[list[Block], str]:
    """The finished blocks of `text` from line `start` on (a line where a block begins: the `end` of the
    last block already final), and the unfinished tail (shown as plain text while it streams)."""
    lines = text.split("\n")
    complete = lines[start:-1]  # the last line may still grow
    tops = _tops(complete)
    final = tops[:-1] + ([tops[-1]] if tops and _closed_fence(tops[-1], complete) else [])
    blocks = [_block(t, complete, start) for t in final]
    tail_from = start + (tops[len(final)].map[0] if len(final) < len(tops) else len(complete))
    return blocks, "\n".join(lines[tail_from:]).strip("\n")


def finish_blocks(text: str, start: int = 0) -> list[Block]:
    """All blocks of a finished reply from line `start` on (the tail is a block too)."""
    lines = text.split("\n")[start:]
    return [_block(t, lines, start) for t in _tops(lines)]


LONG_RUN, PIECE = 32, 16
ZWSP = "\u200b"
MARKUP = set("[]()<>`\\*_~|")


def breakable(text: str, markdown: bool = False) -> str:
    """`text` with a zero-width space after every 16 characters of a run of 32 or more without a space,
    so a word-wrapping label can wrap a long word (a hash, a path) instead of widening the chat. In
    markdown, a run that holds markup (a link, code, emphasis, a table cell) is left whole."""
    def cut(m: re.Match) -> str:
        run = m.group(0)
        if markdown and MARKUP.intersection(run):
            return run
        return ZWSP.join(run[i:i + PIECE] for i in range(0, len(run), PIECE))
    return re.sub(rf"[^\s{ZWSP}]{{{LONG_RUN},}}", cut, text)


SYMBOLS = {
    r"\times": "×", r"\cdot": "·", r"\div": "÷", r"\pm": "±", r"\le": "≤", r"\leq": "≤", r"\ge": "≥",
    r"\geq": "≥", r"\neq": "≠", r"\ne": "≠", r"\approx": "≈", r"\infty": "∞", r"\to": "→", r"\rightarrow": "→",
    r"\Rightarrow": "⇒", r"\sum": "Σ", r"\prod": "Π", r"\int": "∫", r"\partial": "∂", r"\in": "∈",
    r"\alpha": "α", r"\beta": "β", r"\gamma": "γ", r"\delta": "δ", r"\epsilon": "ε", r"\theta": "θ",
    r"\lambda": "λ", r"\mu": "μ", r"\pi": "π", r"\sigma": "σ", r"\phi": "φ", r"\omega": "ω", r"\Delta": "Δ",
    r"\left": "", r"\right": "", r"\,": " ", r"\;": " ", r"\quad": "  ",
}
SUPERSCRIPT = str.maketrans("0123456789+-=()n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿ")
SUBSCRIPT = str.maketrans("0123456789+-=()", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎")


def readable_math(tex: str) -> str:
    """A LaTeX fragment as plain readable text: \\frac{a}{b} -> (a)/(b), x^{2} -> x², \\alpha -> α."""
    out = tex
    for _ in range(4):  # nested fractions and roots
        out = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", out)
        out = re.sub(r"\\sqrt\{([^{}]*)\}", r"√(\1)", out)
    for cmd in sorted(SYMBOLS, key=len, reverse=True):
        out = re.sub(re.escape(cmd) + r"(?![A-Za-z])", SYMBOLS[cmd], out)
    out = re.sub(r"\^\{([0-9+\-=()n]+)\}", lambda m: m.group(1).translate(SUPERSCRIPT), out)
    out = re.sub(r"\^([0-9n])", lambda m: m.group(1).translate(SUPERSCRIPT), out)
    out = re.sub(r"_\{([0-9+\-=()]+)\}", lambda m: m.group(1).translate(SUBSCRIPT), out)
    out = re.sub(r"_([0-9])", lambda m: m.group(1).translate(SUBSCRIPT), out)
    out = re.sub(r"\\text\{([^{}]*)\}", r"\1", out)
    return out.replace("{", "").replace("}", "")


KEPT_AS_WRITTEN = re.compile(r"(`+)(.+?)\1|<(?:https?://|mailto:)[^\s<>]*>", re.S)  # a code span, an autolink


def outside_code(markdown: str, rewrite) -> str:
    """`markdown` with `rewrite` applied to the text between its code spans and autolinks, which stay as
    they are (a code span's backslashes and dollars are literal)."""
    out, at = [], 0
    for m in KEPT_AS_WRITTEN.finditer(markdown):
        out += [rewrite(markdown[at:m.start()]), m.group(0)]
        at = m.end()
    return "".join(out) + rewrite(markdown[at:])


def literal_angles(markdown: str) -> str:
    """`markdown` with every "<" escaped ("\\<"), so it shows as written: Qt's markdown reads "<int>" in
    "vector<int>" (or a tool call's "</function>") as an HTML tag and drops it, so a message or an answer
    showed with words missing (found in a real-window session). Code spans and autolinks
    ("<https://...>") are kept as they are."""
    return outside_code(markdown, lambda text: text.replace("<", "\\<"))


def with_readable_math(markdown: str) -> str:
    """Rewrites $...$, \\(...\\), $$...$$ and \\[...\\] in a markdown text block, outside code spans and
    autolinks. An inline $...$ follows pandoc's rule: the opening $ has a non-space after it, the closing $
    a non-space before it and no digit after it, so prices are text: "$5 for tea and $10 for cake" showed
    as "*5 for tea and*10 for cake", italic, its dollars gone (found in a real-window session)."""
    def show(m):
        return f"*{readable_math(m.group(1)).strip()}*"

    def rewrite(text: str) -> str:
        text = re.sub(r"\$\$(.+?)\$\$", show, text, flags=re.S)
        text = re.sub(r"\\\[(.+?)\\\]", show, text, flags=re.S)
        text = re.sub(r"\\\((.+?)\\\)", show, text, flags=re.S)
        return re.sub(r"(?<![\\$])\$(?=[^\s$])([^$\n]*?[^\s$\\])\$(?!\d)", show, text)
    return outside_code(markdown, rewrite)


def literal_products(markdown: str) -> str:
    """A "*" between two numbers (or brackets) escaped, outside code, so "3*4*5 = 60" shows as written:
    CommonMark reads the "*4*" of it as emphasis, and the answer showed "345 = 60" with a slanted 4
    (found in a real-window session). Emphasis between digits is never what a reply means."""
    return outside_code(markdown, lambda text: re.sub(r"(?<=[0-9)])\*(?=[0-9(])", r"\\*", text))


def shown_markdown(markdown: str) -> str:
    """A reply's text block as Qt's markdown is given it: math readable, then products and angles literal."""
    return literal_angles(literal_products(with_readable_math(markdown)))
