"""A reply cut mid-thought and continued with a small max tokens thinks on within what is left of its
thinking budget, then answers (issue 38): the small limit no longer forces the thought closed a few
tokens on (5 max tokens left a thought 2 tokens before its forced `</think>`). Greedy, the bundled demo."""

import pytest

from runtime.engine import Engine
from runtime.events import THINKING, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.reply_record import GRACE_TOKENS, Continuation, ThinkingBudget
from runtime.sampling import SamplingSettings
from tests.paths import DEMO

GREEDY = SamplingSettings(temperature=0)
QUESTION = ({"role": "user", "content": "What is 45 + 23 - 17 + 9?"},)
BUDGET = 40
HEAD = 12  # the thought's tokens before the cut


@pytest.fixture(scope="module")
def demo():
    return Engine.load(DEMO, device="cpu", max_context=2048)


def reply(engine, max_new_tokens: int, continued: Continuation | None = None) -> list:
    subs = engine.submodels_by_size()
    request = ChatRequest(QUESTION, subs[0], subs[-1], BUDGET, max_new_tokens, GREEDY, continued=continued)
    return list(stream_chat(engine, request))


def test_a_thought_continued_under_a_small_limit_thinks_on_to_its_budget(demo):
    events = reply(demo, 300)
    whole = events[-1]
    thought = [e for e in events if isinstance(e, Token) and e.phase == THINKING and e.token_id is not None]
    assert len(thought) > HEAD + 10 and whole.thinking_end == "budget"  # the budget ended it, not the model
    head = "".join(t.text for t in thought[:HEAD])
    rest = reply(demo, 5, Continuation(head, "", thinking_done=False))[-1]
    assert head + rest.thinking_text == whole.thinking_text  # the thought ends where its budget ends it
    assert rest.thinking_tokens == whole.thinking_tokens - HEAD
    # the answer has its 5 tokens, and what the thought's grace did not use
    assert 5 <= rest.answer_tokens <= 5 + GRACE_TOKENS and whole.answer_text.startswith(rest.answer_text)


def test_the_counted_thought_is_taken_from_the_continuation_when_it_says():
    budget, limit = ThinkingBudget.for_continued_thought(100, 30, 8)
    assert budget.soft == 70 and limit >= 70 + 8
    spent, limit = ThinkingBudget.for_continued_thought(100, 130, 8)
    assert spent.soft == 0 and limit > 8  # a spent budget: the thought ends at its next line end, then answers
    unbounded, limit = ThinkingBudget.for_continued_thought(None, 30, 400)
    assert unbounded.soft == ThinkingBudget.for_reply(None, 400).cap and limit > 400
