"""The contract of `generate --remote`: against `runtime serve` on the demo (a real server on 127.0.0.1),
the same command prints the same events as a local run, token for token, at every depth (greedy).
Tokens of a remote reply have no ids and their latencies are the network's, so those two keys differ."""

import json

import pytest

from runtime import cli
from runtime.depth import level_names
from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.options import ENGINE_CONTEXT
from runtime.remote.client import RemoteServer
from runtime.remote.engine import RemoteEngine
from runtime.remote.models import ELASTIC
from runtime.server.runner import ServerThread
from tests.paths import DEMO

PROMPT = "What is 45 + 23 - 17 + 9?"
# The server's prefix cache outlives one reply (the same server answers every depth), so a switch there
# re-prefills no more than a fresh local engine does: compared apart.
LOCAL_ONLY = {"token_id", "latency_ms", "ttft_ms", "tokens_per_s", "ms", "reprefill_tokens"}


@pytest.fixture(scope="module")
def serve():
    queue = EngineQueue()
    queue.set_engine(Engine.load(DEMO, device="cpu", max_context=ENGINE_CONTEXT))
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    yield srv
    srv.stop()


def run_cli(capsys, *args) -> list[dict]:
    code = cli.main(["generate", "--prompt", PROMPT, "--temperature", "0", "--max-new-tokens", "160", "--json",
                     *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return [json.loads(line) for line in out.splitlines()]


def comparable(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in LOCAL_ONLY} for e in events]


def test_the_demo_server_is_an_elastic_one_with_its_levels(serve):
    engine = RemoteEngine.connect(RemoteServer(serve.address), DEMO.name)
    local = Engine.load(DEMO, device="cpu", max_context=ENGINE_CONTEXT)
    assert engine.model.mode == ELASTIC and engine.submodels_by_size() == local.submodels_by_size()
    def levels(e):  # (Auto's policy is the server's business: it watches the thinker there)
        return [(s.name, s.think, s.answer, s.budget, s.available) for s in e.depth_levels()]
    assert levels(engine) == levels(local) and engine.default_depth() == local.default_depth()
    assert engine.status().address == serve.address.split("/")[2]


@pytest.mark.slow
@pytest.mark.parametrize("depth", level_names())
def test_remote_events_equal_local_ones_token_for_token_at_every_depth(serve, capsys, depth):
    local = run_cli(capsys, "--checkpoint", str(DEMO), "--depth", depth, "--device", "cpu")
    remote = run_cli(capsys, "--remote", serve.address, "--model", DEMO.name, "--depth", depth)
    assert [e["type"] for e in remote] == [e["type"] for e in local]
    assert comparable(remote) == comparable(local)
    assert all(e["token_id"] is None for e in remote if e["type"] == "token")
    switches = [(r["reprefill_tokens"], lo["reprefill_tokens"])
                for r, lo in zip(remote, local) if r["type"] == "switch"]
    assert all(0 < r <= lo for r, lo in switches)
    if depth != "Off":
        assert any(e["type"] == "token" and e["phase"] == "thinking" for e in remote)
