"""/v1/responses (stateless) through the official `openai` client's `responses.create`, on the demo."""

import base64

import openai
import pytest
import requests

from tests.paths import DEMO_NVFP4

MODEL = DEMO_NVFP4.name
QUESTION = "What is 45 + 23?"


def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.address, api_key="unused", max_retries=0, timeout=60)


def respond(srv, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("input", QUESTION)
    return client(srv).responses.create(**kw)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def test_a_response_has_a_reasoning_item_and_a_message(demo_server):
    r = respond(demo_server, reasoning={"effort": "low"}, max_output_tokens=80, temperature=0)
    assert r.object == "response" and r.status == "completed" and r.model == MODEL and r.id.startswith("resp_")
    assert [item.type for item in r.output] == ["reasoning", "message"]
    thought, message = r.output
    assert thought.content[0].type == "reasoning_text" and thought.content[0].text and thought.summary == []
    assert message.role == "assistant" and message.content[0].type == "output_text"
    assert r.output_text == message.content[0].text and r.output_text
    assert r.usage.output_tokens_details.reasoning_tokens > 0 and r.usage.input_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert extra(r, "elastic")["think_submodel"] == "0.5M"  # low effort: the smallest thinks, as in chat
    assert r.store is False and r.previous_response_id is None


def test_no_effort_means_no_reasoning_item_only_when_thinking_is_off(demo_server, demo_engine):
    off = respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=20)
    assert [item.type for item in off.output] == ["message"] and off.usage.output_tokens_details.reasoning_tokens == 0
    default = respond(demo_server, max_output_tokens=120)
    assert extra(default, "elastic")["depth"] == demo_engine.default_depth()


@pytest.mark.parametrize("summary", [None, "auto"])
def test_streamed_events_follow_openais_sequence_and_end_with_the_whole_response(demo_server, summary):
    kw = dict(reasoning={"effort": "low", **({"summary": summary} if summary else {})}, max_output_tokens=80,
              temperature=0)
    whole = respond(demo_server, **kw)
    events = list(respond(demo_server, stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    delta = "response.reasoning_summary_text.delta" if summary else "response.reasoning_text.delta"
    part = "response.reasoning_summary_part" if summary else "response.content_part"
    first_text = kinds.index("response.output_text.delta")
    assert kinds[2:5] == ["response.output_item.added", f"{part}.added", delta]
    assert kinds[first_text - 5:first_text] == [delta.replace("delta", "done"), f"{part}.done",
                                                "response.output_item.done", "response.output_item.added",
                                                "response.content_part.added"]
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    final = events[-1].response
    thought = "".join(e.delta for e in events if e.type == delta)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == whole.output_text
    item = final.output[0]
    assert thought == (item.summary[0].text if summary else item.content[0].text)
    assert thought == (whole.output[0].summary[0].text if summary else whole.output[0].content[0].text)
    assert [i.type for i in final.output] == ["reasoning", "message"] and final.usage == whole.usage
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert added == [i.id for i in final.output]


def test_running_out_of_output_tokens_is_incomplete(demo_server):
    r = respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 2
    events = list(respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"


def test_input_items_instructions_and_a_past_thought_make_the_conversation(demo_server):
    def prompt_tokens(**kw):
        return respond(demo_server, reasoning={"effort": "none"}, max_output_tokens=1, **kw).usage.input_tokens

    plain = prompt_tokens(input=QUESTION)
    assert prompt_tokens(input=[{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]) == plain
    assert prompt_tokens(input=QUESTION, instructions="Answer with one number.") > plain
    past = respond(demo_server, reasoning={"effort": "low"}, max_output_tokens=60,
                   include=["reasoning.encrypted_content"])
    thought = past.output[0]
    assert base64.b64decode(thought.encrypted_content).decode() == thought.content[0].text
    history = [{"role": "user", "content": QUESTION}, thought.model_dump(exclude_none=True),
               past.output[1].model_dump(exclude_none=True), {"role": "user", "content": "And 2 + 2?"}]
    kept = prompt_tokens(input=history, extra_body={"elastic": {"keep_reasoning": True}})
    assert kept > prompt_tokens(input=history)  # the thought came back (the template drops it by default)
    with pytest.raises(openai.BadRequestError) as err:
        prompt_tokens(input=[{**history[1], "encrypted_content": "not base64!"}] + history[2:])
    assert err.value.param == "input[0].encrypted_content"


@pytest.mark.parametrize("fields, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"include": ["file_search_call.results"]}, "include"),
    ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"truncation": "auto"}, "truncation"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"reasoning": {"summary": "everything"}}, "reasoning.summary"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "assistant", "content": "hi"}]}, "input"),
    ({"instructions": 3}, "instructions"),
    ({"extra_body": {"frequency_penalty": 1}}, "frequency_penalty"),
    ({"extra_body": {"elastic": {"depth": "Deepest"}}}, "elastic.depth"),
])
def test_fields_it_cannot_honour_get_400_naming_them(demo_server, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        respond(demo_server, **fields)
    assert err.value.status_code == 400 and err.value.param == param and err.value.message


def test_errors_are_in_openais_shape(demo_server, loading_server):
    r = requests.post(demo_server.address + "/responses", json={"model": "gpt-5", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    with pytest.raises(openai.InternalServerError) as err:
        respond(loading_server)
    assert err.value.status_code == 503 and err.value.code == "model_loading"
