"""The Avro format of the schema registry: parsing, Confluent's canonical and normalized
forms, references, hostile input, and compatibility by Avro's schema resolution rules with
Confluent's error types and paths."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.formats.avro.compat import AvroIncompatibility, compatibility
from eddy.formats.avro.schema import AvroSchema, parse
from eddy.formats.base import MAX_DEPTH, MAX_SCHEMA_CHARS, Incompatibility, InvalidSchema


def j(value: Any) -> str:
    return json.dumps(value, indent=2)


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


# --- canonical form ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "canonical"), [
    ('{"type": "string"}', '"string"'),
    ('  "string"  ', '"string"'),
    ('{"type": "long", "doc": "dropped", "name": "dropped"}', '"long"'),
    ('{"type": "int", "logicalType": "date"}', '{"type":"int","logicalType":"date"}'),
    ('{"logicalType": "decimal", "scale": 2, "precision": 4, "type": "bytes"}',
     '{"type":"bytes","logicalType":"decimal","scale":2,"precision":4}'),
    ('{"items": {"type": "int"}, "type": "array"}', '{"type":"array","items":"int"}'),
    ('{"type": "map", "values": ["null", {"type": "string"}]}',
     '{"type":"map","values":["null","string"]}'),
    ('/* a comment */ {"type": "boolean" // another\n}', '"boolean"'),
])
def test_canonical_of_simple_schemas(text: str, canonical: str) -> None:
    assert parse(text).canonical() == canonical


def test_canonical_record_follows_avros_attribute_order() -> None:
    text = j({"fields": [{"type": "int", "order": "descending", "x-tag": [1, 2],
                          "aliases": ["old_a"], "default": 5, "doc": "field doc",
                          "name": "a"}],
              "zzz": {"b": 1, "a": 2}, "aliases": ["Previous"], "doc": "record doc",
              "namespace": "com.example", "name": "User", "type": "record"})
    assert parse(text).canonical() == (
        '{"type":"record","name":"User","namespace":"com.example","doc":"record doc",'
        '"fields":[{"name":"a","type":"int","doc":"field doc","default":5,'
        '"order":"descending","aliases":["old_a"],"x-tag":[1,2]}],'
        '"zzz":{"b":1,"a":2},"aliases":["Previous"]}')


def test_canonical_namespaces_and_named_references() -> None:
    inner_enum = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"],
                  "default": "RED"}
    other_ns = {"type": "fixed", "name": "Hash", "namespace": "other", "size": 16}
    no_ns = {"type": "record", "name": "Bare", "namespace": "", "fields": []}
    text = j(record("a.b.Outer",
                    {"name": "c", "type": inner_enum},
                    {"name": "c2", "type": "Color"},
                    {"name": "h", "type": ["null", other_ns], "default": None},
                    {"name": "h2", "type": "other.Hash"},
                    {"name": "n", "type": no_ns}))
    assert parse(text).canonical() == (
        '{"type":"record","name":"Outer","namespace":"a.b","fields":['
        '{"name":"c","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"],'
        '"default":"RED"}},'
        '{"name":"c2","type":"Color"},'
        '{"name":"h","type":["null",{"type":"fixed","name":"Hash","namespace":"other",'
        '"size":16}],"default":null},'
        '{"name":"h2","type":"other.Hash"},'
        '{"name":"n","type":{"type":"record","name":"Bare","namespace":"","fields":[]}}]}')


def test_canonical_recursive_record_and_error_type() -> None:
    text = j({"type": "error", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"], "default": None}]})
    assert parse(text).canonical() == (
        '{"type":"error","name":"Node","fields":[{"name":"next","type":["null","Node"],'
        '"default":null}]}')


def test_canonical_defaults_are_written_like_java() -> None:
    text = j(record("R",
                    {"name": "big", "type": "double", "default": 1e10},
                    {"name": "small", "type": "double", "default": 0.0001},
                    {"name": "plain", "type": "double", "default": 2.5},
                    {"name": "int_on_double", "type": "double", "default": 3},
                    {"name": "nan", "type": "float", "default": "NaN"},
                    {"name": "s", "type": "string", "default": "tab\tctl\u001fé"}))
    canonical = parse(text).canonical()
    assert '"default":1.0E10' in canonical
    assert '"default":1.0E-4' in canonical
    assert '"default":2.5' in canonical
    assert '"default":3}' in canonical
    assert '"default":"NaN"' in canonical
    assert '"default":"tab\\tctl\\u001Fé"' in canonical


def test_canonical_is_stable_when_parsed_again() -> None:
    text = j(record("x.R", {"name": "a", "type": {"type": "map", "values": "long"},
                            "default": {"k": 1}},
                    {"name": "b", "type": ["null", record("Inner", {"name": "z",
                                                                   "type": "bytes"})]},
                    {"name": "c", "type": ["null", "Inner"]}))
    first = parse(text).canonical()
    assert parse(first).canonical() == first


def test_name_of_a_record_schema() -> None:
    assert parse(j(record("com.x.R"))).name == "com.x.R"
    assert parse('"int"').name is None
    assert parse('"int"').schema_type == "AVRO"


# --- normalized form -----------------------------------------------------------------------

def test_normalized_sorts_properties_and_aliases() -> None:
    one = j(record("R", {"name": "a", "type": "int", "b-prop": 1, "a-prop": {"y": 1, "x": 2},
                         "aliases": ["z", "y"]}, aliases=["Q", "P"], zprop=1, aprop=2))
    two = j({"aprop": 2, "zprop": 1, "aliases": ["P", "Q"], "type": "record", "name": "R",
             "fields": [{"a-prop": {"x": 2, "y": 1}, "b-prop": 1, "aliases": ["y", "z"],
                         "type": "int", "name": "a"}]})
    assert parse(one).canonical() != parse(two).canonical()
    assert parse(one).normalized() == parse(two).normalized() == (
        '{"type":"record","name":"R","fields":[{"name":"a","type":"int","aliases":["y","z"],'
        '"a-prop":{"x":2,"y":1},"b-prop":1}],"aprop":2,"zprop":1,"aliases":["P","Q"]}')


def test_normalized_converts_defaults_by_type_and_sorts_record_defaults() -> None:
    inner = record("In", {"name": "b", "type": "int"}, {"name": "a", "type": "double"})
    text = j(record("R", {"name": "d", "type": "double", "default": 1},
                    {"name": "f", "type": "float", "default": 3.14159265358979},
                    {"name": "r", "type": inner, "default": {"b": 1, "a": 2}}))
    normalized = parse(text).normalized()
    assert '"name":"d","type":"double","default":1.0}' in normalized
    assert '"default":3.1415927}' in normalized
    assert '"default":{"a":2.0,"b":1}}' in normalized
    huge = parse(j(record("R", {"name": "f", "type": "float", "default": 1e300})))
    assert '"default":"Infinity"' in huge.normalized()


def test_normalized_puts_a_valid_logical_type_first_and_drops_empty_docs() -> None:
    text = j(record("R", {"name": "t", "type": {"type": "long", "connect.version": 1,
                                               "logicalType": "timestamp-millis"}},
                    {"name": "u", "type": {"type": "long", "connect.version": 1,
                                           "logicalType": "no-such-type"}},
                    doc=""))
    normalized = parse(text).normalized()
    assert ('{"type":"long","logicalType":"timestamp-millis","connect.version":1}'
            in normalized)
    assert '{"type":"long","connect.version":1,"logicalType":"no-such-type"}' in normalized
    assert '"doc"' not in normalized
    assert '"doc":""' in parse(text).canonical()


def test_normalized_is_idempotent() -> None:
    text = j(record("a.R", {"name": "e", "type": {"type": "enum", "name": "E",
                                                  "symbols": ["B", "A"], "default": "A",
                                                  "aliases": ["F"]}},
                    {"name": "f", "type": {"type": "fixed", "name": "F2", "size": 4,
                                           "logicalType": "decimal", "precision": 9}},
                    {"name": "g", "type": ["null", "E"], "default": None, "order": "ignore"}))
    normalized = parse(text).normalized()
    assert parse(normalized).normalized() == normalized
    assert '"precision":9' in normalized


# --- invalid schemas -----------------------------------------------------------------------

@pytest.mark.parametrize(("schema", "message"), [
    ("{not json", "not valid JSON"),
    ('{"type": "double", "default": NaN}', "not valid JSON"),
    ("", "not valid JSON"),
    ("5", "Schema not yet supported"),
    ('{"name": "x"}', "No type"),
    ('{"type": {"type": "int"}}', "No type"),
    ('{"type": "strin"}', "Type not supported"),
    ('"Nope"', "Undefined name"),
    (j(record("R", {"name": "a", "type": "Missing"})), "Missing"),
    (j({"type": "record", "fields": []}), "No name"),
    (j(record("1bad")), "Illegal character"),
    (j(record("R", {"name": "bad-field", "type": "int"})), "Illegal character in field name"),
    (j(record("R", {"type": "int"})), "No field name"),
    (j(record("R", {"name": "a"})), "No field type"),
    (j({"type": "record", "name": "R"}), "Record has no fields"),
    (j(record("R", {"name": "a", "type": "int"}, {"name": "a", "type": "long"})),
     "Duplicate field a"),
    (j({"type": "enum", "name": "E"}), "Enum has no symbols"),
    (j({"type": "enum", "name": "E", "symbols": ["A", "A"]}), "Duplicate enum symbol"),
    (j({"type": "enum", "name": "E", "symbols": ["A-1"]}), "Illegal character in enum symbol"),
    (j({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}), "Enum Default"),
    (j({"type": "array"}), "Array has no items"),
    (j({"type": "map"}), "Map has no values"),
    (j({"type": "fixed", "name": "F"}), "Invalid or no size"),
    (j({"type": "fixed", "name": "F", "size": "4"}), "Invalid or no size"),
    (j({"type": "fixed", "name": "F", "size": -1}), "Invalid fixed size"),
    (j({"type": "fixed", "name": "int", "size": 1}), "named after primitives"),
    ('["int", "int"]', "Duplicate in union"),
    ('[{"type": "array", "items": "int"}, {"type": "array", "items": "long"}]',
     "Duplicate in union"),
    ('["int", ["string"]]', "Nested union"),
    (j(record("R", {"name": "a", "type": record("R")})), "Can't redefine: R"),
    (j(record("R", {"name": "a", "type": "int", "default": "x"})), "Invalid default for field a"),
    (j(record("R", {"name": "a", "type": "int", "default": 1 << 31})), "Invalid default"),
    (j(record("R", {"name": "a", "type": "long", "default": 1.5})), "Invalid default"),
    (j(record("R", {"name": "a", "type": ["null", "int"], "default": 1})), "Invalid default"),
    (j(record("R", {"name": "a", "type": record("In", {"name": "x", "type": "int"}),
                    "default": {}})), "Invalid default"),
    (j(record("R", {"name": "a", "type": "double", "default": "one"})), "Invalid default"),
    (j(record("R", {"name": "a", "type": "int", "order": "sideways"})), "Invalid order"),
    (j(record("R", aliases="Old")), "aliases not an array"),
    (j(record("R", aliases=[1])), "alias not a string"),
    (j(record("R", aliases=["bad-alias"])), "Illegal character in alias"),
    (j(record("R", namespace="bad-space.x")), "Illegal character in namespace"),
])
def test_invalid_schemas_are_refused_with_the_reason(schema: str, message: str) -> None:
    with pytest.raises(InvalidSchema, match=message.replace("(", r"\(")):
        parse(schema)


def test_schemas_read_back_skip_default_and_namespace_checks() -> None:
    stored = j(record("R", {"name": "a", "type": "int", "default": "x"},
                      namespace="legacy-ns"))
    with pytest.raises(InvalidSchema):
        parse(stored)
    assert parse(stored, is_new=False).name == "legacy-ns.R"


def test_defaults_matching_their_type_are_accepted() -> None:
    schema = parse(j(record("R",
                            {"name": "u", "type": ["null", "int"], "default": None},
                            {"name": "l", "type": "long", "default": 1 << 40},
                            {"name": "b", "type": "bytes", "default": "\u00ff"},
                            {"name": "a", "type": {"type": "array", "items": "int"},
                             "default": [1, 2]},
                            {"name": "m", "type": {"type": "map", "values": "boolean"},
                             "default": {"x": True}},
                            {"name": "e", "type": {"type": "enum", "name": "E",
                                                   "symbols": ["A"]}, "default": "A"},
                            {"name": "d", "type": "double", "default": "-Infinity"})))
    assert '"default":"-Infinity"' in schema.canonical()


# --- references ----------------------------------------------------------------------------

ADDRESS = j(record("com.acme.Address", {"name": "street", "type": "string"},
                   {"name": "zip", "type": record("Zip", {"name": "code", "type": "int"})}))
CUSTOMER = j(record("com.acme.Customer", {"name": "home", "type": "com.acme.Address"}))


def test_referenced_types_are_used_by_name_and_not_inlined() -> None:
    schema = parse(j(record("com.acme.Order",
                            {"name": "customer", "type": "Customer"},
                            {"name": "ship_to", "type": ["null", "Address"], "default": None})),
                   {"com.acme.Address": ADDRESS, "com.acme.Customer": CUSTOMER})
    assert schema.canonical() == (
        '{"type":"record","name":"Order","namespace":"com.acme","fields":['
        '{"name":"customer","type":"Customer"},'
        '{"name":"ship_to","type":["null","Address"],"default":null}]}')
    resolved = schema.resolved()
    assert '"name":"Customer"' in resolved and '"name":"street"' in resolved
    assert parse(schema.normalized(), schema.references).canonical() == schema.normalized()


def test_references_are_parsed_in_dependency_order() -> None:
    refs = {"com.acme.Customer": CUSTOMER, "com.acme.Address": ADDRESS}
    schema = parse('"com.acme.Customer"', refs)
    assert schema.canonical() == '"com.acme.Customer"'


def test_a_nested_type_of_a_reference_is_inlined_like_confluent() -> None:
    schema = parse(j(record("x.Uses", {"name": "z", "type": "com.acme.Zip"})),
                   {"com.acme.Address": ADDRESS})
    assert '"name":"Zip"' in schema.canonical()


def test_missing_reference_is_refused_by_name() -> None:
    with pytest.raises(InvalidSchema, match=r"com\.acme\.Address"):
        parse(CUSTOMER)
    with pytest.raises(InvalidSchema, match=r"reference 'com\.acme\.Customer'.*Address"):
        parse('"com.acme.Customer"', {"com.acme.Customer": CUSTOMER})


def test_cyclic_references_are_refused_by_name() -> None:
    a = j(record("p.A", {"name": "b", "type": ["null", "p.B"], "default": None}))
    b = j(record("p.B", {"name": "a", "type": ["null", "p.A"], "default": None}))
    with pytest.raises(InvalidSchema, match=r"cyclic references: 'p\.A' -> 'p\.B' -> 'p\.A'"):
        parse('"p.A"', {"p.A": a, "p.B": b})


def test_a_reference_may_not_use_the_referring_schemas_types() -> None:
    ref = j(record("p.Child", {"name": "parent", "type": "p.Parent"}))
    with pytest.raises(InvalidSchema, match=r"Undefined name|not a defined name"):
        parse(j(record("p.Parent", {"name": "c", "type": "p.Child"})), {"p.Child": ref})


def test_invalid_reference_and_redefinition_are_named() -> None:
    with pytest.raises(InvalidSchema, match="reference 'bad'"):
        parse('"int"', {"bad": "{"})
    with pytest.raises(InvalidSchema, match=r"Can't redefine: com\.acme\.Address"):
        parse(ADDRESS, {"com.acme.Address": ADDRESS})


# --- hostile input -------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 100_000 + "1" + "}" * 100_000,
    '{"type":"array","items":' * 40_000 + '"int"' + "}" * 40_000,
    "[" * 100_000,
    '"' + "\\" * 10 + "[" * 100_000,
])
def test_deep_nesting_is_refused_without_recursion(text: str) -> None:
    with pytest.raises(InvalidSchema, match=r"deeper|JSON"):
        parse(text)


def test_schema_nesting_is_bounded_by_max_depth() -> None:
    def arrays(levels: int) -> str:
        return '{"type":"array","items":' * levels + '"int"' + "}" * levels

    assert parse(arrays(MAX_DEPTH)).canonical().count("array") == MAX_DEPTH
    with pytest.raises(InvalidSchema, match=f"deeper than {MAX_DEPTH}"):
        parse(arrays(MAX_DEPTH + 1))


def test_oversized_text_is_refused_before_parsing() -> None:
    with pytest.raises(InvalidSchema, match="more than"):
        parse('"' + "x" * MAX_SCHEMA_CHARS + '"')
    with pytest.raises(InvalidSchema, match="reference 'big'"):
        parse('"int"', {"big": " " * (MAX_SCHEMA_CHARS + 1)})


def test_error_messages_stay_short() -> None:
    with pytest.raises(InvalidSchema) as caught:
        parse('"' + "a" * (MAX_SCHEMA_CHARS - 10) + '"')
    assert str(caught.value).startswith("Undefined name")
    assert len(str(caught.value)) <= 1100


def test_huge_numbers_are_refused_or_kept() -> None:
    def with_default(number: str) -> str:
        return ('{"type":"record","name":"R","fields":[{"name":"a","type":"long",'
                f'"default":{number}}}]}}')

    with pytest.raises(InvalidSchema, match="not valid JSON"):
        parse(with_default("9" * 5000))
    with pytest.raises(InvalidSchema, match="Invalid default"):
        parse(with_default("9" * 4000))
    assert "9" * 4000 in parse(with_default("9" * 4000), is_new=False).canonical()
    big = parse(j(record("R", {"name": "a", "type": "double", "default": 1e308})))
    assert '"default":1.0E308' in big.canonical()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_parses_or_raises_invalid_schema(text: str) -> None:
    try:
        schema = parse(text)
    except InvalidSchema:
        return
    assert parse(schema.canonical()).canonical() == schema.canonical()


_names = st.sampled_from(["A", "B", "c", "int", "x.Y", "", "E"])
_leaves = st.one_of(st.sampled_from(["int", "long", "float", "double", "bytes", "string",
                                     "null", "A", "B", "x.Y"]),
                    st.integers(), st.floats(), st.none(), st.booleans(), st.text(max_size=3))
_schemaish = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.fixed_dictionaries({"type": st.sampled_from(["record", "enum", "fixed", "array", "map",
                                                    "error", "int", "A"])},
                          optional={"name": _names, "namespace": _names,
                                    "fields": st.lists(st.fixed_dictionaries(
                                        {"name": _names, "type": inner},
                                        optional={"default": inner, "aliases": inner,
                                                  "order": inner}), max_size=3),
                                    "symbols": st.lists(_names, max_size=3),
                                    "items": inner, "values": inner, "size": inner,
                                    "default": inner, "aliases": inner,
                                    "logicalType": st.sampled_from(["decimal", "date"]),
                                    "precision": inner, "x": inner})), max_leaves=20)


@settings(max_examples=500, deadline=None)
@given(_schemaish)
def test_schema_like_json_parses_or_raises_invalid_schema(doc: Any) -> None:
    try:
        schema = parse(json.dumps(doc))
    except InvalidSchema:
        return
    canonical = schema.canonical()
    assert parse(canonical).canonical() == canonical
    normalized = schema.normalized()
    assert parse(normalized).normalized() == normalized
    assert compatibility(schema, schema) == []


# --- compatibility -------------------------------------------------------------------------

def issues(reader: Any, writer: Any) -> list[tuple[str, str]]:
    found = compatibility(parse(j(reader)), parse(j(writer)))
    assert all(isinstance(i, Incompatibility) for i in found)
    return [(i.error_type, i.path) for i in found]


OK: list[tuple[str, str]] = []
R_INT = record("R", {"name": "a", "type": "int"})
ENUM_ABC = {"type": "enum", "name": "Suit", "symbols": ["A", "B", "C"]}
ENUM_AB = {"type": "enum", "name": "Suit", "symbols": ["A", "B"]}

COMPAT_CASES: list[tuple[str, Any, Any, list[tuple[str, str]]]] = [
    # primitives and the specification's promotions
    ("same primitive", "string", "string", OK),
    ("int promoted to long", "long", "int", OK),
    ("int promoted to float", "float", "int", OK),
    ("long promoted to double", "double", "long", OK),
    ("float promoted to double", "double", "float", OK),
    ("bytes read as string", "string", "bytes", OK),
    ("string read as bytes", "bytes", "string", OK),
    ("long narrowed to int", "int", "long", [("TYPE_MISMATCH", "/")]),
    ("double narrowed to float", "float", "double", [("TYPE_MISMATCH", "/")]),
    ("int read as string", "string", "int", [("TYPE_MISMATCH", "/")]),
    ("null read as boolean", "boolean", "null", [("TYPE_MISMATCH", "/")]),
    # records
    ("field added with default", record("R", {"name": "a", "type": "int"},
                                        {"name": "b", "type": "string", "default": ""}),
     R_INT, OK),
    ("field added without default", record("R", {"name": "a", "type": "int"},
                                           {"name": "b", "type": "string"}),
     R_INT, [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1")]),
    ("field removed", R_INT, record("R", {"name": "a", "type": "int"},
                                    {"name": "gone", "type": "string"}), OK),
    ("field renamed with alias", record("R", {"name": "b", "type": "int", "aliases": ["a"]}),
     R_INT, OK),
    ("field renamed without alias", record("R", {"name": "b", "type": "int"}), R_INT,
     [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/0")]),
    ("field type changed", record("R", {"name": "a", "type": "string"}), R_INT,
     [("TYPE_MISMATCH", "/fields/0/type")]),
    ("field type promoted", record("R", {"name": "a", "type": "long"}), R_INT, OK),
    ("record renamed", record("S", {"name": "a", "type": "int"}), R_INT,
     [("NAME_MISMATCH", "/name")]),
    ("record renamed with alias", record("S", {"name": "a", "type": "int"}, aliases=["R"]),
     R_INT, OK),
    ("namespace changed only", record("new.ns.R", {"name": "a", "type": "int"}), R_INT, OK),
    ("nested record field changed",
     record("Outer", {"name": "in", "type": record("In", {"name": "x", "type": "string"})}),
     record("Outer", {"name": "in", "type": record("In", {"name": "x", "type": "int"})}),
     [("TYPE_MISMATCH", "/fields/0/type/fields/0/type")]),
    ("several problems in order", record("R", {"name": "a", "type": "string"},
                                         {"name": "b", "type": "int"}),
     R_INT, [("TYPE_MISMATCH", "/fields/0/type"),
             ("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1")]),
    # enums
    ("writer enum symbol missing in reader", ENUM_AB, ENUM_ABC,
     [("MISSING_ENUM_SYMBOLS", "/symbols")]),
    ("reader enum with default reads unknown symbols", {**ENUM_AB, "default": "A"}, ENUM_ABC,
     OK),
    ("reader enum adds a symbol", ENUM_ABC, ENUM_AB, OK),
    ("enum renamed", {**ENUM_AB, "name": "Color"}, ENUM_AB, [("NAME_MISMATCH", "/name")]),
    # fixed
    ("fixed size changed", {"type": "fixed", "name": "H", "size": 8},
     {"type": "fixed", "name": "H", "size": 16}, [("FIXED_SIZE_MISMATCH", "/size")]),
    ("fixed renamed", {"type": "fixed", "name": "G", "size": 8},
     {"type": "fixed", "name": "H", "size": 8}, [("NAME_MISMATCH", "/name")]),
    ("fixed read as bytes", "bytes", {"type": "fixed", "name": "H", "size": 8},
     [("TYPE_MISMATCH", "/")]),
    # unions
    ("writer union branch missing in reader union", ["null", "string"],
     ["null", "string", "int"], [("MISSING_UNION_BRANCH", "/2")]),
    ("reader union is a superset", ["null", "string", "int"], ["null", "string"], OK),
    ("union branch promoted", ["null", "double"], ["null", "int", "float"], OK),
    ("optional read as required: Avro restarts the path", "string", ["null", "string"],
     [("TYPE_MISMATCH", "/")]),
    ("required read as optional", ["null", "string"], "string", OK),
    ("reader union lacks the writer type", ["null", "string"], "boolean",
     [("MISSING_UNION_BRANCH", "/")]),
    ("field made optional", record("R", {"name": "a", "type": ["null", "int"],
                                         "default": None}), R_INT, OK),
    ("optional field made required", R_INT,
     record("R", {"name": "a", "type": ["null", "int"], "default": None}),
     [("TYPE_MISMATCH", "/")]),
    ("union field narrowed", record("R", {"name": "a", "type": ["null", "int"]}),
     record("R", {"name": "a", "type": ["null", "int", "string"]}),
     [("MISSING_UNION_BRANCH", "/fields/0/type/2")]),
    # arrays and maps
    ("array items promoted", {"type": "array", "items": "long"},
     {"type": "array", "items": "int"}, OK),
    ("array items changed", {"type": "array", "items": "long"},
     {"type": "array", "items": "string"}, [("TYPE_MISMATCH", "/items")]),
    ("map values changed", {"type": "map", "values": "int"},
     {"type": "map", "values": "double"}, [("TYPE_MISMATCH", "/values")]),
    ("array read as map", {"type": "map", "values": "int"},
     {"type": "array", "items": "int"}, [("TYPE_MISMATCH", "/")]),
    # recursion
    ("recursive list", record("L", {"name": "v", "type": "long"},
                              {"name": "next", "type": ["null", "L"], "default": None}),
     record("L", {"name": "v", "type": "int"}, {"name": "next", "type": ["null", "L"]}), OK),
    ("recursive list with a field missing a default",
     record("L", {"name": "next", "type": ["null", "L"]}, {"name": "w", "type": "int"}),
     record("L", {"name": "next", "type": ["null", "L"]}),
     [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1")]),
]


@pytest.mark.parametrize(("reader", "writer", "expected"),
                         [c[1:] for c in COMPAT_CASES], ids=[c[0] for c in COMPAT_CASES])
def test_compatibility_rules(reader: Any, writer: Any, expected: list[tuple[str, str]]) -> None:
    assert issues(reader, writer) == expected


def test_incompatibilities_carry_confluents_messages() -> None:
    found = compatibility(parse(j(record("R", {"name": "a", "type": "int"},
                                         {"name": "b", "type": "int"}))),
                          parse(j(record("R", {"name": "a", "type": "string"}))))
    assert isinstance(found[0], AvroIncompatibility)
    assert found[0].additional_info == "reader type: INT not compatible with writer type: STRING"
    assert found[0].confluent_message() == (
        "{errorType:'TYPE_MISMATCH', description:'The type (path '/fields/0/type') of a field "
        "in the new schema does not match with the old schema', additionalInfo:'reader type: "
        "INT not compatible with writer type: STRING'}")
    missing = found[1]
    assert isinstance(missing, AvroIncompatibility)
    assert missing.describe("old", "new") == (
        "The field 'b' at path '/fields/1' in the old schema has no default value and is "
        "missing in the new schema")


def test_enum_and_fixed_details() -> None:
    symbols = compatibility(parse(j(ENUM_AB)), parse(j({**ENUM_ABC, "symbols": ["D", "C"]})))
    assert [i.additional_info for i in symbols if isinstance(i, AvroIncompatibility)] == [
        "[C, D]"]
    size = compatibility(parse(j({"type": "fixed", "name": "H", "size": 8})),
                         parse(j({"type": "fixed", "name": "H", "size": 16})))
    assert isinstance(size[0], AvroIncompatibility)
    assert size[0].additional_info == "expected: 16, found: 8"


def test_full_compatibility_checks_both_directions() -> None:
    old = parse(j(R_INT))
    new = parse(j(record("R", {"name": "a", "type": "int"},
                         {"name": "b", "type": "string", "default": "x"})))
    assert compatibility(new, old) == []  # BACKWARD: new reads old
    assert compatibility(old, new) == []  # FORWARD: old reads new
    newer = parse(j(record("R", {"name": "b", "type": "string", "default": "x"})))
    assert compatibility(newer, old) == []
    assert [i.error_type for i in compatibility(old, newer)] == [
        "READER_FIELD_MISSING_DEFAULT_VALUE"]


def test_compatibility_across_references() -> None:
    refs = {"com.acme.Address": ADDRESS}
    old = parse(j(record("com.acme.Order", {"name": "to", "type": "Address"})), refs)
    changed = j(record("com.acme.Address", {"name": "street", "type": "string"},
                       {"name": "zip", "type": record("Zip", {"name": "code", "type": "int"})},
                       {"name": "city", "type": "string"}))
    new = parse(j(record("com.acme.Order", {"name": "to", "type": "Address"})),
                {"com.acme.Address": changed})
    assert [(i.error_type, i.path) for i in compatibility(new, old)] == [
        ("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/0/type/fields/2")]
    assert isinstance(new, AvroSchema)
