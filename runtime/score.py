"""Scoring a token sequence: the log-probability of each token given those before it."""

from __future__ import annotations

import torch

from .model import ElasticModel


@torch.inference_mode()
def score(model: ElasticModel, name: str, ids: list[int], stepwise: bool = False) -> list[float]:
    """logprobs[i-1] = log p(ids[i] | ids[:i]) under submodel `name`, for i >= 1.

    stepwise=False runs one prefill over all tokens; stepwise=True prefills token 0 and then
    takes one cached decode step per token, exercising the decode path instead.
    """
    model.submodel(name)
    cache = model.new_cache(name, len(ids))
    if stepwise:
        logits = torch.cat([model.forward(name, cache, [t]) for t in ids[:-1]])  # (T-1, vocab)
    else:
        logits = model.forward(name, cache, ids, all_logits=True)[:-1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    target = torch.as_tensor(ids[1:], device=logprobs.device)
    return logprobs.gather(1, target[:, None])[:, 0].tolist()
