"""The OpenAI-compatible server, driven by the official `openai` client over real sockets on 127.0.0.1,
serving the bundled demo model (its NVFP4 export, as the app does).

Where a test needs a reply still running when it acts (disconnects, the queue), the reply is held
before a known token and cannot end by itself (`held_engine`): no timing, however fast the machine.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import openai
import pytest
import requests

from runtime.controls import Controls
from runtime.depth import effort_levels, load_table
from runtime.engine import Engine
from runtime.engine_queue import EngineQueue, stream_in_turn
from runtime.events import STOPPED, Done, Prefill
from runtime.generate import ChatRequest
from runtime.server.runner import ServerThread
from tests.engine_support import held_engine
from tests.paths import DEMO_NVFP4, ROOT
from tests.server_records import records_since, snapshot, wait_for_record

DEMO = DEMO_NVFP4  # served as the app serves it: the NVFP4 export
MODEL = DEMO.name
QUESTION = [{"role": "user", "content": "What is 45 + 23 - 17 + 9?"}]


@pytest.fixture(scope="module")
def engine():
    return Engine.load(DEMO, device="cpu", max_context=1024)


@pytest.fixture(scope="module")
def server(engine):
    queue = EngineQueue(max_waiting=1)
    queue.set_engine(engine)
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    yield srv
    srv.stop()


def client(srv, key="unused", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.address, api_key=key, max_retries=0, timeout=kw.pop("timeout", 60), **kw)


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def ask(srv, **kw):
    kw.setdefault("messages", QUESTION)
    kw.setdefault("model", MODEL)
    return client(srv).chat.completions.create(**kw)


def stream(srv, **kw):
    """(token chunks, final chunk, usage chunk) of a streamed reply."""
    kw.setdefault("messages", QUESTION)
    kw.setdefault("model", MODEL)
    chunks = list(client(srv).chat.completions.create(stream=True, **kw))
    tokens = [c for c in chunks if c.choices and c.choices[0].finish_reason is None]
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    usage = [c for c in chunks if not c.choices]
    assert len(final) == 1 and len(usage) <= 1
    return tokens, final[0], (usage[0].usage if usage else None)


def joined(tokens, final, key):
    parts = [getattr(c.choices[0].delta, key, None) or extra(c.choices[0].delta, key) or "" for c in tokens + [final]]
    return "".join(parts)


# ---------------------------------------------------------------------- models and replies


def test_models_are_the_checkpoint_and_one_per_submodel(server):
    ids = [m.id for m in client(server).models.list()]
    assert ids == [MODEL, f"{MODEL}:0.5M", f"{MODEL}:1.0M", f"{MODEL}:1.5M"]
    assert client(server).models.retrieve(f"{MODEL}:1.0M").id == f"{MODEL}:1.0M"
    with pytest.raises(openai.NotFoundError):
        client(server).models.retrieve("gpt-4o")


def test_a_reply_carries_its_reasoning_both_ways_and_says_who_thought(server):
    r = ask(server, reasoning_effort="low", seed=3)
    msg = r.choices[0].message
    reasoning = extra(msg, "reasoning_content")
    assert reasoning and extra(msg, "reasoning") == reasoning and msg.content
    assert r.choices[0].finish_reason == "stop" and r.model == MODEL
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    e = extra(r, "elastic")
    assert (e["think_submodel"], e["answer_submodel"], e["depth"]) == ("0.5M", "1.5M", "Quick")
    # the answering submodel re-prefilled the prompt and the thinking it had not seen
    assert e["switch"]["from"] == "0.5M" and e["switch"]["reprefill_tokens"] > r.usage.prompt_tokens - 5
    assert e["switch"]["ms"] > 0 and e["ttft_ms"] > 0


def test_streamed_reply_equals_the_whole_one_and_usage_counts_the_tokens_streamed(server):
    whole = ask(server, reasoning_effort="medium", seed=5, temperature=1.0)
    tokens, final, usage = stream(server, reasoning_effort="medium", seed=5, temperature=1.0,
                                  stream_options={"include_usage": True})
    assert usage is not None and usage.completion_tokens == len(tokens)  # one chunk per token
    reasoning_chunks = [c for c in tokens if extra(c.choices[0].delta, "reasoning_content") is not None]
    assert usage.completion_tokens_details.reasoning_tokens == len(reasoning_chunks) > 0
    assert all(extra(c.choices[0].delta, "reasoning") == extra(c.choices[0].delta, "reasoning_content")
               for c in reasoning_chunks)
    assert joined(tokens, final, "content") == whole.choices[0].message.content
    assert joined(tokens, final, "reasoning_content") == extra(whole.choices[0].message, "reasoning_content")
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert tokens[0].choices[0].delta.role == "assistant"
    assert extra(final, "elastic")["think_submodel"] == "1.0M"


def test_no_usage_chunk_unless_asked(server):
    _, _, usage = stream(server, reasoning_effort="none", max_tokens=8)
    assert usage is None


@pytest.mark.parametrize("how", ["reasoning_effort", "reasoning.effort"])
def test_reasoning_effort_changes_who_thinks_and_for_how_long(server, how):
    def run(effort):
        kw = ({"reasoning_effort": effort} if how == "reasoning_effort"
              else {"extra_body": {"reasoning": {"effort": effort}}})
        r = ask(server, seed=1, **kw)
        return r, extra(r, "elastic")

    off, e_off = run("none")
    assert extra(off.choices[0].message, "reasoning_content") is None and e_off["think_submodel"] is None
    assert off.usage.completion_tokens_details.reasoning_tokens == 0 and off.choices[0].message.content
    low, e_low = run("low")
    high, e_high = run("high")
    assert e_low["think_submodel"] == "0.5M" and e_high["think_submodel"] == "1.5M"  # smallest vs parent
    assert e_low["answer_submodel"] == e_high["answer_submodel"] == "1.5M"
    assert e_low["thinking_budget"] < e_high["thinking_budget"]
    # budget + at most 16 tokens of grace to finish the line
    assert low.usage.completion_tokens_details.reasoning_tokens <= e_low["thinking_budget"] + 16
    assert high.usage.completion_tokens_details.reasoning_tokens > 0


def test_the_depth_table_has_every_stop_the_efforts_name():
    names = {row["name"] for row in load_table()}
    assert set(effort_levels().values()) <= names
    # the names clients send (OpenAI's minimal and xhigh, Ollama's and others' max)
    assert set(effort_levels()) == {"none", "minimal", "low", "medium", "high", "xhigh", "max", "auto"}


def test_auto_effort_and_no_effort(server, engine):
    """"auto" is the Auto stop (the smallest submodel starts thinking and may climb; the parent answers);
    no effort at all is the depth table's default stop, as a new chat in the app starts on."""
    r = ask(server, reasoning_effort="auto", seed=1, temperature=0)
    e = extra(r, "elastic")
    assert (e["depth"], e["think_submodel"], e["answer_submodel"]) == ("Auto", "0.5M", "1.5M")
    assert r.choices[0].message.content and r.usage.completion_tokens_details.reasoning_tokens > 0
    assert extra(ask(server, seed=1, max_tokens=300), "elastic")["depth"] == engine.default_depth()


