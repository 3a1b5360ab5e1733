"""Sampling settings and the sampler the decode loop uses, built once per reply.

    sample = DeviceSampler(SamplingSettings(temperature=0.7, top_p=0.95, seed=1), device)
    token = sample.on_device(logits)   # (1,) long on the device, no host sync (the decode loop)
    token_id = sample(logits)          # the id on the host (scoring, tests)

Temperature 0 is greedy, and so is any temperature below GREEDY_BELOW: dividing logits by 1e-300
(a value the CLI, the server and a settings file all accept as a number in range) overflows float32
to infinities whose softmax is NaN, which sampled a garbage token; this file is the one place that
decides. Filters apply in the order top-k, top-p, min-p, each keeping at
least one token. A seeded device generator makes a run repeat exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import UsageError
from .options import MIN_P, SEED, TEMPERATURE, TOP_K, TOP_P, OptionError

# A thousandth: the likeliest token already wins all but near-ties there, and it is far above where
# dividing float32 logits of about 30 by the temperature overflows (about 1e-37).
GREEDY_BELOW = 1e-3


@dataclass(frozen=True)
class SamplingSettings:
    """Defaults and ranges are runtime/options.py's, as the CLI, the server and the app check them."""
    temperature: float = TEMPERATURE.default
    top_p: float = TOP_P.default
    top_k: int = TOP_K.default  # 0: off
    min_p: float = MIN_P.default
    seed: int | None = SEED.default

    @property
    def greedy(self) -> bool:
        """Always the likeliest token: temperature 0, or one too small to divide by (GREEDY_BELOW)."""
        return self.temperature < GREEDY_BELOW

    def check(self) -> SamplingSettings:
        try:
            for option in (TEMPERATURE, TOP_P, TOP_K, MIN_P, SEED):
                value = getattr(self, option.name)
                if value is not None or option.default is not None:
                    option.parse(value)
        except OptionError as e:
            raise UsageError(str(e)) from None
        return self


class DeviceSampler:
    """Samples on the device: greedy, or temperature with top-k, top-p and min-p and a device
    generator (a fixed seed repeats exactly). `on_device` returns a (1,) long tensor without a
    host sync; calling the sampler returns the id on the host."""

    def __init__(self, settings: SamplingSettings, device: torch.device | str = "cpu"):
        self.settings = settings.check()
        device = torch.device(device)
        self.generator = None
        if not settings.greedy and device.type != "meta":  # meta has no generator (and no values)
            self.generator = torch.Generator(device=device)
            if settings.seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(settings.seed)

    @torch.inference_mode()
    def on_device(self, logits: torch.Tensor) -> torch.Tensor:
        s = self.settings
        logits = raw = logits.reshape(-1).float()  # (vocab,)
        if s.greedy:
            return self._mark_invalid(raw, logits.argmax().reshape(1))
        logits = logits / s.temperature
        if s.top_k and s.top_k < logits.numel():
            kth = torch.topk(logits, s.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if s.top_p < 1:
            sorted_probs, order = probs.sort(descending=True)
            drop = (sorted_probs.cumsum(0) - sorted_probs) >= s.top_p  # the tokens before already cover top_p
            probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0))
        if s.min_p > 0:
            probs = probs.masked_fill(probs < s.min_p * probs.max(), 0)
        # argmax of p / E with E ~ Exp(1) picks token i with probability p_i (the exponential race),
        # with no normalisation and no host-side search.
        race = torch.empty_like(probs).exponential_(generator=self.generator).clamp_(min=1e-30)
        return self._mark_invalid(raw, (probs / race).argmax().reshape(1))

    @staticmethod
    def _mark_invalid(logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """-1 instead of a token when the logits hold NaN (damaged weights) or rule out every token,
        decided on the device so the step never waits for the host; `DecodeStep.receive` turns it into
        an error. -inf alone is fine: logits processors and samplers mask tokens with it."""
        return token.masked_fill(torch.isnan(logits).any() | ~(logits > float("-inf")).any(), -1)

    def __call__(self, logits: torch.Tensor) -> int:
        return int(self.on_device(logits))
