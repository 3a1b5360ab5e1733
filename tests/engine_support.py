"""Helpers the runtime, server and window tests share to drive an engine (plain functions; the
fixtures that build engines live in conftest.py)."""

import threading
import time
from contextlib import contextmanager

import torch

from runtime.controls import Controls
from runtime.engine import Engine

HELLO = ({"role": "user", "content": "Hello! What is 12 + 34?"},)


def forbid(*token_ids):
    """A processor that keeps the model from choosing these tokens (so the budget decides)."""
    def process(context, logits):
        logits = logits.clone()
        logits[..., list(token_ids)] = float("-inf")
        return logits
    return process


def assert_same_as_fresh_prefill(engine, checkpoint, submodel: str) -> None:
    """The submodel's live cache predicts the next token as a fresh prefill of its whole context does."""
    live = engine.cache(submodel)
    fresh = Engine.load(checkpoint, max_context=512)
    fresh.model.forward(submodel, fresh.cache(submodel), list(live.tokens))
    a = engine.model.forward(submodel, live, [7])
    b = fresh.model.forward(submodel, fresh.cache(submodel), [7])
    assert torch.allclose(a, b, atol=1e-4)


class Valve:
    """How many more tokens the held replies may make, all replies together (None: any number)."""

    def __init__(self):
        self._changed = threading.Condition()
        self._left: int | None = 0

    def allow(self, tokens: int) -> None:
        """Lets `tokens` more tokens through."""
        with self._changed:
            self._left = None if self._left is None else self._left + tokens
            self._changed.notify_all()

    def open(self) -> None:
        """Lets every reply run on at full speed."""
        with self._changed:
            self._left = None
            self._changed.notify_all()

    def wait_for_turn(self, controls) -> None:
        """Before a reply's next token: waits for the valve, or for a stop of this reply (which the
        decode loop then sees at its next token, as it would have while running)."""
        deadline = time.monotonic() + HELD_AT_MOST_S
        with self._changed:
            while self._left == 0 and not controls.stop_requested and time.monotonic() < deadline:
                self._changed.wait(0.01)  # the stop flag has no condition of its own: look again soon
            if self._left and not controls.stop_requested:
                self._left -= 1


HELD_AT_MOST_S = 300  # a held reply goes on after this, should a test fail while it waits


@contextmanager
def held_engine(engine):
    """Replies on `engine` never end by themselves (end of turn masked: only max_tokens or a stop ends
    them) and wait before each token until the yielded Valve lets them through, so a test finds a reply
    running, at a known token, however fast or loaded the machine. Every reply in the process is held
    (the decode loop asks its Controls for thinking requests once before each token: that is where it
    waits); leaving the block opens the valve."""
    valve, decoder, ends = Valve(), engine.decoder, sorted(engine.chat.special.end_of_turn)
    forward, take = engine.model.forward, Controls.take_thinking_request

    def endless(logits):
        logits = logits.clone()  # the engine's are inference tensors (and the step's a reused buffer)
        logits[..., ends] = float("-inf")
        return logits

    class EndlessStep:
        def __init__(self, step):
            self.step = step

        def send(self, token, signals=None):
            return endless(self.step.send(token, signals))

        def forward_token(self, token):
            return endless(self.step.forward_token(token))

        def __getattr__(self, name):
            return getattr(self.step, name)

    def held_take(controls):
        valve.wait_for_turn(controls)
        return take(controls)

    engine.model.forward = lambda name, cache, ids, all_logits=False: endless(forward(name, cache, ids, all_logits))
    engine.decoder = lambda name: EndlessStep(decoder(name))
    Controls.take_thinking_request = held_take
    try:
        yield valve
    finally:
        valve.open()
        Controls.take_thinking_request = take
        del engine.model.forward
        del engine.decoder


class Scripted:
    """A logits processor that spells one reply per round (a new round: a new context list), each a list
    of pieces: text, or a special token id; then ends the turn. It keeps the contexts it saw."""

    def __init__(self, engine, rounds):
        self.engine, self.rounds, self.contexts = engine, rounds, []
        self.round, self.start, self.last = -1, 0, None

    def ids(self, pieces):
        out = []
        for p in pieces:
            out += [p] if isinstance(p, int) else self.engine.chat.encode(p)
        return out + [min(self.engine.chat.special.end_of_turn)]

    def __call__(self, context, logits):
        if context is not self.last:
            self.last, self.start = context, len(context)
            self.round += 1
            self.contexts.append(context)
        target = self.ids(self.rounds[min(self.round, len(self.rounds) - 1)])
        logits = torch.full_like(logits, float("-inf"))
        logits[..., target[min(len(context) - self.start, len(target) - 1)]] = 0
        return logits
