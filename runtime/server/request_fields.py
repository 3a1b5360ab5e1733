"""The request fields the four reply routes share, each checked the same way wherever it comes: the
model named, the `elastic` object, the reasoning fields resolved on the depth table (`plan_reply`),
sampling, streaming, stop strings and the prompt cache key. A field a route cannot honour is an
ApiError 400 naming it (serving.py). No HTTP here.

Reasoning controls that other servers spell differently all land on the depth table: Ollama's
`reasoning_effort` / `reasoning.effort` (the table's `efforts`: none, minimal, low, medium, high,
xhigh, max; none turns thinking off; auto is the Auto stop, whose thought climbs to larger submodels
when the thinker struggles; a level that cannot run falls back as depth.usable_level says; absent,
the depth table's default stop), vLLM's `thinking_token_budget`, and the `elastic` object for what
only this engine can do.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..depth import DepthLevel, effort_levels, find_level, level_for_effort, usable_level
from ..errors import UsageError
from ..options import MIN_P, SEED, TEMPERATURE, THINKING_BUDGET, TOP_K, TOP_P, Option, OptionError, refusal
from ..sampling import SamplingSettings
from .serving import ServedModel, bad

MAX_STOPS, MAX_STOP_CHARS = 4, 256
MIN_CACHE_KEY, MAX_CACHE_KEY = 16, 256  # a UUID is 36
ELASTIC_FIELDS = {"think_submodel", "answer_submodel", "thinking_budget", "depth", "keep_reasoning"}
TEMPLATE_KWARGS = ("enable_thinking",)  # chat_template_kwargs the server honours (the real template reads these)


@dataclass(frozen=True)
class Plan:
    """Who thinks, who answers and for how long: a request's reasoning fields resolved on the depth table."""
    think: str | None  # None: thinking off
    answer: str
    budget: int | None  # 0 when thinking is off
    escalation: object | None  # Auto's climb (auto_depth.Escalation), None unless it thinks on Auto
    depth: str | None  # the depth level's name, None when the client chose submodels or a budget itself


