"""Fixtures of the server tests: the bundled demo (its NVFP4 export, as the app serves it) behind a
real server on 127.0.0.1, shared by the route modules."""

import pytest

from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.server.runner import ServerThread
from tests.paths import DEMO_NVFP4


@pytest.fixture(scope="session")
def demo_engine():
    return Engine.load(DEMO_NVFP4, device="cpu", max_context=1024)


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
