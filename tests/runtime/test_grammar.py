"""runtime/grammar.py: constrained answers on the tiny random checkpoint. Whatever the model would say,
a forced call parses and validates against its tool's schema, and a json_schema answer validates
(jsonschema is the outside judge); the thinking is never constrained; bad schemas are refused by name."""

import json

import jsonschema
import pytest
import torch

from runtime.engine import Engine
from runtime.generate import ChatRequest, chat
from runtime.grammar import GrammarError, answer_grammar, check_grammar, response_format_schema
from runtime.sampling import SamplingSettings
from runtime.tool_calls import convert_value
from tests.engine_support import HELLO

CALC = {"type": "function", "function": {"name": "calc", "description": "Adds.", "parameters": {
    "type": "object", "properties": {
        "expression": {"type": "string", "maxLength": 16},
        "digits": {"type": "integer", "minimum": 0, "maximum": 12},
        "mode": {"enum": ["fast", "exact"]},
        "weights": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "note": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]}},
    "required": ["expression", "mode"]}}}
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "metric": {"type": "boolean"}},
    "required": ["city", "metric"]}}}
TOOLS = (CALC, WEATHER)
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ANSWER = {"type": "object", "properties": {
    "answer": {"type": "integer", "minimum": -999, "maximum": 999},
    "unit": {"type": "string", "enum": ["m", "s"]},
    "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
    "required": ["answer", "unit", "ok"], "additionalProperties": False}


@pytest.fixture(scope="module")
def engine(checkpoints):
    return Engine.load(checkpoints["hybrid"], max_context=2048)


def ask(engine, seed, thinking=False, **kw):
    return chat(engine, ChatRequest(HELLO, "small" if thinking else None, "full", thinking_budget=12 if thinking else 0,
                                    max_new_tokens=kw.pop("max_new_tokens", 320),
                                    sampling=SamplingSettings(temperature=1.0, seed=seed), **kw))


@pytest.mark.parametrize("seed,name,parallel,thinking", [
    (0, None, False, False), pytest.param(1, "weather", True, False, marks=pytest.mark.slow),
    pytest.param(2, "calc", False, True, marks=pytest.mark.slow),
    pytest.param(3, None, True, True, marks=pytest.mark.slow)])
def test_forced_calls_always_validate(engine, seed, name, parallel, thinking):
    done = ask(engine, seed, thinking, tools=TOOLS, tool_choice="required", tool_name=name,
               parallel_tool_calls=parallel)
    assert done.finish_reason == "tool_calls", (done.finish_reason, done.error, done.invalid_tool_calls)
    assert not done.invalid_tool_calls and done.answer_text.strip() == ""
    assert done.tool_calls and (parallel or len(done.tool_calls) == 1)
    for call in done.tool_calls:
        assert name is None or call.name == name
        jsonschema.validate(call.arguments, SCHEMAS[call.name])
    if thinking:
        assert done.thinking_tokens > 0 and done.think_submodel == "small"


@pytest.mark.parametrize("seed,thinking", [(0, False), pytest.param(1, True, marks=pytest.mark.slow),
                                           pytest.param(2, False, marks=pytest.mark.slow)])
def test_json_schema_answers_validate(engine, seed, thinking):
    schema = response_format_schema({"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER,
                                                                            "strict": True}})
    done = ask(engine, seed, thinking, response_format=schema)
    assert done.finish_reason == "end_of_turn", (done.finish_reason, done.error)
    jsonschema.validate(json.loads(done.answer_text), ANSWER)


