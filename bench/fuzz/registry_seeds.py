"""Seeds of the registry decoder fuzzer (``bench.fuzz.registry_decoders``): Confluent's
``_schemas`` records of every kind, register and config bodies, header and path values, and
Avro, JSON Schema and Protobuf texts with their references (after the cases of
tests/unit/test_registry_*.py). Inputs split at NUL: a record's key and value, or a schema
text and its references as ``name\\x01text``."""

from __future__ import annotations

import json
from typing import Any

from eddy.formats.protobuf import schema as protobuf_schema
from eddy.registry import forward_wire
from eddy.telemetry.pipeline_status import PipelineStatus


def _j(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


_ADDRESS = _j({"type": "record", "name": "Address", "namespace": "com.acme", "fields": [
    {"name": "street", "type": "string"},
    {"name": "zip", "type": {"type": "fixed", "name": "Zip", "size": 5}}]})
_USER = _j({"type": "record", "name": "User", "namespace": "com.example", "doc": "a user",
            "aliases": ["Person"], "fields": [
    {"name": "id", "type": "long", "order": "descending"},
    {"name": "name", "type": "string", "default": "", "aliases": ["n"]},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"],
                               "default": "RED"}, "default": "GREEN"},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}, "default": {}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4,
                                "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ratio", "type": "double", "default": 0.5},
    {"name": "home", "type": "com.acme.Address"}], "x-tag": {"b": 1}})
_CUSTOMER = _j({"$id": "https://example.com/customer.json", "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 40,
                                        "pattern": "^[a-z]+$"},
                               "age": {"type": "integer", "minimum": 0, "maximum": 150},
                               "tags": {"type": "array", "items": {"type": "string"},
                                        "uniqueItems": True},
                               "kind": {"enum": ["a", "b"]},
                               "addr": {"$ref": "#/definitions/addr"}},
                "required": ["name"], "additionalProperties": False,
                "definitions": {"addr": {"type": "object",
                                         "properties": {"zip": {"type": "string"}}}}})
_ORDER_JSON = _j({"type": "object", "properties": {
    "customer": {"$ref": "customer.json"}, "total": {"type": "number", "multipleOf": 0.01},
    "lines": {"type": "array", "items": {"oneOf": [{"type": "null"}, {"type": "object"}]},
              "minItems": 1}}, "patternProperties": {"^x-": {}},
    "dependencies": {"total": ["lines"]}})
_DRAFT_2020 = _j({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
                  "prefixItems": [{"type": "number"}, {"anyOf": [{"const": 3}, {"not": {}}]}],
                  "items": False, "$defs": {"p": {"if": {"type": "string"},
                                                  "then": {"minLength": 1}}}})
P3 = 'syntax = "proto3";\n'
_PROTO_ORDER = P3 + """package shop.v1;
import "google/protobuf/timestamp.proto";
option java_package = "com.shop";
message Order {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  map<string, Line> lines = 3;
  oneof pay { string card = 4; int64 cash = 5 [deprecated = true]; }
  repeated Status history = 6;
  reserved 9, 10 to 12;
  message Line { int32 qty = 1; }
  enum Status { NEW = 0; PAID = 1; }
}
"""
_PROTO_P2 = ('syntax = "proto2";\npackage p;\nmessage M {\n  required int32 a = 1;\n'
             '  optional string b = 2 [default = "x"];\n  extensions 100 to 199;\n}\n'
             "enum E { A = 0; B = 1; }\n")
_PROTO_IMPORT = P3 + 'import "common/money.proto";\nmessage Pay { common.Money amount = 1; }'
_MONEY = P3 + "package common; message Money { int64 units = 1; }"

#: per format: (text, references); the first three are the compatibility seeds
SCHEMAS: dict[str, list[tuple[str, dict[str, str]]]] = {
    "AVRO": [(_USER, {"com.acme.Address": _ADDRESS}), (_ADDRESS, {}), ('"string"', {}),
             ('/* c */ {"type": "int", "logicalType": "date"} // x', {}),
             ('["null", "com.acme.Address"]', {"com.acme.Address": _ADDRESS})],
    "JSON": [(_CUSTOMER, {}), (_ORDER_JSON, {"customer.json": _CUSTOMER}), (_DRAFT_2020, {}),
             ('{"type":"string"}', {})],
    "PROTOBUF": [(_PROTO_ORDER, {}), (_PROTO_P2, {}), (_PROTO_IMPORT, {"common/money.proto":
                                                                      _MONEY}),
                 (P3 + "message M { int32 a = 1; string b = 2; }", {})],
}


