"""Confluent-framed Avro values decoded into Arrow columns (eddy.connect.formats.avro_columns),
without Spark or a network: the registry is a dict behind RegistryClient.get_json."""

from __future__ import annotations

import datetime
import decimal
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.connect.formats.avro_columns import AvroDecoder, AvroSchemaError, TypeMapper
from eddy.connect.formats.confluent_wire import FrameError, frame, message_indexes, split_frame
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError


class FakeRegistry(RegistryClient):
    """Schemas by id and subject versions from dicts; counts the GETs."""

    def __init__(self, by_id: dict[int, str], types: dict[int, str] | None = None) -> None:
        super().__init__("http://registry.invalid")
        self.docs = by_id
        self.types = types or {}
        self.gets: list[str] = []

    def get_json(self, path: str) -> Any:
        self.gets.append(path)
        schema_id = int(path.rsplit("/", 1)[1])
        if schema_id not in self.docs:
            raise RegistryError("HTTP 404 (error 40403): Schema not found", 40403)
        doc: dict[str, Any] = {"schema": self.docs[schema_id]}
        if schema_id in self.types:
            doc["schemaType"] = self.types[schema_id]
        return doc


def record(*fields: dict[str, Any], name: str = "User") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields)}


V1 = record({"name": "name", "type": "string"}, {"name": "age", "type": "int"})
V2 = record({"name": "name", "type": "string"}, {"name": "age", "type": "long"},
            {"name": "email", "type": "string", "default": "none"})