def test_the_thinking_is_free(engine):
    """A thought spelled by a processor (text no JSON grammar allows) stays as it was; the answer is JSON."""
    thought = engine.chat.encode("no json here, only <words>!")
    prompt = len(engine.chat.prompt_ids(list(HELLO), True))

    def spell(context, logits):
        i = len(context) - prompt
        if i < len(thought):
            logits = torch.full_like(logits, float("-inf"))
            logits[..., thought[i]] = 0
        elif i == len(thought):
            logits = torch.full_like(logits, float("-inf"))
            logits[..., engine.chat.special.think_end] = 0
        return logits

    done = chat(engine, ChatRequest(HELLO, "full", "full", max_new_tokens=160, sampling=SamplingSettings(1.0, seed=5),
                                    response_format=ANSWER, logits_processors=(spell,)))
    assert done.thinking_text == "no json here, only <words>!" and done.thinking_end == "model"
    jsonschema.validate(json.loads(done.answer_text), ANSWER)
    assert response_format_schema({"type": "json_object"}) == {"type": "object"}


@pytest.mark.slow
def test_a_json_answer_or_a_call_when_both_are_allowed(engine):
    for seed in range(2):
        done = ask(engine, seed, tools=(WEATHER,), response_format=ANSWER)
        if done.tool_calls:
            jsonschema.validate(done.tool_calls[0].arguments, SCHEMAS["weather"])
        else:
            jsonschema.validate(json.loads(done.answer_text), ANSWER)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_strict_tools_calls_validate_in_auto(engine, seed):
    """A model pushed to open a call (its first answer token made <tool_call>) under OpenAI's `strict`:
    whatever follows is a call that validates; without strict, the random model's call is broken."""
    opener = engine.chat.encode("<tool_call>")[0]
    prompt = len(engine.chat.prompt_ids(list(HELLO), False, tools=list(TOOLS)))

    def push(context, logits):
        if len(context) == prompt:
            logits = logits.clone()
            logits[..., opener] += 100
        return logits

    for strict in (True, False):
        done = ask(engine, seed, tools=TOOLS, strict_tools=strict, logits_processors=(push,))
        if strict:
            assert done.finish_reason == "tool_calls" and not done.invalid_tool_calls
            for call in done.tool_calls:
                jsonschema.validate(call.arguments, SCHEMAS[call.name])
        else:
            assert done.invalid_tool_calls and not done.tool_calls


def test_values_convert_as_their_schema_says():
    union = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert convert_value("7", union) == 7 and convert_value("null", union) is None


def tool(parameters):
    return ({"type": "function", "function": {"name": "t", "parameters": parameters}},)


@pytest.mark.parametrize("parameters,param,words", [
    ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
     "tools[0].function.parameters.properties.a.uniqueItems", "'uniqueItems' is not supported"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x$"}}},
     "tools[0].function.parameters.properties.a.pattern", "text parameter"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}},
     "tools[0].function.parameters.properties.a.$ref", "cannot be a $ref"),
    ({"type": "object", "properties": {}, "required": ["a"]}, "tools[0].function.parameters.required",
     "not among the properties"),
    ({"type": "object", "properties": {"a": {"enum": [1, 2]}}}, "tools[0].function.parameters.properties.a",
     "declare the parameter's type"),
    ({"type": "array"}, "tools[0].function.parameters.type", "must be an object schema"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
     "tools[0].function.parameters.properties.a.$ref", "inside the schema"),
])
def test_bad_tool_schemas_are_refused_by_name(parameters, param, words):
    with pytest.raises(GrammarError) as e:
        answer_grammar(None, tool(parameters), "required")
    assert e.value.param == param and words in e.value.message
    with pytest.raises(GrammarError):
        answer_grammar(None, tool(parameters), "auto", strict=True)
    assert answer_grammar(None, tool(parameters), "auto") is None  # free calls: nothing to compile


def test_schemas_are_bounded():
    deep = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(GrammarError, match="nests deeper than 32"):
        response_format_schema({"type": "json_schema", "json_schema": {"name": "d", "schema": deep}})
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(800)}}
    with pytest.raises(GrammarError, match="at most 65,536"):
        response_format_schema({"type": "json_schema", "json_schema": {"name": "b", "schema": big}})
    for bad, words in (({"type": "xml"}, "must be text, json_object or json_schema"),
                       ({"type": "json_schema"}, "must be an object with name and schema"),
                       ("json", "must be an object")):
        with pytest.raises(GrammarError, match=words):
            response_format_schema(bad)
    assert response_format_schema({"type": "text"}) is None


