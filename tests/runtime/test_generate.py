"""Streaming chat with elastic budget control, on a tiny checkpoint with a real tokenizer and
chat template. The model is random, so tests steer it where needed with logits processors
(a test-only nudge that the request carries, not a change to the engine)."""

import json
import subprocess
import sys

import pytest
import torch

from runtime.controls import Controls
from runtime.engine import Engine
from runtime.events import ANSWER, THINKING, Done, Prefill, Switch, Token
from runtime.generate import ChatRequest, chat, stream_chat
from runtime.reply_record import GRACE_TOKENS
from runtime.sampling import SamplingSettings
from tests.engine_support import HELLO, forbid

GREEDY = SamplingSettings(temperature=0)


def events_of(engine, **kw):
    kw.setdefault("messages", HELLO)
    kw.setdefault("sampling", GREEDY)
    return list(stream_chat(engine, ChatRequest(**kw)))


def force_at(position_in_reply, token_id, prompt_len):
    """A processor that makes token `token_id` the choice at one position of the reply."""
    def process(context, logits):
        if len(context) - prompt_len == position_in_reply:
            logits = torch.full_like(logits, float("-inf"))
            logits[..., token_id] = 0
        return logits
    return process


def test_event_order_think_small_answer_full(engine):
    sp = engine.chat.special
    events = events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=8,
                       max_new_tokens=40, logits_processors=(forbid(sp.think_end, *sp.end_of_turn),))
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "Prefill" and kinds[-1] == "Done"
    switch_at = kinds.index("Switch")
    assert all(k == "Token" for k in kinds[1:switch_at]) and all(k == "Token" for k in kinds[switch_at + 1:-1])
    before, after = events[1:switch_at], events[switch_at + 1:-1]
    assert {(e.phase, e.submodel) for e in before} == {(THINKING, "small")}
    assert {(e.phase, e.submodel) for e in after} == {(ANSWER, "full")}
    assert before[-1].token_id == sp.think_end and before[-1].forced
    switch, done = events[switch_at], events[-1]
    assert (switch.from_submodel, switch.to_submodel) == ("small", "full")
    # The answering submodel re-prefilled exactly the context it had not seen: prompt + thinking.
    assert switch.reprefill_tokens == events[0].prompt_tokens + len(before)
    assert done.budget_hit and done.thinking_tokens == len(before) and done.answer_tokens == len(after)
    switched = (done.switch_from, done.switch_to, done.switch_reprefill_tokens)
    assert switched == ("small", "full", switch.reprefill_tokens)
    assert done.finish_reason == "length"
    assert all(isinstance(e.latency_ms, float) and e.latency_ms >= 0 for e in before + after)


@pytest.mark.slow
@pytest.mark.parametrize("budget", [1, 5, 12, 30])
def test_budget_is_enforced(engine, budget):
    sp = engine.chat.special
    events = events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=budget,
                       max_new_tokens=200, logits_processors=(forbid(sp.think_end, *sp.end_of_turn),))
    thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING]
    done = events[-1]
    assert budget <= len(thinking) <= budget + GRACE_TOKENS
    assert done.thinking_tokens == len(thinking) and done.budget_hit
    assert thinking[-1].token_id == sp.think_end and thinking[-1].forced
    # Forcing waits for the end of a line: </think> stands on a line of its own.
    assert done.thinking_text.endswith("\n")
    assert any(isinstance(e, Token) and e.phase == ANSWER for e in events)


def test_natural_end_of_thinking_is_not_a_budget_hit(engine):
    sp = engine.chat.special
    prompt_len = len(engine.chat.prompt_ids(list(HELLO), True))
    events = events_of(engine, think_submodel="mid", answer_submodel="full", thinking_budget=50, max_new_tokens=30,
                       logits_processors=(force_at(3, sp.think_end, prompt_len),))
    thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING]
    assert len(thinking) == 4 and thinking[-1].token_id == sp.think_end and not thinking[-1].forced
    assert not events[-1].budget_hit


