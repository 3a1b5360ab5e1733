"""Continue (ChatRequest.continued): a reply cut off by its token limit, continued, ends exactly as one
longer reply would have (greedy, on the bundled demo, whose replies are real sums): cut in its answer,
cut again and again, and cut mid-thought."""

import pytest

from runtime.engine import Engine
from runtime.errors import UsageError
from runtime.events import ANSWER, THINKING, Done, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.reply_record import Continuation
from runtime.sampling import SamplingSettings
from tests.paths import DEMO

GREEDY = SamplingSettings(temperature=0)
QUESTION = ({"role": "user", "content": "What is 45 + 23 - 17 + 9?"},)


@pytest.fixture(scope="module")
def demo():
    return Engine.load(DEMO, device="cpu", max_context=2048)


def reply(engine, thinks: bool, max_new_tokens: int, continued: Continuation | None = None) -> list:
    subs = engine.submodels_by_size()
    request = ChatRequest(QUESTION, subs[0] if thinks else None, subs[-1], None, max_new_tokens, GREEDY,
                          continued=continued)
    return list(stream_chat(engine, request))


def tokens(events, phase: str) -> list[Token]:
    return [e for e in events if isinstance(e, Token) and e.phase == phase and e.token_id is not None]


def test_a_reply_cut_again_and_again_ends_as_one_longer_reply(demo):
    whole = reply(demo, False, 300)[-1]
    assert whole.finish_reason == "end_of_turn" and whole.answer_tokens > 12
    answer, parts, done = "", 0, None
    while done is None or done.finish_reason == "length":
        done = reply(demo, False, 5, Continuation(answer_text=answer) if parts else None)[-1]
        assert isinstance(done, Done) and done.answer_tokens <= 5 and not done.thinking_text
        answer += done.answer_text
        parts += 1
        assert parts < 50, "the continued reply never ended"  # bounded by the work, not by time
    assert answer == whole.answer_text and done.finish_reason == whole.finish_reason


def test_an_answer_cut_after_a_thought_goes_on_from_where_it_stopped(demo):
    events = reply(demo, True, 300)
    whole = events[-1]
    assert whole.thinking_text and whole.finish_reason == "end_of_turn"
    head = "".join(t.text for t in tokens(events, ANSWER)[:6])
    assert head and whole.answer_text.startswith(head) and head != whole.answer_text
    rest = reply(demo, True, 300, Continuation(whole.thinking_text, head))
    done = rest[-1]
    assert not tokens(rest, THINKING) and not done.thinking_text  # it does not think again
    assert head + done.answer_text == whole.answer_text
    assert done.answer_tokens == whole.answer_tokens - 6


def test_a_reply_cut_mid_thought_thinks_on_then_answers(demo):
    events = reply(demo, True, 300)
    whole = events[-1]
    thought = tokens(events, THINKING)
    head = "".join(t.text for t in thought[:20])
    assert len(thought) > 30 and whole.thinking_text.startswith(head)
    rest = reply(demo, True, 300, Continuation(head, "", thinking_done=False))
    done = rest[-1]
    assert head + done.thinking_text == whole.thinking_text
    assert done.answer_text == whole.answer_text and done.finish_reason == whole.finish_reason
    assert done.thinking_tokens == whole.thinking_tokens - 20


def test_a_thought_cut_without_a_thinker_is_refused(demo):
    with pytest.raises(UsageError, match="mid-thought"):
        reply(demo, False, 20, Continuation("45 + 23", "", thinking_done=False))