def test_grammars_compile():
    for grammar in (answer_grammar(None, TOOLS, "required"),
                    answer_grammar(None, TOOLS, "auto", response_format=ANSWER),
                    answer_grammar(None, TOOLS, "required", "calc", parallel=False)):
        check_grammar(grammar)
    assert answer_grammar(None, TOOLS, "auto") is None and answer_grammar(None, TOOLS, "none") is None


def _matcher(chat, grammar):
    import llguidance

    from runtime.grammar import ll_tokenizer

    return llguidance.LLMatcher(ll_tokenizer(chat, len(chat.tokenizer)), grammar, log_level=0)


def _accepts(chat, grammar, text: str) -> bool:
    """Whether the constrained answer can be exactly `text`, tokenised as the model writes it, the mask
    computed before each token as the decode loop does (a grammar llguidance cannot follow fails there:
    "too many expressions constructed")."""
    m = _matcher(chat, grammar)
    for t in chat.tokenizer.encode(text, add_special_tokens=False):
        m.compute_bitmask()
        assert not m.is_error(), m.get_error()[:300]
        if not m.consume_token(t):
            return False
    return m.is_accepting()


@pytest.mark.parametrize("arguments", [{"expression": "71+977", "mode": "fast"},
                                       {"expression": "a\nb  c", "mode": "exact"},
                                       {"expression": "</param", "digits": 3, "mode": "fast"},
                                       {"expression": "", "mode": "exact", "weights": [1, 2]}])
def test_every_call_the_template_writes_is_one_the_grammar_allows(arguments):
    """The model writes calls as the template teaches (tool_calls.format_tool_call, token by token): every
    such call is allowed, forced or strict, each text value ending where the model closes it."""
    from runtime.chat_format import ChatFormat
    from runtime.tool_calls import format_tool_call
    from tests.paths import DEMO

    chat_ = ChatFormat(DEMO)
    free = json.loads(json.dumps(CALC))  # its text without a maxLength (a bounded one ends only at its bound)
    del free["function"]["parameters"]["properties"]["expression"]["maxLength"]
    for choice, strict in (("required", False), ("auto", True)):
        grammar = answer_grammar(chat_, [free, WEATHER], tool_choice=choice, strict=strict, room=4096)
        call = format_tool_call("calc", arguments)
        assert _accepts(chat_, grammar, call), (choice, call)
        for metric in (True, False, "true", "false"):  # the template writes True; JSON's true is read too
            assert _accepts(chat_, grammar, call + format_tool_call("weather", {"city": "Oslo", "metric": metric}))
        assert not _accepts(chat_, grammar, call + format_tool_call("weather", {"city": "Oslo", "metric": "yes"}))
        if strict:
            assert _accepts(chat_, grammar, "Let me work it out.\n\n" + call)
    grammar = answer_grammar(chat_, list(TOOLS), tool_choice="required", room=4096)
    for broken in ("71</parameter>x", "71</tool_call>", "x" * 17):  # a closing tag inside, or past maxLength 16
        text = format_tool_call("calc", {"expression": broken, "mode": "fast"})
        assert not _accepts(chat_, grammar, text), broken


@pytest.mark.parametrize("value", ["Oslo", "", "a", "São\nPaulo", "x" * 15, "x" * 16, "<param", "</para"])
@pytest.mark.parametrize("choice, strict", [("required", False), ("auto", True)])
def test_a_forced_calls_text_value_ends_where_the_model_closes_it(value, choice, strict):
    """Issue 39: smolagents' forced final_answer came back as hundreds of tokens of closing-tag attempts,
    the value ending only at its bound. Now a value ends at the model's own `\n</parameter>`, with a
    maxLength (CALC's expression: 16) or without one (WEATHER's city), forced or strict; past maxLength
    it is still refused."""
    from runtime.chat_format import ChatFormat
    from runtime.tool_calls import format_tool_call
    from tests.paths import DEMO

    chat_ = ChatFormat(DEMO)
    grammar = answer_grammar(chat_, list(TOOLS), tool_choice=choice, strict=strict, room=4096)
    assert _accepts(chat_, grammar, format_tool_call("weather", {"city": value, "metric": "true"}))
    assert _accepts(chat_, grammar, format_tool_call("weather", {"city": value * 20, "metric": "true"}))
    assert _accepts(chat_, grammar, format_tool_call("calc", {"expression": value, "mode": "fast"}))
    assert not _accepts(chat_, grammar, format_tool_call("calc", {"expression": value + "x" * 17, "mode": "fast"}))


