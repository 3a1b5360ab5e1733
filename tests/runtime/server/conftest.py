"""Fixtures of the server tests: the bundled demo (its NVFP4 export, as the app serves it) behind a
real server on 127.0.0.1, shared by the route modules."""

import pytest

from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.server.runner import ServerThread
from tests.paths import DEMO_NVFP4


@pytest.fixture(scope="session")
def demo_engine():
    return Engine.load(DEMO_NVFP4, device="cpu", max_context=4096)  # room for an agent's tools and system prompt


@pytest.fixture(scope="session")
def demo_server(demo_engine):
    queue = EngineQueue(max_waiting=2)
    queue.set_engine(demo_engine)
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    yield srv
    srv.stop()


@pytest.fixture
def loading_server():
    """A server whose model is still loading (every reply route answers 503)."""
    queue = EngineQueue()
    queue.set_loading()
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def keyed_server(demo_engine):
    """The demo behind a server that wants the key 's3cret-key'."""
    queue = EngineQueue()
    queue.set_engine(demo_engine)
    srv = ServerThread(queue, "127.0.0.1", 0, api_key="s3cret-key").start()
    yield srv
    srv.stop()


@pytest.fixture
def spell_replies(monkeypatch):
    """`spell_replies(text)`: every reply the server starts from then on (with thinking off) answers
    exactly `text` in the model's own tokens, then ends its turn: a tool call written deterministically,
    through the real decode loop and parser."""
    from dataclasses import replace

    import torch

    import runtime.generate

    real = runtime.generate.stream_chat

    def spell(text: str):
        def steered(engine, request, controls=None):
            assert request.think_submodel is None, "spell_replies steers replies that do not think"
            target = engine.chat.encode(text) + [min(engine.chat.special.end_of_turn)]
            start = []

            def speller(context, logits):
                start[:] = start or [len(context)]  # the first call is for the answer's first token
                logits = torch.full_like(logits, float("-inf"))
                logits[..., target[min(len(context) - start[0], len(target) - 1)]] = 0
                return logits

            return real(engine, replace(request, logits_processors=(speller,)), controls)

        monkeypatch.setattr(runtime.generate, "stream_chat", steered)

    return spell
