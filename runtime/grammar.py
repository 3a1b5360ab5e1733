"""Constrained decoding: the answer follows a grammar, the thinking never does.

llguidance (Microsoft's grammar engine: a Rust core, a 3 MB wheel with no dependencies for
Linux, Windows and macOS) computes, on the CPU and per token, which tokens keep the text inside
the grammar; the mask goes to the device and sets the others' logits to -inf before sampling.

    grammar = answer_grammar(chat, tools=..., tool_choice="required", tool_name=None, parallel=True,
                             response_format=None, room=400)   # Lark text, or None
    constraint = Constraint(chat, grammar, vocab_size, device)  # GrammarError for a bad schema
    constraint.start(len(context))     # the answer begins: tokens from here on are constrained
    logits = constraint(context, logits)  # a logits processor: feeds the new tokens, masks the rest

Two kinds of grammar, one Lark text each:

- a forced tool call (`tool_choice` "required": any offered tool; a named one: that tool) in
  the template's XML form (runtime/tool_calls.py), `<tool_call>\\n<function=NAME>\\n` then one
  `<parameter=P>\\nVALUE\\n</parameter>\\n` per parameter (the schema's required ones always, in
  its order), each VALUE of its schema's type: text for a string (ending where the model closes it,
  never holding `</parameter>` or `</tool_call>`, and short enough that a call's text values all fit
  in its share of the `room`
  the answer has left (`call_room`, `largest_call`), so a forced call ends before the reply's token limit unless
  its JSON values run long),
  JSON for anything else (llguidance's JSON-schema compiler, written as `json.dumps` writes it,
  an unbounded integer within JSON's safe range);
- `response_format` `json_object` or `json_schema` (strict or not: the output always validates),
  or either of them or a call when tools are offered with `tool_choice` "auto".

Schemas come from outside: `check_schema` bounds their size and depth, refuses a keyword this
module cannot honour, naming it (GrammarError carries the request parameter it came from), and a
`$ref` that points nowhere or recurses without end (schema_refs.py): before any work, on every route.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass

import torch

from .errors import ElasticError, show
from .schema_refs import SchemaRefError, check_refs
from .tool_calls import CALL_CLOSE, CALL_OPEN, format_tool_call, tool_schemas

MAX_SCHEMA_BYTES = 64 << 10  # one schema, as JSON
MAX_SCHEMA_DEPTH = 32
JSON_VALUE_TOKENS = 16  # what a JSON value its schema does not bound is expected to take
SAFE_INT = 2 ** 53 - 1  # JSON's safe integer range: an integer with no bounds gets these (bounded digits)
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}  # as json.dumps
# Keywords the grammar honours (llguidance's JSON compiler implements them) or that only annotate.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment",
                         "deprecated", "readOnly", "writeOnly"})
KEYWORDS = ANNOTATIONS | {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "format", "multipleOf"}
SCHEMA_MAPS = ("properties", "$defs", "definitions")  # keywords whose values map names to schemas
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_VALUES = ("items", "additionalProperties")
# Free text that cannot open a call (a strict call must go through the grammar's call rules).
FREE_TEXT = "/(?s:.+)/ & ~/(?s:.*(<tool_call>|<function=).*)/"


def _avoiding(words: tuple[str, ...]) -> str:
    """A regex of the strings that hold none of `words` (each a '<' and a tail without one), built
    without negation: llguidance's lexer multiplies a negation by a length bound past its limit of
    expressions ("too many expressions constructed", at 400 characters). A '<' run is followed by a
    break (a character that leaves every word) or by a word's proper start and another '<' run; the
    string may end inside a word."""
    tails = [w[1:] for w in words]
    starts = sorted({t[:i] for t in tails for i in range(1, len(t))})
    breaks = ["".join(map(_regex_char, p)) + "[^<" + "".join(sorted({_regex_char(t[len(p)]) for t in tails
                                                                      if t.startswith(p) and len(t) > len(p)})) + "]"
              for p in ["", *starts]]
    broken = "(?:" + "|".join(breaks) + ")"
    started = "(?:" + "|".join("".join(map(_regex_char, p)) for p in starts) + ")"
    return f"(?:[^<]|(?:<+{started})*<+{broken})*(?:(?:<+{started})*<+{started}?)?"


def _regex_char(c: str) -> str:
    return "\\" + c if c in "\\/^-[]" else c


# A call's text value holds neither tag that ends a value or a call (the parser ends there).
TEXT_VALUE = _avoiding(("</parameter>", "</tool_call>"))
# A text parameter is written raw (not as a JSON string): these keywords cannot apply to it.
RAW_TEXT_REFUSED = ("pattern", "format")


class GrammarError(ElasticError):
    """A schema or format that cannot be honoured; `param` names where it came from in a request."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param, self.message = param, message


