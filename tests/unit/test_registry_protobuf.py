"""The registry's Protobuf format: parsing (.proto text and base64 FileDescriptorProto),
canonical and normalized forms, references, hostile input, message indexes, and Confluent's
Protobuf compatibility rules (cases from Confluent's documented rules and the protobuf
language guide's "updating a message type", written as our own tests)."""

from __future__ import annotations

import base64
import importlib

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.formats.base import MAX_DEPTH, MAX_SCHEMA_CHARS, PROTOBUF, InvalidSchema
from eddy.formats.protobuf.compat import ProtobufIncompatibility, compatibility, differences
from eddy.formats.protobuf.schema import WELL_KNOWN, ProtobufSchema, parse

P3 = 'syntax = "proto3";\n'
P2 = 'syntax = "proto2";\n'


def diffs(writer: str, reader: str, wrefs: dict[str, str] | None = None,
          rrefs: dict[str, str] | None = None) -> set[str]:
    """Every difference from writer to reader as 'TYPE path'."""
    w, r = parse(writer, wrefs or {}), parse(reader, rrefs or {})
    return {f"{d.error_type} {d.path}" for d in differences(w, r)}


def problems(writer: str, reader: str, wrefs: dict[str, str] | None = None,
             rrefs: dict[str, str] | None = None) -> set[str]:
    """The incompatibilities for a reader of `reader` reading data of `writer`."""
    w, r = parse(writer, wrefs or {}), parse(reader, rrefs or {})
    return {f"{d.error_type} {d.path}" for d in compatibility(r, w)}


# --- parsing, canonical and normalized forms -------------------------------------------------

ORDER = P3 + """
package shop.v1;
import "google/protobuf/timestamp.proto";
option java_package = "com.shop";
option java_multiple_files = true;
message Order {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  map<string, Line> lines = 3;
  message Line { int32 qty = 1; }
}
"""


def test_canonical_reprints_in_confluents_style() -> None:
    s = parse(ORDER)
    assert s.schema_type == PROTOBUF
    assert s.canonical() == (
        'syntax = "proto3";\npackage shop.v1;\n\nimport "google/protobuf/timestamp.proto";\n\n'
        'option java_package = "com.shop";\noption java_multiple_files = true;\n\n'
        "message Order {\n  string id = 1;\n  google.protobuf.Timestamp at = 2;\n"
        "  map<string, Line> lines = 3;\n\n  message Line {\n    int32 qty = 1;\n  }\n}\n")


def test_canonical_ignores_whitespace_and_comments() -> None:
    a = parse(P3 + "message M { int32 a = 1; string b = 2; }")
    b = parse(P3 + "// a comment\nmessage   M {\n\n  int32 a=1; /* x */\n string b =2;\n}\n")
    assert a.canonical() == b.canonical()


def test_canonical_keeps_order_normalized_sorts() -> None:
    one = P3 + ('import "b.proto";\nimport "a.proto";\noption java_package = "x";\n'
                'option go_package = "y";\nmessage M { B b = 2; A a = 1; }')
    two = P3 + ('import "a.proto";\nimport "b.proto";\noption go_package = "y";\n'
                'option java_package = "x";\nmessage M { A a = 1; B b = 2; }')
    refs = {"a.proto": P3 + "message A {}", "b.proto": P3 + "message B {}"}
    s1, s2 = parse(one, refs), parse(two, refs)
    assert s1.canonical() != s2.canonical()
    assert s1.normalized() == s2.normalized()
    norm = s1.normalized()
    assert norm.index('import "a.proto"') < norm.index('import "b.proto"')
    assert norm.index("go_package") < norm.index("java_package")
    assert "  .A a = 1;\n  .B b = 2;\n" in norm


def test_normalized_resolves_names_and_sorts_enums_and_reserved() -> None:
    s = parse(P3 + """package p;
message M {
  reserved 9 to 11, 2;
  Kind k = 1;
  map<string, Inner> m = 3;
  message Inner {}
  enum Kind { A = 0; C = 2; B = 1; }
}""")
    norm = s.normalized()
    assert "  .p.M.Kind k = 1;\n" in norm
    assert "  map<string, .p.M.Inner> m = 3;\n" in norm
    assert norm.index("reserved 2;") < norm.index("reserved 9 to 11;")
    assert norm.index("B = 1;") < norm.index("C = 2;")
    assert s.canonical().index("C = 2;") < s.canonical().index("B = 1;")


