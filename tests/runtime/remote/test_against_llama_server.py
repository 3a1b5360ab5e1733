"""Against a real llama.cpp server, optional: set ELASTIC_CHAT_LLAMA_SERVER to a `llama-server` binary
built in a llama.cpp source tree (its `convert_hf_to_gguf.py` converts the demo: tools/demo_gguf.py;
docs/remote.md gives the commands); skipped otherwise, with the reason.

The demo's parent and its smallest submodel, each converted to GGUF, are served by one llama-server
each; one model alone is SINGLE (the slider as llama.cpp's thinking switch and `thinking_budget_tokens`,
its context its `meta.n_ctx`), and the two behind a small router that lists them as `demo:SUBMODEL` are
PAIRS (the small one thinks, the parent answers after the closed thought). Greedy replies are compared
with the same replies in-process."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.request import Request, urlopen

import pytest

from runtime.checkpoint.extract import extract
from runtime.depth import find_level
from runtime.engine import Engine
from runtime.errors import ElasticError
from runtime.events import END_OF_TURN, LENGTH, Switch
from runtime.generate import ChatRequest, chat
from runtime.remote.client import RemoteServer
from runtime.remote.engine import RemoteEngine
from runtime.remote.models import PAIRS, SINGLE
from runtime.remote.server_kind import LLAMA_CPP
from runtime.sampling import SamplingSettings
from tests.paths import DEMO, ROOT

SERVER = os.environ.get("ELASTIC_CHAT_LLAMA_SERVER")
SOURCE = Path(SERVER).resolve().parents[2] if SERVER else None  # llama.cpp/build/bin/llama-server
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not SERVER, reason="no llama.cpp server here: set ELASTIC_CHAT_LLAMA_SERVER to a llama-server binary built in "
                       "a llama.cpp source tree (docs/remote.md)")]
QUESTION = ({"role": "user", "content": "What is 45 + 23 - 17 + 9?"},)
GREEDY = SamplingSettings(temperature=0)
CONTEXT = 2048


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gguf(checkpoint: Path, out: Path) -> Path:
    if not (SOURCE / "convert_hf_to_gguf.py").is_file():
        pytest.skip(f"{SOURCE} has no convert_hf_to_gguf.py: ELASTIC_CHAT_LLAMA_SERVER must be a llama-server built "
                    "in its llama.cpp source tree (build/bin/llama-server)")
    subprocess.run([sys.executable, str(ROOT / "tools" / "demo_gguf.py"), "--llama-cpp", str(SOURCE),
                    "--checkpoint", str(checkpoint), "--out", str(out)], check=True, capture_output=True, timeout=600)
    return out


def serve(model: Path, logs: Path):
    port = free_port()
    log = open(logs / f"{model.stem}.log", "wb")
    proc = subprocess.Popen([SERVER, "-m", str(model), "--alias", model.stem, "--jinja", "--host", "127.0.0.1",
                             "--port", str(port), "-c", str(CONTEXT), "--threads", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, log, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"llama-server did not start; its log: {log.name}")
        time.sleep(0.5)


class Router:
    """A gateway in front of two llama-servers, as a team runs one: it lists them as demo:SUBMODEL and
    forwards each chat completion, streamed, to the server of the model it names."""

    def __init__(self, upstreams: dict[str, str]):
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": i, "object": "model", "owned_by": "llamacpp",
                                                               "meta": {"n_ctx": CONTEXT}} for i in upstreams]})
                self._answer(200, "application/json", body.encode())

            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                router.bodies.append(json.loads(raw))
                upstream = upstreams[json.loads(raw)["model"]]
                request = Request(upstream + self.path, raw, {"Content-Type": "application/json"})
                with urlopen(request, timeout=120) as r:
                    self.send_response(r.status)
                    self.send_header("Content-Type", r.headers["Content-Type"])
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while chunk := r.read1(65536):
                        self.wfile.write(chunk)
                        self.wfile.flush()

            def _answer(self, status, kind, body):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.bodies: list[dict] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    work = tmp_path_factory.mktemp("llama")
    small = extract(DEMO, "0.5M", work / "small")
    procs = [serve(gguf(DEMO, work / "parent.gguf"), work), serve(gguf(small, work / "small.gguf"), work)]
    router = Router({"demo:1.5M": procs[0][2], "demo:0.5M": procs[1][2]})
    yield {"parent": procs[0][2] + "/v1", "router": router}
    router.httpd.shutdown()
    for proc, log, _ in procs:
        proc.terminate()
        proc.wait(30)
        log.close()


@pytest.fixture(scope="module")
def local():
    return Engine.load(DEMO, max_context=CONTEXT)


def test_one_model_is_single_with_its_served_context_and_its_budget_field(servers, local):
    engine = RemoteEngine.connect(RemoteServer(servers["parent"]), "parent")
    assert engine.model.mode == SINGLE and engine.kind is LLAMA_CPP
    assert engine.max_context == CONTEXT  # meta.n_ctx, not n_ctx_train (2^20 from the converter)
    replies = {}
    for name in ("Off", "Quick", "Max"):
        level = find_level(engine.depth_levels(), name)
        done = list(engine.stream(ChatRequest(QUESTION, level.think, level.answer, level.budget, 200, GREEDY)))[-1]
        assert done.finish_reason in (END_OF_TURN, LENGTH), done.error
        replies[name] = done
    assert replies["Off"].thinking_tokens == 0 and replies["Max"].thinking_tokens > 0
    # One model: every stop thinks on it, greedily, so Quick's thought is Max's cut at Quick's budget. The
    # table sets that budget (a fraction of the ceiling), so either case may happen; each is checked.
    quick, full = replies["Quick"], replies["Max"]
    budget = find_level(engine.depth_levels(), "Quick").budget
    assert 0 < quick.thinking_tokens <= budget
    if full.thinking_tokens > budget:
        assert quick.budget_hit and quick.thinking_end == "budget"
    else:
        assert not quick.budget_hit and quick.thinking_text == full.thinking_text
    # the budget field itself, whatever the table says: half of Max's own thought must end at the budget
    half = max(1, full.thinking_tokens // 2)
    cut = list(engine.stream(ChatRequest(QUESTION, "parent", "parent", half, 200, GREEDY)))[-1]
    assert cut.finish_reason in (END_OF_TURN, LENGTH), cut.error
    assert cut.thinking_tokens <= half < full.thinking_tokens
    assert cut.budget_hit and cut.thinking_end == "budget"
    unbounded = list(engine.stream(ChatRequest(QUESTION, "parent", "parent", None, 200, GREEDY)))[-1]
    same = chat(local, ChatRequest(QUESTION, "1.5M", "1.5M", None, 200, GREEDY))
    assert (unbounded.thinking_text, unbounded.answer_text) == (same.thinking_text, same.answer_text)


def test_two_models_think_and_answer_after_the_closed_thought(servers, local):
    router = servers["router"]
    engine = RemoteEngine.connect(RemoteServer(router.url), "demo")
    assert engine.model.mode == PAIRS and engine.submodels_by_size() == ["0.5M", "1.5M"]
    for budget in (8, 24):
        router.bodies.clear()
        events = list(engine.stream(ChatRequest(QUESTION, "0.5M", "1.5M", budget, 200, GREEDY)))
        done = events[-1]
        assert done.finish_reason in (END_OF_TURN, LENGTH), done.error
        assert done.budget_hit and done.answer_text and any(isinstance(e, Switch) for e in events)
        answer = router.bodies[-1]
        assert answer["continue_final_message"] == "content" and answer["messages"][-1]["role"] == "assistant"
        same = chat(local, ChatRequest(QUESTION, "0.5M", "1.5M", budget, 200, GREEDY))
        assert done.thinking_text == same.thinking_text  # the same budget rule ends the same thought
        # the answer follows the closed thought (llama.cpp renders it with a blank line after </think>,
        # which the in-process answerer does not see, so its digits may differ)
        assert "</think>" not in done.answer_text and done.answer_text.startswith("45 + 23 - 17 + 9 =")


def test_an_unknown_model_and_a_bad_request_are_one_line(servers):
    with pytest.raises(ElasticError, match="has no model"):
        RemoteEngine.connect(RemoteServer(servers["parent"]), "nope")
