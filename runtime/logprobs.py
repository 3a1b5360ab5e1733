"""Log-probabilities of the sampled tokens, computed on the device beside each token and read back
with it in the decode loop's one wait per token (as Auto's signals are: auto_depth.token_signals,
DecodeStep.send), so asking for them adds no host sync.

    values = token_logprobs(logits, token, top=5)   # (1 + 2*top,) fp32 on the device, no sync
    ... step.send(token, values); step.receive() ...
    logprob = read_logprobs(step.signals, token, piece)  # a TokenLogprob: the token's text, its log-probability,
                                                          # and the `top` likeliest tokens with theirs

The distribution is the one the token was drawn from before the sampler's own settings: softmax of
the logits after the logits processors (a grammar's mask included) at temperature 1, as vLLM and
OpenAI report it (the temperature, top-p, top-k and min-p shape the draw, not the numbers). A token
a grammar masked out has -inf (it can never be the sampled one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

MAX_TOP_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs allows


@dataclass(frozen=True)
class Alternative:
    """One of the likeliest tokens at a position: its text, log-probability and UTF-8 bytes (None when
    the token is part of a character, whose bytes its text cannot carry)."""
    token: str
    logprob: float
    bytes: tuple[int, ...] | None

    def to_dict(self) -> dict:
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.bytes) if self.bytes else None}


@dataclass(frozen=True)
class TokenLogprob(Alternative):
    """The sampled token's log-probability and the `top` likeliest tokens at its position, likeliest first."""
    top: tuple[Alternative, ...] = ()

    def to_dict(self) -> dict:
        return {**super().to_dict(), "top_logprobs": [a.to_dict() for a in self.top]}


def token_logprobs(logits: torch.Tensor, token: torch.Tensor, top: int) -> torch.Tensor:
    """[the sampled token's log-probability, the top ids..., their log-probabilities...] as one
    (1 + 2*top,) fp32 device tensor, with no host sync. Ids ride as floats: exact below 2**24, and
    vocabularies are far smaller. `token` may be the sampler's -1 (invalid logits): it reads as 0,
    and the step refuses the token anyway."""
    logp = torch.log_softmax(logits.reshape(-1).float(), dim=-1)  # (vocab,)
    chosen = logp.gather(0, token.reshape(1).clamp(min=0))  # (1,)
    if top == 0:
        return chosen
    values, ids = torch.topk(logp, min(top, logp.numel()))
    return torch.cat([chosen, ids.float(), values])


def read_logprobs(values, token: int, piece: Callable[[int], str]) -> TokenLogprob:
    """The host's copy of `token_logprobs` (read back with `token`) as a TokenLogprob; `piece` turns
    a token id into its text."""
    values = [float(v) for v in values]
    top = (len(values) - 1) // 2
    ids, lps = values[1:1 + top], values[1 + top:]
    return TokenLogprob(*_piece(piece, token, values[0]),
                        top=tuple(Alternative(*_piece(piece, int(i), lp)) for i, lp in zip(ids, lps)))


def _piece(piece: Callable[[int], str], token: int, logprob: float) -> tuple[str, float, tuple[int, ...] | None]:
    text = piece(token)
    raw = None if "\ufffd" in text else tuple(text.encode("utf-8"))
    return text, logprob if math.isfinite(logprob) else -9999.0, raw  # JSON has no -inf (OpenAI: -9999.0)