def test_normalized_drops_proto2_syntax_line() -> None:
    s = parse(P2 + "message M { optional int32 a = 1; }")
    assert s.canonical().startswith('syntax = "proto2";')
    assert "syntax" not in s.normalized()
    assert "optional int32 a = 1;" in s.normalized()


def test_oneofs_and_options_print() -> None:
    s = parse(P3 + 'message M { oneof pick { string a = 1; int64 b = 2 [deprecated = true]; } '
              'repeated int32 xs = 3 [packed = false]; }')
    c = s.canonical()
    assert "  repeated int32 xs = 3 [packed = false];\n" in c
    assert "  oneof pick {\n    string a = 1;\n    int64 b = 2 [deprecated = true];\n  }\n" in c


def test_serialized_round_trip() -> None:
    s = parse(ORDER)
    raw = base64.b64decode(s.serialized())
    fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
    assert fdp.package == "shop.v1"
    assert list(fdp.dependency) == ["google/protobuf/timestamp.proto"]
    order = fdp.message_type[0]
    assert [f.name for f in order.field] == ["id", "at", "lines"]
    assert order.field[1].type_name == ".google.protobuf.Timestamp"
    assert order.field[2].type_name == ".shop.v1.Order.LinesEntry"
    assert any(n.options.map_entry for n in order.nested_type)
    # the serialized form is accepted as schema text and means the same schema
    again = parse(s.serialized())
    assert again.normalized() == s.normalized()
    assert differences(s, again) == []


def test_serialized_descriptor_builds_messages_like_a_client_would() -> None:
    s = parse(ORDER)
    pool = descriptor_pool.DescriptorPool()
    from google.protobuf import timestamp_pb2
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(timestamp_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(s.serialized())))
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.v1.Order"))
    msg = cls(id="o-1")
    msg.lines["x"].qty = 3
    back = cls.FromString(msg.SerializeToString())
    assert back.id == "o-1" and back.lines["x"].qty == 3


def test_protoc_style_descriptor_with_map_entry_is_accepted() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="proto3", package="q")
    m = fdp.message_type.add(name="M")
    entry = m.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=9, label=1)
    entry.field.add(name="value", number=2, type=5, label=1)
    m.field.add(name="tags", number=1, type=11, label=3, type_name=".q.M.TagsEntry",
                json_name="tags")
    s = parse(base64.b64encode(fdp.SerializeToString()).decode())
    assert "  map<string, int32> tags = 1;\n" in s.canonical()
    assert "TagsEntry" not in s.canonical()
    text = parse(P3 + "package q; message M { map<string, int32> tags = 1; }")
    assert text.normalized() == s.normalized()


def test_proto2_features_parse() -> None:
    s = parse(P2 + """package a;
message M {
  required string id = 1;
  optional int32 n = 2 [default = 7];
  repeated string tags = 3;
  extensions 100 to max;
}
extend M { optional string note = 100; }""")
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(s.serialized()))
    assert fdp.message_type[0].field[1].default_value == "7"
    assert fdp.extension[0].extendee == ".a.M"
    assert "extensions 100 to max;" in s.canonical()


def test_message_indexes_and_name() -> None:
    s = parse(P3 + """package p;
message A { message X {} message Y { message Z {} } }
enum E { E0 = 0; }
message B {}""")
    assert s.name == "p.A"
    assert s.message_indexes("p.A") == [0]
    assert s.message_indexes("p.B") == [1]
    assert s.message_indexes("p.A.Y.Z") == [0, 1, 0]
    assert s.message_indexes(".p.A.X") == [0, 0]
    assert s.message_name([0, 1, 0]) == "p.A.Y.Z"
    with pytest.raises(KeyError):
        s.message_indexes("p.E")
    with pytest.raises(KeyError):
        s.message_name([5])


# --- references --------------------------------------------------------------------------

def test_imports_resolve_through_references() -> None:
    refs = {"common/money.proto": P3 + "package common; message Money { int64 units = 1; }"}
    s = parse(P3 + 'import "common/money.proto";\nmessage Pay { common.Money amount = 1; }', refs)
    assert s.imports == ["common/money.proto"]
    assert "common/money.proto" in s.dependencies
    assert s.resolve("common.Money", "Pay") is not None
    assert "  .common.Money amount = 1;\n" in s.normalized()


def test_transitive_references_and_public_imports() -> None:
    refs = {
        "a.proto": P3 + "package a; message A {}",
        "b.proto": P3 + 'package b; import public "a.proto"; message B { a.A x = 1; }',
    }
    s = parse(P3 + 'import "b.proto"; message C { b.B b = 1; a.A a = 2; }', refs)
    assert set(s.dependencies) == {"a.proto", "b.proto"}


