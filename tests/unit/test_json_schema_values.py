"""Confluent-framed JSON values decoded by a JSON Schema into Arrow columns
(eddy.connect.formats.json_schema_columns), without Spark or a network."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.connect.formats.confluent_wire import frame
from eddy.connect.formats.json_schema_columns import JsonSchemaDecoder, SchemaMapper
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "addr": {"$ref": "#/definitions/Addr"},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "any": {},
        "either": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        "mixed": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "definitions": {"Addr": {"properties": {"city": {"type": "string"}}}},
}


class Registry(RegistryClient):
    def __init__(self, docs: dict[int, tuple[str, str]]) -> None:
        super().__init__("http://registry.invalid")
        self.docs = docs

    def get_json(self, path: str) -> Any:
        schema_id = int(path.rsplit("/", 1)[1])
        if schema_id not in self.docs:
            raise RegistryError("HTTP 404 (error 40403): Schema not found", 40403)
        text, kind = self.docs[schema_id]
        return {"schema": text, "schemaType": kind}


def make_decoder() -> JsonSchemaDecoder:
    text = json.dumps(SCHEMA)
    registry = Registry({1: (text, "JSON"), 2: ('{"type": "object"}', "JSON"),
                         3: ('"string"', "AVRO")})
    return JsonSchemaDecoder(registry, RegisteredSchema(text, "JSON", id=1))


def value(doc: Any, schema_id: int = 1) -> bytes:
    return frame(schema_id, json.dumps(doc).encode())


def test_types_from_the_schema() -> None:
    t = make_decoder().arrow_type
    assert t == pa.struct([
        ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
        ("ok", pa.bool_()), ("tags", pa.list_(pa.string())),
        ("addr", pa.struct([("city", pa.string())])),
        ("attrs", pa.map_(pa.string(), pa.int64())), ("any", pa.string()),
        ("either", pa.int64()), ("mixed", pa.string())])
    # recursion ends in the JSON text
    linked = {"definitions": {"N": {"type": "object", "properties": {
        "next": {"$ref": "#/definitions/N"}}}}, "$ref": "#/definitions/N"}
    assert SchemaMapper(linked).map(linked).type == pa.struct([("next", pa.string())])


def test_decode_good_bad_and_null() -> None:
    dec = make_decoder()
    good = {"id": 7, "name": "a", "score": 2, "ok": True, "tags": ["x", None],
            "addr": {"city": "Oslo", "zip": 1}, "attrs": {"k": 1}, "any": {"deep": [1]},
            "either": 3, "mixed": 5, "unknown": "ignored"}
    values = [value(good), value({"id": 8}, 2), None, value({"id": "eight"}),
              value({"addr": {"city": 5}}), b"{\"id\": 1}", frame(1, b"{nope"), value({"id": 1}, 9),
              value({"id": 1}, 3), frame(1, b"\xff\xfe"), value({"id": True}),
              value({"id": 1 << 70})]
    array, errors = dec.decode(values)
    rows = array.to_pylist()
    assert rows[0] == {"id": 7, "name": "a", "score": 2.0, "ok": True, "tags": ["x", None],
                       "addr": {"city": "Oslo"}, "attrs": [("k", 1)],
                       "any": '{"deep":[1]}', "either": 3, "mixed": "5"}
    assert rows[1]["id"] == 8 and errors[1] is None  # written with another JSON schema
    assert rows[2] is None and errors[2] is None
    expected = {3: "`id`: expected integer, got str", 4: "`addr.city`: expected string",
                5: "magic byte is 0x7b", 6: "not JSON text", 7: "unknown schema id 9",
                8: "is AVRO, not JSON", 9: "not JSON text", 10: "expected integer, got bool",
                11: "expected integer, got int"}
    for i, why in expected.items():
        assert rows[i] is None and errors[i] is not None and why in errors[i], (i, errors[i])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=30), st.text(max_size=30).map(str.encode)),
                max_size=15))
def test_garbage_never_raises(payloads: list[bytes]) -> None:
    dec = make_decoder()
    values = [frame(1, p) if i % 3 else p for i, p in enumerate(payloads)]
    array, errors = dec.decode(list(values))
    assert len(array) == len(values)
    for row, err in zip(array.to_pylist(), errors, strict=True):
        assert row is None or err is None
