"""No client learns another's prompt from the engine's cache (issue 24): each server request has a cache
scope of its own, so a request never reuses what another request, or the app's chat window, left in
the cache. What a client can see of it (`usage.prompt_tokens_details.cached_tokens`, and how long its
prefill takes, which `elastic.ttft_ms` reports) then depends on its own request alone: every prompt
token is prefilled, whatever ran before.

The guess a client would test is the conversation it suspects, continued by one turn: were it right,
an engine that shared its cache would resume from the other's snapshot.
"""

import json

import pytest
import requests

from runtime.controls import Controls
from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.events import Done, Prefill
from runtime.generate import ChatRequest, stream_chat
from runtime.server.runner import ServerThread
from tests.paths import DEMO_NVFP4

SECRET = [{"role": "system", "content": "You are the assistant of Project Walrus. The launch code is 4417."},
          {"role": "user", "content": "What is 12 + 30?"}]


@pytest.fixture(scope="module")
def engine():
    return Engine.load(DEMO_NVFP4, device="cpu", max_context=512)


@pytest.fixture(scope="module")
def server(engine):
    queue = EngineQueue()
    queue.set_engine(engine)
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    yield srv
    srv.stop()


@pytest.fixture
def counted(engine, monkeypatch):
    """How many tokens the model runs, prefill and decode together."""
    ran = []
    forward = engine.model.forward

    def counting(name, cache, tokens, *args, **kw):
        ran.append(len(tokens))
        return forward(name, cache, tokens, *args, **kw)

    monkeypatch.setattr(engine.model, "forward", counting)
    return ran


def ask(srv, messages, **kw) -> dict:
    body = {"model": DEMO_NVFP4.name, "messages": messages, "max_tokens": 4, "reasoning_effort": "none", **kw}
    r = requests.post(srv.address + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def streamed_usage(srv, messages) -> dict:
    body = {"model": DEMO_NVFP4.name, "messages": messages, "max_tokens": 4, "reasoning_effort": "none",
            "stream": True, "stream_options": {"include_usage": True}}
    r = requests.post(srv.address + "/chat/completions", json=body, timeout=120)
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    return [c for c in chunks if c.get("usage")][-1]["usage"]


def guess(answer: str) -> list[dict]:
    """The victim's conversation, continued by one turn: what a client would send to test a guess."""
    return [*SECRET, {"role": "assistant", "content": answer}, {"role": "user", "content": "And 5 more?"}]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_guess_at_another_clients_conversation_reuses_nothing(server, counted, streamed):
    answer = ask(server, SECRET)["choices"][0]["message"]["content"]
    counted.clear()
    usage = streamed_usage(server, guess(answer)) if streamed else ask(server, guess(answer))["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert sum(counted) >= usage["prompt_tokens"]  # every prompt token ran: its prefill took as long as any


@pytest.mark.parametrize("effort", ["none", "low"])
def test_the_same_request_twice_runs_its_whole_prompt_both_times(server, counted, effort):
    first = ask(server, guess("42"), reasoning_effort=effort)
    ran_first, counted[:] = sum(counted), []
    second = ask(server, guess("42"), reasoning_effort=effort)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert sum(counted) == ran_first  # the same work, whoever came first


def test_the_app_windows_chats_are_not_revealed_to_the_server(server, engine, counted):
    """The window's reply (scope "", as the app's worker sends it) leaves its snapshots; a server
    request that guesses the window's conversation does not resume from them."""
    window = ChatRequest(tuple(SECRET), None, engine.submodels_by_size()[-1], 0, 4)
    events = list(stream_chat(engine, window, Controls()))
    answer = "".join(getattr(e, "text", "") for e in events if getattr(e, "phase", "") == "answer")
    follow_up = ChatRequest(tuple(guess(answer)), None, window.answer_submodel, 0, 4)
    counted.clear()
    usage = ask(server, guess(answer))["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0 and sum(counted) >= usage["prompt_tokens"]
    # the window's own next turn after a server request starts afresh too, and is right
    prefill = next(e for e in stream_chat(engine, follow_up, Controls()) if isinstance(e, Prefill))
    assert prefill.reused_tokens == 0


def test_a_scope_reuses_its_own_prefix_and_only_its_own(engine):
    """The engine's rule itself: the window's next turn still resumes from its own snapshot."""
    sub = engine.submodels_by_size()[-1]
    first = ChatRequest(tuple(SECRET), None, sub, 0, 4)
    events = list(stream_chat(engine, first, Controls()))
    answer = "".join(getattr(e, "text", "") for e in events if getattr(e, "phase", "") == "answer")
    assert isinstance(events[-1], Done)
    nxt = ChatRequest(tuple(guess(answer)), None, sub, 0, 4)
    other = next(e for e in stream_chat(engine, ChatRequest(**{**nxt.__dict__, "cache_scope": "someone else"}),
                                        Controls()) if isinstance(e, Prefill))
    assert other.reused_tokens == 0
    list(stream_chat(engine, first, Controls()))  # the window's turn again, then its follow-up
    own = next(e for e in stream_chat(engine, nxt, Controls()) if isinstance(e, Prefill))
    assert own.reused_tokens > 0


# ---------------------------------------------------------------------- prompt_cache_key: a client's own conversation

KEY = "0b6f3c1e-5d0a-4f43-9c1b-8e2d7a9c4f10"


def test_requests_with_the_same_prompt_cache_key_share_their_cache_and_no_one_else(server):
    answer = ask(server, SECRET, prompt_cache_key=KEY)["choices"][0]["message"]["content"]
    for other in ({}, {"prompt_cache_key": KEY[:-1] + "1"}, {"prompt_cache_key": KEY.upper()}):
        ask(server, SECRET, prompt_cache_key=KEY)  # the owner's turn again: its snapshot is the newest
        usage = ask(server, guess(answer), **other)["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == 0, other
    ask(server, SECRET, prompt_cache_key=KEY)
    own = ask(server, guess(answer), prompt_cache_key=KEY)["usage"]
    assert 0 < own["prompt_tokens_details"]["cached_tokens"] < own["prompt_tokens"]


def test_a_key_does_not_carry_over_to_another_api_key(engine):
    """The app's server restarted with another API key keeps the engine (and its cache)."""
    queue = EngineQueue()
    queue.set_engine(engine)
    first = ServerThread(queue, "127.0.0.1", 0, api_key="first-api-key").start()
    try:
        r = requests.post(first.address + "/chat/completions", timeout=120,
                          headers={"Authorization": "Bearer first-api-key"},
                          json={"model": DEMO_NVFP4.name, "messages": SECRET, "max_tokens": 4,
                                "reasoning_effort": "none", "prompt_cache_key": KEY})
        answer = r.json()["choices"][0]["message"]["content"]
    finally:
        first.stop()
    second = ServerThread(queue, "127.0.0.1", 0, api_key="second-api-key").start()
    try:
        r = requests.post(second.address + "/chat/completions", timeout=120,
                          headers={"Authorization": "Bearer second-api-key"},
                          json={"model": DEMO_NVFP4.name, "messages": guess(answer), "max_tokens": 4,
                                "reasoning_effort": "none", "prompt_cache_key": KEY})
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        second.stop()


@pytest.mark.parametrize("key", ["short", "", 12345678901234567890, ["x" * 20], "x" * 257, "tab\tinside-the-key-x"])
def test_a_prompt_cache_key_easy_to_guess_or_not_text_is_refused(server, key):
    body = {"model": DEMO_NVFP4.name, "messages": SECRET, "max_tokens": 2, "prompt_cache_key": key}
    r = requests.post(server.address + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_cache_key"
