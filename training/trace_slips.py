"""Where a thought about a sum first leaves the right trace, what kind of slip it was, and who made it.

The demo's thinking is deterministic given the sum (data.thinking_text: the question copied as a bare
expression, then one line per operation, "45+23: 5+3=8 4+2=6 so 68"), so the first token whose text
stops matching it is the slip that matters: everything after follows from it. Knowing which submodel
wrote that token, and whether Auto had climbed before it, says where Auto loses (issue 40).

Kinds of slip, by where in the trace the first wrong character falls:
- "copy": the first line, the question rewritten as an expression;
- "running value": the number carried from the line before ("86+11" after "... so 86");
- "next number": the operator or the number taken from the question ("86+11" for "86+66");
- "column": a column's digits, carry or borrow;
- "result": the value assembled from the columns ("so 68");
- "ran on": more lines than the sum has operations;
- "cut": the thought ended before the trace did (the budget, or the model closing it early).
A thought whose trace is right but whose answer is wrong is "answer" (the answering submodel's slip).
"""

from __future__ import annotations

from .data import Problem, thinking_text

KINDS = ("copy", "running value", "next number", "column", "result", "ran on", "cut", "answer")
BUDGET = "budget"  # the writer of a token the budget forced (the end of a cut thought)


def first_slip(p: Problem, pieces: list[tuple[str, str]]) -> dict | None:
    """The first place the thought `pieces` ((text, writer) per thinking token, in order; the writer is a
    submodel's name, or BUDGET for a forced token) leaves the trace of `p`: {"token": index into pieces,
    "line": the trace's line, "kind": one of KINDS, "by": the writer}. None when the trace is right."""
    expected = thinking_text(p) + "\n"
    written = ""
    for i, (text, who) in enumerate(pieces):
        if not expected.startswith(written + text):
            at = len(written) + _common(expected[len(written):], text)
            if who == BUDGET or at >= len(expected):
                kind = "cut" if who == BUDGET else "ran on"
            else:
                kind = _kind(expected, at)
            return {"token": i, "line": expected[:at].count("\n"), "kind": kind, "by": who}
        written += text
    if written.rstrip("\n") == expected.rstrip("\n"):
        return None
    forced = any(who == BUDGET for _, who in pieces)  # the budget ended it (else the model closed it early)
    last = next((who for text, who in reversed(pieces) if text), None)
    return {"token": len(pieces), "line": written.count("\n"), "kind": "cut", "by": BUDGET if forced else last}


def _common(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _kind(expected: str, at: int) -> str:
    """The kind of a slip at character `at` of the expected trace."""
    line_no = expected[:at].count("\n")
    if line_no == 0:
        return "copy"
    start = expected.rfind("\n", 0, at) + 1
    line, col = expected[start:expected.index("\n", start)], at - start
    head = line.index(":")  # "a+b": the running value, then the operator and the next number
    if col < head:
        op = next(i for i, c in enumerate(line[:head]) if i and c in "+-")
        return "running value" if col < op else "next number"
    return "result" if col >= line.rindex(" so ") + 1 else "column"


def who_lost(slip: dict | None, right: bool, climbs: list[int]) -> str:
    """One wrong reply's story for Auto's table: "answer" (the trace was right), or who slipped and whether
    the thought had climbed by then ("0.5M, before any climb", "1.0M, after a climb", "budget")."""
    if slip is None:
        return "answer" if not right else "right"
    if slip["by"] == BUDGET:
        return BUDGET
    before = [c for c in climbs if c <= slip["token"]]
    return f"{slip['by']}, {'after a climb' if before else 'before any climb'}"
