"""The reply's one record (runtime/reply_record.py): every event carries the running totals, and the
texts of each phase's Token events, joined, are exactly the texts in Done, however the reply goes
(prompts, budgets, stop strings, a stop or an error mid-reply, Auto's climbs, steering, half characters
at the end of a phase). The tiny checkpoint is random; sampling at temperature 1 makes it produce every
kind of token, byte tokens that split a character included.

Both producers keep it: a reply on this PC (generate.py) and a reply from a server (remote/reply.py,
here `runtime serve` on the same engine, an Elastic server). What a request cannot carry over the wire
(logits processors, steering the thought in flight) is tested on the local producer alone."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from runtime.auto_depth import AutoPolicy, Escalation
from runtime.controls import Controls
from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.events import (
    ANSWER,
    END_OF_TURN,
    ERROR,
    LENGTH,
    STOP_STRING,
    STOPPED,
    THINKING,
    Done,
    Prefill,
    Switch,
    Token,
)
from runtime.generate import ChatRequest
from runtime.remote.client import RemoteServer
from runtime.remote.engine import RemoteEngine
from runtime.sampling import SamplingSettings
from runtime.server.runner import ServerThread

PROMPTS = ["Hello! What is 12 + 34?", "Unicode: café, naïve, ✓, 你好, 🙂.", "Think step by step: 7 * 8",
           "The quick brown fox"]
NEVER = "\x00never"
GREEDY = SamplingSettings(temperature=0)


@pytest.fixture(scope="module")
def engine(checkpoints):
    return Engine.load(checkpoints["hybrid"], max_context=512)


@pytest.fixture(scope="module")
def served(engine):
    """The same engine behind `runtime serve`'s server, as a remote engine (an Elastic server)."""
    queue = EngineQueue()
    queue.set_engine(engine)
    server = ServerThread(queue, "127.0.0.1", 0).start()
    yield RemoteEngine.connect(RemoteServer(server.address), Path(engine.model.folder).name)
    server.stop()


@pytest.fixture(params=["local", "remote"])
def producer(request, engine):
    """Whoever makes the reply's events: the engine itself, or a server running it."""
    return engine if request.param == "local" else request.getfixturevalue("served")


def sampled(seed: int) -> SamplingSettings:
    return SamplingSettings(temperature=1.0, top_p=1.0, seed=seed)


def reply(engine, prompt=PROMPTS[0], think="small", answer="full", budget=6, max_new=28, seed=0, steer=None,
          sampling=None, **kw) -> list:
    """One reply's events; `steer(event, controls)` sees each event as it comes."""
    request = ChatRequest(({"role": "user", "content": prompt},), think, answer, budget, max_new,
                          sampling or sampled(seed), **kw)
    controls, events = Controls(), []
    for event in engine.stream(request, controls):
        events.append(event)
        if steer is not None:
            steer(event, controls)
    return events


def check_record(events) -> Done:
    """The invariants every reply keeps, local or remote; returns its Done. A remote reply has no Prefill
    and its Tokens no ids: each streamed piece is one token."""
    done = events[-1]
    assert isinstance(done, Done) and not any(isinstance(e, Done) for e in events[:-1])
    tokens = [e for e in events if isinstance(e, Token)]
    remote = not isinstance(events[0], Prefill)
    assert not any(isinstance(e, Prefill) for e in events[1:])
    if remote:
        assert all(t.token_id is None for t in tokens)
    for phase, text in ((THINKING, done.thinking_text), (ANSWER, done.answer_text)):
        assert "".join(t.text for t in tokens if t.phase == phase) == text, phase
    assert not done.answer_text.startswith("\n")  # the line break after </think>, dropped once
    # A Token of no new token only releases held-back text, at the very end.
    released = [t for t in tokens if t.token_id is None and not remote]
    assert len(released) <= 1 and all(t is tokens[-1] and t.text and not t.forced for t in released)
    assert done.switches == tuple(e for e in events if isinstance(e, Switch))
    # Each event's totals are what came before it, counted here once to check them.
    counted = {THINKING: Counter(), ANSWER: Counter()}
    elapsed, ttft = 0.0, None
    for e in events:
        if isinstance(e, Token) and (e.token_id is not None or remote):
            counted[e.phase][e.submodel] += 1
            ttft = e.progress.ttft_ms if ttft is None else ttft
        p = e.progress
        assert (p.thinking_tokens, p.answer_tokens) == (counted[THINKING].total(), counted[ANSWER].total())
        assert p.thinking_by_submodel == tuple(counted[THINKING].items())  # in the order they worked
        assert p.answer_by_submodel == tuple(counted[ANSWER].items())
        assert p.elapsed_ms >= elapsed and p.ttft_ms == (ttft or 0.0) and p.tokens_per_s >= 0
        elapsed = p.elapsed_ms
    assert done.progress.thinking_ms <= done.progress.elapsed_ms
    assert (done.thinking_tokens, done.answer_tokens) == (done.progress.thinking_tokens, done.progress.answer_tokens)
    return done


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_streamed_texts_are_the_final_texts(producer, prompt):
    finishes = set()
    for seed, (think, answer, budget) in enumerate([("small", "full", 6), ("small", "full", None), ("mid", "mid", 3),
                                                    ("small", "full", 0), ("full", "small", 1)]):
        done = check_record(reply(producer, prompt, think, answer, budget, seed=seed))
        finishes.add(done.finish_reason)
        assert done.finish_reason in (END_OF_TURN, LENGTH)
    assert LENGTH in finishes


