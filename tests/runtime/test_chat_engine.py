"""One engine shape (runtime/chat_engine.py): a model on this PC and one on a server are held the same way
by the window, the CLI and the engine queue."""

from runtime.chat_engine import ChatEngine
from runtime.engine import Engine
from runtime.events import Done
from runtime.generate import ChatRequest
from runtime.remote.client import RemoteServer
from runtime.remote.engine import RemoteEngine
from runtime.sampling import SamplingSettings
from tests.remote_stub import RemoteStub, chunk, sse

QUESTION = ({"role": "user", "content": "What is 2 + 2?"},)
TOOL = {"type": "function", "function": {"name": "add", "description": "adds two numbers",
                                         "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}


def test_the_local_and_the_remote_engine_have_one_shape_and_both_stream_a_reply(checkpoints):
    local = Engine.load(checkpoints["hybrid"], max_context=512)
    script = lambda body: [sse(chunk(content="4")), sse(chunk(finish="stop")), b"data: [DONE]\n\n"]  # noqa: E731
    with RemoteStub([{"id": "star", "object": "model", "max_model_len": 4096}], script) as stub:
        remote = RemoteEngine.connect(RemoteServer(stub.url), "star")
        for engine in (local, remote):
            assert isinstance(engine, ChatEngine), type(engine).__name__
            answer = engine.submodels_by_size()[-1]
            request = ChatRequest(QUESTION, None, answer, 0, 4, SamplingSettings(0.0))
            events = list(engine.stream(request))
            assert isinstance(events[-1], Done) and events[-1].answer_submodel == answer
            assert engine.default_depth() in [level.name for level in engine.depth_levels()]
            assert engine.thinking_ceiling > 0 and engine.max_context > 0 and engine.status() is not None


def test_a_local_engine_counts_a_prompt_as_the_request_renders_it_and_a_remote_one_cannot(checkpoints):
    local = Engine.load(checkpoints["hybrid"], max_context=512)
    plain = ChatRequest(QUESTION, "small", "full", 8)
    count = local.token_counter(plain)
    assert count(list(QUESTION)) == len(local.chat.prompt_ids(list(QUESTION), enable_thinking=True))
    with_tools = ChatRequest(QUESTION, "small", "full", 8, tools=(TOOL,))
    assert local.token_counter(with_tools)(list(QUESTION)) > count(list(QUESTION))  # the template renders them
    with RemoteStub([{"id": "star", "object": "model"}]) as stub:
        assert RemoteEngine.connect(RemoteServer(stub.url), "star").token_counter(plain) is None
