"""Seeded synthetic data for the demo model: sums where reasoning helps, plus plain talk.

The task, as the app states it: chains of two to four whole numbers from 0 to 99 joined by + and -,
every partial result from 0 to 199; the answer is the number. With thinking on, the model first
rewrites the question as a bare expression ("45+23-17+9"), then does one operation per line,
column by column from the ones, with the carry or borrow written out:

    45+23: 5+3=8 4+2=6 so 68
    68-17: 8-7=1 6-1=5 so 51
    51+9: 1+9=10 5+0+1=6 so 60

A column of an addition is `a+b=s` (`a+b+1=s` when the column before carried: its sum was 10 or
more); a column of a subtraction is `a-b=d`, written `1a-b=d` when it borrows and `a-b-1=d` when
the column before borrowed. The result is the last column's value followed by the ones digits of
the columns before it, right to left. Every step is then a single-digit fact or a copy, which a
1.5M-parameter model can do reliably; "45 + 23 = 68" in one step (the old trace, `TRACES["whole"]`)
it mostly cannot (docs/results/demo-eval.md).

Users phrase sums in many ways ("45+23", "45 plus 23", "Add 45 and 23", "what's 45 - 17?"), so the
questions vary in wording, spacing and case. Held out from training, for evaluation: every
expression whose hash falls in the held-out bucket (in any phrasing), and a set of phrasings.
Some thinking traces are cut short as a budget would cut them, so the model learns to answer after
a forced `</think>`. Conversation examples teach short, useful replies about the app.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, replace

from . import tools_data

MAX_OPERAND, MAX_VALUE = 99, 199

# Phrasings. `{e}` is the expression as the user writes it; `{a}`/`{b}` the two numbers of a
# two-number sum. Held-out phrasings never appear in training.
TRAIN_TEMPLATES = ["What is {e}?", "what is {e}", "What's {e}?", "whats {e}", "{e}", "{e}=", "{e} =", "{e} = ?",
                   "{e}=?", "Compute {e}.", "compute {e}", "Calculate {e}", "How much is {e}?", "Solve {e}",
                   "Please work out {e}.", "Can you compute {e}?", "{e}?", "what does {e} make?", "Quick: {e}",
                   "{e} is?", "What is {e} equal to?", "Evaluate {e}."]
TRAIN_ADD = ["Add {a} and {b}", "add {a} and {b}.", "What is the sum of {a} and {b}?", "{a} plus {b}",
             "Add {a} to {b}."]
TRAIN_SUB = ["Subtract {b} from {a}", "What is {a} take away {b}?", "{a} minus {b}?", "take {b} from {a}"]
HELD_OUT_TEMPLATES = ["Tell me {e}.", "Could you calculate {e}?", "What do you get for {e}?", "work out {e} please",
                      "Find {e}", "Hey, what's {e}?", "{e} equals?", "Do the sum {e}"]
HELD_OUT_ADD = ["Please add {a} and {b}.", "What do {a} and {b} add up to?"]
HELD_OUT_SUB = ["Please subtract {b} from {a}.", "What is {a} less {b}?"]
WORDS = {"+": "plus", "-": "minus"}

TALK = {
    "greeting": (["hi", "hello", "hey", "good morning", "good evening", "hi there", "hello!", "hey, how are you?",
                  "Hi!", "Hello there"],
                 "The user greets me. I greet them back and say what I can do.",
                 ["Hello! I'm the Elastic Chat demo model. Ask me a sum like 45 + 23 - 17 + 9.",
                  "Hi! I'm the small offline demo model of Elastic Chat. Try a sum like 38 + 47."]),
    "app": (["what is this app?", "what is elastic chat?", "what does this app do?", "tell me about this app",
             "What is Elastic Chat?", "explain this app"],
            "The user asks about the app. I explain elastic models briefly.",
            ["Elastic Chat runs NVIDIA's Star Elastic models on your RTX PC: one checkpoint holds 30B, 23B and 12B "
             "reasoning models, and a small one can think while the full one answers."]),
    "real_model": (["how do I get the real model?", "where is the real model?", "how can I download the 30B model?",
                    "how do I use a bigger model?", "How do I download the full model?", "can I get a smarter model?"],
                   "The user wants the real model. I point to the model manager.",
                   ["Open the model manager and download the NVFP4 checkpoint (about 18.7 GB). It needs an NVIDIA "
                    "RTX GPU, and the app shows which submodels fit."]),
    "who": (["who are you?", "what are you?", "are you the real model?", "Who are you", "what model is this?"],
            "The user asks what I am. I say I am the tiny demo model.",
            ["I'm a tiny demo model that ships with Elastic Chat so it works offline. I add and subtract whole "
             "numbers up to 99 and know a few facts about this app."]),
    "thanks": (["thanks", "thank you", "thanks a lot", "Thank you!", "great, thanks"],
               "The user thanks me. I reply politely.",
               ["You're welcome!", "Glad to help!"]),
    "bye": (["bye", "goodbye", "see you", "Bye!", "good night"],
            "The user says goodbye. I say goodbye too.",
            ["Goodbye! Come back any time."]),
    "abilities": (["what can you do?", "help", "what can I ask you?", "What can you do", "how do I use you?"],
                  "The user asks what I can do. I describe my small skills.",
                  ["I add and subtract chains of two to four whole numbers from 0 to 99, like 45 + 23 - 17 + 9, "
                   "working column by column. For real questions, download the full model in the model manager."]),
    "out_of_scope": (["what is the capital of France?", "write a poem", "explain quantum physics",
                      "who won the world cup?", "tell me a joke", "translate hello to German",
                      "write some python code", "what is the meaning of life?", "summarize this article",
                      "what's the weather today?", "recommend a book", "what is 7 times 8?", "divide 10 by 2"],
                     "This is beyond a tiny demo model. I say so and point to the real model.",
                     ["I'm only a tiny demo model: I can add and subtract small numbers, but not answer that. "
                      "Download the real model in the model manager for questions like this."]),
}


@dataclass(frozen=True)
class Problem:
    numbers: tuple[int, ...]
    ops: tuple[str, ...]  # "+" or "-", one fewer than numbers

    @property
    def expression(self) -> str:
        """The canonical form, "45 + 23 - 17": the held-out split and the answer use it."""
        return " ".join([str(self.numbers[0])] + [f"{o} {n}" for o, n in zip(self.ops, self.numbers[1:])])

    @property
    def compact(self) -> str:
        return self.expression.replace(" ", "")

    @property
    def partials(self) -> list[int]:
        out = [self.numbers[0]]
        for o, n in zip(self.ops, self.numbers[1:]):
            out.append(out[-1] + n if o == "+" else out[-1] - n)
        return out

    @property
    def result(self) -> int:
        return self.partials[-1]

    @property
    def steps(self) -> tuple[str, ...]:
        """One line of working per operation, in the column trace."""
        return tuple(column_step(a, o, n) for a, o, n in zip(self.partials, self.ops, self.numbers[1:]))


def make_problem(rng: random.Random, n_numbers: int) -> Problem:
    """Numbers 0..99; every partial result stays within 0..199."""
    value = rng.randint(0, MAX_OPERAND)
    numbers, ops = [value], []
    for _ in range(n_numbers - 1):
        # Subtract about half the time, whenever the running value allows a useful one.
        if value >= 1 and (rng.random() < 0.5 or value + MAX_OPERAND > MAX_VALUE and rng.random() < 0.8):
            n = rng.randint(0, min(value, MAX_OPERAND))
            value, op = value - n, "-"
        else:
            n = rng.randint(0, min(MAX_OPERAND, MAX_VALUE - value))
            value, op = value + n, "+"
        numbers.append(n)
        ops.append(op)
    return Problem(tuple(numbers), tuple(ops))


def digit_columns(a: int, b: int) -> list[tuple[int, int]]:
    """The digits of a and b column by column from the ones, 0 where the shorter number has run out."""
    da, db = str(a)[::-1], str(b)[::-1]
    return [(int(da[i]) if i < len(da) else 0, int(db[i]) if i < len(db) else 0)
            for i in range(max(len(da), len(db)))]


def minus_column(x: int, y: int, carry: int) -> tuple[str, int]:
    """One column of a written subtraction ("11-7=4" when it borrows, "5-1-1=3" when one was borrowed)
    and the borrow it passes to the next column."""
    d = x - y - carry
    return f"{'1' if d < 0 else ''}{x}-{y}{'-1' if carry else ''}={d % 10}", int(d < 0)


def column_step(a: int, op: str, b: int) -> str:
    """"45+23: 5+3=8 4+2=6 so 68": the columns from the ones, carry/borrow written out."""
    columns, carry = [], 0
    for x, y in digit_columns(a, b):
        if op == "+":
            s = x + y + carry
            columns.append(f"{x}+{y}{'+1' if carry else ''}={s}")
            carry = s // 10
        else:
            text, carry = minus_column(x, y, carry)
            columns.append(text)
    value = a + b if op == "+" else a - b
    return f"{a}{op}{b}: {' '.join(columns)} so {value}"


def whole_step(a: int, op: str, b: int) -> str:
    """The old trace: the whole operation in one step."""
    return f"{a}{op}{b}={a + b if op == '+' else a - b}"


TRACES = {"columns": column_step, "whole": whole_step}


def thinking_text(p: Problem, trace: str = "columns") -> str:
    step = TRACES[trace]
    return "\n".join([p.compact] + [step(a, o, n) for a, o, n in zip(p.partials, p.ops, p.numbers[1:])])


def answer_text(p: Problem) -> str:
    return f"{p.expression} = {p.result}."


def is_held_out(expression: str) -> bool:
    """About 10% of canonical expressions ("45 + 23 - 17"), whatever the phrasing."""
    return hashlib.sha256(expression.encode()).digest()[0] < 26


# Lead-ins for the last phase of training, so that unfamiliar words before a sum do not turn it into
# small talk (none is part of a held-out phrasing).
LEAD_INS = ["ok", "so", "now", "quick one:", "question:", "next:", "I need", "help me with", "can you do",
            "what about", "and", "also", "try this:", "hmm,", "one more:", "let's see,", "my homework:", "here:",
            "result of", "I wonder about", "check", "what comes out of", "and now", "for me:"]


# Words for random frames around a sum ("banana lamp 45+23 river?"): every step of copying the
# question must hold whatever surrounds it. Words with an arithmetic meaning and every word of a
# held-out phrasing are left out, so held-out checks still meet their wording for the first time.
FILLER = """about above after again air all almost also always animal answer any apple are around ask
back bag ball be because bed before begin best big bird black blue boat book box boy bread bring brown
but buy call can car card carry cat chair child city clean close cold come cook cool cup dark day dear
dog door down draw dream dress drink drive each early earth easy eat egg end enough even every eye face
fall far farm fast father feel few field fill fine fire first fish five floor fly food foot for friend
full game garden girl give glad go gold good grass great green hand happy hard have he head hear help
her here high hill his home horse hot house how I if in into is it jump just keep kind king lake lamp
large last late learn left let letter light like line list little live long look lot love low made make
man many may maybe me milk mind moon morning mother move much must my name near need never new next nice
night no not now off often oh ok old on once only open or other our out over page paper park part
people pick place plan play please point quick quiet rain read ready real red right river road rock room
round run said same say school sea see seem shall she ship shoe short should show side simple sing sit
sky sleep slow small snow so some song soon sound start stay still stone stop story street sun sure
sweet table talk tea tell than that the then there these they thing think this time today together too
tree true try turn under up us very wait walk want warm was watch water way we well were what when where
which while white who why will wind window with word work world write yellow yes yet you young your
""".split()
ARITHMETIC_WORDS = {"add", "added", "adding", "and", "away", "from", "less", "minus", "more", "plus", "subtract",
                    "sum", "take", "times", "total", "divide", "by", "of", "equal", "equals", "make", "makes"}


def template_words(templates: list[str]) -> set[str]:
    return {w.lower() for t in templates for w in re.findall(r"[A-Za-z']+", re.sub(r"\{\w\}", " ", t))}


HELD_OUT_WORDS = template_words(HELD_OUT_TEMPLATES + HELD_OUT_ADD + HELD_OUT_SUB)
NOT_NOISE = ARITHMETIC_WORDS | HELD_OUT_WORDS
NOISE_WORDS = sorted({w for w in FILLER if w.lower() not in NOT_NOISE})


def noise_word(rng: random.Random) -> str:
    """A filler word, or a made-up one (a few letters), so that no word is special."""
    if rng.random() < 0.7:
        word = rng.choice(NOISE_WORDS)
    else:
        while True:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 7)))
            if word not in NOT_NOISE:
                break
    return word.capitalize() if rng.random() < 0.15 else word


def noise_frame(rng: random.Random) -> str:
    """"{e}" between random words: one to five before, none to three after, any closing mark."""
    before = " ".join(noise_word(rng) for _ in range(rng.randint(1, 5)))
    after = " ".join(noise_word(rng) for _ in range(rng.choice([0, 0, 1, 2, 3])))
    gap = rng.choice([" ", " ", " ", "  ", ": ", ", "])
    return f"{before}{gap}{{e}}{(' ' + after) if after else ''}{rng.choice(['', '', '?', '.', '!', ' ?'])}"


def spell(p: Problem, rng: random.Random) -> str:
    """The expression as a user might write it: in words, packed, spaced or irregularly spaced."""
    style = rng.random()
    parts = [str(p.numbers[0])]
    for o, n in zip(p.ops, p.numbers[1:]):
        if style < 0.15:  # words
            parts.append(f" {WORDS[o]} {n}")
        elif style < 0.45:  # no spaces
            parts.append(f"{o}{n}")
        elif style < 0.85:  # spaced
            parts.append(f" {o} {n}")
        else:  # irregular spacing
            parts.append(rng.choice(["", " ", "  "]) + o + rng.choice(["", " ", "  "]) + str(n))
    return "".join(parts)


def worded(p: Problem, rng: random.Random, held_out_phrasing: bool = False) -> str:
    """A two-number sum in a sentence of its own ("Add 45 and 23", "Subtract 17 from 45")."""
    if p.ops[0] == "+":
        pool = HELD_OUT_ADD if held_out_phrasing else TRAIN_ADD
    else:
        pool = HELD_OUT_SUB if held_out_phrasing else TRAIN_SUB
    return rng.choice(pool).format(a=p.numbers[0], b=p.numbers[1])


def render(p: Problem, rng: random.Random, held_out_phrasing: bool = False, lead_ins: bool = False,
           frames: float = 0.0) -> str:
    """The question as a user might type it (`frames`: the share put between random words)."""
    two = len(p.numbers) == 2
    if frames and not held_out_phrasing and rng.random() < frames:
        inner = spell(p, rng)  # drawn even when replaced below: the draws are part of the seeded data
        if two and rng.random() < 0.3:  # "Subtract 17 from 45" among random words too
            inner = worded(p, rng)
            inner = inner[:1].lower() + inner[1:] if rng.random() < 0.5 else inner
        return noise_frame(rng).format(e=inner)
    if two and rng.random() < 0.3:
        text = worded(p, rng, held_out_phrasing)
    else:
        text = rng.choice(HELD_OUT_TEMPLATES if held_out_phrasing else TRAIN_TEMPLATES).format(e=spell(p, rng))
    if rng.random() < 0.15:
        text = text[:1].swapcase() + text[1:]
    if lead_ins and rng.random() < 0.35:
        text = f"{rng.choice(LEAD_INS)} {text}"
    return text


def question(p: Problem, rng: random.Random | None = None, held_out_phrasing: bool = False) -> str:
    return render(p, rng, held_out_phrasing) if rng else f"What is {p.expression}?"


@dataclass(frozen=True)
class Example:
    """One training conversation: history messages, the last user turn, and the target reply."""
    messages: tuple[dict, ...]  # ends with the user turn being answered (or a tool's result)
    thinking: str | None  # None: thinking off (the prompt closes the thinking block)
    answer: str
    tools: tuple[dict, ...] | None = None  # the tools offered (rendered into the system turn)
    calls: tuple[tuple[str, dict], ...] = ()  # the reply calls these (name, arguments) instead of answering


@dataclass(frozen=True)
class Mix:
    """What a training stream holds; the defaults are what the shipped model trained on."""
    trace: str = "columns"
    arithmetic: float = 0.85  # share of sums (the rest is talk)
    thinking_off: float = 0.08  # share of sums answered at once
    cut_short: float = 0.05  # share of sums whose thinking a budget cuts
    numbers: tuple[int, ...] = (2, 2, 3, 3, 4, 4)  # how many numbers a sum has, drawn uniformly
    lead_ins: bool = False  # put a lead-in word before some questions (the polish phase)
    frames: float = 0.0  # share of sums put between random words (the later phases)
    history: float = 0.1  # share of conversations with earlier turns...
    history_turns: tuple[int, ...] = (1,)  # ...and how many, drawn uniformly
    history_sums: float = 0.5  # share of earlier turns that are sums (the rest is talk)
    # The tool phases (0 in the earlier ones, which then draw exactly the random numbers they always did):
    tools: float = 0.0  # share of conversations offered tools (tools_data.offered_tools)
    out_of_range: float = 0.0  # share of sums the demo cannot do: a number over 99, or below 0 on the way
    system: float = 0.0  # share of conversations with a system prompt of their own
    tool_arithmetic: float = 0.75  # share of tool lists that hold an arithmetic tool
    call_share: float = 0.5  # share of out-of-range sums with a tool trained on the call (the rest: the answer)


def arithmetic_example(rng: random.Random, mix: Mix = Mix(), held_out: bool = False) -> tuple[Example, Problem]:
    while True:
        p = make_problem(rng, rng.choice(mix.numbers))
        if is_held_out(p.expression) == held_out:
            break
    user = render(p, rng, lead_ins=mix.lead_ins, frames=mix.frames)
    mode = rng.random()
    if mode < mix.thinking_off:
        thinking = None
    elif mode < mix.thinking_off + mix.cut_short:  # cut short as a budget would: some lines, then the answer
        lines = thinking_text(p, mix.trace).split("\n")
        thinking = "\n".join(lines[: rng.randint(0, len(lines) - 1)])
    else:
        thinking = thinking_text(p, mix.trace)
    return Example(({"role": "user", "content": user},), thinking, answer_text(p)), p


def talk_example(rng: random.Random) -> Example:
    kind = rng.choice(list(TALK))
    prompts, reasoning, replies = TALK[kind]
    user = rng.choice(prompts)
    thinking = reasoning if rng.random() < 0.7 else None
    return Example(({"role": "user", "content": user},), thinking, rng.choice(replies))


def one_example(rng: random.Random, mix: Mix = Mix()) -> Example:
    offered = mix.tools and rng.random() < mix.tools
    tools, arith = tools_data.offered_tools(rng, mix.tool_arithmetic) if offered else (None, None)
    if rng.random() < mix.arithmetic:
        if mix.out_of_range and rng.random() < mix.out_of_range:
            ex = out_of_range_example(rng, mix, tools, arith)
        else:
            ex = arithmetic_example(rng, mix)[0]
    else:
        ex = talk_example(rng)
    if rng.random() < mix.history:  # earlier turns, with their thinking dropped as the template does
        turns = 1 if mix.history_turns == (1,) else rng.choice(mix.history_turns)
        history = ()
        for _ in range(turns):
            if rng.random() < mix.history_sums:
                if mix.out_of_range and rng.random() < mix.out_of_range:
                    history += out_of_range_turn(rng, mix, tools, arith)
                    continue
                prev = arithmetic_example(rng, mix)[0]
            else:
                prev = talk_example(rng)
            history += prev.messages + ({"role": "assistant", "content": prev.answer},)
        ex = replace(ex, messages=history + ex.messages)
    if mix.system and rng.random() < mix.system:
        ex = replace(ex, messages=({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)},) + ex.messages)
    if tools is not None:
        ex = replace(ex, tools=tuple(tools))
    return ex


# ----------------------------------------------------------------------------- sums the demo cannot do

SYSTEM_PROMPTS = ["You are a helpful assistant.", "Be concise.", "Answer briefly.",
                  "You are Elastic Chat's demo model.",
                  "You are a friendly assistant. Keep answers short.", "Think step by step.",
                  "You are a careful assistant.", "Reply in English."]
BIG, NEGATIVE = "big", "negative"
CAN_DO = "I add and subtract whole numbers from 0 to 99, with results from 0 to 199."
USE_TOOL, CANNOT = "I use the tool", "I can't do this"


def make_out_of_range(rng: random.Random, n_numbers: int, kind: str) -> Problem:
    """A sum outside the demo's range: `big`, a number from 100 up (to 9999), or `negative`, a running
    value that goes below 0 (numbers 0..99, in range until that step)."""
    if kind == BIG:
        numbers = [rng.randint(0, MAX_OPERAND) for _ in range(n_numbers)]
        for k in rng.sample(range(n_numbers), 1 if rng.random() < 0.7 else min(2, n_numbers)):
            numbers[k] = rng.randint(100, 999) if rng.random() < 0.75 else rng.randint(1000, 9999)
        return Problem(tuple(numbers), tuple(rng.choice("+-") for _ in range(n_numbers - 1)))
    while True:
        at = rng.randrange(n_numbers - 1)  # the step that goes below 0
        head = make_problem(rng, at + 1)
        if head.result < MAX_OPERAND:
            break
    below = rng.randint(head.result + 1, MAX_OPERAND)
    numbers, ops = list(head.numbers) + [below], list(head.ops) + ["-"]
    for _ in range(n_numbers - len(numbers)):
        numbers.append(rng.randint(0, MAX_OPERAND))
        ops.append(rng.choice("+-"))
    return Problem(tuple(numbers), tuple(ops))


def out_of_range_kind(p: Problem) -> str | None:
    """Why the demo cannot do `p` (BIG, NEGATIVE), or None when it can (no partial over 199 either)."""
    if any(n > MAX_OPERAND for n in p.numbers):
        return BIG
    if any(v < 0 for v in p.partials):
        return NEGATIVE
    return None if all(v <= MAX_VALUE for v in p.partials) else "over"


def negative_step(a: int, b: int) -> str:
    """"60-80: 0-0=0 6-8<0 so below 0": the columns until the top one, which has nothing to borrow from."""
    *lower, (x, y) = digit_columns(a, b)
    columns, carry = [], 0
    for lx, ly in lower:
        text, carry = minus_column(lx, ly, carry)
        columns.append(text)
    columns.append(f"{x}-{y}{'-1' if carry else ''}<0")
    return f"{a}-{b}: {' '.join(columns)} so below 0"


def out_of_range_thinking(p: Problem, can_call: bool) -> str:
    """The copy of the question, then why it is out of range, then what to do about it."""
    lines = [p.compact]
    if out_of_range_kind(p) == BIG:
        lines.append(f"{next(n for n in p.numbers if n > MAX_OPERAND)} is over 99")
    else:
        for a, o, b in zip(p.partials, p.ops, p.numbers[1:]):
            if o == "-" and b > a:
                lines.append(negative_step(a, b))
                break
            lines.append(column_step(a, o, b))
    lines.append(USE_TOOL if can_call else CANNOT)
    return "\n".join(lines)


def decline_text(p: Problem) -> str:
    """What the demo says when it cannot do a sum and has no tool for it."""
    if out_of_range_kind(p) == BIG:
        why = f"{next(n for n in p.numbers if n > MAX_OPERAND)} is over 99"
    else:
        why = "it goes below 0"
    return f"I can't work that out: {why}. {CAN_DO}"


def tool_result_text(rng: random.Random, value: int) -> str:
    """A tool's answer as tools write them."""
    r = rng.random()
    return str(value) if r < 0.7 else (f'{{"result": {value}}}' if r < 0.85 else f"Result: {value}")


