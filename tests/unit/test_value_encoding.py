"""The eddy sink's schema-aware values without Spark or a network: schemas derived from
Spark types (their JSON form), encoding into Confluent's wire format, decoding that
again with the source's decoders (a round trip is the identity), registration against a
fake registry, options and the dead letters."""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.connect.formats import value_encoding as ve
from eddy.connect.formats.avro_columns import AvroDecoder
from eddy.connect.formats.confluent_wire import split_frame
from eddy.connect.formats.json_schema_columns import JsonSchemaDecoder
from eddy.connect.formats.protobuf_encoding import load_message_class
from eddy.connect.formats.protobuf_from_spark import file_descriptor, message_model, proto_text
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError
from eddy.connect.formats.schema_from_spark import SchemaDerivationError, avro_schema, json_schema
from eddy.connect.formats.value_encoders import (
    DeadLetters,
    EncodeError,
    encode_batch,
)
from eddy.connect.options import OptionError
from eddy.connect.runtime.spec import SpecError, load_pipeline_text

UTC = datetime.UTC


def struct(*fields: tuple[str, Any, bool]) -> dict[str, Any]:
    """Spark's JSON form of a struct type (StructType.jsonValue())."""
    return {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": nullable, "metadata": {}} for n, t, nullable in fields]}


def array(element: Any, contains_null: bool = True) -> dict[str, Any]:
    return {"type": "array", "elementType": element, "containsNull": contains_null}


def mapping(value: Any, key: Any = "string") -> dict[str, Any]:
    return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": True}


ADDR = struct(("city", "string", True), ("zip", "integer", False))
ORDER = struct(
    ("id", "long", False), ("name", "string", True), ("amount", "decimal(10,2)", True),
    ("ts", "timestamp", True), ("day", "date", True), ("tags", array("string"), True),
    ("attrs", mapping("integer"), True), ("addr", ADDR, True),
    ("lines", array(struct(("sku", "string", False)), False), False),
    ("raw", "binary", True), ("score", "double", True), ("small", "short", False),
)
ROW: dict[str, Any] = {
    "id": 7, "name": "ann", "amount": decimal.Decimal("12.30"),
    "ts": datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    "day": datetime.date(2025, 1, 2), "tags": ["a", None], "attrs": {"x": 1},
    "addr": {"city": None, "zip": 150}, "lines": [{"sku": "s1"}, {"sku": "s2"}],
    "raw": b"\x00\xff", "score": 0.25, "small": -3,
}


# ---- derivation -------------------------------------------------------------------------


def test_avro_schema_follows_spark_to_avro_with_null_first() -> None:
    schema = avro_schema(ORDER)
    nullable = lambda t: ["null", t]  # noqa: E731
    assert schema == {"type": "record", "name": "topLevelRecord", "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": nullable("string"), "default": None},
        {"name": "amount", "type": nullable({"type": "bytes", "logicalType": "decimal",
                                             "precision": 10, "scale": 2}), "default": None},
        {"name": "ts", "type": nullable({"type": "long", "logicalType": "timestamp-micros"}),
         "default": None},
        {"name": "day", "type": nullable({"type": "int", "logicalType": "date"}),
         "default": None},
        {"name": "tags", "type": nullable({"type": "array", "items": nullable("string")}),
         "default": None},
        {"name": "attrs", "type": nullable({"type": "map", "values": nullable("int")}),
         "default": None},
        {"name": "addr", "type": nullable({
            "type": "record", "name": "addr", "namespace": "topLevelRecord", "fields": [
                {"name": "city", "type": nullable("string"), "default": None},
                {"name": "zip", "type": "int"}]}), "default": None},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "lines", "namespace": "topLevelRecord",
            "fields": [{"name": "sku", "type": "string"}]}}},
        {"name": "raw", "type": nullable("bytes"), "default": None},
        {"name": "score", "type": nullable("double"), "default": None},
        {"name": "small", "type": "int"},
    ]}
    fastavro.parse_schema(schema)  # a valid schema
    deeper = avro_schema(struct(("a", struct(("b", struct(("c", "long", True)), True)), True)))
    inner = deeper["fields"][0]["type"][1]["fields"][0]["type"][1]
    assert (inner["name"], inner["namespace"]) == ("b", "topLevelRecord.a")
    assert avro_schema("string") == "string"
    assert avro_schema("timestamp_ntz") == {
        "type": "long", "logicalType": "local-timestamp-micros"}


