"""Samplers, built once as closures: `sampler(logits) -> token id`.

    sample = make_sampler(temperature=0.7, top_p=0.95, seed=1)
    token = sample(logits)   # logits: (vocab,) or (1, vocab), fp32

Temperature 0 is greedy. Filters apply in the order top-k, top-p, min-p, each keeping at
least one token. A seeded generator makes a run repeat exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .errors import UsageError

Sampler = Callable[[torch.Tensor], int]


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0  # 0: off
    min_p: float = 0.0
    seed: int | None = None

    def check(self) -> "SamplingSettings":
        if not 0 <= self.temperature <= 10:
            raise UsageError(f"temperature {self.temperature} must be between 0 and 10")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top-p {self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise UsageError(f"top-k {self.top_k} must be 0 (off) or positive")
        if not 0 <= self.min_p < 1:
            raise UsageError(f"min-p {self.min_p} must be in [0, 1)")
        return self


def make_sampler(settings: SamplingSettings, device: torch.device | str = "cpu") -> Sampler:
    settings.check()
    if settings.temperature == 0:
        return lambda logits: int(logits.reshape(-1).argmax())
    generator = torch.Generator(device=device)
    if settings.seed is None:
        generator.seed()
    else:
        generator.manual_seed(settings.seed)
    temperature, top_p, top_k, min_p = settings.temperature, settings.top_p, settings.top_k, settings.min_p

    def sample(logits: torch.Tensor) -> int:
        logits = logits.reshape(-1).float() / temperature
        if top_k and top_k < logits.numel():
            kth = torch.topk(logits, top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if top_p < 1:
            sorted_probs, order = probs.sort(descending=True)
            # drop a token when the tokens before it already cover top_p
            drop = (sorted_probs.cumsum(0) - sorted_probs) >= top_p
            probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0))
        if min_p > 0:
            probs = probs.masked_fill(probs < min_p * probs.max(), 0)
        return int(torch.multinomial(probs, 1, generator=generator))

    return sample