def served_model(body, served: ServedModel) -> tuple[str, str | None]:
    """The model the client named, and the submodel it pins (None: the whole checkpoint)."""
    if not isinstance(body, dict):
        raise bad(None, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", f"model is required: one of {', '.join(served.ids())}")
    return model, served.pinned(model)


def elastic_fields(body: dict) -> tuple[dict, bool]:
    """The `elastic` object (checked keys) and its keep_reasoning."""
    elastic = body.get("elastic")
    if elastic is None:
        elastic = {}
    if not isinstance(elastic, dict):
        raise bad("elastic", "elastic must be an object")
    unknown = set(elastic) - ELASTIC_FIELDS
    if unknown:
        raise bad(f"elastic.{sorted(unknown)[0]}", f"unknown field; elastic takes {', '.join(sorted(ELASTIC_FIELDS))}")
    if "keep_reasoning" not in elastic:
        return elastic, False
    return elastic, bool_field(elastic, "keep_reasoning", "elastic.keep_reasoning")


def plan_reply(body: dict, elastic: dict, served: ServedModel, model: str, pin: str | None,
               effort: tuple | None = None, budget: tuple | None = None) -> Plan:
    """The depth level the request asks for (its effort, `elastic.depth`, else the table's default),
    then the submodels and budget it overrides. `effort` and `budget` are (value, param) pairs for a
    route that spells them its own way; absent, chat's fields are read from `body`."""
    effort_value, effort_param = effort if effort is not None else _effort(body)
    stop, depth = _depth(effort_value, effort_param, elastic, served)
    think, answer, chosen_budget = stop.think, stop.answer, stop.budget
    escalation = stop.escalation  # Auto climbs unless the client chose the submodels itself
    if pin is not None:
        think, answer, escalation = (pin if think else None), pin, None
    for key in ("think_submodel", "answer_submodel"):
        name = elastic.get(key)
        if name is None:
            continue
        param = f"elastic.{key}"
        if not isinstance(name, str) or name not in served.submodels:
            raise bad(param, f"{name!r} is not a submodel in memory; choose one of {', '.join(served.submodels)}")
        if pin is not None and name != pin:
            raise bad(param, f"model {model!r} pins submodel {pin}; use the checkpoint's id {served.id!r} to choose")
        if key == "think_submodel":
            if think is None:
                raise bad(param, f"depth {stop.name} turns thinking off; drop {param} or choose a depth that thinks")
            think = name
        else:
            answer = name
        depth, escalation = None, None
    chosen, budget_param = budget if budget is not None else _budget(body, elastic, served)
    if chosen is not None:
        if chosen > 0 and think is None:
            raise bad(budget_param, f"depth {stop.name} turns thinking off, so a thinking budget cannot apply; "
                                    "drop one of them")
        chosen_budget, depth = chosen, None
    off = _thinking_off(body)
    if off is not None:
        if chosen:
            raise bad(off, f"{off} turns thinking off, so {budget_param} cannot apply; drop one of them")
        chosen_budget = 0
    if chosen_budget == 0:
        think = None
    return Plan(think, answer, chosen_budget if think else 0, escalation if think else None, depth)


def sampling_fields(body: dict) -> SamplingSettings:
    return SamplingSettings(*(option_field(option, body) for option in (TEMPERATURE, TOP_P, TOP_K, MIN_P, SEED)))


def stream_fields(body: dict) -> tuple[bool, bool]:
    """`stream` and `stream_options.include_usage`."""
    stream = bool_field(body, "stream", "stream") if body.get("stream") is not None else False
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise bad("stream_options", "stream_options is only allowed when stream is true")
        if not isinstance(options, dict):
            raise bad("stream_options", "stream_options must be an object")
        if options.get("include_usage") is not None:
            include_usage = bool_field(options, "include_usage", "stream_options.include_usage")
    return stream, include_usage


def refuse_unknown(body: dict, known: set[str], route: str) -> None:
    """A field this route does not know is refused by name, as OpenAI's and Anthropic's own APIs do."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad(unknown[0], f"{unknown[0]} is not a field this server's {route} knows; leave it out")


def joined_text(value, where: str, parts: str) -> str:
    """A text given as a string or as a list of text `parts` ({type: text, text: ...}), joined; another
    kind of part (an image, a file) is refused by name."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{j}]", f"only text {parts} ({{type: text, text: ...}}) are supported here")
            texts.append(part["text"])
        return "".join(texts)
    raise bad(where, f"must be a string or a list of text {parts}")


def refuse_penalties(body: dict) -> None:
    """OpenAI's logit_bias and penalties, which this engine's sampler does not apply: refused, never ignored."""
    if body.get("logit_bias"):
        raise bad("logit_bias", "logit_bias is not supported by this server")
    for key in ("presence_penalty", "frequency_penalty"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or value not in (0, 0.0)):  # false equals 0
            raise bad(key, f"{key} is not supported by this server (leave it out or 0)")


def _thinking_off(body: dict) -> str | None:
    """The field that turns thinking off (`chat_template_kwargs.enable_thinking` false, vLLM's and
    SGLang's; `think` false, Ollama's), or None. Unknown template kwargs are refused: the template
    runs in the engine, and only these reach it."""
    kwargs, off = body.get("chat_template_kwargs"), None
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise bad("chat_template_kwargs", "chat_template_kwargs must be an object")
        unknown = sorted(set(kwargs) - set(TEMPLATE_KWARGS))
        if unknown:
            raise bad(f"chat_template_kwargs.{unknown[0]}", f"unknown template argument; this server honours "
                                                            f"{', '.join(TEMPLATE_KWARGS)}")
        off_param = "chat_template_kwargs.enable_thinking"
        if "enable_thinking" in kwargs and not bool_field(kwargs, "enable_thinking", off_param):
            off = off_param
    if body.get("think") is not None and not bool_field(body, "think", "think"):
        off = off or "think"
    return off


def _effort(body: dict) -> tuple[object, str]:
    """The effort asked for, as (value, param): `reasoning_effort` or `reasoning.effort`."""
    effort, param = body.get("reasoning_effort"), "reasoning_effort"
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise bad("reasoning", "reasoning must be an object such as {\"effort\": \"low\"}")
        if reasoning.get("effort") is not None:
            if effort is not None and effort != reasoning["effort"]:
                raise bad("reasoning.effort", "reasoning.effort and reasoning_effort disagree; send one of them")
            effort, param = reasoning["effort"], "reasoning.effort"
    return effort, param