@pytest.mark.slow
def test_elastic_fields_and_pinned_submodels(server):
    r = ask(server, model=f"{MODEL}:1.0M", reasoning_effort="low", seed=2)
    e = extra(r, "elastic")
    assert (e["think_submodel"], e["answer_submodel"], e["switch"]) == ("1.0M", "1.0M", None)
    r = ask(server, seed=2, extra_body={"elastic": {"think_submodel": "0.5M", "answer_submodel": "1.0M",
                                                    "thinking_budget": 5}})
    e = extra(r, "elastic")
    assert (e["think_submodel"], e["answer_submodel"], e["thinking_budget"]) == ("0.5M", "1.0M", 5)
    assert r.usage.completion_tokens_details.reasoning_tokens <= 5 + 16
    r = ask(server, seed=2, extra_body={"thinking_token_budget": 0})
    assert extra(r, "elastic")["think_submodel"] is None
    r = ask(server, seed=2, extra_body={"thinking_budget_tokens": 7})  # llama.cpp's spelling
    assert extra(r, "elastic")["thinking_budget"] == 7
    assert extra(ask(server, seed=2, extra_body={"elastic": {"depth": "deep"}}), "elastic")["depth"] == "Deep"


def test_assistant_reasoning_is_read_in_both_spellings(server):
    def prompt_tokens(key, keep):
        history = [QUESTION[0], {"role": "assistant", "content": "57.", key: "45 + 23 = 68.\n68 - 17 = 51."},
                   {"role": "user", "content": "And 2 + 2?"}]
        return ask(server, messages=history, max_tokens=1, reasoning_effort="none",
                   extra_body={"elastic": {"keep_reasoning": keep}}).usage.prompt_tokens

    kept = prompt_tokens("reasoning", True)
    assert kept == prompt_tokens("reasoning_content", True)
    assert kept > prompt_tokens("reasoning", False)  # by default the template drops past reasoning