def test_well_known_types_need_no_reference() -> None:
    s = parse(P3 + 'import "google/protobuf/any.proto";\nimport "google/protobuf/api.proto";\n'
              "message M { google.protobuf.Any a = 1; google.protobuf.Api b = 2; }")
    assert "google/protobuf/api.proto" in s.dependencies


def test_a_reference_may_be_serialized() -> None:
    dep = parse(P3 + "package d; message D {}")
    s = parse(P3 + 'import "d.proto"; message M { d.D x = 1; }', {"d.proto": dep.serialized()})
    assert s.resolve("d.D", "M") is not None


def test_missing_reference_is_named() -> None:
    with pytest.raises(InvalidSchema, match=r"missing reference 'nope\.proto'"):
        parse(P3 + 'import "nope.proto"; message M {}')


def test_cyclic_references_are_named() -> None:
    refs = {"a.proto": P3 + 'import "b.proto"; message A {}',
            "b.proto": P3 + 'import "a.proto"; message B {}'}
    with pytest.raises(InvalidSchema, match=r"cyclic reference: a.proto -> b.proto -> a.proto"):
        parse(P3 + 'import "a.proto"; message M {}', refs)


def test_self_import_is_a_cycle() -> None:
    with pytest.raises(InvalidSchema, match="cyclic"):
        parse(P3 + 'import "x.proto"; message M {}', {"x.proto": P3 + 'import "x.proto";'})


def test_import_chain_deeper_than_the_bound_is_refused() -> None:
    n = MAX_DEPTH + 5
    refs = {f"f{i}.proto": P3 + (f'import "f{i + 1}.proto";' if i < n else "")
            for i in range(n + 1)}
    with pytest.raises(InvalidSchema, match="deeper than"):
        parse(P3 + 'import "f0.proto";', refs)


# --- invalid schemas -----------------------------------------------------------------------

@pytest.mark.parametrize(("text", "match"), [
    (P3 + "message M { int32 a = 1 }", "syntax error at line 2"),
    (P3 + "message M { Nope a = 1; }", "unknown type 'Nope'"),
    (P3 + "message M { int32 a = 1; int32 b = 1; }", "duplicate field number"),
    (P3 + "message M {} message M {}", "M"),
    ('syntax = "proto4"; message M {}', "proto4"),
    (P2 + "message M { optional group G = 1 { optional int32 a = 1; } }", "groups"),
    (P3 + "message M { map<M, int32> m = 1; }", "M"),
    (P3 + "message M { int32 a = 0; }", "0"),
    (P3 + "message M { int32 a = 536870912; }", "536870912"),
    (P3 + 'option no_such_option = "x"; message M {}', "unknown option 'no_such_option'"),
    (P3 + "option optimize_for = FASTEST; message M {}", "optimize_for"),
    (P3 + "message M { reserved 10 to 2; }", "ends before it starts"),
    (P3 + 'package a; package b;', "more than one package"),
    ('edition = "2023"; message M {}', "editions are not supported"),
    ("message M { int32 a = 1; } }", "syntax error"),
    ("%%%", "syntax error"),
])
def test_invalid_schemas_are_refused_with_a_reason(text: str, match: str) -> None:
    with pytest.raises(InvalidSchema, match=match):
        parse(text)


@pytest.mark.parametrize("text", ["3q2+7w==", "QUJD", "AAAA"])
def test_garbage_base64_is_refused(text: str) -> None:
    with pytest.raises(InvalidSchema, match="syntax error"):
        parse(text)


def test_descriptor_with_unknown_fields_is_refused() -> None:
    from eddy.formats.protobuf.schema import decode_serialized
    raw = descriptor_pb2.FileDescriptorProto(name="x").SerializeToString() + b"\xf8\x07\x01"
    with pytest.raises(InvalidSchema, match="unknown fields"):
        decode_serialized(base64.b64encode(raw).decode())


def test_too_long_is_refused_before_parsing() -> None:
    text = P3 + "//" + "x" * MAX_SCHEMA_CHARS
    with pytest.raises(InvalidSchema, match="more than"):
        parse(text)


def test_too_long_reference_is_refused() -> None:
    with pytest.raises(InvalidSchema, match=r"reference 'big\.proto'.*more than"):
        parse(P3 + 'import "big.proto";', {"big.proto": " " * (MAX_SCHEMA_CHARS + 1)})