def test_budget_zero_turns_thinking_off(engine):
    events = events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=0, max_new_tokens=10)
    assert not [e for e in events if isinstance(e, Switch)]
    assert {e.phase for e in events if isinstance(e, Token)} == {ANSWER}
    assert events[-1].think_submodel is None
    # The template closed the thinking block in the prompt.
    prompt = engine.chat.prompt_ids(list(HELLO), enable_thinking=False)
    assert prompt[-2:] == [engine.chat.special.think_start, engine.chat.special.think_end]


def test_unbounded_thinking_still_leaves_room_for_an_answer(engine):
    sp = engine.chat.special
    events = events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=None,
                       max_new_tokens=24, logits_processors=(forbid(sp.think_end, *sp.end_of_turn),))
    done = events[-1]
    assert done.answer_tokens >= 1 and done.thinking_tokens + done.answer_tokens <= 24


def test_end_of_turn_inside_thinking_forces_an_answer(engine):
    sp = engine.chat.special
    eot = min(sp.end_of_turn)
    prompt_len = len(engine.chat.prompt_ids(list(HELLO), True))
    events = events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=40, max_new_tokens=30,
                       logits_processors=(force_at(2, eot, prompt_len), forbid(sp.think_end)))
    thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING]
    assert thinking[-1].token_id == sp.think_end and thinking[-1].forced
    assert eot not in [e.token_id for e in thinking]
    assert events[-1].answer_tokens > 0


def test_switch_state_equals_a_fresh_prefill(engine, checkpoints):
    sp = engine.chat.special
    events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=6, max_new_tokens=12,
              logits_processors=(forbid(sp.think_end, *sp.end_of_turn),))
    live = engine.cache("full")
    context = list(live.tokens)
    fresh = Engine.load(checkpoints["hybrid"], max_context=512)
    fresh.model.forward("full", fresh.cache("full"), context)
    probe = [7]
    a = engine.model.forward("full", live, probe)
    b = fresh.model.forward("full", fresh.cache("full"), probe)
    assert torch.allclose(a, b, atol=1e-4)
    for x, y in zip(live.layers, fresh.cache("full").layers):
        if hasattr(x, "ssm"):
            assert torch.allclose(x.ssm, y.ssm, atol=1e-4) and torch.allclose(x.conv, y.conv, atol=1e-5)
        elif hasattr(x, "k"):
            n = len(context) + 1
            assert torch.allclose(x.k[:, :n], y.k[:, :n], atol=1e-5)


def test_stop_ends_within_one_token(engine):
    controls = Controls()
    stream = stream_chat(engine, ChatRequest(HELLO, None, "full", max_new_tokens=100, sampling=GREEDY), controls)
    tokens_after_stop = 0
    seen = 0
    for event in stream:
        if isinstance(event, Token):
            seen += 1
            if controls.stop_requested:
                tokens_after_stop += 1
            if seen == 3:
                controls.stop()
        if isinstance(event, Done):
            assert event.finish_reason == "stopped"
    assert tokens_after_stop == 0


def test_stop_before_the_prefill_finishes(engine):
    controls = Controls()
    controls.stop()
    events = list(stream_chat(engine, ChatRequest(HELLO, None, "full", max_new_tokens=5), controls))
    assert len(events) == 1 and events[0].finish_reason == "stopped"


def test_fixed_seed_repeats_exactly(engine):
    sampling = SamplingSettings(temperature=0.9, top_p=0.95, top_k=50, seed=1234)
    runs = [[e.token_id for e in events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=10,
                                           max_new_tokens=30, sampling=sampling) if isinstance(e, Token)]
            for _ in range(2)]
    assert runs[0] == runs[1]
    other = SamplingSettings(temperature=0.9, top_p=0.95, top_k=50, seed=99)
    third = [e.token_id for e in events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=10,
                                           max_new_tokens=30, sampling=other) if isinstance(e, Token)]
    assert third != runs[0]