def _key(keytype: str, subject: str | None = "s", **more: Any) -> bytes:
    return _j({"keytype": keytype, "subject": subject, **more}).encode()


def _value(**fields: Any) -> bytes:
    return _j(fields).encode()


def _schema_record(subject: str, version: int, sid: int, text: str, schema_type: str = "AVRO",
                   **more: Any) -> tuple[bytes, bytes]:
    extra = {"schemaType": schema_type} if schema_type != "AVRO" else {}
    return (_key("SCHEMA", subject, version=version, magic=1),
            _value(subject=subject, version=version, id=sid, **extra, **more, schema=text,
                   deleted=False))


#: what the state holds before an input's records: Confluent's records of every kind
BASE_RECORDS: list[tuple[bytes, bytes | None]] = [
    _schema_record("addr", 1, 1, _ADDRESS),
    _schema_record("user", 1, 2, _USER, references=[
        {"name": "com.acme.Address", "subject": "addr", "version": 1}],
        metadata={"properties": {"owner": "x"}}, ruleSet={"domainRules": []}),
    _schema_record("customer", 1, 3, _CUSTOMER, "JSON"),
    _schema_record("order", 1, 4, _ORDER_JSON, "JSON", references=[
        {"name": "customer.json", "subject": "customer", "version": 1}]),
    _schema_record("order", 2, 5, _PROTO_ORDER, "PROTOBUF"),
    _schema_record("other", 1, 3, _CUSTOMER, "JSON"),
    (_key("CONFIG", None, magic=0), _value(compatibilityLevel="FULL")),
    (_key("CONFIG", "user", magic=0), _value(subject="user", normalize=True,
                                             compatibilityLevel="NONE")),
    (_key("MODE", None, magic=0), _value(mode="READWRITE")),
    (_key("MODE", "order", magic=0), _value(subject="order", mode="IMPORT")),
    (_key("DELETE_SUBJECT", "other", magic=0), _value(subject="other", version=1)),
    (b'{"keytype":"NOOP","magic":0}', None),
]
_RECORDS: list[tuple[bytes, bytes | None]] = [
    *BASE_RECORDS,
    (b'{"subject": "s", "version": 2, "magic": 0, "keytype": "SCHEMA"}',
     b'{"subject":"s","version":2,"id":7,"md5":"abc","schema":"\\"int\\"","future":[1]}'),
    (_key("CLEAR_SUBJECT", "other", magic=0), _value(subject="other")),
    (_key("CLEAR_SUBJECT", None, magic=0), b"{}"),
    (_key("SCHEMA", "addr", version=1, magic=1), None),
    (_key("CONFIG", "user", magic=0), None),
    (b'{"keytype":"CONTEXT","tenant":"default","context":".x","magic":0}', b"{}"),
]


def seed_inputs() -> list[bytes]:
    """Records (alone and in sequences), request bodies, header and path values, and
    schema texts of every format with their references."""
    out = [k + (b"\x00" + v if v is not None else b"") for k, v in _RECORDS]
    out.append(b"\x00".join(k + b"\x00" + (v or b"") for k, v in _RECORDS[6:]))
    out += [b"application/vnd.schemaregistry.v1+json; q=0.9, application/json;q=0.5, */*;q=0",
            b"latest", b"-1", b"2147483647", b'{"compatibility":"backward_transitive"}',
            b'{"mode":"READONLY"}']
    for schema_type, texts in SCHEMAS.items():
        for text, refs in texts:
            ref_list = [{"name": n, "subject": n.replace("/", "_"), "version": 1} for n in refs]
            out.append(_j({"schema": text, "schemaType": schema_type, "references": ref_list,
                           "metadata": {"properties": {"a": "b"}}, "ruleSet": None,
                           "id": 100, "version": 1}).encode())
            out.append("\x00".join([text, *(f"{n}\x01{t}" for n, t in refs.items())])
                       .encode("utf-8"))
    out.append(protobuf_schema.parse(_PROTO_P2).serialized().encode())
    # a forwarded write, its answers, a pipeline's status report
    out.append(forward_wire.encode_request(forward_wire.WriteRequest(
        1, "orders-value", None, True, False, False,
        _j({"schema": _USER, "schemaType": "AVRO"}).encode())))
    out.append(forward_wire.ok_answer({"id": 7}, 42))
    out.append(forward_wire.error_answer(409, 409, "Schema being registered is incompatible"))
    out.append(PipelineStatus("orders-lake", "running", 3, 500, 120.5, 7, 2, 10_000, "h", 42,
                              "").encode()[1])
    return out