def test_a_text_value_is_bounded_by_its_share_of_the_room():
    """The lazy value still ends in time: past its share of the room only the closing tag may follow."""
    from runtime.chat_format import ChatFormat
    from runtime.tool_calls import format_tool_call
    from tests.paths import DEMO

    chat_ = ChatFormat(DEMO)
    grammar = answer_grammar(chat_, [WEATHER], tool_choice="required", parallel=False, room=200)
    assert _accepts(chat_, grammar, format_tool_call("weather", {"city": "Oslo", "metric": "true"}))
    assert not _accepts(chat_, grammar, format_tool_call("weather", {"city": "Oslo" * 50, "metric": "true"}))


OPEN_SCHEMAS = {  # as clients send them: pydantic's model_json_schema(), zod, a hand-written one
    "pydantic": {"properties": {"name": {"title": "Name", "type": "string"}, "age": {"type": "integer"}},
                 "required": ["name", "age"], "title": "Person", "type": "object"},
    "nested": {"type": "object", "properties": {"person": {"type": "object", "properties": {
        "name": {"type": "string"}}, "required": ["name"]}}, "required": ["person"]},
    "defs": {"$defs": {"P": {"type": "object", "properties": {"name": {"type": "string"}}}},
             "type": "object", "properties": {"person": {"$ref": "#/$defs/P"}}, "required": ["person"]},
}
KEPT = {"pydantic": '{"name": "Ann", "age": 3}', "nested": '{"person": {"name": "Ann"}}',
        "defs": '{"person": {"name": "Ann"}}'}
EXTRA = {"pydantic": '{"name": "Ann", "age": 3, "x": 1}', "nested": '{"person": {"name": "Ann", "x": 1}}',
         "defs": '{"person": {"name": "Ann", "x": 1}}'}


@pytest.mark.parametrize("kind", OPEN_SCHEMAS)
def test_an_object_that_names_its_properties_takes_no_others(kind):
    """Issue 39: a schema without additionalProperties let the model add a key the schema does not name,
    and the output ran to the token limit (invalid JSON, with a 200). Strict or not, such an object now
    takes none (as xgrammar does by default), at every level and through $defs; an explicit
    additionalProperties is followed, and a schema composed with allOf is left as written."""
    from runtime.chat_format import ChatFormat
    from tests.paths import DEMO

    chat_ = ChatFormat(DEMO)
    schema = OPEN_SCHEMAS[kind]
    grammar = answer_grammar(chat_, response_format=schema)
    assert _accepts(chat_, grammar, KEPT[kind]) and not _accepts(chat_, grammar, EXTRA[kind])
    jsonschema.validate(json.loads(KEPT[kind]), schema)
    opened = json.loads(json.dumps(schema).replace('"type": "object"', '"type": "object", '
                                                                       '"additionalProperties": true'))
    assert _accepts(chat_, answer_grammar(chat_, response_format=opened), EXTRA[kind])


def test_an_allof_schema_is_left_open():
    from runtime.chat_format import ChatFormat
    from tests.paths import DEMO

    chat_ = ChatFormat(DEMO)
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                        {"type": "object", "properties": {"b": {"type": "integer"}}}]}
    assert _accepts(chat_, answer_grammar(chat_, response_format=schema), '{"a": 1, "b": 2}')