def out_of_range_problem(rng: random.Random, mix: Mix, held_out: bool = False) -> Problem:
    while True:
        p = make_out_of_range(rng, rng.choice(mix.numbers), BIG if rng.random() < 0.5 else NEGATIVE)
        if is_held_out(p.expression) == held_out:
            return p


def tool_loop(p: Problem, tools: list[dict], arith: int, thinking: str | None, result: str) -> tuple[dict, ...]:
    """The assistant's call (its reasoning kept, as the template keeps it inside a tool loop) and the result."""
    tool = tools[arith]
    call = {"type": "function", "function": {"name": tools_data.tool_name(tool),
                                             "arguments": {tools_data.required_param(tool): p.compact}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    if thinking:
        turn["reasoning_content"] = thinking
    return turn, {"role": "tool", "content": result}


def out_of_range_example(rng: random.Random, mix: Mix, tools: list[dict] | None, arith: int | None,
                         held_out: bool = False) -> Example:
    """A sum the demo cannot do: with an arithmetic tool, the call (half the time) or the answer from the
    tool's result (the other half); without one, a plain no and what it can do instead."""
    p = out_of_range_problem(rng, mix, held_out)
    user = ({"role": "user", "content": render(p, rng, lead_ins=mix.lead_ins, frames=mix.frames)},)
    can_call = arith is not None
    thinking = out_of_range_thinking(p, can_call) if rng.random() >= mix.thinking_off else None
    if not can_call:
        return Example(user, thinking, decline_text(p))
    tool = tools[arith]
    call = (tools_data.tool_name(tool), {tools_data.required_param(tool): p.compact})
    if rng.random() < mix.call_share:
        return Example(user, thinking, "", calls=(call,))
    loop = tool_loop(p, tools, arith, thinking if rng.random() < 0.8 else None, tool_result_text(rng, p.result))
    after = f"The tool says {p.result}." if rng.random() >= mix.thinking_off else None
    return Example(user + loop, after, answer_text(p))


def out_of_range_turn(rng: random.Random, mix: Mix, tools: list[dict] | None, arith: int | None) -> tuple[dict, ...]:
    """An earlier turn of the conversation about a sum the demo could not do (thinking dropped)."""
    p = out_of_range_problem(rng, mix)
    user = ({"role": "user", "content": render(p, rng, lead_ins=mix.lead_ins, frames=mix.frames)},)
    if arith is None:
        return user + ({"role": "assistant", "content": decline_text(p)},)
    return user + tool_loop(p, tools, arith, None, tool_result_text(rng, p.result)) + (
        {"role": "assistant", "content": answer_text(p)},)


def training_examples(seed: int, mix: Mix = Mix()):
    """An endless, seeded stream of training examples (some with earlier turns as history)."""
    rng = random.Random(seed)
    while True:
        yield one_example(rng, mix)


def example_batch(seed: int, phase: str, step: int, size: int, mix: Mix = Mix()) -> list[Example]:
    """The batch of one training step, a function of (seed, phase, step) alone: a resumed run sees
    exactly the data it would have seen."""
    rng = random.Random(f"{seed}/{phase}/{step}")
    return [one_example(rng, mix) for _ in range(size)]


def evaluation_problems(seed: int, n: int, numbers: tuple[int, ...] = (2, 3, 4)) -> list[Problem]:
    """Held-out problems, as many with each count of numbers (two, three, four)."""
    rng = random.Random(seed + 1_000_003)
    out, seen = [], set()
    while len(out) < n:
        p = make_problem(rng, numbers[len(out) % len(numbers)])
        if is_held_out(p.expression) and p.expression not in seen:
            seen.add(p.expression)
            out.append(p)
    return out


# What the tokenizer sees of the tool phases: sums out of range, tool calls, and the system turn
# with tools (whose fixed instruction then takes fewer tokens).
TOKENIZER_TOOL_MIX = Mix(tools=0.5, out_of_range=0.3, lead_ins=True, frames=0.4)


def evaluation_out_of_range(seed: int, n: int, numbers: tuple[int, ...] = (2, 3, 4)) -> list[Problem]:
    """Held-out sums the demo cannot do, half with a number over 99 and half with a result below 0 (the
    running value in range until the last step), as many with each count of numbers."""
    rng = random.Random(seed + 2_000_029)
    out, seen = [], set()
    while len(out) < n:
        kind = (BIG, NEGATIVE)[len(out) % 2]
        k = numbers[(len(out) // 2) % len(numbers)]
        p = make_out_of_range(rng, k, kind)
        if kind == NEGATIVE and (p.result >= 0 or any(v < 0 for v in p.partials[:-1])):
            continue
        if is_held_out(p.expression) and p.expression not in seen:
            seen.add(p.expression)
            out.append(p)
    return out


def corpus(seed: int, n: int = 4000, n_tools: int = 1000) -> list[str]:
    """Texts to train the tokenizer on (both traces, so either can be trained with one tokenizer; no
    held-out phrasing, so their words reach the model as pieces it has seen; no held-out tool)."""
    from runtime.chat_template import compile_template
    from runtime.chat_template import render as render_template
    from runtime.tool_calls import format_tool_call

    from .tokenizer import CHAT_TEMPLATE

    rng = random.Random(seed)
    texts = []
    for i in range(n):
        ex = one_example(rng, Mix(trace="whole" if i % 2 else "columns"))
        texts += [m["content"] for m in ex.messages] + [ex.thinking or "", ex.answer]
    template = compile_template(CHAT_TEMPLATE)
    rng = random.Random(f"{seed}/tokenizer-tools")
    for _ in range(n_tools):
        ex = one_example(rng, TOKENIZER_TOOL_MIX)
        texts += [m["content"] for m in ex.messages] + [ex.thinking or "", ex.answer]
        texts += [format_tool_call(name, args) for name, args in ex.calls]
        if ex.tools:
            texts.append(render_template(template, messages=[{"role": "user", "content": ""}], tools=list(ex.tools)))
    return texts