def _depth(effort, param: str, elastic: dict, served: ServedModel) -> tuple[DepthLevel, str | None]:
    depth = elastic.get("depth")
    if depth is not None:
        if effort is not None:
            raise bad("elastic.depth", f"send {param} or elastic.depth, not both")
        if not isinstance(depth, str):
            raise bad("elastic.depth", "elastic.depth must be the name of a depth stop")
        try:
            stop = find_level(list(served.stops), depth)
        except UsageError as e:
            raise bad("elastic.depth", str(e)) from None
        return stop, stop.name
    stops = list(served.stops)
    if effort is None:  # the stop a new chat starts on in the app
        stop = usable_level(stops, served.default)
        if stop is not None:
            return stop, stop.name
        effort = "medium"
    efforts = effort_levels()
    if not isinstance(effort, str) or effort not in efforts:
        raise bad(param, refusal(param, effort, f"one of {', '.join(efforts)}"))
    stop = level_for_effort(stops, effort)
    if stop is not None:
        return stop, stop.name
    names = {s.name for s in stops}
    if efforts[effort] not in names:
        raise bad(param, f"this model's depth table has no {efforts[effort]} stop; use "
                         f"{', '.join(e for e, name in efforts.items() if name in names)}")
    raise bad(param, f"no depth for {param} {effort!r} fits in memory here; choose a lower effort")


def _budget(body: dict, elastic: dict, served: ServedModel) -> tuple[int | None, str | None]:
    """The thinking budget asked for, if any, and the parameter that asked."""
    values = {}
    for param, source, key in (("thinking_token_budget", body, "thinking_token_budget"),  # vLLM
                               ("thinking_budget_tokens", body, "thinking_budget_tokens"),  # llama.cpp
                               ("elastic.thinking_budget", elastic, "thinking_budget")):
        if source.get(key) is not None:
            values[param] = option_field(THINKING_BUDGET.within(high=served.max_context), source, param, key)
    if len(set(values.values())) > 1:
        raise bad(list(values)[-1], f"{' and '.join(values)} disagree; send one of them")
    return next(iter(values.values()), None), next(iter(values), None)


def stop_strings(value) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or not 1 <= len(stops) <= MAX_STOPS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops)):
        raise bad("stop", f"stop must be a string or a list of up to {MAX_STOPS} non-empty strings "
                          f"(at most {MAX_STOP_CHARS} characters each)")
    return tuple(stops)


def cache_key(value) -> str | None:
    """OpenAI's `prompt_cache_key`: the requests that send the same key may reuse each other's cached
    prompt (http_app.py gives every other request a cache of its own). Whoever knows a key can test
    guesses of the prompts sent with it, so it must be hard to guess: a random value such as a UUID."""
    if value is None:
        return None
    if not isinstance(value, str) or not MIN_CACHE_KEY <= len(value) <= MAX_CACHE_KEY or not value.isprintable():
        raise bad("prompt_cache_key", f"prompt_cache_key must be {MIN_CACHE_KEY} to {MAX_CACHE_KEY} printable "
                                      "characters, hard to guess (such as a UUID): requests that send the same key "
                                      "share cached prompts")
    return value


def option_field(option: Option, source: dict, param: str | None = None, key: str | None = None):
    """A numeric field checked by its option (runtime/options.py), as the CLI and the app check it;
    the option's default when absent or null. An integer field refuses 4.0 as OpenAI does (the
    registry counts it as whole for settings files; a request's JSON says what it sends)."""
    value = source.get(key or option.name)
    if option.kind is int and isinstance(value, float):
        raise bad(param or option.name, refusal(param or option.name, value, option.rule + ", written without "
                                                "a decimal point"))
    try:
        return option.read(source, param, key)
    except OptionError as e:
        raise bad(param or option.name, str(e)) from None


def bool_field(source: dict, key: str, param: str) -> bool:
    v = source.get(key)
    if not isinstance(v, bool):
        raise bad(param, f"{param} must be true or false")
    return v
