"""JSON Schema for the registry: parsing (invalid schemas of each kind, hostile input),
canonical and normalized forms, references, and Confluent's compatibility rules (the cases
of Confluent's "Schema Evolution and Compatibility" and JSON Schema diff rules, as our own
tests)."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eddy.formats.base import JSON, MAX_DEPTH, MAX_SCHEMA_CHARS, InvalidSchema
from eddy.formats.json_schema.compat import (
    COMPATIBLE_CHANGES,
    TOO_COMPLEX,
    _max_matching,
    compatibility,
)
from eddy.formats.json_schema.schema import JsonSchema, parse


def schema(value: Any, refs: dict[str, str] | None = None) -> JsonSchema:
    return parse(json.dumps(value), refs or {})


def errors(reader: Any, writer: Any, refs: dict[str, str] | None = None) -> list[str]:
    """The incompatible error types when ``reader`` reads what ``writer`` wrote."""
    return [i.error_type for i in compatibility(schema(reader, refs), schema(writer, refs))]


def paths(reader: Any, writer: Any) -> list[tuple[str, str]]:
    return [(i.error_type, i.path) for i in compatibility(schema(reader), schema(writer))]


def obj(props: dict[str, Any], *, required: tuple[str, ...] = (), closed: bool = False,
        **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    out.update(extra)
    return out


STR = {"type": "string"}
INT = {"type": "integer"}


# ---- parsing: the forms ---------------------------------------------------------------

def test_canonical_is_compact_and_keeps_key_order() -> None:
    text = '{ "type" : "object",\n  "properties": {"b": {}, "a": {"title": "é"}} }'
    parsed = parse(text)
    assert parsed.schema_type == JSON
    assert parsed.canonical() == '{"type":"object","properties":{"b":{},"a":{"title":"é"}}}'
    assert parse(parsed.canonical()).canonical() == parsed.canonical()


def test_normalized_sorts_every_objects_keys() -> None:
    parsed = parse('{"type":"object","properties":{"b":{"type":"string","maxLength":3},'
                   '"a":{}}}')
    assert parsed.normalized() == ('{"properties":{"a":{},"b":{"maxLength":3,'
                                   '"type":"string"}},"type":"object"}')
    reordered = parse('{"properties":{"a":{},"b":{"maxLength":3,"type":"string"}},'
                      '"type":"object"}')
    assert reordered.normalized() == parsed.normalized()
    assert reordered.canonical() != parsed.canonical()


def test_name_is_the_title_and_boolean_schemas_parse() -> None:
    assert schema({"title": "Order", "type": "object"}).name == "Order"
    assert schema({"type": "object"}).name is None
    assert parse("true").canonical() == "true"
    assert parse("false").canonical() == "false"


def test_drafts_are_taken_from_schema_keyword() -> None:
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
              "maximum": 3, "exclusiveMaximum": True}
    assert schema(draft4).dialect == "http://json-schema.org/draft-04/schema#"
    with pytest.raises(InvalidSchema, match="not a valid JSON Schema"):
        schema({"type": "number", "exclusiveMaximum": True})  # draft 7: must be a number
    modern = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
              "prefixItems": [STR], "items": False}
    assert schema(modern).dialect == "https://json-schema.org/draft/2020-12/schema"
    # an unknown dialect is checked as draft 7, as Confluent does
    with pytest.raises(InvalidSchema):
        schema({"$schema": "http://example.com/mine", "type": "strin"})
    assert schema({"$schema": "http://example.com/mine", "type": "string"})


# ---- parsing: invalid schemas, one per kind -------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid JSON"),
    ("", "not valid JSON"),
    ('{"type": "string"} x', "not valid JSON"),
    ("3", "must be a JSON object or a boolean"),
    ('"string"', "must be a JSON object or a boolean"),
    ("[]", "must be a JSON object or a boolean"),
    ('{"type": "strin"}', "not a valid JSON Schema"),
    ('{"minLength": -1}', "not a valid JSON Schema"),
    ('{"required": "a"}', "not a valid JSON Schema"),
    ('{"properties": {"a": 3}}', "not a valid JSON Schema"),
    ('{"$schema": 7}', "\\$schema must be a string"),
    ('{"pattern": "["}', "invalid regex"),
    ('{"patternProperties": {"(": {}}}', "invalid regex"),
    ('{"pattern": "a{99999999999}"}', "invalid regex"),
    ('{"maximum": NaN}', "not a JSON number"),
    ('{"maximum": Infinity}', "not a JSON number"),
    ('{"maximum": 1e400}', "out of range"),
    ('{"maximum": ' + "9" * 5000 + "}", "not valid JSON"),
    ('{"description": "\\ud800"}', "cannot be"),
])
def test_invalid_schemas_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidSchema, match=message):
        parse(text)


def test_non_string_text_is_refused() -> None:
    with pytest.raises(InvalidSchema):
        parse(b'{"type": "string"}')  # type: ignore[arg-type]


# ---- hostile input --------------------------------------------------------------------

@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
@pytest.mark.parametrize("shape", ["array", "object", "schema"])
def test_deep_nesting_is_refused_before_parsing(depth: int, shape: str) -> None:
    if shape == "array":
        text = "[" * depth + "]" * depth
    elif shape == "object":
        text = '{"a":' * depth + "1" + "}" * depth
    else:
        text = '{"not":' * depth + "{}" + "}" * (depth)
    with pytest.raises(InvalidSchema, match="nests deeper"):
        parse(text)


def test_unbalanced_deep_nesting_is_refused_too() -> None:
    with pytest.raises(InvalidSchema, match="nests deeper"):
        parse("[" * 100_000)


def test_nesting_at_the_limit_parses_and_compares_under_a_deep_caller_stack() -> None:
    writer: Any = STR
    reader: Any = INT
    for _ in range(MAX_DEPTH - 1):
        writer, reader = {"items": writer}, {"items": reader}

    def deep_call(frames: int) -> list[str]:
        if frames:
            return deep_call(frames - 1)
        return errors(reader, writer)

    assert deep_call(300) == ["TYPE_CHANGED"]
    assert errors(writer, writer) == []


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    parsed = parse(json.dumps({"description": "[{" * 50_000 + '\\"'}))
    assert parsed.schema["description"].startswith("[{[{")


def test_oversized_text_is_refused_before_parsing() -> None:
    with pytest.raises(InvalidSchema, match="more than"):
        parse(" " * (MAX_SCHEMA_CHARS + 1))
    with pytest.raises(InvalidSchema, match="more than"):
        parse("{}", {"big.json": " " * (MAX_SCHEMA_CHARS + 1)})


def test_deeply_nested_regex_groups_are_refused_without_recursing() -> None:
    with pytest.raises(InvalidSchema, match="nests deeper"):
        schema({"pattern": "(" * 100_000 + ")" * 100_000})


def test_long_ref_chains_and_wide_combinations_are_bounded() -> None:
    n = 2000
    chain: dict[str, Any] = {
        "definitions": {f"d{i}": {"type": "object",
                                  "properties": {"x": {"$ref": f"#/definitions/d{i + 1}"}}}
                        for i in range(n)},
        "$ref": "#/definitions/d0",
    }
    chain["definitions"][f"d{n}"] = STR
    assert errors(chain, chain) == [TOO_COMPLEX]  # capped, no RecursionError
    wide = {"anyOf": [{"type": "string", "maxLength": i} for i in range(1, 600)]}
    assert errors(wide, wide) == [TOO_COMPLEX]  # 600 x 600 pairs, past the work cap
    narrower = {"anyOf": wide["anyOf"][:100]}  # 10,000 pairs: within the cap
    assert errors(narrower, narrower) == []


def test_reference_loops_of_pure_refs_do_not_hang() -> None:
    loop = {"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
            "properties": {"x": {"$ref": "#/definitions/a"}}}
    assert errors(loop, loop) == []


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_parse_of_arbitrary_text_returns_or_raises_invalid_schema(text: str) -> None:
    try:
        parsed = parse(text)
    except InvalidSchema:
        return
    assert json.loads(parsed.canonical()) == json.loads(text)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "properties", "items", "required", "enum", "oneOf", "anyOf",
                         "allOf", "not", "$ref", "additionalProperties", "pattern",
                         "maxLength", "minimum", "const", "a", "definitions", "$id"]),
        inner, max_size=5),
    max_leaves=20)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_parse_of_arbitrary_json_returns_or_raises_invalid_schema(value: Any) -> None:
    with contextlib.suppress(InvalidSchema):
        parse(json.dumps(value))


_types = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])
_schemas = st.recursive(
    st.builds(lambda t: {"type": t}, _types) | st.just({}) | st.booleans()
    | st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 5))
    | st.builds(lambda v: {"enum": v}, st.lists(st.integers(0, 3), min_size=1, max_size=3)),
    lambda inner: st.builds(lambda p, r, c: {"type": "object", "properties": p,
                                             "required": sorted(set(r) & set(p)),
                                             "additionalProperties": c},
                            st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
                            st.lists(st.sampled_from("abc"), max_size=2), st.booleans())
    | st.builds(lambda i: {"type": "array", "items": i}, inner)
    | st.builds(lambda k, s: {k: s}, st.sampled_from(["oneOf", "anyOf", "allOf"]),
                st.lists(inner, min_size=1, max_size=3))
    | st.builds(lambda s: {"not": s}, inner),
    max_leaves=8)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas, _schemas)
def test_compatibility_of_arbitrary_schemas_is_a_list_and_reflexive(a: Any, b: Any) -> None:
    found = errors(a, b)
    assert all(t not in COMPATIBLE_CHANGES for t in found)
    assert errors(a, a) == []


# ---- references -----------------------------------------------------------------------

CUSTOMER = json.dumps(obj({"name": STR, "address": {"$ref": "#/definitions/address"}},
                          definitions={"address": obj({"city": STR})}))


def test_a_ref_to_another_registered_schema_resolves_and_validates() -> None:
    order = schema(obj({"customer": {"$ref": "customer.json"}}), {"customer.json": CUSTOMER})
    assert order.referenced_names == ("customer.json",)
    validator = order.validator()
    assert validator.is_valid({"customer": {"name": "x", "address": {"city": "y"}}})
    assert not validator.is_valid({"customer": {"name": 3}})
    assert not validator.is_valid({"customer": {"address": {"city": 3}}})


def test_refs_resolve_against_the_root_id_and_into_fragments() -> None:
    refs = {"customer.json": CUSTOMER}
    root = {"$id": "https://example.com/schemas/order.json",
            "properties": {"city": {"$ref": "customer.json#/definitions/address"}}}
    parsed = schema(root, refs)
    assert parsed.referenced_names == ("customer.json",)
    assert not parsed.validator().is_valid({"city": {"city": 1}})
    by_url = {"https://example.com/customer.json": CUSTOMER}
    assert schema({"$ref": "https://example.com/customer.json"}, by_url).referenced_names == (
        "https://example.com/customer.json",)


def test_unused_references_are_accepted_and_not_listed() -> None:
    assert schema(STR, {"customer.json": CUSTOMER}).referenced_names == ()


def test_a_missing_reference_is_refused_by_name() -> None:
    with pytest.raises(InvalidSchema, match=re.escape("missing reference 'customer.json'")):
        schema(obj({"c": {"$ref": "customer.json"}}))
    with pytest.raises(InvalidSchema, match=r"missing reference 'other\.json'.*'a\.json'"):
        schema({"$ref": "a.json"}, {"a.json": json.dumps({"$ref": "other.json"})})


def test_a_dangling_pointer_is_refused() -> None:
    with pytest.raises(InvalidSchema, match="unresolvable \\$ref '#/definitions/nope'"):
        schema({"properties": {"a": {"$ref": "#/definitions/nope"}}})
    with pytest.raises(InvalidSchema, match="unresolvable"):
        schema({"$ref": "customer.json#/definitions/nope"}, {"customer.json": CUSTOMER})


def test_cyclic_references_are_refused_by_name() -> None:
    refs = {"a.json": json.dumps(obj({"b": {"$ref": "b.json"}})),
            "b.json": json.dumps(obj({"a": {"$ref": "a.json"}}))}
    cycle = "cyclic references: a.json -> b.json -> a.json"
    with pytest.raises(InvalidSchema, match=re.escape(cycle)):
        schema({"$ref": "a.json"}, refs)


def test_recursion_inside_one_schema_is_not_a_cycle() -> None:
    tree = obj({"children": {"type": "array", "items": {"$ref": "#"}}})
    assert schema(tree).validator().is_valid({"children": [{"children": []}]})
    assert schema({"$ref": "tree.json"}, {"tree.json": json.dumps(tree)})


def test_an_invalid_reference_is_refused_by_name() -> None:
    invalid = "reference 'bad.json' is not a valid JSON Schema"
    with pytest.raises(InvalidSchema, match=re.escape(invalid)):
        schema({"$ref": "bad.json"}, {"bad.json": '{"type": 1}'})
    with pytest.raises(InvalidSchema, match=re.escape("reference 'bad.json' is not valid JSON")):
        schema({"$ref": "bad.json"}, {"bad.json": "{"})


def test_compatibility_follows_references() -> None:
    new_customer = json.dumps(obj({"name": INT}))
    old = schema(obj({"customer": {"$ref": "customer.json"}}), {"customer.json": CUSTOMER})
    new = schema(obj({"customer": {"$ref": "customer.json"}}),
                 {"customer.json": new_customer})
    # the address dropped from an open model is compatible; the name's type is not
    assert [(i.error_type, i.path) for i in compatibility(new, old)] == [
        ("TYPE_CHANGED", "#/properties/customer/properties/name")]


# ---- compatibility: Confluent's rules -------------------------------------------------

OPEN_A = obj({"a": STR})
CLOSED_A = obj({"a": STR}, closed=True)

CASES: list[tuple[str, Any, Any, list[str]]] = [
    # (case, reader, writer, incompatible error types)
    ("identical", OPEN_A, OPEN_A, []),
    ("open: optional property added", obj({"a": STR, "b": INT}), OPEN_A,
     ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
    ("open: required property added", obj({"a": STR, "b": INT}, required=("b",)), OPEN_A,
     ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
    ("open: required property with default added",
     obj({"a": STR, "b": {"type": "integer", "default": 0}}, required=("b",)), OPEN_A,
     ["REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"]),
    ("open: property with empty schema added", obj({"a": STR, "b": {}}), OPEN_A, []),
    ("open: property removed", obj({}), OPEN_A, []),
    ("closed: optional property added", obj({"a": STR, "b": INT}, closed=True), CLOSED_A, []),
    ("closed: required property added",
     obj({"a": STR, "b": INT}, required=("b",), closed=True), CLOSED_A,
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]),
    ("closed: required property with default added",
     obj({"a": STR, "b": {"type": "integer", "default": 1}}, required=("b",), closed=True),
     CLOSED_A, []),
    ("closed: property removed", obj({}, closed=True), CLOSED_A,
     ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    ("closed: property that was false removed", obj({}, closed=True),
     obj({"a": False}, closed=True), []),
    ("content model closed", CLOSED_A, OPEN_A, ["ADDITIONAL_PROPERTIES_REMOVED"]),
    ("content model opened", OPEN_A, CLOSED_A, []),
    ("additional properties given a schema", obj({"a": STR}, additionalProperties=STR), OPEN_A,
     ["ADDITIONAL_PROPERTIES_NARROWED"]),
    ("additional properties' schema dropped", OPEN_A, obj({"a": STR}, additionalProperties=STR),
     []),
    ("partially open: removed property covered", obj({}, additionalProperties=STR),
     obj({"a": STR}, additionalProperties=STR), []),
    ("partially open: removed property not covered", obj({}, additionalProperties=STR),
     obj({"a": INT}, additionalProperties=STR),
     ["TYPE_CHANGED", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]),
    ("partially open: added property covered by a pattern",
     obj({"s_name": STR}, patternProperties={"^s_": STR}),
     obj({}, patternProperties={"^s_": STR}), []),
    ("partially open: added property not covered by a pattern",
     obj({"s_age": INT}, patternProperties={"^s_": STR}),
     obj({}, patternProperties={"^s_": STR}),
     ["TYPE_CHANGED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]),
    ("existing property made required", obj({"a": STR}, required=("a",)), OPEN_A,
     ["REQUIRED_ATTRIBUTE_ADDED"]),
    ("existing property made required with a default",
     obj({"a": {"type": "string", "default": ""}}, required=("a",)),
     obj({"a": {"type": "string", "default": ""}}), []),
    ("required dropped", OPEN_A, obj({"a": STR}, required=("a",)), []),
    ("type changed", obj({"a": INT}), OPEN_A, ["TYPE_CHANGED"]),
    ("integer widened to number", {"type": "number"}, INT, []),
    ("number narrowed to integer", INT, {"type": "number"}, ["TYPE_NARROWED"]),
    ("null added to a type", {"type": ["string", "null"]}, STR, []),
    ("null removed from a type", STR, {"type": ["string", "null"]}, ["TYPE_CHANGED"]),
    ("maxLength decreased", {"type": "string", "maxLength": 5},
     {"type": "string", "maxLength": 10}, ["MAX_LENGTH_DECREASED"]),
    ("maxLength increased", {"type": "string", "maxLength": 10},
     {"type": "string", "maxLength": 5}, []),
    ("maxLength added", {"type": "string", "maxLength": 10}, STR, ["MAX_LENGTH_ADDED"]),
    ("minLength removed", STR, {"type": "string", "minLength": 2}, []),
    ("minLength increased", {"type": "string", "minLength": 3},
     {"type": "string", "minLength": 2}, ["MIN_LENGTH_INCREASED"]),
    ("pattern added", {"type": "string", "pattern": "^a"}, STR, ["PATTERN_ADDED"]),
    ("pattern changed", {"type": "string", "pattern": "^a"},
     {"type": "string", "pattern": "^b"}, ["PATTERN_CHANGED"]),
    ("pattern removed", STR, {"type": "string", "pattern": "^b"}, []),
    ("maximum decreased", {"type": "number", "maximum": 5}, {"type": "number", "maximum": 9},
     ["MAXIMUM_DECREASED"]),
    ("minimum decreased", {"type": "number", "minimum": 1}, {"type": "number", "minimum": 5},
     []),
    ("minimum increased", {"type": "number", "minimum": 6}, {"type": "number", "minimum": 5},
     ["MINIMUM_INCREASED"]),
    ("exclusiveMinimum added", {"type": "number", "exclusiveMinimum": 0}, {"type": "number"},
     ["EXCLUSIVE_MINIMUM_ADDED"]),
    ("exclusiveMaximum increased", {"type": "number", "exclusiveMaximum": 9},
     {"type": "number", "exclusiveMaximum": 3}, []),
    ("multipleOf expanded", {"type": "integer", "multipleOf": 4},
     {"type": "integer", "multipleOf": 2}, ["MULTIPLE_OF_EXPANDED"]),
    ("multipleOf reduced", {"type": "integer", "multipleOf": 2},
     {"type": "integer", "multipleOf": 4}, []),
    ("multipleOf changed", {"type": "integer", "multipleOf": 3},
     {"type": "integer", "multipleOf": 2}, ["MULTIPLE_OF_CHANGED"]),
    ("enum extended", {"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}, []),
    ("enum narrowed", {"enum": ["a"]}, {"enum": ["a", "b"]}, ["ENUM_ARRAY_NARROWED"]),
    ("enum changed", {"enum": ["a", "c"]}, {"enum": ["a", "b"]}, ["ENUM_ARRAY_CHANGED"]),
    ("const changed", {"const": 1}, {"const": 2}, ["ENUM_ARRAY_CHANGED"]),
    ("items changed", {"type": "array", "items": INT}, {"type": "array", "items": STR},
     ["TYPE_CHANGED"]),
    ("items given a schema", {"type": "array", "items": STR}, {"type": "array"},
     ["SCHEMA_ADDED"]),
    ("items' schema dropped", {"type": "array"}, {"type": "array", "items": STR}, []),
    ("maxItems decreased", {"type": "array", "maxItems": 1}, {"type": "array", "maxItems": 2},
     ["MAX_ITEMS_DECREASED"]),
    ("minItems added", {"type": "array", "minItems": 1}, {"type": "array"},
     ["MIN_ITEMS_ADDED"]),
    ("uniqueItems added", {"type": "array", "uniqueItems": True}, {"type": "array"},
     ["UNIQUE_ITEMS_ADDED"]),
    ("uniqueItems removed", {"type": "array"}, {"type": "array", "uniqueItems": True}, []),
    ("tuple: item removed from a closed tuple",
     {"type": "array", "items": [STR], "additionalItems": False},
     {"type": "array", "items": [STR, INT], "additionalItems": False},
     ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    ("tuple: item added to an open tuple", {"type": "array", "items": [STR, INT]},
     {"type": "array", "items": [STR]}, ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL"]),
    ("tuple: item added to a closed tuple",
     {"type": "array", "items": [STR, INT], "additionalItems": False},
     {"type": "array", "items": [STR], "additionalItems": False}, []),
    ("tuple: closed", {"type": "array", "items": [STR], "additionalItems": False},
     {"type": "array", "items": [STR]}, ["ADDITIONAL_ITEMS_REMOVED"]),
    ("oneOf member added", {"oneOf": [STR, INT, {"type": "boolean"}]}, {"oneOf": [STR, INT]},
     []),
    ("oneOf member removed", {"oneOf": [STR]}, {"oneOf": [STR, INT]}, ["SUM_TYPE_NARROWED"]),
    ("oneOf member changed", {"oneOf": [STR, {"type": "boolean"}]}, {"oneOf": [STR, INT]},
     ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"]),
    ("allOf to anyOf", {"anyOf": [STR, {"maxLength": 3}]}, {"allOf": [STR, {"maxLength": 3}]},
     []),
    ("anyOf to allOf", {"allOf": [STR, {"maxLength": 3}]}, {"anyOf": [STR, {"maxLength": 3}]},
     ["COMBINED_TYPE_CHANGED"]),
    ("allOf member added", {"allOf": [STR, {"maxLength": 3}]}, {"allOf": [STR]},
     ["PRODUCT_TYPE_EXTENDED"]),
    ("allOf member removed", {"allOf": [STR]}, {"allOf": [STR, {"maxLength": 3}]}, []),
    ("a type becomes a union of it", {"oneOf": [STR, INT]}, STR, []),
    ("not narrowed", {"not": STR}, {"not": {"type": ["string", "number"]}}, []),
    ("not extended", {"not": {"type": ["string", "number"]}}, {"not": STR},
     ["NOT_TYPE_EXTENDED"]),
    ("dependency added", obj({"a": STR, "b": STR}, dependencies={"a": ["b"]}),
     obj({"a": STR, "b": STR}), ["DEPENDENCY_ARRAY_ADDED"]),
    ("dependency extended", obj({"a": STR, "b": STR, "c": STR}, dependencies={"a": ["b", "c"]}),
     obj({"a": STR, "b": STR, "c": STR}, dependencies={"a": ["b"]}),
     ["DEPENDENCY_ARRAY_EXTENDED"]),
    ("dependency narrowed", obj({"a": STR, "b": STR, "c": STR}, dependencies={"a": ["b"]}),
     obj({"a": STR, "b": STR, "c": STR}, dependencies={"a": ["b", "c"]}), []),
    ("dependency schema added", obj({"a": STR}, dependencies={"a": {"required": ["b"]}}),
     OPEN_A, ["DEPENDENCY_SCHEMA_ADDED"]),
    ("maxProperties decreased", obj({}, maxProperties=2), obj({}, maxProperties=3),
     ["MAX_PROPERTIES_DECREASED"]),
    ("minProperties added", obj({}, minProperties=1), obj({}), ["MIN_PROPERTIES_ADDED"]),
    ("title and description changed", {"type": "string", "title": "x", "description": "y"},
     {"type": "string", "title": "z"}, []),
    ("reader accepts anything", {}, obj({"a": STR}), []),
    ("reader true", True, INT, []),
    ("writer wrote nothing", INT, False, []),
    ("reader rejects everything", False, INT, ["TYPE_CHANGED"]),
]


@pytest.mark.parametrize(("reader", "writer", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_confluent_compatibility_rules(reader: Any, writer: Any, expected: list[str]) -> None:
    assert errors(reader, writer) == expected


def test_there_are_many_distinct_rule_cases() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 30
    assert sum(1 for c in CASES if c[3]) >= 30
    assert sum(1 for c in CASES if not c[3]) >= 20


def test_paths_point_at_the_nested_keyword() -> None:
    writer = obj({"a": obj({"b": {"type": "string", "maxLength": 9}})})
    reader = obj({"a": obj({"b": {"type": "string", "maxLength": 3}})})
    assert paths(reader, writer) == [("MAX_LENGTH_DECREASED",
                                      "#/properties/a/properties/b/maxLength")]
    assert paths(obj({"a": STR, "b": INT}), OPEN_A) == [
        ("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "#/properties/b")]
    assert paths(obj({"a": STR}, required=("a",)), OPEN_A) == [
        ("REQUIRED_ATTRIBUTE_ADDED", "#/required/a")]
    assert paths({"type": "array", "items": INT}, {"type": "array", "items": STR}) == [
        ("TYPE_CHANGED", "#/items")]
    assert paths(INT, {"type": "number"}) == [("TYPE_NARROWED", "#/")]


def test_every_problem_is_reported_with_a_description() -> None:
    writer = obj({"a": STR, "b": INT}, closed=True)
    reader = obj({"a": INT, "c": STR}, required=("c",), closed=True)
    found = compatibility(schema(reader), schema(writer))
    assert {(i.error_type, i.path) for i in found} == {
        ("TYPE_CHANGED", "#/properties/a"),
        ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "#/properties/b"),
        ("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "#/properties/c"),
    }
    for item in found:
        assert item.path in item.description
        assert item.error_type in item.message()


def test_recursive_schemas_compare_and_changes_inside_them_are_found() -> None:
    def tree(leaf: Any) -> Any:
        return {"definitions": {"node": obj({"value": leaf, "next": {
            "$ref": "#/definitions/node"}})}, "$ref": "#/definitions/node"}
    assert errors(tree(STR), tree(STR)) == []
    assert paths(tree(INT), tree(STR)) == [("TYPE_CHANGED", "#/properties/value")]


def test_union_members_are_matched_as_a_whole_not_greedily() -> None:
    """The first writer member fits both reader members, the second only the first: a
    maximum matching pairs them crosswise."""
    writer = {"oneOf": [{"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 50}]}
    reader = {"oneOf": [STR, {"type": "string", "maxLength": 10}]}
    assert errors(reader, writer) == []
    narrower = {"oneOf": [{"type": "string", "maxLength": 10},
                          {"type": "string", "maxLength": 20}]}
    assert errors(narrower, writer) == ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"]


@given(st.integers(0, 5), st.integers(0, 5), st.sets(st.tuples(st.integers(0, 4),
                                                               st.integers(0, 4))))
def test_matching_is_maximum(left: int, right: int, pairs: set[tuple[int, int]]) -> None:
    edges = {(i, j): [] for i, j in pairs if i < left and j < right}
    found = _max_matching(left, right, edges)  # type: ignore[arg-type]
    assert found is not None and all(edge in edges for edge in found)
    assert len({i for i, _ in found}) == len(found) == len({j for _, j in found})
    best = 0
    for k in range(min(left, right), 0, -1):
        if any(len({i for i, _ in c}) == k == len({j for _, j in c})
               for c in itertools.combinations(edges, k)):
            best = k
            break
    assert len(found) == best


def test_levels_map_onto_reader_and_writer() -> None:
    """BACKWARD: the new schema reads the old; FORWARD: the old reads the new; FULL: both
    (Confluent's summary: closed models take optional additions backward, open ones forward).
    """
    old, new = schema(OPEN_A), schema(obj({"a": STR, "b": INT}))
    assert compatibility(new, old) and not compatibility(old, new)  # FORWARD only
    old, new = schema(CLOSED_A), schema(obj({"a": STR, "b": INT}, closed=True))
    assert not compatibility(new, old) and compatibility(old, new)  # BACKWARD only


def test_no_recursion_error_escapes_a_comparison_at_low_stack() -> None:
    writer: Any = STR
    reader: Any = INT
    for _ in range(MAX_DEPTH - 1):
        writer, reader = {"items": writer}, {"items": reader}
    w, r = schema(writer), schema(reader)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(150)
    try:
        found = compatibility(r, w)
    finally:
        sys.setrecursionlimit(limit)
    assert [i.error_type for i in found] in (["TYPE_CHANGED"], [TOO_COMPLEX])