def encode(schema: dict[str, Any], value: dict[str, Any], schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return frame(schema_id, out.getvalue())


def decoder_for(reader: dict[str, Any], reader_id: int,
                others: dict[int, dict[str, Any]] | None = None) -> tuple[AvroDecoder,
                                                                          FakeRegistry]:
    docs = {reader_id: json.dumps(reader)}
    docs.update({k: json.dumps(v) for k, v in (others or {}).items()})
    registry = FakeRegistry(docs)
    return AvroDecoder(registry, RegisteredSchema(json.dumps(reader), id=reader_id), []), registry


def test_frame_checks() -> None:
    assert split_frame(b"\x00\x00\x00\x01\x02xyz") == (258, 5)
    with pytest.raises(FrameError, match="fewer than the 5-byte"):
        split_frame(b"\x00\x00")
    with pytest.raises(FrameError, match="magic byte is 0x7b"):
        split_frame(b'{"a": 1}')
    assert message_indexes(b"\x00", 0) == ([0], 1)
    assert message_indexes(b"\x04\x02\x06rest", 0) == ([1, 3], 3)
    with pytest.raises(FrameError, match="runs past the end"):
        message_indexes(b"\x04\x82\x82", 0)
    with pytest.raises(FrameError, match="announced"):
        message_indexes(b"\x7e", 0)  # 63 indexes, nothing after
    with pytest.raises(FrameError, match="not in 0"):
        message_indexes(b"\x01", 0)  # count -1


def test_evolution_poison_and_nulls() -> None:
    dec, registry = decoder_for(V2, 2, {1: V1})
    values = [
        encode(V1, {"name": "ann", "age": 30}, 1),
        encode(V2, {"name": "bob", "age": 1 << 40, "email": "b@x"}, 2),
        None,
        b"raw text",
        b"\x01\x00\x00\x00\x02abc",
        frame(99, b"\x02a\x02"),
        encode(V2, {"name": "cy", "age": 5, "email": "c"}, 2)[:-1],
        encode(V2, {"name": "cy", "age": 5, "email": "c"}, 2) + b"\x00",
        encode(V1, {"name": "dee", "age": 4}, 1),
    ]
    array, errors = dec.decode(values)
    assert array.type == pa.struct([("name", pa.string()), ("age", pa.int64()),
                                    ("email", pa.string())])
    rows = array.to_pylist()
    assert rows[0] == {"name": "ann", "age": 30, "email": "none"}  # v1: the default
    assert rows[1] == {"name": "bob", "age": 1 << 40, "email": "b@x"}
    assert rows[8] == {"name": "dee", "age": 4, "email": "none"}
    assert rows[2] is None and errors[2] is None  # a null value is no error
    for i in (3, 4, 5, 6, 7):
        assert rows[i] is None and errors[i]
    assert "magic byte is 0x72" in str(errors[3])
    assert "magic byte is 0x01" in str(errors[4])
    assert "unknown schema id 99" in str(errors[5])
    assert "does not decode" in str(errors[6])
    assert "1 byte(s) left" in str(errors[7])
    # ids are fetched once each, the unknown one too
    array, errors = dec.decode(values)
    assert sorted(registry.gets) == ["/schemas/ids/1", "/schemas/ids/99"]


def test_incompatible_writer_is_a_record_error() -> None:
    other = record({"name": "zzz", "type": "int"})  # no `name`, no default: no resolution
    dec, _ = decoder_for(V1, 1, {5: other})
    _, errors = dec.decode([encode(other, {"zzz": 1}, 5), encode(V1, {"name": "a", "age": 1}, 1)])
    assert errors[0] and "schema id 5" in errors[0]
    assert errors[1] is None


def test_types_map_like_spark() -> None:
    schema = record(
        {"name": "b", "type": "boolean"}, {"name": "f", "type": "float"},
        {"name": "by", "type": "bytes"},
        {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "il", "type": ["int", "long"]},
        {"name": "u", "type": ["null", "int", "string", {"type": "record", "name": "P",
                                                         "fields": [{"name": "x",
                                                                     "type": "int"}]}]},
        {"name": "arr", "type": {"type": "array", "items": "P"}},
        {"name": "m", "type": {"type": "map", "values": "double"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                 "scale": 2}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    )
    dec, _ = decoder_for(schema, 7)
    utc = datetime.UTC
    value = {
        "b": True, "f": 1.5, "by": b"\x00\x01", "fx": b"abcd", "e": "BLUE", "opt": None,
        "il": 7, "u": ("t.P", {"x": 3}), "arr": [{"x": 1}, {"x": 2}], "m": {"k": 2.5},
        "d": datetime.date(2024, 2, 29),
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=utc),
        "tu": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=utc),
        "lt": datetime.datetime(2024, 1, 2, 3, 4, 5),
        "dec": decimal.Decimal("1234.56"), "tm": datetime.time(1, 2, 3),
        "id": "12345678-1234-1234-1234-123456789012",
    }
    array, errors = dec.decode([encode(schema, value, 7),
                                encode(schema, {**value, "u": "text", "opt": "o"}, 7)])
    assert errors == [None, None]
    t = array.type
    assert t.field("fx").type == pa.binary() and t.field("e").type == pa.string()
    assert t.field("il").type == pa.int64()
    assert t.field("u").type == pa.struct([("member0", pa.int32()), ("member1", pa.string()),
                                           ("member2", pa.struct([("x", pa.int32())]))])
    assert t.field("m").type == pa.map_(pa.string(), pa.float64())
    assert t.field("ts").type == pa.timestamp("us", tz="UTC")
    assert t.field("lt").type == pa.timestamp("us")
    assert t.field("dec").type == pa.decimal128(9, 2)
    assert t.field("tm").type == pa.int32() and t.field("id").type == pa.string()
    first, second = array.to_pylist()
    assert first["u"] == {"member0": None, "member1": None, "member2": {"x": 3}}
    assert second["u"] == {"member0": None, "member1": "text", "member2": None}
    assert second["opt"] == "o" and first["opt"] is None
    assert first["ts"] == value["ts"] and first["tu"] == value["tu"]
    assert first["lt"] == value["lt"] and first["d"] == value["d"]
    assert first["dec"] == value["dec"] and first["tm"] == 3_723_000
    assert first["arr"] == [{"x": 1}, {"x": 2}] and first["m"] == [("k", 2.5)]
    assert (first["e"], first["fx"], first["id"]) == ("BLUE", b"abcd", value["id"])


