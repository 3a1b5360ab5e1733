"""Log-probabilities (runtime/logprobs.py): computed on the device beside the sampled token, read back
with it, and equal to the log-softmax of a fresh forward over the same context (the outside judge),
for every sampled token of a reply, thinking, its end and the answer, across a switch, greedy or
sampled, constrained or not."""

import math

import pytest
import torch

from runtime.engine import Engine
from runtime.events import ANSWER, THINKING, Token
from runtime.generate import ChatRequest, chat, stream_chat
from runtime.logprobs import MAX_TOP_LOGPROBS, token_logprobs
from runtime.sampling import SamplingSettings
from tests.engine_support import HELLO


@pytest.fixture(scope="module")
def engine(checkpoints):
    return Engine.load(checkpoints["hybrid"], max_context=512)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("top", [0, 1, 5, MAX_TOP_LOGPROBS])
def test_the_device_vector_is_the_log_softmax(seed, top):
    """Random logits, some masked (a grammar's -inf), the chosen token anywhere: the vector is
    [its log-probability, the top ids, their log-probabilities], the reference's log-softmax."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 300, generator=g) * (1 + seed)
    logits[0, torch.randperm(300, generator=g)[:100]] = float("-inf")
    allowed = torch.nonzero(logits[0] > float("-inf")).reshape(-1)
    token = allowed[torch.randint(len(allowed), (1,), generator=g)]
    values = token_logprobs(logits, token, top)
    reference = torch.log_softmax(logits[0].double(), -1)
    assert values.shape == (1 + 2 * top,) and values.dtype == torch.float32
    assert values[0].item() == pytest.approx(reference[token].item(), abs=1e-5)
    best = reference.topk(top)
    assert values[1:1 + top].long().tolist() == best.indices.tolist()
    assert values[1 + top:].tolist() == pytest.approx(best.values.tolist(), abs=1e-5)


def reference_logprobs(engine, name, context):
    """log-softmax of a fresh prefill of `context` on `name`: the distribution of the next token."""
    cache = engine.model.new_cache(name, engine.max_context)
    return torch.log_softmax(engine.model.forward(name, cache, context).reshape(-1).double(), -1)


@pytest.mark.parametrize("sampling", [SamplingSettings(temperature=0), SamplingSettings(0.8, 0.9, 20, 0.0, 3)])
@pytest.mark.parametrize("top", [0, 3])
def test_every_sampled_token_carries_its_log_probability(engine, sampling, top):
    """A reply that thinks on one submodel and answers on another: each sampled Token's log-probability
    and alternatives equal a fresh forward's over the context before it; forced tokens carry none."""
    request = ChatRequest(HELLO, "small", "full", 6, 14, sampling, logprobs=top)
    events = list(stream_chat(engine, request))
    tokens = [e for e in events if isinstance(e, Token) and e.token_id is not None]
    prompt = engine.chat.prompt_ids(list(HELLO), enable_thinking=True)
    context, checked = list(prompt), {THINKING: 0, ANSWER: 0}
    for t in tokens:
        if t.forced:
            assert t.logprob is None
        else:
            ref = reference_logprobs(engine, t.submodel, context)
            assert t.logprob.logprob == pytest.approx(ref[t.token_id].item(), abs=1e-3), t
            assert t.logprob.token == engine.chat.tokenizer.decode([t.token_id], skip_special_tokens=False)
            assert len(t.logprob.top) == top
            best = ref.topk(top)
            assert [a.logprob for a in t.logprob.top] == pytest.approx(best.values.tolist(), abs=1e-3)
            if sampling.greedy and top:
                assert t.logprob.top[0].logprob == pytest.approx(t.logprob.logprob, abs=1e-6)
            checked[t.phase] += 1
        context.append(t.token_id)
    assert checked[THINKING] and checked[ANSWER], checked


def test_constrained_tokens_carry_the_masked_distribution(engine):
    """Under a grammar the log-probabilities are those of the masked distribution: every alternative is a
    token the grammar allows, and none is -inf as JSON can carry (-9999 stands for it)."""
    fmt = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
           "required": ["a"]}
    done = None
    for event in stream_chat(engine, ChatRequest(HELLO, None, "full", 0, 20, SamplingSettings(temperature=0),
                                                 response_format=fmt, logprobs=2)):
        if isinstance(event, Token) and event.logprob is not None:
            assert all(math.isfinite(a.logprob) for a in (event.logprob, *event.logprob.top))
            assert event.logprob.logprob <= 0
        done = event
    assert done.answer_text.startswith("{")


def test_without_logprobs_nothing_rides_back(engine):
    done_events = list(stream_chat(engine, ChatRequest(HELLO, "small", "full", 4, 10, SamplingSettings(temperature=0))))
    assert all(e.logprob is None for e in done_events if isinstance(e, Token))
    with_them = chat(engine, ChatRequest(HELLO, "small", "full", 4, 10, SamplingSettings(temperature=0), logprobs=4))
    without = chat(engine, ChatRequest(HELLO, "small", "full", 4, 10, SamplingSettings(temperature=0)))
    assert with_them.answer_text == without.answer_text  # asking changes nothing of the reply