def answer_tokens_of(events) -> list[Token]:
    """The answer's Tokens of a token each (a remote reply's pieces all are; a local one's have ids)."""
    remote = not isinstance(events[0], Prefill)
    return [e for e in events if isinstance(e, Token) and e.phase == ANSWER and (e.token_id is not None or remote)]


def test_stop_strings_across_tokens_never_matching_and_at_the_start(producer):
    """Greedy, so each variant repeats the base reply's tokens up to its stop."""
    engine = producer
    base = reply(engine, budget=3, max_new=40, sampling=GREEDY)
    check_record(base)
    raw = [t for t in answer_tokens_of(base) if t.text.strip("\n")]
    assert len(raw) >= 4, [t.text for t in raw]
    first, second = raw[1].text, raw[2].text
    across = first[-1] + second[0]  # ends one token's text, starts the next's
    plain = base[-1].answer_text
    cases = {
        "across": (across,),
        "never": (NEVER,),
        # the reply's last character could start this one: it is held back to the end, then released
        "held to the end": (plain[-1] + NEVER,),
        "at the start": (plain[0],),
        "several": (NEVER, across, plain[-1] + NEVER),
    }
    for name, stops in cases.items():
        done = check_record(reply(engine, budget=3, max_new=40, sampling=GREEDY, stop_strings=stops))
        if name in ("never", "held to the end"):
            assert done.answer_text == plain and done.finish_reason == base[-1].finish_reason, name
        else:
            assert done.finish_reason == STOP_STRING, name
            assert plain.startswith(done.answer_text) and not any(s in done.answer_text for s in stops), name
    at_start = reply(engine, budget=3, max_new=40, sampling=GREEDY, stop_strings=(plain[0],))
    assert check_record(at_start).answer_text == ""


def at_position(action):
    """A processor that calls `action(position in the reply, logits)` for each token sampled."""
    start = []

    def process(context, logits):
        if not start:  # the first call sees the prompt alone
            start.append(len(context))
        return action(len(context) - start[0], logits)
    return process


def scripted(script: dict[int, int]):
    """A processor that makes the reply's token at each position of `script` the one it names."""
    def action(position, logits):
        if position not in script:
            return logits
        out = torch.full_like(logits, float("-inf"))
        out[..., script[position]] = 0.0
        return out
    return at_position(action)


def forbid(*token_ids):
    """A processor that keeps the model from choosing these tokens (so the budget or the test decides)."""
    def process(context, logits):
        logits = logits.clone()
        logits[..., list(token_ids)] = float("-inf")
        return logits
    return process


def half_character(engine) -> int:
    """A token that is the first byte of a multi-byte character: alone it decodes to U+FFFD."""
    special = set(engine.chat.tokenizer.all_special_ids)
    return next(i for i in range(len(engine.chat.tokenizer)) if i not in special
                and engine.chat.decode([i]).endswith("\ufffd"))


def test_half_characters_at_the_end_of_each_phase_reach_the_tokens(engine):
    """The thinking decoder's flush rides on the </think> token; the answer's, at the end of turn, is a
    Token of no new token."""
    sp, half = engine.chat.special, half_character(engine)
    a = engine.chat.encode("a")[0]
    script = {0: a, 1: half, 2: sp.think_end, 3: a, 4: half, 5: min(sp.end_of_turn)}
    events = reply(engine, budget=20, logits_processors=(scripted(script),))
    done = check_record(events)
    assert done.finish_reason == END_OF_TURN and done.thinking_end == "model"
    thinking = [e for e in events if isinstance(e, Token) and e.phase == THINKING]
    assert thinking[-1].token_id == sp.think_end and thinking[-1].text.endswith("\ufffd")
    assert events[-2].token_id is None and events[-2].text.endswith("\ufffd")
    assert done.answer_text == "a" + events[-2].text and done.answer_tokens == 2
    # At the length limit the last token carries it: one Token per token, as `generate --json` prints them.
    events = reply(engine, think=None, budget=0, max_new=2, logits_processors=(scripted({0: a, 1: half}),))
    done = check_record(events)
    assert done.finish_reason == LENGTH and [t for t in events if isinstance(t, Token)] == answer_tokens_of(events)
    assert done.answer_text == "a\ufffd" and done.answer_tokens == 2


@pytest.mark.parametrize("after", [1, 3])
def test_a_stop_mid_reply_keeps_the_record_local_or_remote(producer, after):
    def stop(event, controls):
        if isinstance(event, Token) and event.progress.tokens >= after:
            controls.stop()

    done = check_record(reply(producer, budget=None, max_new=60, seed=3, steer=stop))
    assert done.finish_reason == STOPPED and done.progress.tokens >= after