class GrammarFailed(ElasticError):
    """The constrained answer left its grammar (an engine fault, not the request's)."""


# ----------------------------------------------------------------------------- checking schemas

def check_schema(schema, param: str) -> dict:
    """`schema` from outside, bounded (size, depth) and made only of KEYWORDS; returns it."""
    if not isinstance(schema, dict):
        raise GrammarError(param, "must be a JSON schema object")
    try:
        size = len(json.dumps(schema, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        raise GrammarError(param, "is not a JSON value") from None
    if size > MAX_SCHEMA_BYTES:
        raise GrammarError(param, f"is {size:,} bytes as JSON; at most {MAX_SCHEMA_BYTES:,} are accepted")
    _walk(schema, param, 0)
    try:
        check_refs(schema, param)
    except SchemaRefError as e:
        raise GrammarError(e.where, e.message) from None
    return schema


def _walk(node, where: str, depth: int) -> None:
    if isinstance(node, bool):  # true / false are schemas too
        return
    if not isinstance(node, dict):
        raise GrammarError(where, "must be a JSON schema object")
    if depth > MAX_SCHEMA_DEPTH:
        raise GrammarError(where, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    for key, value in node.items():
        if key not in KEYWORDS:
            raise GrammarError(f"{where}.{key}", f"the JSON-schema keyword {key!r} is not supported here")
        if key in SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise GrammarError(f"{where}.{key}", "must be an object of schemas")
            for name, sub in value.items():
                _walk(sub, f"{where}.{key}.{name}", depth + 1)
        elif key in SCHEMA_LISTS:
            if not isinstance(value, list) or not value:
                raise GrammarError(f"{where}.{key}", "must be a non-empty list of schemas")
            for i, sub in enumerate(value):
                _walk(sub, f"{where}.{key}[{i}]", depth + 1)
        elif key in SCHEMA_VALUES:
            _walk(value, f"{where}.{key}", depth + 1)
        elif key == "required" and not (isinstance(value, list) and all(isinstance(r, str) for r in value)):
            raise GrammarError(f"{where}.required", "must be a list of property names")
        elif key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            raise GrammarError(f"{where}.$ref", "only references inside the schema (#/$defs/...) are supported")


def response_format_schema(value) -> dict | None:
    """A request's `response_format` -> the JSON schema the answer must follow (None: plain text)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise GrammarError("response_format", "must be an object such as {\"type\": \"json_object\"}")
    kind = value.get("type")
    if kind not in ("text", "json_object", "json_schema", "json"):
        raise GrammarError("response_format.type", f"must be text, json_object or json_schema (or TGI's json with "
                                                   f"a value), not {show(kind, 40)}")
    if kind in ("json_object", "json") and value.get("value") is not None:  # TGI's (the Hugging Face client's)
        for key in sorted(set(value) - {"type", "value"}):
            raise GrammarError(f"response_format.{key}", "is not a field of a {type, value} response format")
        return check_schema(value["value"], "response_format.value")
    for key in sorted(set(value) - {"type", "json_schema"}):
        raise GrammarError(f"response_format.{key}", "is not a field of response_format; send type and json_schema "
                                                     "(or TGI's type and value)")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise GrammarError("response_format.json_schema", "must be an object with name and schema")
        if spec.get("strict") is not None and not isinstance(spec.get("strict"), bool):
            raise GrammarError("response_format.json_schema.strict", "must be true or false")
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise GrammarError("response_format.json_schema.name", "must be a string")
        for key in sorted(set(spec) - {"name", "description", "schema", "strict"}):
            raise GrammarError(f"response_format.json_schema.{key}", "is not a field of json_schema (name, "
                                                                     "description, schema, strict)")
        return check_schema(spec.get("schema", {}), "response_format.json_schema.schema")
    raise GrammarError("response_format.value", "TGI's json format needs its schema as value")


# ----------------------------------------------------------------------------- grammars

def check_grammar(grammar: str | None) -> None:
    """llguidance's own check of a grammar (no tokenizer needed): GrammarError if it would not compile."""
    if grammar is None:
        return
    import llguidance

    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise GrammarError("grammar", _first_line(error))


def answer_grammar(chat, tools=None, tool_choice: str = "auto", tool_name: str | None = None, parallel: bool = True,
                   response_format: dict | None = None, room: int = 4096, strict: bool = False) -> str | None:
    """The Lark grammar the answer must follow, or None when it is free. `response_format` is a JSON
    schema (response_format_schema's); `tools` are checked ones (tool_calls.check_tools); `room`: the
    tokens the answer may still use; `strict` (OpenAI's per-function `strict`): with `tool_choice`
    auto, the answer is free text or calls that validate. A call's text value ends where the model
    closes it (_value). With no `chat`, a grammar to check only."""
    offered = bool(tools) and tool_choice != "none"
    forced = offered and tool_choice == "required"
    if not (forced or response_format is not None or (offered and strict)):
        return None  # free: the tools' schemas only convert the values of the calls the parser reads
    calls = None
    if offered:
        chosen = [t for t in tools if _name(t) == tool_name] if tool_name else list(tools)
        calls = _calls_rules(chat, chosen, parallel, call_room(room, parallel))
    if forced:
        return "start: LEAD calls\n" + calls
    if response_format is None:  # strict: text, or text and then calls (as the template teaches)
        return f"start: FREE | FREE? LEAD calls\nFREE: {FREE_TEXT}\n" + calls
    body = _json(response_format)
    if calls:  # a JSON answer, or a call
        return f"start: answer | LEAD calls\nanswer: {body}\n" + calls
    return f"start: {body}\n"


def constrainable(tools) -> bool:
    """Whether calls of these (checked) tools can be kept to their schemas with tool_choice "auto":
    the tool loops (runtime/tool_loop.py) then constrain every call, as llama.cpp's server does, so a
    model that starts a call writes a valid one (the right name, every required parameter, values of
    their types) and a model that does not is free. False when there are none, or a schema uses what
    the grammar cannot honour (the calls are then checked only after they are written)."""
    if not tools:
        return False
    try:
        check_grammar(answer_grammar(None, list(tools), strict=True))
    except GrammarError:
        return False
    return True


def _name(tool: dict) -> str:
    return tool.get("function", tool)["name"]


def call_room(room: int, parallel: bool) -> int:
    """The tokens one constrained call is sized for: all the answer's room, or half of it when calls
    may follow one another."""
    return room // 2 if parallel else room


def largest_call(tools, tool_name: str | None, parallel: bool, room: int) -> int:
    """The most tokens a constrained call of these tools can take (in bytes, which bound tokens): the
    decode loop ends a reply after a call when less room is left, so a call that could not finish is
    never begun."""
    share, sizes = call_room(room, parallel), [0]
    for tool in tools or ():
        name = _name(tool)
        if tool_name and name != tool_name:
            continue
        params = _parameters(tool["function"].get("parameters") or {}, "tools")
        texts = sum(1 for _, prop, _ in params if _is_text(prop))
        sizes.append(len(_skeleton(name, params).encode()) + _json_values(params)
                     + texts * _value_tokens(name, params, share))
    return max(sizes)


def _is_text(prop: dict) -> bool:
    return "string" in _types(prop) or not _types(prop)


def _skeleton(name: str, params: list) -> str:
    return format_tool_call(name, {key: "" for key, _, _ in params}) + "\n\n"


def _json_values(params: list) -> int:
    return sum(_json_bytes(prop) or JSON_VALUE_TOKENS for _, prop, _ in params if not _is_text(prop))


def _calls_rules(chat, tools: list[dict], parallel: bool, room: int) -> str:
    """Rules `calls` (one call, or one or more when parallel) and `LEAD` (the answer's opening line breaks)."""
    open_, close = _marker(chat, CALL_OPEN), _marker(chat, CALL_CLOSE)
    schemas = tool_schemas(tools)
    rules = [f"calls: call{'+' if parallel else ''}", "LEAD: /\\n{0,2}/",
             "call: " + " | ".join(f"call{i}" for i in range(len(schemas)))]
    for i, (name, schema) in enumerate(schemas.items()):
        where = f"tools[{i}].function.parameters"
        params = _parameters(schema, where)
        value_tokens = _value_tokens(name, params, room)
        body = []
        for j, (key, prop, required) in enumerate(params):
            rule = f"t{i}p{j}"
            value = _value(prop, f"{rule}v", rules, where, key, value_tokens)
            rules.append(f"{rule}: {_lit(f'<parameter={key}>' + chr(10))} {value}")
            body.append(rule if required else f"{rule}?")
        rules.append(f"call{i}: {open_} {_lit(chr(10) + f'<function={name}>' + chr(10))} {' '.join(body)} "
                     f"{_lit('</function>' + chr(10))} {close} {_lit(chr(10))}")
    return "\n".join(rules) + "\n"


def _value_tokens(name: str, params: list, room: int) -> int:
    """The most tokens one text value of this tool may take: the room left after the call's own text
    and its JSON values, shared by its text values. Counted in bytes (a token holds at least one), so
    a call whose JSON values are bounded by their schemas always fits in `room`."""
    texts = sum(1 for _, prop, _ in params if _is_text(prop))
    return max(1, (room - len(_skeleton(name, params).encode()) - _json_values(params)) // max(1, texts))


def _json_bytes(schema, depth: int = 0) -> int | None:
    """The most bytes the JSON of a value of `schema` takes as the grammar writes it, or None when the
    schema does not bound it (a number, a string without maxLength, an open object...)."""
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return None
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return max((len(json.dumps(v, ensure_ascii=False).encode()) for v in values), default=None)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        sizes = [_json_bytes(b, depth + 1) for b in branches]
        return None if None in sizes else max(sizes)
    types = _types(schema)
    sizes = [_type_bytes(schema, kind, depth) for kind in types]
    return None if not sizes or None in sizes else max(sizes)


def _type_bytes(schema: dict, kind: str, depth: int) -> int | None:
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "integer":
        bounded = _bounded({"type": "integer", **{k: schema[k] for k in ("minimum", "maximum") if k in schema}})
        return max(len(str(int(bounded["minimum"]))), len(str(int(bounded["maximum"]))))
    if kind == "string" and isinstance(schema.get("maxLength"), int):
        return 6 * schema["maxLength"] + 2  # each character at most a \\uXXXX escape
    if kind == "array" and isinstance(schema.get("maxItems"), int) and isinstance(schema.get("items"), dict):
        item = _json_bytes(schema["items"], depth + 1)
        return None if item is None else 2 + schema["maxItems"] * (item + 2)
    if kind == "object" and schema.get("additionalProperties") is False:
        props = schema.get("properties", {})
        sizes = [_json_bytes(v, depth + 1) for v in props.values()]
        if None in sizes:
            return None
        return 2 + sum(len(json.dumps(k, ensure_ascii=False).encode()) + 4 + n for k, n in zip(props, sizes))
    return None


def _parameters(schema: dict, where: str) -> list[tuple[str, dict, bool]]:
    """(name, schema, required) for each parameter of a tool, in the schema's order."""
    check_schema(schema, where)
    kind = schema.get("type", "object")
    if kind != "object":
        raise GrammarError(f"{where}.type", "a tool's parameters must be an object schema")
    props = schema.get("properties", {})
    required = schema.get("required", [])
    missing = [r for r in required if r not in props]
    if missing:
        raise GrammarError(f"{where}.required", f"{missing[0]!r} is required but not among the properties")
    defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
    out = []
    for key, prop in props.items():
        if isinstance(prop, bool):
            prop = {}
        if "$ref" in prop:
            raise GrammarError(f"{where}.properties.{key}.$ref", "a parameter's own schema cannot be a "
                                                                 "$ref; write its type there (refs inside it work)")
        out.append((key, {**prop, **defs} if defs else prop, key in required))
    return out


def _types(schema: dict) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    out = set()
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, []):
            if isinstance(branch, dict):
                out |= _types(branch)
    return out


def _value(prop: dict, rule: str, rules: list, where: str, key: str, max_tokens: int) -> str:
    """The grammar of one parameter's value and its closing tag (adds the rules it needs)."""
    end = "\n</parameter>\n"
    types = _types(prop)
    if "string" in types or not types:
        literals = prop.get("enum", [prop["const"]] if "const" in prop else None)
        if literals is not None:
            if not all(isinstance(v, str) for v in literals):
                raise GrammarError(f"{where}.properties.{key}", "an enum or const without a type must be strings; "
                                                                "declare the parameter's type")
            return "(" + " | ".join(_lit(v + end) for v in literals) + ")"
        for refused in RAW_TEXT_REFUSED:
            if refused in prop:
                raise GrammarError(f"{where}.properties.{key}.{refused}",
                                   f"{refused!r} is not supported for a text parameter of a forced call")
        low, high = prop.get("minLength", 0), prop.get("maxLength")
        if not isinstance(low, int) or (high is not None and not isinstance(high, int)):
            raise GrammarError(f"{where}.properties.{key}", "minLength and maxLength must be integers")
        # One lazy lexeme, the value and its closing tag: it ends where the model first closes it, as
        # OpenAI and vLLM end a string (a greedy lexeme would end only at its bound: llguidance's lexer
        # does not end one that could go on). It holds no TEXT_VALUE tag, and at most its share of the
        # room in characters, so a call of ASCII text always closes in time; one whose characters take
        # several tokens each may still be cut.
        most = max(low, max_tokens if high is None else min(high, max_tokens))
        closed = f"/(?s:.{{{low},{most}}})\\n<\\/parameter>\\n/ & /(?s:{TEXT_VALUE})\\n<\\/parameter>\\n/"
        rules.append(f"{rule}[lazy]: {closed}")
        return rule
    if types <= {"boolean", "null"} and not ({"enum", "const"} & prop.keys()):
        # The template writes a parameter's own value with Python's str (True, None), JSON inside
        # objects and lists: both spellings are the model's, and the parser reads both.
        words = [w for kind, pair in (("boolean", ("true", "false", "True", "False")), ("null", ("null", "None")))
                 if kind in types for w in pair]
        return "(" + " | ".join(_lit(w + end) for w in words) + ")"
    return f"{_json(prop)} {_lit(end)}"


def _bounded(node, close: bool = True):
    """A copy of a schema as the grammar follows it. Every integer with no bounds gets JSON's safe
    range, so its digits are bounded (a number's are not: its fraction may run on until the reply's
    token limit). With `close`, an object that names its properties and says nothing of others takes
    none (additionalProperties false), strict or not: a model that adds a key the schema does not
    name tends to run on to the token limit, cutting the JSON; and an object with fewer keys still
    validates, so the answer always does. An explicit `additionalProperties` is followed as given."""
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: _bounded(v, close) for k, v in value.items()}
        elif key in SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_bounded(v, close) for v in value]
        elif key in SCHEMA_VALUES:
            out[key] = _bounded(value, close)
        else:
            out[key] = value
    kind = node.get("type")
    if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
        if "minimum" not in node and "exclusiveMinimum" not in node:
            out["minimum"] = -SAFE_INT
        if "maximum" not in node and "exclusiveMaximum" not in node:
            out["maximum"] = SAFE_INT
    if close and isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def _uses_all_of(node, depth: int = 0) -> bool:
    """Whether a schema composes objects with allOf anywhere: its branches name their own keys, so
    closing each would forbid the others' (the schema is then left open, as written)."""
    if isinstance(node, list):
        return any(_uses_all_of(v, depth + 1) for v in node)
    if not isinstance(node, dict) or depth > 2 * MAX_SCHEMA_DEPTH:
        return False
    return "allOf" in node or any(_uses_all_of(v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))


def _json(schema: dict) -> str:
    prepared = _bounded(schema, close=not _uses_all_of(schema))
    return "%json " + json.dumps({**prepared, "x-guidance": JSON_STYLE}, ensure_ascii=False)


def _lit(text: str) -> str:
    """A Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text, ensure_ascii=False)


def _marker(chat, text: str) -> str:
    """`<tool_call>` as the grammar must spell it: the vocabulary's own token when it has one (llguidance
    treats added tokens as special: matched by id, not by text), else the text (and with no `chat`:
    a grammar only checked, never run)."""
    if chat is None:
        return _lit(text)
    ids = chat.encode(text)  # bounded, and a panic is one line (runtime/native.py)
    return f"<[{ids[0]}]>" if len(ids) == 1 and ids[0] in chat.added_ids else _lit(text)


# ----------------------------------------------------------------------------- the mask

_TOKENIZERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def ll_tokenizer(chat, vocab_size: int):
    """llguidance's view of the checkpoint's tokenizer (about a second to build for 131k tokens: built
    once per tokenizer and kept while it lives). The end-of-turn tokens are its end of text."""
    import llguidance.hf  # only when a reply is constrained

    with _LOCK:
        cached = _TOKENIZERS.get(chat.tokenizer)
        if cached is None or cached[0] != vocab_size:
            n_vocab = max(vocab_size, len(chat.tokenizer))
            cached = (vocab_size, llguidance.hf.from_tokenizer(chat.tokenizer, n_vocab=n_vocab,
                                                               eos_token=sorted(chat.special.end_of_turn)))
            _TOKENIZERS[chat.tokenizer] = cached
        return cached[1]


@dataclass
class _Buffers:
    host: torch.Tensor  # (words,) int32, pinned on CUDA: the mask llguidance writes
    device: torch.Tensor  # (words,) int32 on the logits' device
    shifts: torch.Tensor  # (32,) int32: bit positions


class Constraint:
    """One reply's grammar state: a logits processor that feeds the matcher the answer's tokens as they
    come and masks every token that would leave the grammar. The mask is computed on the CPU (while the
    device runs the step already queued) and applied on the device; nothing else waits."""

    def __init__(self, chat, grammar: str, vocab_size: int, device: torch.device | str = "cpu"):
        import llguidance

        tokenizer = ll_tokenizer(chat, vocab_size)
        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise GrammarError("grammar", _first_line(self.matcher.get_error()))
        self.vocab = vocab_size
        words = (max(vocab_size, len(chat.tokenizer)) + 31) // 32
        device = torch.device(device)
        cuda = device.type == "cuda"
        self.buffers = _Buffers(torch.zeros(words, dtype=torch.int32, pin_memory=cuda),
                                torch.zeros(words, dtype=torch.int32, device=device),
                                torch.arange(32, dtype=torch.int32, device=device))
        self.at: int | None = None  # where the answer began in the context (None: not yet)
        self.fed = 0

    def start(self, at: int) -> None:
        """The answer begins at context index `at`: from its first token on, the grammar applies."""
        self.at = self.fed = at

    @property
    def finished(self) -> bool:
        """The grammar is complete: only the end of the turn is allowed."""
        return self.matcher.is_stopped() and not self.matcher.is_error()

    def __call__(self, context: list[int], logits: torch.Tensor) -> torch.Tensor:
        if self.at is None:
            return logits
        new = context[self.fed:]
        if new and not self.matcher.consume_tokens(new):
            raise GrammarFailed(f"the constrained answer left its grammar ({_first_line(self.matcher.get_error())})")
        self.fed = len(context)
        b = self.buffers
        self.matcher.unsafe_compute_mask_ptr(b.host.data_ptr(), b.host.numel() * 4)
        if self.matcher.is_error():
            raise GrammarFailed(f"the constrained answer has no way on ({_first_line(self.matcher.get_error())})")
        b.device.copy_(b.host, non_blocking=True)
        allowed = ((b.device[:, None] >> b.shifts) & 1).reshape(-1)[:logits.shape[-1]].bool()  # (vocab,)
        return logits.masked_fill(~allowed, float("-inf"))


def _first_line(text: str) -> str:
    return (text or "unknown error").strip().splitlines()[0][:300]