def test_follow_up_turn_reuses_the_prefix(engine, checkpoints):
    sp = engine.chat.special
    common = dict(think_submodel="small", answer_submodel="full", thinking_budget=6, max_new_tokens=16,
                  sampling=GREEDY, logits_processors=(forbid(*sp.end_of_turn),))
    first = chat(engine, ChatRequest(HELLO, **common))
    turn2 = HELLO + ({"role": "assistant", "content": first.answer_text, "reasoning_content": first.thinking_text},
                     {"role": "user", "content": "And 5 + 5?"})
    events = list(stream_chat(engine, ChatRequest(turn2, **common)))
    prefill = events[0]
    assert isinstance(prefill, Prefill) and prefill.reused_tokens > 0
    assert prefill.prefilled_tokens < prefill.prompt_tokens
    switch = next(e for e in events if isinstance(e, Switch))
    assert switch.reprefill_tokens < prefill.prompt_tokens  # the answering model reused its own snapshot
    # Reuse changes nothing: a fresh engine gives the same reply token for token.
    fresh = Engine.load(checkpoints["hybrid"], max_context=512)
    again = list(stream_chat(fresh, ChatRequest(turn2, **common)))
    assert again[0].reused_tokens == 0
    assert [e.token_id for e in events if isinstance(e, Token)] == [e.token_id for e in again if isinstance(e, Token)]


def test_submodel_request_takes_effect_at_the_next_token(engine):
    controls = Controls()
    events = []
    for event in stream_chat(engine, ChatRequest(HELLO, None, "full", max_new_tokens=12, sampling=GREEDY), controls):
        events.append(event)
        if isinstance(event, Token) and len([e for e in events if isinstance(e, Token)]) == 4:
            controls.request_submodel("small")
    tokens = [e for e in events if isinstance(e, Token)]
    assert [t.submodel for t in tokens[:4]] == ["full"] * 4
    assert all(t.submodel == "small" for t in tokens[4:])
    idx = next(i for i, e in enumerate(events) if isinstance(e, Switch))
    assert isinstance(events[idx - 1], Token) and events[idx - 1] is tokens[3]


def test_stop_strings_end_the_reply_without_showing_the_stop(engine):
    first = chat(engine, ChatRequest(HELLO, None, "full", max_new_tokens=20, sampling=GREEDY))
    text = first.answer_text
    assert len(text) > 4
    stop = text[2:4]
    events = events_of(engine, think_submodel=None, answer_submodel="full", max_new_tokens=20, stop_strings=(stop,))
    done = events[-1]
    assert done.finish_reason == "stop_string"
    shown = "".join(e.text for e in events if isinstance(e, Token))
    assert stop not in shown and done.answer_text == text[:text.index(stop)]


def test_text_deltas_never_split_a_character(engine):
    """Byte-level tokens split multi-byte characters; the deltas never do."""
    target = engine.chat.encode("café ✓ 你好 🙂")
    prompt_len = len(engine.chat.prompt_ids(list(HELLO), False))

    def spell(context, logits):
        i = len(context) - prompt_len
        logits = torch.full_like(logits, float("-inf"))
        logits[..., target[i] if i < len(target) else min(engine.chat.special.end_of_turn)] = 0
        return logits

    events = events_of(engine, think_submodel=None, answer_submodel="full", max_new_tokens=40,
                       logits_processors=(spell,))
    deltas = [e.text for e in events if isinstance(e, Token)]
    assert "".join(deltas) == "café ✓ 你好 🙂"
    assert all("\ufffd" not in d for d in deltas)
    assert len(deltas) > len([d for d in deltas if d])  # some tokens held their bytes back
    assert events[-1].finish_reason == "end_of_turn"


def test_unknown_submodel_and_bad_values_are_clear(engine):
    from runtime.errors import UsageError

    with pytest.raises(UsageError, match="unknown submodel 'huge'"):
        list(stream_chat(engine, ChatRequest(HELLO, "huge", "full")))
    with pytest.raises(UsageError, match="temperature"):
        list(stream_chat(engine, ChatRequest(HELLO, None, "full", sampling=SamplingSettings(temperature=-1))))


def test_context_overflow_is_a_clear_error(checkpoints):
    small = Engine.load(checkpoints["hybrid"], max_context=16)
    from runtime.errors import UsageError

    with pytest.raises(UsageError, match="fills the context"):
        list(stream_chat(small, ChatRequest(({"role": "user", "content": "word " * 40},), None, "full")))


