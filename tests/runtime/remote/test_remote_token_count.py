"""Counting a prompt for a model on a server (runtime/remote/token_count.py, issue 38): llama.cpp renders
the chat with /apply-template and counts with /tokenize, vLLM counts the chat with its /tokenize, and a
server with no such route, or whose route fails, is estimated from the characters and says so and why.
The stand-in checks what it is asked and answers as the engine's route does."""

import json

from runtime.remote.client import RemoteServer, Timeouts
from runtime.remote.engine import RemoteEngine
from tests.remote_stub import RemoteStub

CHAT = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 45 + 23?"})
FAST = Timeouts(connect=5.0, first_byte=30.0, between_chunks=30.0)
TEMPLATE = "<|user|>What is 45 + 23?<|assistant|><think>\n"


def answer(obj) -> list:
    return [("status", 200, json.dumps(obj).encode())]


def engine_on(models, routes):
    """A stand-in whose POSTs are answered by `routes` (path -> body -> JSON answer), and its engine."""
    holder = []

    def script(body):
        path = holder[0].posts[-1]
        if path not in routes:
            return [("status", 404, b'{"error": {"message": "File Not Found"}}')]
        return answer(routes[path](body))
    stub = RemoteStub(models, script).__enter__()
    holder.append(stub)
    return stub, RemoteEngine.connect(RemoteServer(stub.url, timeouts=FAST), "star")


def test_llama_cpp_renders_the_chat_then_counts_its_tokens():
    def template(body):
        assert body["messages"] == list(CHAT) and body["chat_template_kwargs"] == {"enable_thinking": True}
        return {"prompt": TEMPLATE}

    def tokenize(body):
        return {"tokens": list(range(len(body["content"].split())))}
    stub, engine = engine_on([{"id": "star", "owned_by": "llamacpp"}], {"/apply-template": template,
                                                                        "/tokenize": tokenize})
    try:
        counter = engine.prompt_counter()
        assert counter.count(CHAT, True) == (len(TEMPLATE.split()), "")
        assert counter.count_text("one two three") == (3, "")
        assert stub.posts == ["/apply-template", "/tokenize", "/tokenize"]
        assert stub.bodies[1] == {"content": TEMPLATE}
    finally:
        stub.__exit__()


def test_vllm_counts_the_chat_with_its_template_and_a_text_alone():
    def tokenize(body):
        assert body["model"] == "star"
        if "messages" in body:
            assert body["add_generation_prompt"] is True and body["chat_template_kwargs"] == {"enable_thinking": False}
            return {"count": 21, "max_model_len": 4096, "tokens": [0] * 21}
        assert body["add_special_tokens"] is False
        return {"count": len(body["prompt"]), "max_model_len": 4096, "tokens": []}
    stub, engine = engine_on([{"id": "star", "owned_by": "vllm"}], {"/tokenize": tokenize})
    try:
        counter = engine.prompt_counter()
        assert counter.count(CHAT, False) == (21, "")
        assert counter.count_text("abcde") == (5, "")
    finally:
        stub.__exit__()


def test_a_server_without_a_tokenizer_route_is_estimated_and_says_so_without_asking():
    stub, engine = engine_on([{"id": "star"}], {})
    try:
        tokens, how = engine.prompt_counter().count(CHAT, False)
        chars = sum(len(m["content"]) for m in CHAT)
        assert tokens == -(-chars // 4) and how.startswith("estimated from its characters (4 a token)")
        assert "no tokenizer route" in how and stub.bodies == []
    finally:
        stub.__exit__()


def test_a_route_that_fails_is_estimated_with_why_and_not_asked_again():
    stub, engine = engine_on([{"id": "star", "owned_by": "vllm"}], {})  # its /tokenize answers 404
    try:
        counter = engine.prompt_counter()
        tokens, how = counter.count(CHAT, False)
        assert tokens == 7 and how.startswith("estimated") and "/tokenize (404)" in how
        assert counter.count_text("abcdefgh") == (2, how)
        assert stub.posts == ["/tokenize"]  # asked once
    finally:
        stub.__exit__()


def test_an_elastic_chat_server_counts_as_the_model_here_does():
    """Another Elastic Chat (`runtime serve` on the demo): its count_tokens gives what the tokenizer here gives."""
    from runtime.engine import Engine
    from runtime.engine_queue import EngineQueue
    from runtime.server.runner import ServerThread
    from tests.paths import DEMO

    engine = Engine.load(DEMO, device="cpu", max_context=2048)
    queue = EngineQueue()
    queue.set_engine(engine)
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    try:
        counter = RemoteEngine.connect(RemoteServer(srv.address, timeouts=FAST), DEMO.name).prompt_counter()
        assert counter.count(CHAT, False) == (len(engine.chat.prompt_ids(list(CHAT), enable_thinking=False)), "")
        text = "The meeting is on Tuesday at 10 in room 4."
        assert counter.count_text(text) == (len(engine.chat.encode_plain(text)), "")
    finally:
        srv.stop()


def test_stop_ends_a_count_in_flight_on_a_server_that_does_not_answer():
    """The app quits while a count waits on a hung server: `stop` ends the wait (its thread can end) and the
    count is an estimate; no later count asks again."""
    import threading

    release = threading.Event()

    def hangs(body):
        release.wait(600)
        return []  # (the client hung up long ago: nothing more is sent)
    with RemoteStub([{"id": "star", "owned_by": "vllm"}], hangs) as stub:
        engine = RemoteEngine.connect(RemoteServer(stub.url, timeouts=Timeouts(connect=5.0, answer=600.0)), "star")
        counter = engine.prompt_counter()
        said = []
        counting = threading.Thread(target=lambda: said.append(counter.count(CHAT, False)), daemon=True)
        counting.start()
        assert not counting.join(timeout=0.5) and counting.is_alive()  # it waits on the server
        counter.stop()
        counting.join(timeout=120)
        release.set()
    assert not counting.is_alive() and said[0][1].startswith("estimated") and "stopped" in said[0][1]
    assert counter.count_text("abcd") == (1, said[0][1]) and stub.posts == ["/tokenize"]