@pytest.mark.slow
def test_a_seed_repeats_a_reply(server):
    # A question the demo is unsure of, sampled hot: different seeds must be able to differ (on its own
    # sums the retrained demo is confident enough to answer alike under every seed).
    vague = [{"role": "user", "content": "Say something about numbers, anything at all"}]

    def reply(seed):
        r = ask(server, seed=seed, temperature=2.0, reasoning_effort="medium", messages=vague, max_tokens=40)
        return r.choices[0].message.content, extra(r.choices[0].message, "reasoning_content")

    assert reply(7) == reply(7)
    assert len({reply(s) for s in range(1, 9)}) > 1


def test_stop_ends_the_answer_before_the_stop_string(server):
    full = ask(server, seed=0, temperature=0, reasoning_effort="none").choices[0].message.content
    assert len(full) > 8
    cut = full[4:7]
    stopped = ask(server, seed=0, temperature=0, reasoning_effort="none", stop=[cut, "never seen"])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == full[:full.index(cut)]
    tokens, final, _ = stream(server, seed=0, temperature=0, reasoning_effort="none", stop=cut)
    assert joined(tokens, final, "content") == full[:full.index(cut)]


def test_max_tokens_ends_with_length(server):
    r = ask(server, max_completion_tokens=3, reasoning_effort="none")
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("fields, param", [
    ({"temperature": 3}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"extra_body": {"reasoning": {"effort": "ultra"}}}, "reasoning.effort"),
    ({"max_tokens": 10 ** 6}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"seed": "x"}, "seed"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"n": 2}, "n"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"tools": [{"type": "function", "function": {"name": "f g", "parameters": {}}}]}, "tools[0].function.name"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
    ({"extra_body": {"elastic": {"think_submodel": "9B"}}}, "elastic.think_submodel"),
    ({"extra_body": {"elastic": {"depth": "Deepest"}}}, "elastic.depth"),
    ({"extra_body": {"elastic": {"budget": 3}}}, "elastic.budget"),
    ({"reasoning_effort": "none", "extra_body": {"thinking_token_budget": 20}}, "thinking_token_budget"),
    ({"extra_body": {"thinking_token_budget": 20, "elastic": {"thinking_budget": 30}}}, "elastic.thinking_budget"),
    ({"extra_body": {"thinking_budget_tokens": -1}}, "thinking_budget_tokens"),
    ({"reasoning_effort": "none", "extra_body": {"elastic": {"thinking_budget": 9}}}, "elastic.thinking_budget"),
    ({"model": f"{MODEL}:1.0M", "extra_body": {"elastic": {"answer_submodel": "1.5M"}}}, "elastic.answer_submodel"),
])
def test_bad_parameters_get_400_naming_the_parameter(server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        ask(server, **fields)
    assert err.value.status_code == 400 and err.value.param == param and err.value.message


def test_a_conversation_longer_than_the_context_gets_400(server):
    with pytest.raises(openai.BadRequestError) as err:
        ask(server, messages=[{"role": "user", "content": "1 + 1 " * 2000}])
    assert err.value.param == "messages" and "context" in err.value.message


def test_unknown_model_404_bad_json_400_big_body_413(server):
    with pytest.raises(openai.NotFoundError) as err:
        ask(server, model="gpt-4o")
    assert err.value.code == "model_not_found" and err.value.param == "model"
    url = server.address + "/chat/completions"
    r = requests.post(url, data=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = requests.post(url, data=b'{"x": "' + b"a" * (5 * 1024 * 1024) + b'"}',
                      headers={"content-type": "application/json"})
    assert r.status_code == 413 and "error" in r.json()
    r = requests.get(server.address.replace("/v1", "/v2/anything"))
    assert r.status_code == 404 and r.json()["error"]["message"]


def test_503_while_the_model_loads():
    queue = EngineQueue()
    queue.set_loading()
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    try:
        with pytest.raises(openai.InternalServerError) as err:
            ask(srv)
        assert err.value.status_code == 503 and err.value.code == "model_loading"
        r = requests.get(srv.address.replace("/v1", "/health"))
        assert r.status_code == 503 and r.json()["status"] == "loading"
        with pytest.raises(openai.InternalServerError):
            client(srv).models.list()
    finally:
        srv.stop()


def test_api_key(engine):
    queue = EngineQueue()
    queue.set_engine(engine)
    srv = ServerThread(queue, "127.0.0.1", 0, api_key="s3cret-key").start()
    try:
        with pytest.raises(openai.AuthenticationError) as err:
            client(srv, key="wrong-key").models.list()
        assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
        r = requests.post(srv.address + "/chat/completions", json={"model": MODEL, "messages": QUESTION})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"  # no key at all
        with pytest.raises(openai.AuthenticationError):
            client(srv, key="wrong-key").chat.completions.create(model=MODEL, messages=QUESTION)
        assert client(srv, key="s3cret-key").chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=4).usage.completion_tokens == 4
        health = requests.get(srv.address.replace("/v1", "/health")).json()
        assert health == {"status": "ok"}  # nothing about the model without the key
    finally:
        srv.stop()


# ---------------------------------------------------------------------- one engine, one reply at a time


@pytest.mark.parametrize("streamed", [True, False])
def test_a_client_that_hangs_up_stops_its_reply_within_a_token(server, engine, streamed):
    with held_engine(engine) as valve:
        # a few tokens ahead of the client, one more per chunk it reads (the server may put several
        # tokens in one chunk): held once the client stops reading, until the hang-up stops it
        valve.allow(4 if streamed else 8)
        before = snapshot(server)
        if streamed:
            reply = client(server).chat.completions.create(model=MODEL, messages=QUESTION, stream=True,
                                                           max_tokens=500, reasoning_effort="none")
            for i, _ in enumerate(reply):
                if i == 5:
                    break
                valve.allow(1)
            reply.close()  # hang up mid-reply
        else:
            with pytest.raises(openai.APITimeoutError):  # the client gives up and closes the connection
                client(server, timeout=1.0).chat.completions.create(model=MODEL, messages=QUESTION,
                                                                    max_tokens=500, reasoning_effort="none")
        # this reply's record: the one of a hang-up (an earlier request's record, such as the other
        # variant's last ask, may land after its response reached the client, so not simply the last)
        rec = wait_for_record(server, before, lambda r: r.tokens_at_cancel is not None)
    assert rec.finish_reason == "stopped" and rec.tokens_at_cancel is not None
    assert rec.tokens - rec.tokens_at_cancel <= 1  # the decode loop saw the flag at the next token
    assert 0 < rec.tokens < 500
    assert server.queue.snapshot().running is None  # the engine is free for the next one
    assert ask(server, max_tokens=2, reasoning_effort="none").usage.completion_tokens == 2


@pytest.mark.slow
def test_a_client_that_hangs_up_while_waiting_leaves_the_line(server, engine):
    with held_engine(engine) as valve:
        first = threading.Thread(target=lambda: ask(server, max_tokens=60, reasoning_effort="none"))
        first.start()
        assert wait_for(lambda: server.queue.snapshot().running is not None)
        with pytest.raises(openai.APITimeoutError):
            client(server, timeout=0.5).chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=5)
        assert wait_for(lambda: server.queue.waiting == 0, 5)  # it left before its turn came
        assert server.queue.snapshot().running is not None  # ...while the first still runs
        valve.open()
        first.join()
    assert any(r.finish_reason == "cancelled" and r.tokens == 0 for r in server.records)