@pytest.mark.parametrize("opener", ["message M{", "{", "(", "[", "<", "{b:"])
def test_deep_nesting_is_refused_without_recursion(opener: str) -> None:
    text = P3 + opener * 100_000
    assert len(text) <= MAX_SCHEMA_CHARS
    with pytest.raises(InvalidSchema, match="nesting deeper than"):
        parse(text)


def test_nesting_at_the_bound_parses() -> None:
    depth = MAX_DEPTH - 1
    text = P3 + "message M { " * depth + "int32 a = 1;" + " }" * depth
    s = parse(text)
    assert s.message_indexes(".".join(["M"] * depth)) == [0] * depth


def test_brackets_inside_strings_and_comments_do_not_count() -> None:
    text = P3 + '// ' + "{" * 1000 + '\noption java_package = "' + "(" * 1000 + '";\nmessage M {}'
    assert parse(text).canonical().count("(") == 1000


def test_deeply_nested_descriptor_is_refused() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="d", syntax="proto3")
    m = fdp.message_type.add(name="M")
    for _ in range(MAX_DEPTH + 5):
        m = m.nested_type.add(name="M")
    with pytest.raises(InvalidSchema, match="nested deeper than"):
        parse(base64.b64encode(fdp.SerializeToString()).decode())


def test_invalid_descriptor_is_refused_by_the_pool() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="d", syntax="proto3")
    m = fdp.message_type.add(name="M")
    m.field.add(name="a", number=1, type=11, label=1, type_name=".Missing")
    with pytest.raises(InvalidSchema, match="Missing"):
        parse(base64.b64encode(fdp.SerializeToString()).decode())


_TOKENS = ["syntax", "=", '"proto3"', '"proto2"', ";", "message", "M", "N", "{", "}", "int32",
           "string", "map", "<", ">", ",", "1", "2", "0x10", "oneof", "o", "enum", "E", "A",
           "reserved", "to", "max", "option", "(", ")", "[", "]", "import", '"a.proto"',
           "repeated", "optional", "required", ".", "package", "p", "service", "rpc", "returns",
           "stream", "extend", "extensions", "group", "//", "/*", "*/", '"', "\\", "-", "inf"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300),
                 st.lists(st.sampled_from(_TOKENS), max_size=60).map(" ".join)))
def test_parse_only_returns_or_raises_invalid_schema(text: str) -> None:
    try:
        s = parse(text, {"a.proto": P3 + "message A {}"})
    except InvalidSchema:
        return
    assert isinstance(s, ProtobufSchema)
    s.canonical()
    s.normalized()
    parse(s.serialized(), {"a.proto": P3 + "message A {}"})


# --- compatibility -------------------------------------------------------------------------

def test_package_change_is_reported_but_compatible() -> None:
    w = P3 + "package foo; message T { string s = 1; .foo.T.S st = 2; message S { string s = 1; } }"
    r = P3 + "package bar; message T { string s = 1; .bar.T.S st = 2; message S { string s = 1; } }"
    assert diffs(w, r) == {"PACKAGE_CHANGED #/"}
    assert problems(w, r) == set()


