"""A schema's `$ref`s are checked before any work (issue 37, item 10): a cycle of references or an endless
required chain has no finite value, and llguidance, which compiles references lazily, failed at the first
mask, after the prompt had run. The routes' side is tests/runtime/server/test_schema_refs_routes.py."""

import pytest

from runtime.grammar import GrammarError, check_schema
from runtime.schema_refs import ENDLESS, SchemaRefError, check_refs


def node(**kw) -> dict:
    return {"type": "object", **kw}


def chain(n: int, end) -> dict:
    """$defs d0 -> d1 -> ... -> d{n-1} -> `end` (a schema, or "cycle" back to d0)."""
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n - 1)}
    defs[f"d{n - 1}"] = {"$ref": "#/$defs/d0"} if end == "cycle" else end
    return {"$defs": defs, "$ref": "#/$defs/d0"}


ENDLESS_SCHEMAS = {
    "the root refers to itself": {"$ref": "#"},
    "two defs refer to each other": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                     "$ref": "#/$defs/a"},
    "a long cycle": chain(500, "cycle"),
    "definitions, not $defs": {"definitions": {"a": {"$ref": "#/definitions/a"}}, "$ref": "#/definitions/a"},
    "allOf itself": {"allOf": [{"$ref": "#"}]},
    "anyOf only itself": {"anyOf": [{"$ref": "#"}, {"allOf": [{"$ref": "#"}]}]},
    "a required property of itself": node(properties={"me": {"$ref": "#"}}, required=["me"]),
    "a required chain through $defs": {"$defs": {"n": node(properties={"next": {"$ref": "#/$defs/n"}},
                                                           required=["next"])}, "$ref": "#/$defs/n"},
    "a required chain of two": {"$defs": {"a": node(properties={"b": {"$ref": "#/$defs/b"}}, required=["b"]),
                                          "b": node(properties={"a": {"$ref": "#/$defs/a"}}, required=["a"])},
                                "$ref": "#/$defs/a"},
    "an array of at least one of itself": {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    "a prefix item of itself": {"type": "array", "prefixItems": [{"$ref": "#"}], "minItems": 1},
    "a required property through additionalProperties": node(additionalProperties={"$ref": "#"},
                                                             required=["x"]),
    "several types that all recurse": {"type": ["object", "array"], "properties": {"me": {"$ref": "#"}},
                                       "required": ["me"], "items": {"$ref": "#"}, "minItems": 2},
    "nested under an optional property": node(properties={"opt": {"$ref": "#/$defs/bad"}},
                                              **{"$defs": {"bad": {"$ref": "#/$defs/bad"}}}),
    "in one branch's items": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#/$defs/x"}}]} | {
        "$defs": {"x": {"allOf": [{"$ref": "#/$defs/x"}]}}},
}

FINITE_SCHEMAS = {
    "a linked list (next optional)": {"$defs": {"n": node(properties={"next": {"$ref": "#/$defs/n"}})},
                                      "$ref": "#/$defs/n"},
    "a tree (children may be empty)": node(properties={"children": {"type": "array", "items": {"$ref": "#"}}},
                                           required=["children"]),
    "recursion ended by null": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"},
                                                             "minItems": 1}]},
    "recursion ended by a second type": {"type": ["object", "null"], "properties": {"me": {"$ref": "#"}},
                                         "required": ["me"]},
    "a long chain that ends": chain(1500, {"type": "string"}),
    "an enum ends it": {"anyOf": [{"enum": [1, 2]}, {"allOf": [{"$ref": "#"}]}]},
    "an unused def that never ends": {"$defs": {"bad": {"$ref": "#/$defs/bad"}}, "type": "string"},
    "a ref into properties": node(properties={"a": {"type": "integer"}, "b": {"$ref": "#/properties/a"}},
                                  required=["b"]),
    "escaped pointer parts": {"$defs": {"a/b": {"type": "string"}, "c~d": {"$ref": "#/$defs/a~1b"}},
                              "$ref": "#/$defs/c~0d"},
    "closed objects": node(properties={"a": {"type": "string"}}, required=["a"], additionalProperties=False),
    "false is not recursion (the grammar names it)": node(required=["a"], additionalProperties=False),
    "no refs at all": node(properties={"a": {"type": "array", "items": {"type": "integer"}, "minItems": 3}}),
}


@pytest.mark.parametrize("schema", list(ENDLESS_SCHEMAS.values()), ids=list(ENDLESS_SCHEMAS))
def test_a_schema_without_a_finite_value_is_refused_by_name(schema):
    with pytest.raises(GrammarError) as e:
        check_schema(schema, "response_format.json_schema.schema")
    assert e.value.param.startswith("response_format.json_schema.schema") and e.value.message == ENDLESS


@pytest.mark.parametrize("schema", list(FINITE_SCHEMAS.values()), ids=list(FINITE_SCHEMAS))
def test_a_recursive_schema_with_an_end_is_accepted(schema):
    assert check_schema(schema, "x") is schema


@pytest.mark.parametrize("ref, words", [
    ("#/$defs/nope", "points at nothing"),
    ("#/$defs/a/properties/zz", "points at nothing"),
    ("#/required", "is not a schema"),
    ("#/$defs/a/required/0", "is not a schema"),
    ("#/$defs/a/type", "is not a schema"),
    ("#anchor", "is not a JSON pointer"),
    ("#/$defs/9", "points at nothing"),
])
def test_a_ref_that_names_no_schema_is_refused_where_it_is(ref, words):
    schema = node(properties={"x": {"$ref": ref}}, required=[],
                  **{"$defs": {"a": node(properties={"y": {"type": "string"}}, required=["y"])}})
    with pytest.raises(GrammarError) as e:
        check_schema(schema, "p")
    assert e.value.param == "p.properties.x.$ref" and words in e.value.message


@pytest.mark.parametrize("n", [1, 2, 3000])
def test_chains_of_any_length_are_decided_without_recursion(n):
    """The work list follows each edge once, and no Python recursion follows a chain (a chain longer
    than the interpreter's recursion limit is decided like a short one)."""
    check_refs(chain(n, {"type": "null"}), "p")
    with pytest.raises(SchemaRefError):
        check_refs(chain(n, "cycle"), "p")


def test_the_refusal_names_the_nearest_schema_that_never_ends():
    schema = node(properties={"ok": {"type": "string"}, "bad": {"$ref": "#/$defs/loop"}},
                  **{"$defs": {"loop": {"allOf": [{"$ref": "#/$defs/loop"}]}}})
    with pytest.raises(SchemaRefError) as e:
        check_refs(schema, "tools[0].function.parameters")
    assert e.value.where == "tools[0].function.parameters.properties.bad"