@pytest.mark.slow
def test_two_clients_and_the_chat_window_take_turns_in_order_and_a_third_gets_429(server, engine):
    results, order = {}, []
    before = snapshot(server)
    served = lambda: [r for r in records_since(server, before)  # noqa: E731 (a's and b's, in any order)
                      if r.finish_reason != "refused" and r.tokens in (30, 10)]

    def request(name, max_tokens):
        r = ask(server, max_tokens=max_tokens, reasoning_effort="none")
        results[name] = r

    def chat_window():
        with server.queue.turn(Controls(), "chat") as eng:
            assert eng is engine
            order.append(("chat", time.monotonic()))
            time.sleep(0.05)
            order.append(("chat done", time.monotonic()))

    with held_engine(engine) as valve:
        a = threading.Thread(target=request, args=("a", 30))
        a.start()
        assert wait_for(lambda: server.queue.snapshot().running is not None)
        chat = threading.Thread(target=chat_window)
        chat.start()
        assert wait_for(lambda: server.queue.waiting == 1)
        b = threading.Thread(target=request, args=("b", 10))
        b.start()
        assert wait_for(lambda: server.queue.waiting == 2)
        # the line holds one server request (max_waiting=1; the chat window does not count): a third is refused
        with pytest.raises(openai.RateLimitError) as err:
            ask(server, max_tokens=5)
        assert err.value.status_code == 429 and err.value.code == "queue_full"
        valve.open()
        for t in (a, chat, b):
            t.join(60)
    # A job's record is written just after its reply reaches the client: wait for both.
    assert wait_for(lambda: len(served()) >= 2)
    first, second = sorted(served(), key=lambda r: r.number)
    assert first.finished <= order[0][1] <= order[1][1] <= second.started
    assert results["a"].usage.completion_tokens == 30 and results["b"].usage.completion_tokens == 10