@pytest.mark.parametrize(("writer", "reader"), [
    # the same type written with and without qualification
    (P3 + "message T { S s = 1; message S {} }", P3 + "message T { .T.S s = 1; message S {} }"),
    (P3 + "package foo; message T { S s = 1; message S {} }",
     P3 + "package foo; message T { .foo.T.S s = 1; message S {} }"),
    (P3 + "message T { map<string, S> m = 1; message S {} }",
     P3 + "message T { map<string, T.S> m = 1; message S {} }"),
    # wire-compatible scalar groups
    (P3 + "message T { int32 a = 1; }", P3 + "message T { int64 a = 1; }"),
    (P3 + "message T { uint32 a = 1; }", P3 + "message T { bool a = 1; }"),
    (P3 + "message T { sint32 a = 1; }", P3 + "message T { sint64 a = 1; }"),
    (P3 + "message T { fixed32 a = 1; }", P3 + "message T { sfixed32 a = 1; }"),
    (P3 + "message T { fixed64 a = 1; }", P3 + "message T { sfixed64 a = 1; }"),
    (P3 + "message T { string a = 1; }", P3 + "message T { bytes a = 1; }"),
    # a message field may become repeated
    (P3 + "message T { optional S s = 1; message S {} }",
     P3 + "message T { repeated S s = 1; message S {} }"),
])
def test_changes_with_no_difference(writer: str, reader: str) -> None:
    assert diffs(writer, reader) == set()


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (P3 + "message T { string a = 1; }", P3 + "message T { string a = 1; string b = 2; }",
     {"FIELD_ADDED #/T/2"}),
    (P3 + "message W { message T { string a = 1; } }",
     P3 + "message W { message T { string a = 1; string b = 2; } }",
     {"FIELD_ADDED #/W/T/2"}),
    (P3 + "message T { string a = 1; string b = 2; }", P3 + "message T { string a = 1; }",
     {"FIELD_REMOVED #/T/2"}),
    (P3 + "message T { string a = 1; }", P3 + "message T { string a = 2; }",
     {"FIELD_REMOVED #/T/1", "FIELD_ADDED #/T/2"}),
    (P3 + "message T { int32 a = 1; }", P3 + "message T { int32 b = 1; }",
     {"FIELD_NAME_CHANGED #/T/1"}),
    (P3 + "message T { int32 a = 1; }", P3 + "message T { S a = 1; } enum S { X = 0; }",
     {"ENUM_ADDED #/S"}),
    (P3 + "message T { S a = 1; } enum S { X = 0; }", P3 + "message T { int32 a = 1; }",
     {"ENUM_REMOVED #/S"}),
    (P3 + "message T { S a = 1; } enum S { X = 0; Y = 1; }",
     P3 + "message T { S a = 1; } enum S { X = 0; Z = 1; }",
     {"ENUM_CONST_CHANGED #/S/1"}),
    (P3 + "enum S { X = 0; Y = 1; }", P3 + "enum S { X = 0; }", {"ENUM_CONST_REMOVED #/S/1"}),
    (P3 + "enum S { X = 0; }", P3 + "enum S { X = 0; Y = 1; }", {"ENUM_CONST_ADDED #/S/1"}),
    (P3 + "message T { string a = 1; string b = 2; }",
     P3 + "message T { string a = 1; oneof o { string b = 2; int32 c = 3; } }",
     {"ONEOF_ADDED #/T/o", "ONEOF_FIELD_ADDED #/T/o/3"}),
    (P3 + "message T { string a = 1; string b = 2; }",
     P3 + "message T { string a = 1; oneof o { string b = 2; } }",
     {"ONEOF_ADDED #/T/o"}),
    (P3 + "message T { oneof o { string a = 1; string b = 2; } }",
     P3 + "message T { oneof o { string a = 1; string b = 2; int32 c = 3; } }",
     {"ONEOF_FIELD_ADDED #/T/o/3"}),
    (P3 + "message T { oneof o { string a = 1; string b = 2; } int32 c = 3; }",
     P3 + "message T { int32 c = 3; }",
     {"ONEOF_REMOVED #/T/o"}),
    (P3 + "message T { oneof o { string a = 1; string b = 2; } }",
     P3 + "message T { string a = 1; oneof o { string b = 2; } }",
     {"ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/T/1"}),
    (P3 + "message T { optional string s = 1; }", P3 + "message T { repeated string s = 1; }",
     {"FIELD_STRING_OR_BYTES_LABEL_CHANGED #/T/1"}),
    (P3 + "message T { optional bytes s = 1; }", P3 + "message T { repeated bytes s = 1; }",
     {"FIELD_STRING_OR_BYTES_LABEL_CHANGED #/T/1"}),
    (P3 + "message T { string a = 1; }", P3 + "message T { string a = 1; } message U {}",
     {"MESSAGE_ADDED #/U"}),
    (P3 + "message T { string a = 1; }", P3 + "message U {} message T { string a = 1; }",
     {"MESSAGE_ADDED #/U", "MESSAGE_MOVED #/T"}),
    (P3 + "message T {} message U {}", P3 + "message U {} message T {}",
     {"MESSAGE_MOVED #/T", "MESSAGE_MOVED #/U"}),
])
def test_compatible_changes(writer: str, reader: str, expected: set[str]) -> None:
    assert diffs(writer, reader) == expected
    assert problems(writer, reader) == set()


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (P2 + "message T { optional string a = 1; }",
     P2 + "message T { optional string a = 1; required string b = 2; }",
     {"REQUIRED_FIELD_ADDED #/T/2"}),
    (P2 + "message T { optional string a = 1; required string b = 2; }",
     P2 + "message T { optional string a = 1; }",
     {"REQUIRED_FIELD_REMOVED #/T/2"}),
    (P3 + "message T { int32 a = 1; }",
     P3 + "message T { .T.S a = 1; message S { string s = 1; } } enum S { X = 0; }",
     {"FIELD_KIND_CHANGED #/T/1"}),
    (P3 + "message T { .T.S a = 1; message S {} } enum S { X = 0; }",
     P3 + "message T { int32 a = 1; }",
     {"FIELD_KIND_CHANGED #/T/1", "MESSAGE_REMOVED #/T/S"}),
    (P3 + "message T { int32 a = 1; }", P3 + "message T { U a = 1; } message U {}",
     {"FIELD_KIND_CHANGED #/T/1"}),
    (P3 + "message T { map<string, int32> a = 1; }", P3 + "message T { U a = 1; } message U {}",
     {"FIELD_KIND_CHANGED #/T/1"}),
    (P3 + "message T { int32 a = 1; }", P3 + "message T { string b = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { sint32 a = 1; }", P3 + "message T { int32 a = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { fixed32 a = 1; }", P3 + "message T { fixed64 a = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { float a = 1; }", P3 + "message T { double a = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { E a = 1; } enum E { X = 0; }", P3 + "message T { string a = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { map<string, int32> a = 1; }",
     P3 + "message T { map<string, string> b = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { map<int32, int32> a = 1; }", P3 + "message T { map<string, int32> a = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED #/T/1"}),
    (P3 + "message T { U a = 1; } message U { string s = 1; }",
     P3 + "message T { V a = 1; } message V { string s = 1; }",
     {"FIELD_NAMED_TYPE_CHANGED #/T/1", "MESSAGE_REMOVED #/U"}),
    (P3 + 'import "google/protobuf/timestamp.proto";\n'
     "message T { google.protobuf.Timestamp a = 1; }",
     P3 + 'import "google/protobuf/duration.proto";\n'
     "message T { google.protobuf.Duration a = 1; }",
     {"FIELD_NAMED_TYPE_CHANGED #/T/1"}),
    (P3 + "message T { optional int32 a = 1; }", P3 + "message T { repeated int32 a = 1; }",
     {"FIELD_NUMERIC_LABEL_CHANGED #/T/1"}),
    (P3 + "message T { oneof o { string a = 1; string b = 2; int32 c = 3; } }",
     P3 + "message T { oneof o { string a = 1; string b = 2; } }",
     {"ONEOF_FIELD_REMOVED #/T/o/3"}),
    (P3 + "message T { string a = 1; string b = 2; }",
     P3 + "message T { oneof o { string a = 1; string b = 2; int32 c = 3; } }",
     {"MULTIPLE_FIELDS_MOVED_TO_ONEOF #/T/o"}),
    (P3 + "message T { string a = 1; oneof o { string b = 2; string c = 3; } }",
     P3 + "message T { oneof o { string a = 1; string b = 2; string c = 3; } }",
     {"FIELD_MOVED_TO_EXISTING_ONEOF #/T/o"}),
    (P3 + "message T { string a = 1; oneof o { string b = 2; string c = 3; } }",
     P3 + "message T { oneof o2 { string a = 1; string b = 2; string c = 3; } }",
     {"FIELD_MOVED_TO_EXISTING_ONEOF #/T/o2"}),
    (P3 + "message T {} message U {}", P3 + "message T {}", {"MESSAGE_REMOVED #/U"}),
])
def test_incompatible_changes(writer: str, reader: str, expected: set[str]) -> None:
    assert problems(writer, reader) == expected