def test_json_schema_is_draft7_with_required_and_closed_objects() -> None:
    schema = json_schema(struct(("id", "long", False), ("name", "string", True),
                                ("tags", array("string", False), True),
                                ("attrs", mapping("double"), False), ("addr", ADDR, True),
                                ("ts", "timestamp", True), ("raw", "binary", False)))
    assert schema == {
        "$schema": "http://json-schema.org/draft-07/schema#", "title": "topLevelRecord",
        "type": "object", "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["string", "null"]},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}},
            "attrs": {"type": "object", "additionalProperties": {"type": ["number", "null"]}},
            "addr": {"type": ["object", "null"], "properties": {
                "city": {"type": ["string", "null"]}, "zip": {"type": "integer"}},
                "required": ["zip"], "additionalProperties": False},
            "ts": {"type": ["string", "null"], "format": "date-time"},
            "raw": {"type": "string", "contentEncoding": "base64"}},
        "required": ["id", "attrs", "raw"], "additionalProperties": False}


def test_protobuf_text_and_descriptor_agree() -> None:
    model = message_model(ORDER)
    assert proto_text(model) == """syntax = "proto3";

import "google/protobuf/timestamp.proto";

message TopLevelRecord {
  int64 id = 1;
  optional string name = 2;
  optional string amount = 3;
  google.protobuf.Timestamp ts = 4;
  optional int32 day = 5;
  repeated string tags = 6;
  map<string, int32> attrs = 7;
  Addr addr = 8;
  repeated Lines lines = 9;
  optional bytes raw = 10;
  optional double score = 11;
  int32 small = 12;
  message Addr {
    optional string city = 1;
    int32 zip = 2;
  }
  message Lines {
    string sku = 1;
  }
}
"""
    _, serialized = ve.derive("protobuf", ORDER)
    cls = load_message_class(serialized)
    desc = cls.DESCRIPTOR
    assert [(f.name, f.number) for f in desc.fields] == [
        (f.name, f.number) for f in model.fields]
    assert desc.fields_by_name["name"].has_presence
    assert not desc.fields_by_name["id"].has_presence
    assert desc.fields_by_name["attrs"].message_type.GetOptions().map_entry
    assert desc.fields_by_name["ts"].message_type.full_name == "google.protobuf.Timestamp"
    # a nested message is renamed when its name is taken by a field
    clash = message_model(struct(("Item", "string", True), ("item", ADDR, True)))
    assert [m.name for m in clash.nested] == ["Item2"]
    loaded = load_message_class(base64.b64encode(
        file_descriptor(clash).SerializeToString()).decode())
    assert loaded.DESCRIPTOR.fields_by_name["item"].message_type.name == "Item2"


@pytest.mark.parametrize(("fmt", "spark_type", "message"), [
    ("avro", struct(("m", mapping("long", key="integer"), True)), "`m`: Avro maps have "
     "string keys"),
    ("avro", struct(("bad-name", "long", True)), "`bad-name`: not a valid Avro name"),
    ("avro", struct(("i", "interval day to second", True)), "`i`: Spark type interval"),
    ("json", struct(("m", mapping("long", key="long"), True)), "`m`: JSON objects have "
     "string keys"),
    ("protobuf", struct(("a", array(array("long")), True)), "`a[]`: Protobuf has no array"),
    ("protobuf", "string", "needs a struct"),
    ("protobuf", struct(("v", "void", True)), "`v`: Spark type void"),
])
def test_what_a_format_cannot_hold_names_the_field(fmt: str, spark_type: Any,
                                                   message: str) -> None:
    with pytest.raises(SchemaDerivationError, match=message.replace("[", r"\[")):
        ve.derive(fmt, spark_type)


# ---- encoding: a round trip through the source's decoders -------------------------------