def in_thread(fn, *args, **kw):
    """Runs fn in a thread; returns (thread, box) where box gets the result or the exception."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args, **kw)
        except Exception as e:  # the test inspects it
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_the_chat_window_waits_its_turn_through_stream_in_turn(server, engine):
    """What the app's engine worker does for a chat reply while the server is busy."""
    request = ChatRequest(tuple(QUESTION), None, "1.5M", 0, 5)
    with held_engine(engine) as valve:
        a, a_box = in_thread(ask, server, max_tokens=30, reasoning_effort="none")
        assert wait_for(lambda: server.queue.snapshot().running is not None)
        chat, chat_box = in_thread(lambda: [(e, time.monotonic())
                                            for e in stream_in_turn(server.queue, request, Controls())])
        assert wait_for(lambda: server.queue.waiting == 1)
        impatient = Controls()
        gave_up, gave_up_box = in_thread(lambda: list(stream_in_turn(server.queue, request, impatient)))
        assert wait_for(lambda: server.queue.waiting == 2)
        impatient.stop()  # Esc while still waiting: it leaves the line at once, with a Done
        gave_up.join(5)
        valve.open()
        a.join(60)
        chat.join(60)
    (done,) = gave_up_box["value"]
    assert isinstance(done, Done) and done.finish_reason == STOPPED and done.answer_tokens == 0
    events = chat_box["value"]
    assert isinstance(events[0][0], Prefill) and isinstance(events[-1][0], Done)
    assert events[-1][0].answer_tokens == 5
    a_record = next(r for r in reversed(server.records) if r.tokens == 30)
    assert a_record.finished <= events[0][1]  # the chat began only after the server's reply ended


def test_a_model_swap_stops_server_replies_with_503(server, engine):
    """What the app's engine worker does when the user loads another model."""
    with held_engine(engine):  # the running reply waits until the swap stops it
        running, running_box = in_thread(ask, server, max_tokens=300, reasoning_effort="none")
        assert wait_for(lambda: server.queue.snapshot().running is not None)
        waiting, waiting_box = in_thread(ask, server, max_tokens=5, reasoning_effort="none")
        assert wait_for(lambda: server.queue.waiting == 1)
        with server.queue.exclusive("loading another model"):
            running.join(10)
            waiting.join(10)
            with pytest.raises(openai.InternalServerError) as err:
                ask(server, max_tokens=5)
            assert err.value.status_code == 503 and err.value.code == "model_loading"
            server.queue.set_engine(engine)  # the new model (the same one here)
    for box, code in ((running_box, "reply_stopped"), (waiting_box, "model_not_ready")):
        e = box["error"]
        assert isinstance(e, openai.InternalServerError) and e.status_code == 503 and e.code == code
    assert ask(server, max_tokens=2, reasoning_effort="none").usage.completion_tokens == 2


