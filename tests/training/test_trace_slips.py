"""Where a thought leaves the right trace (training/trace_slips.py), on many sums cut into tokens anyhow."""

import random

from training.data import make_problem, thinking_text
from training.trace_slips import BUDGET, first_slip, who_lost


def tokens(text: str, rng: random.Random, writers=("0.5M",)) -> list[tuple[str, str]]:
    """`text` cut at random points, each piece written by a writer in turn (a climb between pieces)."""
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, len(text) // 3)))
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    switch = rng.randrange(len(pieces))
    return [(p, writers[0] if i < switch or len(writers) == 1 else writers[1]) for i, p in enumerate(pieces)]


def region(trace: str, rng: random.Random) -> tuple[int, str]:
    """A random character of `trace` and the kind of slip a wrong one there is."""
    lines = trace.split("\n")
    line_no = rng.randrange(len(lines))
    start = sum(len(x) + 1 for x in lines[:line_no])
    line = lines[line_no]
    col = rng.randrange(len(line))
    if line_no == 0:
        return start + col, "copy"
    head, op = line.index(":"), next(i for i, c in enumerate(line) if i and c in "+-")
    if col < head:
        return start + col, "running value" if col < op else "next number"
    return start + col, "result" if col >= line.rindex(" so ") + 1 else "column"


def wrong(c: str) -> str:
    return "7" if c != "7" else "3"


def test_a_right_trace_has_no_slip_however_it_is_cut_into_tokens():
    rng = random.Random(0)
    for _ in range(300):
        p = make_problem(rng, rng.choice([2, 3, 4]))
        text = thinking_text(p) + "\n"
        assert first_slip(p, tokens(text, rng)) is None
        assert first_slip(p, tokens(text, rng) + [("", BUDGET)]) is None  # the budget's `</think>` adds no text


def test_the_first_wrong_character_names_its_kind_line_token_and_writer():
    rng = random.Random(1)
    seen = set()
    for _ in range(2000):
        p = make_problem(rng, rng.choice([2, 3, 4]))
        text = thinking_text(p) + "\n"
        at, kind = region(text.rstrip("\n"), rng)
        pieces = tokens(text[:at] + wrong(text[at]) + text[at + 1:], rng, ("0.5M", "1.0M"))
        slip = first_slip(p, pieces)
        ends = [sum(len(t) for t, _ in pieces[:k + 1]) for k in range(len(pieces))]
        i = next(k for k, end in enumerate(ends) if end > at)  # the piece that holds character `at`
        assert slip == {"token": i, "line": text[:at].count("\n"), "kind": kind, "by": pieces[i][1]}, (text, at)
        seen.add(kind)
    assert seen == {"copy", "running value", "next number", "column", "result"}


def test_a_thought_cut_short_or_running_on():
    rng = random.Random(2)
    for _ in range(300):
        p = make_problem(rng, rng.choice([3, 4]))
        text = thinking_text(p) + "\n"
        end = rng.randrange(1, len(text) - 1)
        by_budget = first_slip(p, tokens(text[:end], rng) + [("\n" if text[end - 1] != "\n" else "", BUDGET)])
        assert by_budget["kind"] == "cut" and by_budget["by"] == BUDGET
        closed = first_slip(p, tokens(text[:end], rng))  # the model closed its thought early itself
        assert closed["kind"] == "cut" and closed["by"] == "0.5M"
        ran_on = first_slip(p, tokens(text, rng) + [("0+0=0 so 0\n", "0.5M")])
        assert ran_on["kind"] == "ran on" and ran_on["line"] == len(p.numbers)


def test_who_lost_says_whether_the_slip_came_before_or_after_a_climb():
    slip = {"token": 30, "line": 2, "kind": "column", "by": "1.0M"}
    assert who_lost(slip, False, [12]) == "1.0M, after a climb"
    assert who_lost(dict(slip, by="0.5M"), False, [31]) == "0.5M, before any climb"
    assert who_lost(dict(slip, by=BUDGET, kind="cut"), False, []) == BUDGET
    assert who_lost(None, False, []) == "answer" and who_lost(None, True, []) == "right"
