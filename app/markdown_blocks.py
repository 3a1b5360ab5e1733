"""Streaming markdown, split into blocks (no Qt).

A reply is rendered block by block: a block is final once a blank line (text) or a closing
fence (code) follows it, so each block is rendered as markdown exactly once while the
unfinished tail is shown as plain text. Code blocks become their own widget with a copy
button; inline math is rewritten into readable Unicode since Qt's markdown has no math.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    kind: str  # "text" or "code"
    text: str
    language: str = ""


def split_blocks(text: str) -> tuple[list[Block], str]:
    """Finished blocks, and the unfinished tail (shown as plain text while it streams)."""
    blocks: list[Block] = []
    lines = text.split("\n")
    complete_lines = lines[:-1]  # the last line may still grow
    i, para = 0, []
    while i < len(complete_lines):
        line = complete_lines[i]
        fence = re.match(r"^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)", line)
        if fence:
            if para:
                blocks.append(Block("text", "\n".join(para)))
                para = []
            marker, language = fence.group(1), fence.group(2)
            end = next((j for j in range(i + 1, len(complete_lines))
                        if complete_lines[j].strip().startswith(marker)), None)
            if end is None:  # the code block is still streaming
                return blocks, "\n".join(lines[i:])
            blocks.append(Block("code", "\n".join(complete_lines[i + 1:end]), language))
            i = end + 1
            continue
        if line.strip() == "":
            if para:
                blocks.append(Block("text", "\n".join(para)))
                para = []
        else:
            para.append(line)
        i += 1
    return blocks, "\n".join(para + [lines[-1]]).strip("\n") if (para or lines[-1]) else ""


def finish_blocks(text: str) -> list[Block]:
    """All blocks of a finished reply (the tail counts as a block too)."""
    blocks, tail = split_blocks(text + "\n\n")
    if tail.strip():
        fence = re.match(r"^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)\n?", tail)
        if fence:  # an unclosed code block at the very end
            blocks.append(Block("code", tail[fence.end():].rstrip("\n"), fence.group(2)))
        else:
            blocks.append(Block("text", tail))
    return blocks


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


def with_readable_math(markdown: str) -> str:
    """Rewrites $...$, \\(...\\), $$...$$ and \\[...\\] in a markdown text block."""
    def show(m):
        return f"*{readable_math(m.group(1)).strip()}*"
    markdown = re.sub(r"\$\$(.+?)\$\$", show, markdown, flags=re.S)
    markdown = re.sub(r"\\\[(.+?)\\\]", show, markdown, flags=re.S)
    markdown = re.sub(r"\\\((.+?)\\\)", show, markdown, flags=re.S)
    return re.sub(r"(?<![\\$])\$([^$\n]+?)\$", show, markdown)