def test_oneof_cases_report_compatible_companions() -> None:
    w = P3 + "message T { string a = 1; oneof o { string b = 2; string c = 3; } }"
    r = P3 + "message T { oneof o2 { string a = 1; string b = 2; string c = 3; } }"
    assert diffs(w, r) == {"FIELD_MOVED_TO_EXISTING_ONEOF #/T/o2", "ONEOF_ADDED #/T/o2",
                           "ONEOF_REMOVED #/T/o"}


def test_direction_matters_for_required_fields() -> None:
    old = parse(P2 + "message T { optional string a = 1; }")
    new = parse(P2 + "message T { optional string a = 1; required string b = 2; }")
    backward = compatibility(reader=new, writer=old)
    forward = compatibility(reader=old, writer=new)
    assert [d.error_type for d in backward] == ["REQUIRED_FIELD_ADDED"]
    assert [d.error_type for d in forward] == ["REQUIRED_FIELD_REMOVED"]
    assert "#/T/2" in backward[0].message()


def _home(pkg: str = "", kind: str = "int32", nested: bool = False) -> str:
    body = f"message GoogleHome {{ {kind} deviceID = 1; bool enabled = 2; }}"
    if nested:
        body = f"message outer {{ {body} }}"
    return P3 + f"package io.demo{pkg};\n" + body


