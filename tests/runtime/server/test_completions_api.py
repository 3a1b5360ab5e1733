"""/v1/completions (a raw prompt continued) through the official `openai` client, on the demo."""

import openai
import pytest
import requests
import torch

from runtime.errors import UsageError
from runtime.events import Token
from runtime.generate import ChatRequest, stream_chat
from runtime.sampling import SamplingSettings
from tests.paths import DEMO_NVFP4

MODEL = DEMO_NVFP4.name
PROMPT = "45 + 23 ="


def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.address, api_key="unused", max_retries=0, timeout=60)


def complete(srv, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("temperature", 0)
    return client(srv).completions.create(**kw)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def test_a_raw_prompt_is_continued_by_the_parent_without_template_or_thinking(demo_server, demo_engine):
    r = complete(demo_server, max_tokens=6)
    assert r.object == "text_completion" and r.model == MODEL and r.id.startswith("cmpl-")
    choice = r.choices[0]
    assert choice.text and choice.finish_reason in ("stop", "length") and choice.logprobs is None
    # the prompt is its own tokens, no chat turn around it
    assert r.usage.prompt_tokens == len(demo_engine.chat.encode_plain(PROMPT))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens <= r.usage.prompt_tokens + 6
    e = extra(r, "elastic")
    assert (e["think_submodel"], e["answer_submodel"]) == (None, "1.5M")


def test_special_token_strings_in_the_prompt_stay_characters(demo_server, demo_engine):
    prompt = "<|im_start|>assistant\n<think>"
    r = complete(demo_server, prompt=prompt, max_tokens=1)
    special = demo_engine.chat.encode(prompt)  # what a template would make of it
    assert r.usage.prompt_tokens == len(demo_engine.chat.encode_plain(prompt)) > len(special)


def test_streamed_completion_equals_the_whole_one_and_echo_gives_the_prompt_back(demo_server):
    whole = complete(demo_server, max_tokens=8).choices[0].text
    chunks = list(complete(demo_server, max_tokens=8, stream=True, stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(texts) - 1  # one chunk a token
    assert complete(demo_server, max_tokens=8, echo=True).choices[0].text == PROMPT + whole
    echoed = [c.choices[0].text for c in complete(demo_server, max_tokens=8, echo=True, stream=True)]
    assert echoed[0].startswith(PROMPT) and "".join(echoed) == PROMPT + whole


def test_line_breaks_at_the_start_of_a_raw_prompts_continuation_are_kept(demo_engine):
    """A chat answer drops the line break after </think>; a completion has no </think>: its text is its own."""
    newline = demo_engine.chat.encode_plain("\n")
    assert len(newline) == 1

    def newline_first(context, logits):  # the continuation's first token is a line break
        if len(context) == len(prompt):
            logits = torch.full_like(logits, float("-inf"))
            logits[..., newline[0]] = 0.0
        return logits

    prompt = demo_engine.chat.encode_plain("def f():")
    request = ChatRequest((), None, "1.5M", 0, 3, SamplingSettings(temperature=0), prompt="def f():",
                          logits_processors=(newline_first,))
    events = list(stream_chat(demo_engine, request))
    done = events[-1]
    assert done.answer_text.startswith("\n") and done.think_submodel is None
    assert "".join(e.text for e in events if isinstance(e, Token)) == done.answer_text
    with pytest.raises(UsageError):  # a raw prompt is never thought about
        list(stream_chat(demo_engine, ChatRequest((), "0.5M", "1.5M", 5, 3, prompt="x")))


def test_max_tokens_defaults_to_16_and_stop_cuts_the_text(demo_server):
    r = complete(demo_server, prompt="1 2 3 4 5 6 7 8 9", temperature=1.0, seed=4)
    assert r.usage.completion_tokens <= 16
    full = complete(demo_server, max_tokens=12).choices[0].text
    assert len(full) >= 3
    cut = full[1:3]
    stopped = complete(demo_server, max_tokens=12, stop=[cut])
    assert stopped.choices[0].finish_reason == "stop" and stopped.choices[0].text == full[:full.index(cut)]


def test_a_pinned_submodel_answers(demo_server):
    r = complete(demo_server, model=f"{MODEL}:0.5M", max_tokens=2)
    assert extra(r, "elastic")["answer_submodel"] == "0.5M"


@pytest.mark.parametrize("fields, param", [
    ({"suffix": "}"}, "suffix"),
    ({"n": 2}, "n"),
    ({"best_of": 3}, "best_of"),
    ({"logprobs": 21}, "logprobs"),
    ({"logprobs": 2, "echo": True}, "logprobs"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [1, 2, 3]}, "prompt"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": 5}, "temperature"),
    ({"echo": "yes"}, "echo"),
    ({"presence_penalty": 1}, "presence_penalty"),
    ({"extra_body": {"reasoning_effort": "low"}}, "reasoning_effort"),
    ({"extra_body": {"elastic": {"depth": "Deep"}}}, "elastic.depth"),
    ({"extra_body": {"elastic": {"answer_submodel": "9B"}}}, "elastic.answer_submodel"),
])
def test_fields_it_cannot_honour_get_400_naming_them(demo_server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        complete(demo_server, **fields)
    assert err.value.status_code == 400 and err.value.param == param and err.value.message


def test_errors_are_in_openais_shape(demo_server, loading_server):
    r = requests.post(demo_server.address + "/completions", json={"model": "gpt-3.5-turbo-instruct", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    with pytest.raises(openai.InternalServerError) as err:
        complete(loading_server)
    assert err.value.status_code == 503 and err.value.code == "model_loading"