class FakeRegistry(RegistryClient):
    """A registry in dicts: schemas by id, versions by subject; counts the calls."""

    def __init__(self) -> None:
        super().__init__("http://registry.invalid")
        self.schemas: dict[int, tuple[str, str]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.calls: list[str] = []

    def post_json(self, path: str, body: Any) -> Any:
        self.calls.append(("POST " if body is not None else "GET ") + path)
        parts = path.split("?")[0].split("/")
        if body is not None:
            doc = (body["schema"], body["schemaType"])
            found = next((i for i, d in self.schemas.items() if d == doc), None)
            subject = parts[2]
            if path.endswith("/versions"):
                if found is None:
                    found = len(self.schemas) + 1
                    self.schemas[found] = doc
                if found not in self.subjects.setdefault(subject, []):
                    self.subjects[subject].append(found)
                return {"id": found}
            if found is None or found not in self.subjects.get(subject, []):
                raise RegistryError("HTTP 404 (error 40403): Schema not found", 40403)
            return {"subject": subject, "id": found, "schema": doc[0], "schemaType": doc[1],
                    "version": self.subjects[subject].index(found) + 1}
        if parts[1] == "schemas":
            text, kind = self.schemas[int(parts[3])]
            return {"schema": text, "schemaType": kind}
        ids = self.subjects.get(parts[2], [])
        if not ids:
            raise RegistryError("HTTP 404 (error 40401): Subject not found", 40401)
        text, kind = self.schemas[ids[-1]]
        return {"subject": parts[2], "id": ids[-1], "version": len(ids), "schema": text,
                "schemaType": kind}


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> FakeRegistry:
    fake = FakeRegistry()
    monkeypatch.setitem(ve._clients, fake.urls[0], fake)
    monkeypatch.setattr(ve, "_ids", {})
    return fake


def prepared(fmt: str, spark_type: Any, registry: FakeRegistry, **kw: Any
             ) -> ve.FieldEncoding:
    return ve.prepare(ve.FieldEncoding("value", fmt, registry.urls[0], "t-value", **kw),
                      spark_type)


def batch_of(arrow_type: Any, rows: list[Any], key: list[Any] | None = None) -> Any:
    arrays = [pa.array(rows, arrow_type)]
    names = ["value"]
    if key is not None:
        arrays.append(pa.array(key, pa.binary()))
        names.append("key")
    return pa.RecordBatch.from_arrays(arrays, names=names)


ORDER_ARROW = pa.struct([
    ("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(10, 2)),
    ("ts", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
    ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int32())),
    ("addr", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
    ("lines", pa.list_(pa.struct([("sku", pa.string())]))), ("raw", pa.binary()),
    ("score", pa.float64()), ("small", pa.int16())])


def test_avro_values_decode_back_to_the_rows(registry: FakeRegistry) -> None:
    enc = prepared("avro", ORDER, registry)
    assert enc.schema_id == 1 and registry.calls == ["POST /subjects/t-value/versions"]
    other = {**ROW, "id": 8, "name": None, "tags": [], "attrs": {}, "addr": None,
             "ts": datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)}
    out = encode_batch(batch_of(ORDER_ARROW, [ROW, None, other]), [enc])
    assert out.errors == [None, None, None]
    values = out.columns["value"]
    assert values[1] is None  # a null value is a null record, not an encoded one
    assert all(split_frame(v) == (1, 5) for v in values if v is not None)
    decoder = AvroDecoder(registry, RegisteredSchema(enc.schema, id=1), [])
    decoded, errors = decoder.decode(values)
    assert errors == [None, None, None]
    got = decoded.to_pylist()
    for row in got:
        if row is not None:
            row["attrs"] = dict(row["attrs"])
    assert got == [ROW, None, other]
    # fastavro reading the payload with the registered schema: the same
    registered = json.loads(registry.schemas[1][0])
    assert registered == avro_schema(ORDER)
    first = values[0]
    assert first is not None
    record = fastavro.schemaless_reader(io.BytesIO(first[5:]),
                                        fastavro.parse_schema(registered), None)
    assert record["ts"] == ROW["ts"] and record["amount"] == ROW["amount"]


def test_json_values_decode_back_and_nan_is_an_error(registry: FakeRegistry) -> None:
    spark_type = struct(("id", "long", False), ("score", "double", True),
                        ("tags", array("string"), True), ("attrs", mapping("long"), True),
                        ("ts", "timestamp", True), ("amount", "decimal(12,0)", True))
    arrow = pa.struct([("id", pa.int64()), ("score", pa.float64()),
                       ("tags", pa.list_(pa.string())),
                       ("attrs", pa.map_(pa.string(), pa.int64())),
                       ("ts", pa.timestamp("us", tz="UTC")), ("amount", pa.decimal128(12, 0))])
    enc = prepared("json", spark_type, registry)
    rows = [{"id": 1, "score": 1.5, "tags": ["a"], "attrs": {"k": 2},
             "ts": datetime.datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC),
             "amount": decimal.Decimal(123456789012)},
            {"id": 2, "score": math.nan, "tags": None, "attrs": None, "ts": None,
             "amount": None},
            {"id": 3, "score": None, "tags": None, "attrs": {"inf": None}, "ts": None,
             "amount": None}]
    out = encode_batch(batch_of(arrow, rows), [enc])
    assert out.errors[0] is None and out.errors[2] is None
    assert out.errors[1] == ("value.format json: `score`: nan has no JSON form (JSON has "
                             "no NaN or infinite numbers)")
    first = out.columns["value"][0]
    assert first is not None and json.loads(first[5:]) == {
        "id": 1, "score": 1.5, "tags": ["a"], "attrs": {"k": 2},
        "ts": "2025-05-06T07:08:09Z", "amount": 123456789012}
    decoder = JsonSchemaDecoder(registry, RegisteredSchema(enc.schema, "JSON", id=1))
    decoded, errors = decoder.decode([out.columns["value"][0], out.columns["value"][2]])
    assert errors == [None, None]
    got = decoded.to_pylist()
    assert got[0]["id"] == 1 and got[0]["tags"] == ["a"] and got[0]["attrs"] == [("k", 2)]
    assert got[1] == {"id": 3, "score": None, "tags": None, "attrs": [("inf", None)],
                      "ts": None, "amount": None}