# -- what the mutations insert -----------------------------------------------------------------
TOKENS = [
    b'"', b"{", b"}", b"[", b"]", b",", b":", b"\\", b"\\u0000", b"\\ud800", b"\\udfff",
    b"\\uDBFF\\uDFFF", b"\xed\xa0\x80", b"\xff", b"\x00", b"\x01", b"null", b"true", b"NaN",
    b"-Infinity", b"1e999", b"-1", b"0", b"2147483648", b"-9223372036854775809", b"9" * 40,
    b"0.5", b'""', b"{}", b"[]", b"[" * 70, b'{"a":' * 70, b"/*", b"//", b"\n",
    b'"type":"record"', b'"fields":[]', b'"name":"X"', b'"default":', b'"symbols":["A","A"]',
    b'"logicalType":"decimal","precision":', b'"namespace":"a..b"', b'"aliases":[""]',
    b'"$ref":"#/definitions/x"', b'"pattern":"(a+)+$"', b'"additionalProperties":false',
    b'"$schema":"https://json-schema.org/draft/2020-12/schema"', b'"$id":"http://x/y.json"',
    b'"format":"regex"', b'"allOf":[', b'"keytype":"SCHEMA"', b'"deleted":true',
    b"message M {", b"}", b" = 1;", b"repeated ", b"map<string, M> ", b"oneof o {",
    b"enum E { A = 0; }", b"option (x) = {", b'import "a.proto";', b"extend M {",
    b"reserved 1 to max;", b'syntax = "proto2";', b"536870911", b"19000", b"group G = 1 {",
    b'[default = "x"]', b".", b"google.protobuf.Any ",
]
NUMBERS = [b"0", b"-1", b"1", b"2147483647", b"2147483648", b"-2147483649", b"1e308",
           b"1e999", b"-0", b"9" * 4301, b"0.1", b"65536", b"536870912"]
JSON_KEYS = ["type", "name", "namespace", "fields", "items", "values", "symbols", "size",
             "default", "logicalType", "precision", "scale", "aliases", "order", "doc",
             "properties", "required", "additionalProperties", "$ref", "$id", "$schema",
             "definitions", "$defs", "allOf", "anyOf", "oneOf", "not", "enum", "const",
             "pattern", "patternProperties", "minimum", "maximum", "multipleOf", "minLength",
             "maxItems", "prefixItems", "dependentRequired", "if", "then", "else", "format",
             "schema", "schemaType", "references", "metadata", "ruleSet", "subject", "version",
             "id", "keytype", "magic", "deleted", "mode", "compatibilityLevel", "compatibility"]
JSON_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, -(2**31) - 1, 2**63, 10**30, 1.5, 1e308, -0.0,
    float("nan"), float("inf"), "",
    "a", "\ud800", "\x00", "null", "record", "string", "int", "long", "bytes", "fixed", "enum",
    "array", "map", "object", "integer", "number", "boolean", "error", "decimal", "uuid",
    "#/definitions/x", "#", "customer.json", "com.acme.Address", "PROTOBUF", "JSON", "AVRO",
    "SCHEMA", "CONFIG", [], {}, ["null", "string"], ["string", "string"], {"type": "string"},
    {"type": "record", "name": "R", "fields": []}, {"$ref": "#"}, [{}], {"a": {"b": {}}}]