# ---------------------------------------------------------------------- the command line


def run_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "runtime", "serve", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_cli_refuses_another_host_without_a_key_in_one_line():
    out = run_cli("--checkpoint", str(DEMO), "--host", "0.0.0.0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: --host 0.0.0.0") and "--api-key" in out.stderr


@pytest.mark.slow
def test_cli_refuses_a_taken_port_in_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = run_cli("--checkpoint", str(DEMO), "--port", str(port))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in out.stderr


@pytest.mark.slow
def test_cli_serves_the_demo_until_stopped():
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--checkpoint", str(DEMO), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        first = proc.stdout.readline()
        assert first.startswith("listening on http://127.0.0.1:") and "/v1" in first
        base = first.split()[2]
        assert proc.stdout.readline().startswith("ready: models " + MODEL)
        assert requests.get(base.replace("/v1", "/health")).json()["status"] == "ok"
        r = openai.OpenAI(base_url=base, api_key="x", max_retries=0).chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=4)
        assert r.usage.completion_tokens == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_big_body_without_a_length_is_refused_too(server):
    def chunks():
        for _ in range(5 * 1024):
            yield b"a" * 1024

    r = requests.post(server.address + "/chat/completions", data=chunks(),  # chunked: no Content-Length
                      headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


# ---------------------------------------------------------------------- in the app


@pytest.mark.slow
def test_the_app_serves_the_engine_it_loaded_and_the_strip_sees_the_request(qtbot, engine):
    from app.server_control import ServerControl

    queue = EngineQueue()
    queue.set_engine(engine)  # what the engine worker does once a model has loaded
    control = ServerControl(queue)
    try:
        control.start("0.0.0.0", 0, "")  # an open address without a key: refused in one line, no exception
        qtbot.waitUntil(lambda: control.status().error != "", timeout=20000)
        assert "--api-key" in control.status().error and not control.status().running
        with qtbot.waitSignal(control.sig_status, timeout=20000,
                              check_params_cb=lambda s: s.running and s.address.startswith("http://127.0.0.1:")):
            control.start("127.0.0.1", 0, "")
        srv = control.server
        with held_engine(engine) as valve:
            reply = threading.Thread(target=lambda: ask(srv, max_tokens=40, reasoning_effort="none"))
            reply.start()
            qtbot.waitUntil(lambda: control.status().in_flight is not None, timeout=20000)
            status = control.status()
            assert status.in_flight.startswith("server 127.0.0.1:") and srv.address in status.summary
            valve.open()
            reply.join(60)
        qtbot.waitUntil(lambda: control.status().in_flight is None, timeout=5000)
    finally:
        control.shutdown()
    assert not control.status().running


def test_the_settings_box_refuses_an_open_address_without_a_key(qtbot):
    from app.widgets.server_settings import ServerSettingsBox

    box = ServerSettingsBox(True, "0.0.0.0", 8000, "")
    qtbot.addWidget(box)
    assert "API key" in box.problem() and "API key" in box.note.text()
    box.api_key.setText("long-enough-key")
    assert box.problem() == "" and box.values() == (True, "0.0.0.0", 8000, "long-enough-key")
    box.host.setText("127.0.0.1")
    box.api_key.setText("")
    assert box.problem() == "" and "http://127.0.0.1:8000/v1" in box.note.text()


def test_a_finished_reply_is_not_counted_as_cancelled(server):
    before = snapshot(server)
    ask(server, max_tokens=3, reasoning_effort="none")
    stream(server, max_tokens=3, reasoning_effort="none")
    assert wait_for(lambda: len([r for r in records_since(server, before) if r.tokens == 3]) >= 2)
    assert all(r.finish_reason == "length" and r.tokens_at_cancel is None
               for r in records_since(server, before) if r.tokens == 3)
