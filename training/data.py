"""Seeded synthetic data for the demo model: arithmetic where reasoning helps, plus plain talk.

The task is a chain of additions and subtractions ("What is 23 + 8 - 14 + 6?"). With thinking
on, the model works through it one step per line ("23 + 8 = 31.") and then answers; with
thinking off it must answer at once, which a small model rarely gets right for more than one
step. Some thinking traces are cut short as budget control would cut them, so the model learns
to answer after a forced `</think>`. Conversation examples teach short, useful replies about
the app. Problems whose expression hashes into the held-out bucket never appear in training.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

USER_ARITH = ["What is {e}?", "Compute {e}.", "{e} = ?", "Calculate {e}", "How much is {e}?", "what's {e}",
              "Please work out {e}.", "Solve {e}"]

TALK = {
    "greeting": (["hi", "hello", "hey", "good morning", "good evening", "hi there", "hello!", "hey, how are you?",
                  "Hi!", "Hello there"],
                 "The user greets me. I greet them back and say what I can do.",
                 ["Hello! I'm the Elastic Chat demo model. Ask me a small sum like 12 + 7 - 5.",
                  "Hi! I'm the small offline demo model of Elastic Chat. Try a sum like 23 + 8 - 4."]),
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
            ["I'm a tiny demo model that ships with Elastic Chat so it works offline. I know small sums and a few "
             "facts about this app."]),
    "thanks": (["thanks", "thank you", "thanks a lot", "Thank you!", "great, thanks"],
               "The user thanks me. I reply politely.",
               ["You're welcome!", "Glad to help!"]),
    "bye": (["bye", "goodbye", "see you", "Bye!", "good night"],
            "The user says goodbye. I say goodbye too.",
            ["Goodbye! Come back any time."]),
    "abilities": (["what can you do?", "help", "what can I ask you?", "What can you do", "how do I use you?"],
                  "The user asks what I can do. I describe my small skills.",
                  ["I can add and subtract small numbers step by step, like 12 + 7 - 5. For real questions, "
                   "download the full model in the model manager."]),
    "out_of_scope": (["what is the capital of France?", "write a poem", "explain quantum physics",
                      "who won the world cup?", "tell me a joke", "translate hello to German",
                      "write some python code", "what is the meaning of life?", "summarize this article",
                      "what's the weather today?", "recommend a book"],
                     "This is beyond a tiny demo model. I say so and point to the real model.",
                     ["I'm only a tiny demo model, so I can't answer that well. Download the real model in the "
                      "model manager for questions like this."]),
}


@dataclass(frozen=True)
class Problem:
    expression: str
    steps: tuple[str, ...]  # one line of working per operation
    result: int


def make_problem(rng: random.Random, n_ops: int) -> Problem:
    value = rng.randint(2, 60)
    expression, steps = str(value), []
    for _ in range(n_ops):
        if value > 3 and rng.random() < 0.45:
            operand = rng.randint(1, min(value, 30))
            new, op = value - operand, "-"
        else:
            operand = rng.randint(1, 30)
            new, op = value + operand, "+"
        steps.append(f"{value} {op} {operand} = {new}.")
        expression += f" {op} {operand}"
        value = new
    return Problem(expression, tuple(steps), value)


def is_held_out(expression: str) -> bool:
    return hashlib.sha256(expression.encode()).digest()[0] < 26  # about 10%


def thinking_text(p: Problem) -> str:
    return "\n".join(p.steps) + f"\nSo the answer is {p.result}."


def answer_text(p: Problem) -> str:
    return f"{p.expression} = {p.result}."


@dataclass(frozen=True)
class Example:
    """One training conversation: history messages, the last user turn, and the target reply."""
    messages: tuple[dict, ...]  # ends with the user turn being answered
    thinking: str | None  # None: thinking off (the prompt closes the thinking block)
    answer: str


def arithmetic_example(rng: random.Random, held_out: bool = False) -> tuple[Example, Problem]:
    while True:
        p = make_problem(rng, rng.choice([1, 2, 2, 3, 3, 4]))
        if is_held_out(p.expression) == held_out:
            break
    user = rng.choice(USER_ARITH).format(e=p.expression)
    mode = rng.random()
    if mode < 0.4:
        thinking = None
    elif mode < 0.55:  # cut short as a budget would: some lines, then the answer anyway
        lines = thinking_text(p).split("\n")
        thinking = "\n".join(lines[: rng.randint(0, len(lines) - 1)])
    else:
        thinking = thinking_text(p)
    return Example(({"role": "user", "content": user},), thinking, answer_text(p)), p


def talk_example(rng: random.Random) -> Example:
    kind = rng.choice(list(TALK))
    prompts, reasoning, replies = TALK[kind]
    user = rng.choice(prompts)
    thinking = reasoning if rng.random() < 0.7 else None
    return Example(({"role": "user", "content": user},), thinking, rng.choice(replies))


def training_examples(seed: int):
    """An endless, seeded stream of training examples (some with a previous turn as history)."""
    rng = random.Random(seed)
    while True:
        ex = arithmetic_example(rng)[0] if rng.random() < 0.72 else talk_example(rng)
        if rng.random() < 0.15:  # a previous turn, with its thinking dropped as the template does
            prev = arithmetic_example(rng)[0] if rng.random() < 0.5 else talk_example(rng)
            history = prev.messages + ({"role": "assistant", "content": prev.answer},)
            ex = Example(history + ex.messages, ex.thinking, ex.answer)
        yield ex


def evaluation_problems(seed: int, n: int) -> list[Problem]:
    """Held-out problems with two to four operations, the ones where thinking matters."""
    rng = random.Random(seed + 1_000_003)
    out = []
    while len(out) < n:
        p = make_problem(rng, rng.choice([2, 3, 4]))
        if is_held_out(p.expression):
            out.append(p)
    return out


def question(p: Problem, rng: random.Random | None = None) -> str:
    return (rng.choice(USER_ARITH) if rng else USER_ARITH[0]).format(e=p.expression)


def corpus(seed: int, n: int = 4000) -> list[str]:
    """Texts to train the tokenizer on."""
    stream = training_examples(seed)
    texts = []
    for _ in range(n):
        ex = next(stream)
        texts += [m["content"] for m in ex.messages] + [ex.thinking or "", ex.answer]
    return texts