def test_incompatible_change_inside_an_imported_type() -> None:
    w = P3 + 'import "g.proto"; message T { .io.demo.GoogleHome h = 1; }'
    r = P3 + 'import "g2.proto"; message T { .io.demo.GoogleHome h = 1; }'
    assert problems(w, r, {"g.proto": _home()}, {"g2.proto": _home(kind="string")}) == {
        "FIELD_SCALAR_KIND_CHANGED #/GoogleHome/1", "FIELD_NAMED_TYPE_CHANGED #/T/1"}


def test_imported_type_in_another_package_with_same_local_name_is_compatible() -> None:
    w = P3 + 'import "g.proto"; message T { .io.demo.outer.GoogleHome h = 1; }'
    r = P3 + 'import "g2.proto"; message T { .io.demo2.outer.GoogleHome h = 1; }'
    assert diffs(w, r, {"g.proto": _home(nested=True)},
                 {"g2.proto": _home("2", nested=True)}) == set()
    assert problems(w, r, {"g.proto": _home(nested=True)},
                    {"g2.proto": _home("2", "string", nested=True)}) == {
        "FIELD_SCALAR_KIND_CHANGED #/outer/GoogleHome/1", "FIELD_NAMED_TYPE_CHANGED #/T/1"}


def test_moving_a_message_into_an_import_removes_it() -> None:
    w = P3 + ("message T { GoogleHome h = 1; } "
              "message GoogleHome { int32 deviceID = 1; bool enabled = 2; }")
    r = P3 + 'import "g.proto"; message T { .io.demo.GoogleHome h = 1; }'
    assert problems(w, r, {}, {"g.proto": _home()}) == {"MESSAGE_REMOVED #/GoogleHome"}
    assert problems(r, w, {"g.proto": _home()}, {}) == set()
    assert diffs(r, w, {"g.proto": _home()}, {}) == {"MESSAGE_ADDED #/GoogleHome"}


def test_recursive_imported_types_terminate() -> None:
    dep = P3 + "package r; message Node { Node next = 1; int32 v = 2; }"
    dep2 = P3 + "package r; message Node { Node next = 1; string v = 2; }"
    w = P3 + 'import "r.proto"; message T { r.Node n = 1; }'
    r = P3 + 'import "r2.proto"; message T { r.Node n = 1; }'
    found = problems(w, r, {"r.proto": dep}, {"r2.proto": dep2})
    assert "FIELD_SCALAR_KIND_CHANGED #/Node/2" in found
    assert "FIELD_NAMED_TYPE_CHANGED #/T/1" in found


def test_text_and_serialized_forms_are_compatible_with_each_other() -> None:
    s = parse(ORDER)
    assert compatibility(parse(s.serialized()), s) == []
    assert compatibility(s, parse(s.serialized())) == []


def test_incompatibility_message_is_confluents_verbose_line() -> None:
    [d] = compatibility(parse(P3 + "message T {}"), parse(P3 + "message T {} message U {}"))
    assert d.error_type == "MESSAGE_REMOVED"
    assert d.description == ("The reader schema is missing a MESSAGE type at path '#/U' in "
                             "the writer schema")
    # Protobuf's Difference.toString: double quotes, the reader and writer labelled as the
    # level has them (BACKWARD: the new schema reads, FORWARD: the old one)
    assert isinstance(d, ProtobufIncompatibility)
    assert d.confluent_message("new", "old") == (
        '{errorType:"MESSAGE_REMOVED", description:"The new schema is missing a MESSAGE type '
        "at path '#/U' in the old schema\"}")


@pytest.mark.parametrize("path", sorted(WELL_KNOWN))
def test_protoc_descriptors_round_trip_through_text(path: str) -> None:
    module = importlib.import_module(WELL_KNOWN[path])
    from_protoc = parse(base64.b64encode(module.DESCRIPTOR.serialized_pb).decode())
    reprinted = parse(from_protoc.canonical())
    assert reprinted.normalized() == from_protoc.normalized()
    assert differences(from_protoc, reprinted) == []


