"""The Auto depth: thinking starts on the smallest submodel and moves up, mid-thought, when the
thinker is unsure of its next token.

The signal is the entropy (in nats) of the thinker's next-token distribution: the softmax of
the logits the token is sampled from, at temperature 1 (so it means the same at any sampling
setting). It is computed on the device from logits the decode step already has
(decode_step.token_signals) and read back with the token in the one host sync per token
(DecodeStep.send/receive): no extra forward pass, no extra sync; and only while there is a
larger submodel to climb to.
When its mean over the last `window` tokens exceeds the threshold, the token just sampled is not
kept: the next submodel up the ladder re-prefills the thought so far (the exact switch) and
decides that token itself; its Switch event says reason "escalate". The parent answers.

Why entropy, and the threshold: `python -m training.auto_signal` measures the candidates on
held-out sums and writes what it picks into the checkpoint's elastic.json as `auto_depth`; a
checkpoint without it uses the depth table's default (depth_levels.json, the Auto row).

This module is plain Python (no torch), so elastic.json's validation stays light.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .errors import CheckpointError, show


class Signals(NamedTuple):
    """One token's signals, read back with it: the entropy of the distribution it was sampled from
    (nats), and its doubt (1 - the largest probability)."""
    entropy: float
    doubt: float


SIGNALS = Signals._fields
MAX_THRESHOLD = 64.0  # no distribution over fewer than e^64 tokens has more entropy


def read_signals(values) -> Signals | None:
    """The host's values (a tuple or list read back with the token) as Signals; None when not watched."""
    return None if values is None else Signals(*(float(v) for v in values))


@dataclass(frozen=True)
class AutoPolicy:
    """When a thinker is struggling: the mean of its `signal` over its last `window` tokens exceeds
    `threshold`; and the submodel the Auto stop's thought starts on (`start`, a submodel name of the
    checkpoint; None: the depth table's thinker, the smallest)."""
    signal: str = "entropy"
    threshold: float = 1.0
    window: int = 1
    start: str | None = None

    def as_dict(self) -> dict:
        out = {"signal": self.signal, "threshold": self.threshold, "window": self.window}
        return out if self.start is None else dict(out, start=self.start)


MAX_WINDOW, MAX_NOTE, MAX_START = 256, 1000, 64  # MAX_START: a submodel name's longest (checkpoint/submodels.py)
POLICY_KEYS = ("signal", "threshold", "window", "start", "measured")


def parse_policy(data, where: str, path=None) -> AutoPolicy:
    """An `auto_depth` object ({"signal": "entropy", "threshold": 0.6, "window": 1, "start": "1.0M"}, every
    key optional, plus "measured", a note saying where the numbers come from) checked field by field;
    raises CheckpointError naming `where`. `start` is checked here as a name only: whether it names a
    submodel on Auto's ladder is for whoever knows the submodels (checkpoint/submodels.py check_auto_start)."""
    def fail(message):
        raise CheckpointError(path or where, f"{where}: {message}; fix it, or delete it to use the depth "
                                             "table's default (python -m training.auto_signal measures one)")

    if not isinstance(data, dict):
        fail("must be an object such as {\"signal\": \"entropy\", \"threshold\": 0.6}")
    unknown = sorted(set(data) - set(POLICY_KEYS))
    if unknown:
        fail(f"unknown key {show(unknown[0], 40)}; it takes {', '.join(POLICY_KEYS)}")
    signal = data.get("signal", AutoPolicy.signal)
    if signal not in SIGNALS:
        fail(f"signal {show(signal, 40)} is not one of {', '.join(SIGNALS)}")
    threshold = data.get("threshold", AutoPolicy.threshold)
    top = 1.0 if signal == "doubt" else MAX_THRESHOLD
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold) \
            or not 0 <= threshold <= top:
        fail(f"threshold {str(threshold)[:40]} must be a number from 0 to {top:g} for signal {signal}")
    window = data.get("window", AutoPolicy.window)
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
        fail(f"window {str(window)[:40]} must be a whole number of tokens from 1 to {MAX_WINDOW}")
    start = data.get("start")
    if start is not None and (not isinstance(start, str) or not start.strip() or len(start) > MAX_START
                              or not start.isprintable()):
        fail(f"start {show(start, 40)} must be the name of a submodel in elastic.json's submodels")
    note = data.get("measured", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        fail(f"measured must be a note of at most {MAX_NOTE} characters")
    return AutoPolicy(signal, float(threshold), window, start)


class Watch:
    """The host's side of the policy for one thinker: its last `window` signal values."""

    def __init__(self, policy: AutoPolicy):
        self.policy = policy
        self.recent: deque[float] = deque(maxlen=policy.window)

    def struggling(self, signals: Signals | None) -> bool:
        """Adds one token's signals; True when the window is full and its mean exceeds the threshold."""
        if signals is None:
            return False
        self.recent.append(getattr(signals, self.policy.signal))
        full = len(self.recent) == self.policy.window
        return full and sum(self.recent) / len(self.recent) > self.policy.threshold


@dataclass(frozen=True)
class Escalation:
    """What makes a reply Auto: the submodels a thought may climb, smallest first (the first is where
    it starts), and when to climb."""
    ladder: tuple[str, ...]
    policy: AutoPolicy

    def next_rung(self, current: str) -> str | None:
        """The submodel above `current` on the ladder; None at the top or off the ladder."""
        if current not in self.ladder:
            return None
        i = self.ladder.index(current)
        return self.ladder[i + 1] if i + 1 < len(self.ladder) else None


def token_signals(logits: torch.Tensor) -> torch.Tensor:
    """The Auto depth's signals of softmax(logits), in auto_depth.Signals order (entropy in nats, doubt =
    1 - the top probability), as a (2,) fp32 device tensor, with no host sync. Tokens masked with -inf
    count as impossible (entr(0) = 0)."""
    probs = torch.softmax(logits.reshape(-1).float(), dim=-1)
    return torch.stack([torch.special.entr(probs).sum(), 1 - probs.max()])