@pytest.mark.slow
def test_generate_cli_json_contract(checkpoints):
    out = subprocess.run(
        [sys.executable, "-m", "runtime", "generate", "--checkpoint", str(checkpoints["hybrid"]), "--prompt", "Hi",
         "--think-submodel", "small", "--answer-submodel", "full", "--thinking-budget", "4", "--max-new-tokens", "20",
         "--temperature", "0.7", "--seed", "3", "--json"], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[-1]["type"] == "done" and all(line["type"] in ("token", "switch", "done") for line in lines)
    token_keys = {"type", "phase", "submodel", "token_id", "text", "latency_ms"}
    assert all(set(line) == token_keys for line in lines if line["type"] == "token")
    done = lines[-1]
    assert set(done) >= {"finish_reason", "thinking_tokens", "answer_tokens", "budget_hit", "ttft_ms", "tokens_per_s"}
    switches = [line for line in lines if line["type"] == "switch"]
    thinking = [line for line in lines if line.get("phase") == "thinking"]
    assert done["thinking_tokens"] == len(thinking) <= 4 + GRACE_TOKENS
    if switches:
        assert set(switches[0]) == {"type", "from", "to", "reprefill_tokens", "ms", "reason"}
        assert switches[0]["reason"] == "answer"  # thinking ended; "depth"/"escalate"/"request" otherwise
        assert (switches[0]["from"], switches[0]["to"]) == ("small", "full")
        assert lines.index(switches[0]) == len(thinking)


@pytest.mark.slow
def test_generate_cli_depth_and_readable_output(checkpoints):
    out = subprocess.run(
        [sys.executable, "-m", "runtime", "generate", "--checkpoint", str(checkpoints["hybrid"]), "--prompt", "Hi",
         "--depth", "quick", "--max-new-tokens", "12", "--seed", "1"], capture_output=True, text=True, check=True)
    assert "[thinking on small]" in out.stdout and "tokens/s" in out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "runtime", "generate", "--checkpoint", str(checkpoints["hybrid"]), "--prompt", "Hi",
         "--depth", "extreme"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown depth 'extreme'" in bad.stderr


def test_cache_transplant_is_opt_in_approximate_and_cheaper(engine, checkpoints):
    sp = engine.chat.special
    common = dict(think_submodel="small", answer_submodel="full", thinking_budget=20, max_new_tokens=40,
                  logits_processors=(forbid(sp.think_end, *sp.end_of_turn),))
    exact = next(e for e in events_of(Engine.load(checkpoints["hybrid"], max_context=512), **common)
                 if isinstance(e, Switch))
    fresh = Engine.load(checkpoints["hybrid"], max_context=512)
    events = events_of(fresh, transplant=True, **common)
    switch = next(e for e in events if isinstance(e, Switch))
    assert exact.exact and not switch.exact
    assert switch.reprefill_tokens < exact.reprefill_tokens  # the thinking tokens were not re-run
    assert events[-1].answer_tokens > 0 and events[-1].finish_reason == "length"
    # the prompt part of the KV cache is exact; the transplanted part came from the thinker
    thinker, answerer = fresh.cache("small"), fresh.cache("full")
    kv = next(i for i, layer in enumerate(answerer.layers) if hasattr(layer, "k"))
    start, n = len(fresh.chat.prompt_ids(list(HELLO), True)), thinker.length
    assert n > start + 10
    assert torch.equal(answerer.layers[kv].k[:, start:n], thinker.layers[kv].k[:, start:n])


@pytest.mark.parametrize("max_new", [3, 4, 6, 9])
def test_even_tiny_replies_end_with_an_answer(engine, max_new):
    sp = engine.chat.special
    done = events_of(engine, think_submodel="small", answer_submodel="full", thinking_budget=None,
                     max_new_tokens=max_new, logits_processors=(forbid(sp.think_end, *sp.end_of_turn),))[-1]
    assert done.answer_tokens >= 1 and done.thinking_tokens + done.answer_tokens <= max_new