def test_custom_options_stay_in_the_text_forms() -> None:
    s = parse(P3 + 'package p;\nimport "google/protobuf/descriptor.proto";\n'
              "extend google.protobuf.FieldOptions { string pii = 50001; }\n"
              'message M { string email = 1 [(p.pii) = "high", deprecated = true]; }')
    assert '(p.pii) = "high"' in s.canonical()
    assert s.normalized().index("deprecated = true") < s.normalized().index("(p.pii)")
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(s.serialized()))
    assert fdp.message_type[0].field[0].options.deprecated
    assert fdp.extension[0].extendee == ".google.protobuf.FieldOptions"


IGNORED_META = P3 + """package confluent;
import "google/protobuf/descriptor.proto";
message Meta { string doc = 1; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
"""
WITH_EXTENSIONS = P2 + """package acme;
import "google/protobuf/descriptor.proto";
import "confluent/meta.proto";
option java_package = "com.acme";
option (file_tag) = "x";
extend google.protobuf.FileOptions { optional string file_tag = 50001; }
extend google.protobuf.FieldOptions { optional int32 sensitivity = 50002; }
extend google.protobuf.MessageOptions { optional bool audited = 50003; }
extend google.protobuf.OneofOptions { optional bool picked = 50004; }
message Order {
  option (audited) = true;
  optional string id = 1 [(sensitivity) = 3, deprecated = true];
  optional int32 qty = 2 [(confluent.field_meta).doc = "how many", default = 1];
  oneof pick { option (picked) = true; string a = 3; string b = 4; }
  extensions 100 to 199;
  extend Order { optional string note = 100; }
}
enum Kind { option allow_alias = true; A = 0; B = 0; }
"""


def test_format_ignore_extensions_drops_extensions_and_custom_options() -> None:
    from eddy.registry.schema_ops import formatted
    s = parse(WITH_EXTENSIONS, {"confluent/meta.proto": IGNORED_META})
    text = formatted(s, " Ignore_Extensions", "stored")
    # Confluent's FormatContext(ignoreExtensions): no extend blocks, no extension ranges, no
    # custom options except its own confluent.* ones; imports and standard options stay
    assert text == P2 + """package acme;

import "google/protobuf/descriptor.proto";
import "confluent/meta.proto";

option java_package = "com.acme";

message Order {
  optional string id = 1 [deprecated = true];
  optional int32 qty = 2 [
    (confluent.field_meta).doc = "how many",
    default = 1
  ];

  oneof pick {
    string a = 3;
    string b = 4;
  }
}
enum Kind {
  option allow_alias = true;
  A = 0;
  B = 0;
}
"""
    assert "extend " in s.canonical() and "(audited)" in s.canonical()
    # what is left is still a schema, the same messages
    again = parse(text, {"confluent/meta.proto": IGNORED_META})
    assert [m.name for m in again.model.messages] == ["Order"]
    # not a Protobuf format for the other types: as stored (Confluent ignores unknown formats)
    plain = parse(P3 + "message M { string a = 1; }")
    assert formatted(plain, "ignore_extensions", "stored") == plain.canonical()
    from eddy.formats.avro.schema import parse as parse_avro
    assert formatted(parse_avro('"string"'), "ignore_extensions", "stored") == "stored"


def test_format_ignore_extensions_through_the_service() -> None:
    import asyncio

    from eddy.registry.memory_log import MemoryLog
    from eddy.registry.requests import SchemaRequest
    from eddy.registry.service.core import RegistryService
    from eddy.registry.state import SchemaState

    state = SchemaState()
    service = RegistryService(MemoryLog(state.apply), state)

    async def scenario() -> tuple[dict[str, object], str, dict[str, object]]:
        await service.register("meta", SchemaRequest.from_body(
            {"schema": IGNORED_META, "schemaType": "PROTOBUF"}))
        body = {"schema": WITH_EXTENSIONS, "schemaType": "PROTOBUF", "references": [
            {"name": "confluent/meta.proto", "subject": "meta", "version": 1}]}
        answer = await service.register("orders", SchemaRequest.from_body(body))
        schema_id = int(answer["id"])
        return (await service.schema_by_id(schema_id, fmt="ignore_extensions"),
                await service.schema_text_by_id(schema_id, fmt="ignore_extensions"),
                await service.get_version("orders", "latest", fmt="ignore_extensions"))

    by_id, text, version = asyncio.run(scenario())
    assert by_id["schema"] == text == version["schema"]
    assert "extend" not in text and "(sensitivity)" not in text and "extensions" not in text
    assert by_id["schemaType"] == "PROTOBUF" and by_id["references"] == [
        {"name": "confluent/meta.proto", "subject": "meta", "version": 1}]