def test_protobuf_values_and_nulls_in_repeated_fields(registry: FakeRegistry) -> None:
    enc = prepared("protobuf", ORDER, registry)
    kind = registry.schemas[enc.schema_id or 0][1]
    assert kind == "PROTOBUF" and registry.schemas[1][0] == proto_text(message_model(ORDER))
    bad = {**ROW, "tags": ["a", None]}
    good = {**ROW, "tags": ["a", "b"], "name": None, "addr": None}
    out = encode_batch(batch_of(ORDER_ARROW, [good, bad]), [enc])
    assert out.errors[0] is None
    assert out.errors[1] == ("value.format protobuf: `tags[1]`: null, which a Protobuf "
                             "repeated field cannot hold")
    value = out.columns["value"][0]
    assert value is not None and value[:6] == b"\x00\x00\x00\x00\x01\x00"
    msg = load_message_class(enc.schema).FromString(value[6:])
    assert (msg.id, msg.amount, msg.day, msg.small) == (7, "12.30", 20090, -3)
    assert msg.ts.ToDatetime(tzinfo=UTC) == ROW["ts"]
    assert list(msg.tags) == ["a", "b"] and dict(msg.attrs) == {"x": 1}
    assert [line.sku for line in msg.lines] == ["s1", "s2"]
    assert not msg.HasField("name") and not msg.HasField("addr") and msg.raw == b"\x00\xff"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "n": st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1)),
    "s": st.one_of(st.none(), st.text(max_size=20)),
    "f": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    "xs": st.one_of(st.none(), st.lists(st.integers(-(1 << 31), (1 << 31) - 1), max_size=4)),
}), max_size=8))
def test_avro_and_json_round_trips_are_the_identity(rows: list[dict[str, Any]]) -> None:
    fake = FakeRegistry()
    spark_type = struct(("n", "long", True), ("s", "string", True), ("f", "double", True),
                        ("xs", array("integer", False), True))
    arrow = pa.struct([("n", pa.int64()), ("s", pa.string()), ("f", pa.float64()),
                       ("xs", pa.list_(pa.int32()))])
    batch = batch_of(arrow, rows)
    for fmt in ("avro", "json"):
        text, schema = ve.derive(fmt, spark_type)
        schema_id = fake.register("t-value", RegisteredSchema(text, ve.SCHEMA_TYPES[fmt]))
        enc = ve.FieldEncoding("value", fmt, fake.urls[0], "t-value", schema_id=schema_id,
                               schema=schema)
        out = encode_batch(batch, [enc])
        assert out.errors == [None] * len(rows)
        decoder: Any = (AvroDecoder(fake, RegisteredSchema(text, id=schema_id), [])
                        if fmt == "avro" else
                        JsonSchemaDecoder(fake, RegisteredSchema(text, "JSON", id=schema_id)))
        decoded, errors = decoder.decode(out.columns["value"])
        assert errors == [None] * len(rows)
        assert decoded.to_pylist() == rows