def test_unsupported_schemas_are_named() -> None:
    linked = record({"name": "next", "type": ["null", "User"]})
    with pytest.raises(AvroSchemaError, match="recursive"):
        TypeMapper(False).map(linked)
    with pytest.raises(AvroSchemaError, match="unknown type"):
        TypeMapper(False).map(record({"name": "x", "type": "Nope"}))
    with pytest.raises(AvroSchemaError, match="precision"):
        TypeMapper(False).map({"type": "bytes", "logicalType": "decimal", "precision": 50})
    # a writer whose arrays hold zero-width items is refused, not looped over
    nulls = record({"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                   {"name": "n", "type": {"type": "array", "items": "null"}})
    dec, _ = decoder_for(V1, 1, {3: nulls})
    hostile = frame(3, b"\x02a\x02" + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f")
    _, errors = dec.decode([hostile])
    assert errors[0] and "zero-width" in errors[0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=20))
def test_garbage_never_raises(values: list[bytes]) -> None:
    dec, _ = _GARBAGE
    framed = [frame(1, v) if i % 2 else v for i, v in enumerate(values)]
    array, errors = dec.decode(list(framed))
    assert len(array) == len(errors) == len(framed)
    for row, err in zip(array.to_pylist(), errors, strict=True):
        assert (row is None) == (err is not None)


_GARBAGE = decoder_for(record(
    {"name": "s", "type": "string"}, {"name": "n", "type": ["null", "long"]},
    {"name": "a", "type": {"type": "array", "items": "double"}},
    {"name": "m", "type": {"type": "map", "values": "bytes"}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5,
                           "scale": 1}},
    {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}), 1)


def test_registry_down_fails_the_batch() -> None:
    class Down(FakeRegistry):
        def get_json(self, path: str) -> Any:
            raise RegistryError("schema registry http://x: connection refused")

    registry = Down({})
    dec = AvroDecoder(registry, RegisteredSchema(json.dumps(V1), id=1), [])
    with pytest.raises(RegistryError, match="connection refused"):
        dec.decode([encode(V1, {"name": "a", "age": 1}, 2)])  # a writer id not cached


def test_hostile_counts_and_lengths_are_bounded_by_the_bytes() -> None:
    import tracemalloc

    schema = record({"name": "s", "type": "string"},
                    {"name": "a", "type": {"type": "array", "items": "int"}},
                    {"name": "m", "type": {"type": "map", "values": "long"}})
    dec, _ = decoder_for(schema, 1)
    huge = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"  # zig-zag 2**62 - 1
    values = [frame(1, huge), frame(1, b"\x02a" + huge + b"\x02"),
              frame(1, b"\x02a\x00" + huge + b"\x02k\x02"),
              frame(1, b"\x02a\x01" + huge)]  # a negative block count, then a huge size
    tracemalloc.start()
    try:
        _, errors = dec.decode(values)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(e and "does not decode" in e for e in errors), errors
    assert peak < 1 << 20


def test_zero_width_arrays_are_refused_wherever_they_hide() -> None:
    """An array whose items take no bytes lets a 10-byte count loop 2**62 times: refused in
    the reader schema itself (which reads records written with it), in a writer, and in a
    named type a schema uses from a reference."""
    from eddy.formats.avro.checks import check_arrays

    empty = {"type": "record", "name": "Empty", "namespace": "t", "fields": []}
    nulls = record({"name": "n", "type": {"type": "array", "items": "null"}})
    with pytest.raises(AvroSchemaError, match="zero-width"):
        decoder_for(nulls, 1)
    dec, _ = decoder_for(V1, 1, {2: record({"name": "e", "type": {"type": "array",
                                                                  "items": empty}})})
    _, errors = dec.decode([frame(2, b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f\x00")])
    assert errors[0] is not None and "zero-width" in errors[0]
    # the array is inside a referenced record, used by name
    holder = {"type": "record", "name": "Holder", "namespace": "r",
              "fields": [{"name": "xs", "type": {"type": "array", "items": {
                  "type": "fixed", "name": "Nothing", "size": 0}}}]}
    uses = record({"name": "h", "type": "r.Holder"})
    with pytest.raises(AvroSchemaError, match="zero-width"):
        check_arrays(uses, {"holder.avsc": holder})
    check_arrays(record({"name": "h", "type": "string"}), {"holder.avsc": holder})  # unused


def test_bytes_fixed_and_decimal_defaults_are_bytes() -> None:
    """Avro's bytes and fixed defaults are JSON strings whose code points 0-255 are the
    bytes: a record written before such a field existed reads the bytes they spell (and
    the decimal they encode), not the string's UTF-8."""
    reader = record({"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                    {"name": "raw", "type": "bytes", "default": "\u00ff\u0001"},
                    {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2},
                     "default": "\u00ffA"},
                    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                               "precision": 6, "scale": 2},
                     "default": "\u0004\u00d2"},  # 1234 -> 12.34
                    {"name": "cost", "type": {"type": "fixed", "name": "Cost", "size": 2,
                                              "logicalType": "decimal", "precision": 4,
                                              "scale": 1}, "default": "\u00ff\u00f6"})  # -10
    dec, _ = decoder_for(reader, 2, {1: V1})
    array, errors = dec.decode([encode(V1, {"name": "a", "age": 3}, 1)])
    assert errors == [None]
    (row,) = array.to_pylist()
    assert row["raw"] == b"\xff\x01" and row["tag"] == b"\xffA"
    assert row["price"] == decimal.Decimal("12.34") and row["cost"] == decimal.Decimal("-1.0")