def test_a_stop_or_an_error_mid_reply_keeps_the_record(engine):
    sp = engine.chat.special
    a = engine.chat.encode("a")[0]
    text_a = engine.chat.decode([a])
    no_end = forbid(*sp.end_of_turn)  # the reply goes on until the test stops it

    def stop_at(phase, n):
        def steer(event, controls):
            if isinstance(event, Token) and event.phase == phase and event.progress.tokens >= n:
                controls.stop()
        return steer

    for phase, n in ((THINKING, 2), (ANSWER, 7)):
        done = check_record(reply(engine, budget=4, steer=stop_at(phase, n), logits_processors=(no_end,)))
        assert done.finish_reason == STOPPED
    # Stopped while the answer holds back what could start a stop string: it is released, as text.
    events = reply(engine, budget=0, think=None, stop_strings=(text_a + NEVER,), steer=stop_at(ANSWER, 3),
                   logits_processors=(no_end, scripted({2: a})))
    done = check_record(events)
    assert done.finish_reason == STOPPED and events[-2].token_id is None and events[-2].text == text_a

    def fails_at(position):
        def action(at, logits):
            if at == position:
                raise RuntimeError("a processor failed")
            return logits
        return at_position(action)

    for position in (1, 9):  # thinking, answering
        done = check_record(reply(engine, budget=4, logits_processors=(no_end, fails_at(position))))
        assert done.finish_reason == ERROR and "a processor failed" in done.error


def test_auto_climbs_and_steering_keep_the_counts_per_submodel(engine):
    sp = engine.chat.special
    budget_decides = forbid(sp.think_end, *sp.end_of_turn)
    climbs = Escalation(("small", "mid", "full"), AutoPolicy("entropy", 0.0, 1))  # any doubt climbs
    done = check_record(reply(engine, budget=10, escalation=climbs))
    assert [s.reason for s in done.switches][:2] == ["escalate", "escalate"]

    def steer(event, controls):
        p = event.progress
        if isinstance(event, Token) and event.phase == THINKING:
            if p.thinking_tokens == 2:
                controls.request_depth("mid", 12)
            elif p.thinking_tokens == 4:
                controls.think_longer(6)
        elif isinstance(event, Token) and p.answer_tokens == 3:
            controls.request_submodel("small")  # the rest of the answer on another submodel

    events = reply(engine, budget=8, max_new=40, steer=steer, logits_processors=(budget_decides,))
    done = check_record(events)
    assert [name for name, _ in done.thinking_by_submodel] == ["small", "mid"]
    assert [name for name, _ in done.progress.answer_by_submodel][:2] == ["full", "small"]
    assert [s.reason for s in done.switches][:3] == ["depth", "answer", "request"]

    def answer_now(event, controls):
        if isinstance(event, Token) and event.progress.thinking_tokens == 2:
            controls.answer_now()

    done = check_record(reply(engine, budget=None, steer=answer_now, logits_processors=(budget_decides,)))
    assert done.thinking_end == "user"


def test_one_serialisation_per_event(producer):
    """`to_dict` is the only one: `generate --json` prints it, a chat saves it, the server projects it."""
    events = reply(producer, budget=3, seed=2)
    done = check_record(events)
    token = next(e for e in events if isinstance(e, Token))
    assert set(token.to_dict()) == {"type", "phase", "submodel", "token_id", "text", "latency_ms"}
    switch = done.switches[0]
    assert switch.to_dict() == {"type": "switch", "from": "small", "to": "full", "reprefill_tokens":
                                switch.reprefill_tokens, "ms": round(switch.ms, 3), "reason": "answer"}
    assert done.to_dict()["thinking_by_submodel"] == {"small": done.thinking_tokens}
    assert done.progress.to_dict()["thinking_by_submodel"] == done.to_dict()["thinking_by_submodel"]


def test_the_server_streams_the_tokens_as_they_come(engine):
    """The chunk stream no longer diffs against Done: the text released at the end is a chunk of its own."""
    from runtime.server.openai_api import ChunkStream, ParsedChat, completion

    sp, half = engine.chat.special, half_character(engine)
    a = engine.chat.encode("a")[0]
    events = reply(engine, budget=20, logits_processors=(scripted({0: a, 1: sp.think_end, 2: a, 3: half,
                                                                   4: min(sp.end_of_turn)}),))
    done = check_record(events)
    parsed = ParsedChat(ChatRequest(({"role": "user", "content": "hi"},), "small", "full"), "m", True, False, None)
    stream = ChunkStream(parsed, "id", 0)
    chunks = [c for e in events for c in stream.on_event(e)]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == done.answer_text == "a\ufffd"
    assert "".join(d.get("reasoning_content", "") for d in deltas) == done.thinking_text
    assert deltas[-1] == {} and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert completion(parsed, events[0], done, "id", 0, 0.0)["choices"][0]["message"]["content"] == "a\ufffd"
