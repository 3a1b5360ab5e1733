"""The engine queue's one loop that takes turns (`reply_in_turn`), as the server's requests and the window's
replies (`stream_in_turn`) both use it, on any engine of the ChatEngine shape, and what the server may run on."""

from __future__ import annotations

import threading

import pytest

from runtime.chat_engine import ChatEngine
from runtime.controls import Controls, StopRequested
from runtime.engine_queue import EMPTY, READY, EngineQueue, EngineUnavailable, reply_in_turn, stream_in_turn
from runtime.errors import UsageError
from runtime.events import ANSWER, END_OF_TURN, ERROR, STOPPED, Done, Token
from runtime.generate import ChatRequest
from runtime.reply_record import ReplyRecord, ThinkingBudget

REQUEST = ChatRequest(({"role": "user", "content": "hi"},), "small", "full", 8, 64)


class FakeEngine:
    """A ChatEngine that answers `words`, one Token each, and refuses a request with no messages."""

    max_context = 256
    thinking_ceiling = 128

    def __init__(self, words=("a", "b", "c")):
        self.words, self.streamed = words, []

    def stream(self, request, controls=None):
        if not request.messages:
            raise UsageError("nothing to answer")
        self.streamed.append(request)
        record = ReplyRecord(None, request.answer_submodel, ThinkingBudget.for_reply(0, request.max_new_tokens))
        record.start()

        def events():
            for word in self.words:
                record.arrived()
                record.count()
                yield record.token(word, None)
            yield record.done(END_OF_TURN)
        return events()

    def depth_levels(self):
        return []

    def default_depth(self):
        return "Off"

    def submodels_by_size(self):
        return ["full"]

    all_submodels_by_size = submodels_by_size

    def status(self):
        return "fake"

    def token_counter(self, request):
        return None

    def release(self):
        pass


def stopped() -> Controls:
    controls = Controls()
    controls.stop()
    return controls


def test_a_fake_engine_has_the_shape_it_stands_for():
    assert isinstance(FakeEngine(), ChatEngine) and not isinstance(object(), ChatEngine)


def test_a_reply_in_turn_runs_on_the_engine_and_keeps_its_tickets_progress():
    queue, engine = EngineQueue(), FakeEngine()
    queue.set_engine(engine)
    ticket = queue.enter("server x", Controls(), bounded=True)
    started, seen = [], []
    for event in reply_in_turn(queue, ticket, REQUEST, lambda: started.append(len(seen))):
        seen.append(event)
        if isinstance(event, Token):  # the live strip's line, while it runs
            assert queue.snapshot().running == f"server x · {ANSWER} on full · {event.progress.tokens} tokens"
    assert started == [0] and engine.streamed == [REQUEST] and isinstance(seen[-1], Done)
    assert ticket.began is not None and queue.snapshot().running is None  # the engine is free again


def test_what_keeps_a_reply_from_beginning_is_raised_before_any_event_and_frees_the_line():
    queue = EngineQueue()
    ticket = queue.enter("server", Controls(), bounded=True)
    with pytest.raises(EngineUnavailable):
        next(reply_in_turn(queue, ticket, REQUEST))
    queue.set_engine(FakeEngine())
    ticket = queue.enter("server", Controls(), bounded=True)
    with pytest.raises(UsageError, match="nothing to answer"):
        next(reply_in_turn(queue, ticket, ChatRequest((), None, "full")))
    holder = queue.enter("chat")
    queue.wait(holder)  # someone holds the engine: the next ticket waits, and is stopped while it does
    ticket = queue.enter("server", stopped(), bounded=True)
    with pytest.raises(StopRequested):
        next(reply_in_turn(queue, ticket, REQUEST))
    queue.leave(holder)
    assert queue.snapshot().running is None and queue.waiting == 0


def test_the_window_gets_a_done_for_a_reply_that_never_began():
    queue = EngineQueue()
    events = list(stream_in_turn(queue, REQUEST, Controls()))
    assert [(e.finish_reason, e.error) for e in events] == [(ERROR, "no model is loaded")]
    assert (events[0].think_submodel, events[0].thinking_budget, events[0].progress.tokens) == ("small", 8, 0)
    queue.set_engine(FakeEngine())
    holder = queue.enter("server")
    queue.wait(holder)
    assert [e.finish_reason for e in stream_in_turn(queue, REQUEST, stopped())] == [STOPPED]
    queue.leave(holder)


def test_an_engine_that_is_not_shared_is_the_windows_alone():
    """A model on another server: the app's own server answers as if none were loaded."""
    queue, engine = EngineQueue(), FakeEngine()
    queue.set_engine(engine, shared=False)
    assert queue.snapshot().state == EMPTY
    with pytest.raises(EngineUnavailable):
        queue.check_ready()
    with pytest.raises(EngineUnavailable):
        next(reply_in_turn(queue, queue.enter("server", Controls(), bounded=True), REQUEST))
    assert [type(e) for e in stream_in_turn(queue, REQUEST, Controls())][-1] is Done and engine.streamed == [REQUEST]
    queue.set_engine(engine)
    assert queue.snapshot().state == READY and queue.check_ready() is engine


def test_turns_are_taken_in_arrival_order():
    queue, engine = EngineQueue(), FakeEngine()
    queue.set_engine(engine)
    first = queue.enter("first", Controls())
    order = []
    second_done = threading.Event()

    def second():
        for _ in stream_in_turn(queue, REQUEST, Controls(), "second"):
            pass
        order.append("second")
        second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    for event in reply_in_turn(queue, first, REQUEST):
        if isinstance(event, Done):
            order.append("first")  # (the engine is still held here)
    thread.join(10)
    assert second_done.is_set() and order == ["first", "second"]