# ---- registration, options, dead letters ------------------------------------------------


def test_registration_is_cached_lookup_and_latest(registry: FakeRegistry) -> None:
    first = prepared("avro", ORDER, registry)
    again = prepared("avro", ORDER, registry)
    assert first == again and len(registry.calls) == 1  # asked once per process
    with pytest.raises(OptionError, match="subject 't-value' does not have the schema"):
        prepared("json", ORDER, registry, auto_register=False)
    looked = prepared("avro", ORDER, registry, auto_register=False)
    assert looked.schema_id == first.schema_id and registry.calls[-1] == (
        "POST /subjects/t-value")
    # use.latest.version: the subject's latest schema, whatever the rows' type
    latest = ve.prepare(ve.FieldEncoding("value", "avro", registry.urls[0], "t-value",
                                         use_latest=True), "string")
    assert (latest.schema_id, latest.derived) == (first.schema_id, False)
    with pytest.raises(OptionError, match="is AVRO, not JSON"):
        ve.prepare(ve.FieldEncoding("value", "json", registry.urls[0], "t-value",
                                    use_latest=True), "string")
    # a row the latest schema does not take is a row error, not a task failure
    out = encode_batch(batch_of(pa.struct([("id", pa.string())]), [{"id": "x"}]), [latest])
    assert out.errors[0] is not None and out.errors[0].startswith("value.format avro: ")


def test_write_options() -> None:
    lower = {"schema.registry.url": "http://r:8081", "value.format": "AVRO",
             "key.format": "json", "key.subject": "keys", "auto.register.schemas": "false"}
    encs = ve.parse_encodings(lower, "orders")
    assert [(e.field, e.format, e.subject, e.auto_register, e.use_latest) for e in encs] == [
        ("key", "json", "keys", False, False), ("value", "avro", "orders-value", False, False)]
    with pytest.raises(OptionError, match=r"value.format=avro needs the option schema"):
        ve.parse_encodings({"value.format": "avro"}, "t")
    with pytest.raises(OptionError, match="expected one of avro, json, protobuf"):
        ve.parse_encodings({**lower, "value.format": "xml"}, "t")
    with pytest.raises(OptionError, match=r"set value.subject"):
        ve.parse_encodings(lower, None)
    with pytest.raises(OptionError, match=r"use.latest.version: expected true or false"):
        ve.parse_encodings({**lower, "use.latest.version": "maybe"}, "t")
    assert ve.parse_encodings({"value.format": "bytes"}, "t") == ()


def test_dead_letters_need_a_topic() -> None:
    batch = batch_of(pa.struct([("f", pa.float64())]), [{"f": math.inf}], key=[b"k"])
    enc = ve.FieldEncoding("value", "json", "http://r", "s", schema_id=3,
                           schema=json.dumps(json_schema(struct(("f", "double", True)))))
    out = encode_batch(batch, [enc])
    with pytest.raises(EncodeError, match=r"no dead-letter topic .*`f`: inf has no JSON"):
        DeadLetters(None, "p", "sinks[0]:eddy").add(batch, out, 0)
    letters = DeadLetters(("127.0.0.1:1", "dl"), "p", "sinks[0]:eddy")
    letters.add(batch, out, 0)
    key, value, headers = letters.records[0]
    assert (key, json.loads(value or b"")) == (b"k", {"f": "inf"})
    assert dict(headers)["eddy.stage"] == b"sinks[0]:eddy"


def test_sink_spec_options() -> None:
    base = """
name: p
source: {type: datagen}
sinks:
  - {type: eddy, topic: t, value.format: protobuf, %s}
"""
    text = base % 'schema.registry.url: "http://r:8081", use.latest.version: true'
    sink = load_pipeline_text(text).sinks[0]
    assert sink.write_options() == {  # type: ignore[union-attr]
        "value.format": "protobuf", "schema.registry.url": "http://r:8081",
        "auto.register.schemas": "true", "use.latest.version": "true"}
    with pytest.raises(SpecError, match=r"value.format: protobuf needs schema.registry.url"):
        load_pipeline_text(base % "key.subject: k")
    routed = """
name: p
source: {type: datagen}
transforms: [{route: "'x'"}]
sinks: [{type: eddy, value.format: avro, schema.registry.url: "http://r"}]
"""
    with pytest.raises(SpecError, match=r"set value.subject"):
        load_pipeline_text(routed)
