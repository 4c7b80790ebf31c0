"""confluent-kafka's newer schema-id framings, read by the pipeline reader without Spark or
a network (the registry is a dict behind RegistryClient.get_json): the schema's GUID in
the record header `__value_schema_id` / `__key_schema_id` (the value then the bare
payload), and magic byte 1 with the GUID as the value's prefix; the classic framing
still read; bad headers are decode errors, never exceptions; header bytes agree with
confluent-kafka's own SchemaId."""

from __future__ import annotations

import io
import json
import re
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from eddy.connect.formats import confluent_wire as wire
from eddy.connect.formats import registry_client as rc
from eddy.connect.formats import value_decoding as vd
from eddy.connect.formats.confluent_wire import FrameError, frame, parse_header, split_frame
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError
from eddy.connect.reader.kafka_rows import arrow_schema as _arrow_schema

URL = "http://framings.invalid"
GUID_V1 = "0b3b8a4e-1f2d-4c5e-9a6b-7c8d9e0f1a2b"
GUID_V2 = "c0ffee00-1234-4abc-8def-0123456789ab"
GUID_JSON = "11111111-2222-4333-8444-555555555555"
GUID_PROTO = "99999999-8888-4777-8666-555555555555"
UNKNOWN = "deadbeef-dead-4eef-8ead-beefdeadbeef"

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "age", "type": "long", "default": 7}]}
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}}}
FD = descriptor_pb2.FieldDescriptorProto


def proto_file() -> descriptor_pb2.FileDescriptorProto:
    """pets.proto: Cat (index [0]) and Dog (index [1], the one read)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="pets.proto", package="pets",
                                             syntax="proto3")
    fdp.message_type.add(name="Cat").field.add(name="lives", number=1, type=FD.TYPE_INT32,
                                               label=FD.LABEL_OPTIONAL)
    fdp.message_type.add(name="Dog").field.add(name="name", number=1, type=FD.TYPE_STRING,
                                               label=FD.LABEL_OPTIONAL)
    return fdp


def dog_file() -> descriptor_pb2.FileDescriptorProto:
    """The reader's file: Dog alone (index [0])."""
    fdp = proto_file()
    del fdp.message_type[0]
    return fdp


class Registry(RegistryClient):
    """Schemas by id and GUID from dicts; records the paths asked."""

    def __init__(self) -> None:
        super().__init__(URL)
        import base64

        pets = base64.b64encode(proto_file().SerializeToString()).decode()
        dogs = base64.b64encode(dog_file().SerializeToString()).decode()
        self.docs: dict[str, dict[str, Any]] = {
            "/schemas/ids/1": {"schema": json.dumps(V1)},
            "/schemas/ids/2": {"schema": json.dumps(V2)},
            f"/schemas/guids/{GUID_V1}": {"schema": json.dumps(V1)},
            f"/schemas/guids/{GUID_V2}": {"schema": json.dumps(V2)},
            f"/schemas/guids/{GUID_JSON}": {"schema": json.dumps(JSON_SCHEMA),
                                            "schemaType": "JSON"},
            "/schemas/ids/5": {"schema": json.dumps(JSON_SCHEMA), "schemaType": "JSON"},
            f"/schemas/guids/{GUID_PROTO}?format=serialized": {"schema": pets,
                                                                "schemaType": "PROTOBUF"},
            "/subjects/dogs-value/versions/1?format=serialized": {"schema": dogs,
                                                                  "schemaType": "PROTOBUF"},
        }
        self.gets: list[str] = []

    def get_json(self, path: str) -> Any:
        self.gets.append(path)
        if path not in self.docs:
            raise RegistryError("HTTP 404 (error 40403): Schema not found", 40403)
        return self.docs[path]


@pytest.fixture
def registry() -> Any:
    made = Registry()
    vd._clients[URL] = made
    yield made
    del vd._clients[URL]
    for dec in [d for d in vd._decoders if d.url == URL]:
        del vd._decoders[dec]


def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def batch(values: list[bytes | None], headers: list[list[tuple[str, bytes | None]]],
          keys: list[bytes | None] | None = None) -> Any:
    n = len(values)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.RecordBatch.from_arrays([
        pa.array(keys or [None] * n, pa.binary()), pa.array(values, pa.binary()),
        pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
        pa.array([0] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
        pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], header_type),
    ], schema=_arrow_schema(True))


def guid_header(guid: str, indexes: list[int] | None = None) -> bytes:
    """The header value as confluent-kafka's header_schema_id_serializer writes it."""
    return SchemaId("PROTOBUF" if indexes is not None else "AVRO", guid=guid,
                    message_indexes=indexes).guid_to_bytes()


def test_wire_framings_agree_with_confluent_kafka() -> None:
    # magic byte 1 + GUID as the prefix (SchemaId.from_bytes reads it)
    framed = frame(GUID_V1, b"payload")
    assert split_frame(framed) == (GUID_V1, 17)
    parsed = SchemaId("AVRO")
    assert parsed.from_bytes(io.BytesIO(framed)).read() == b"payload"
    assert str(parsed.guid) == GUID_V1
    assert split_frame(frame(258, b"x")) == (258, 5)  # classic, unchanged
    # headers as confluent-kafka writes them, for Avro/JSON and for Protobuf
    assert parse_header(guid_header(GUID_V1), False) == (GUID_V1, None)
    assert parse_header(guid_header(GUID_PROTO, [1, 0]), True) == (GUID_PROTO, [1, 0])
    assert parse_header(guid_header(GUID_PROTO, [0]), True) == (GUID_PROTO, [0])
    assert parse_header(SchemaId("AVRO", 9).id_to_bytes(), False) == (9, None)
    assert parse_header(SchemaId("PROTOBUF", 9, message_indexes=[2]).id_to_bytes(),
                        True) == (9, [2])
    # what is refused, and why
    for value, why in [
        (b"", "0 byte(s), fewer than the 5-byte"),
        (b"\x01" + bytes(15), "magic byte is 0x01 but 16 byte(s), fewer than the 17-byte"),
        (b"\x02" + bytes(20), "magic byte is 0x02, not 0x00 or 0x01"),
        (b"\x00\x01", "2 byte(s), fewer than the 5-byte"),
    ]:
        with pytest.raises(FrameError, match=re.escape(why)):
            split_frame(value)
    for header, protobuf, why in [
        (b"", False, "magic byte is missing"),
        (b"\x07" + bytes(16), False, "magic byte is 0x07, not 0x00 or 0x01"),
        (guid_header(GUID_V1)[:-1], False, "16 byte(s); magic byte 1 and a 16-byte schema "
                                           "GUID take 17"),
        (guid_header(GUID_V1) + b"\x00", False, "18 byte(s)"),
        (b"\x00\x00\x00\x01", False, "4 byte(s); magic byte 0 and a 4-byte schema id take 5"),
        (guid_header(GUID_V1), True, "a varint runs past the end"),
        (guid_header(GUID_V1, [0]) + b"zz", True, "2 byte(s) after the message indexes"),
        (guid_header(GUID_V1) + b"\x02\x03", True, "message index -2 is negative"),
        (b"\x01" + bytes(16) + b"\xfe\xff\xff\xff\x0f", True, "not in 0..100"),
        (b"\x01" + bytes(1 << 20), False, "1048577 byte(s)"),
    ]:
        with pytest.raises(FrameError, match=re.escape(why)):
            parse_header(header, protobuf)


def test_avro_header_prefix_and_classic_framings(registry: Registry) -> None:
    dec = vd.FieldDecoding("value", "avro", URL, "users-value",
                           reader=RegisteredSchema(json.dumps(V2), id=2, subject="users-value",
                                                   version=2))
    key_header = ("__key_schema_id", guid_header(GUID_V1))  # the key's: not the value's
    rows: list[tuple[bytes | None, list[tuple[str, bytes | None]]]] = [
        (avro(V1, {"name": "hdr-v1"}), [("trace", b"x"), ("__value_schema_id",
                                                          guid_header(GUID_V1))]),
        (avro(V2, {"name": "hdr-v2", "age": 3}), [("__value_schema_id", guid_header(GUID_V2)),
                                                  ("__value_schema_id", b"ignored: 2nd")]),
        (frame(GUID_V1, avro(V1, {"name": "guid-prefix"})), []),
        (frame(1, avro(V1, {"name": "classic"})), [key_header]),
        # the header wins over a prefix (the whole value is the payload)
        (frame(1, avro(V1, {"name": "both"})), [("__value_schema_id", guid_header(GUID_V1))]),
        (avro(V1, {"name": "x"}), [("__value_schema_id", guid_header(UNKNOWN))]),
        (avro(V1, {"name": "x"}), [("__value_schema_id", b"\x01abc")]),
        (avro(V1, {"name": "x"}), [("__value_schema_id", b"\x05" + bytes(16))]),
        (None, [("__value_schema_id", b"junk")]),  # a tombstone is null, not an error
        (frame(UNKNOWN, b"\x02a"), []),
        (avro(V1, {"name": "null header value"}), [("__value_schema_id", None)]),
        (frame(2, avro(V2, {"name": "after", "age": 1})), []),
    ]
    got = batch([v for v, _ in rows], [h for _, h in rows])
    schema = vd.output_schema(_arrow_schema(True), [dec])
    out = vd.decode_batch(got, [dec], schema).to_pydict()
    assert out["value"][:5] == [{"name": "hdr-v1", "age": 7}, {"name": "hdr-v2", "age": 3},
                                {"name": "guid-prefix", "age": 7},
                                {"name": "classic", "age": 7}, None]
    errors = out["_eddy_decode_error"]
    assert errors[:4] == [None] * 4 and errors[8] is None and errors[11] is None
    assert out["value"][11] == {"name": "after", "age": 1}
    assert "value.format avro: schema guid " + GUID_V1 in errors[4]  # prefix read as avro
    assert errors[5] == (f"value.format avro: unknown schema guid {UNKNOWN} (the registry "
                         "has no such schema)")
    assert errors[6] == ("value.format avro: header __value_schema_id: 4 byte(s); magic "
                         "byte 1 and a 16-byte schema GUID take 17")
    assert errors[7] == ("value.format avro: header __value_schema_id: magic byte is 0x05, "
                         "not 0x00 or 0x01")
    assert f"unknown schema guid {UNKNOWN}" in errors[9]
    assert "magic byte is 0x" in errors[10]  # a null header value: the prefix is read
    assert out["headers"][0] == [{"key": "trace", "value": b"x"},
                                 {"key": "__value_schema_id", "value": guid_header(GUID_V1)}]
    assert out["_eddy_raw_value"] == [v for v, _ in rows]
    # each GUID asked once (the unknown one too), by GUID
    out2 = vd.decode_batch(got, [dec], schema).to_pydict()
    assert out2 == out
    assert sorted(registry.gets) == sorted([f"/schemas/guids/{GUID_V1}",
                                            f"/schemas/guids/{GUID_V2}",
                                            f"/schemas/guids/{UNKNOWN}", "/schemas/ids/1"])

    # headers read only to find ids: left out of the output when not asked for
    bare = vd.output_schema(_arrow_schema(False), [dec])
    out3 = vd.decode_batch(got, [dec], bare)
    assert "headers" not in out3.schema.names
    assert out3.to_pydict()["value"] == out["value"]
    # no schema-id header at all: the classic path
    plain = batch([frame(1, avro(V1, {"name": "p"}))], [[("other", b"1")]])
    assert vd.decode_batch(plain, [dec], bare).to_pydict()["value"] == [
        {"name": "p", "age": 7}]


def test_key_json_and_protobuf_from_headers(registry: Registry) -> None:
    key_dec = vd.FieldDecoding("key", "json", URL, "k-key",
                               reader=RegisteredSchema(json.dumps(JSON_SCHEMA), "JSON", id=5))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto_file())
    dog = message_factory.GetMessageClass(pool.FindMessageTypeByName("pets.Dog"))
    cat = message_factory.GetMessageClass(pool.FindMessageTypeByName("pets.Cat"))
    value_dec = vd.FieldDecoding("value", "protobuf", URL, "dogs-value",
                                 reader=RegisteredSchema("", "PROTOBUF", subject="dogs-value",
                                                         version=1))
    rex = dog(name="rex").SerializeToString()
    rows: list[tuple[bytes, bytes, list[tuple[str, bytes | None]]]] = [
        (b'{"id": 1}', rex, [("__key_schema_id", guid_header(GUID_JSON)),
                             ("__value_schema_id", guid_header(GUID_PROTO, [1]))]),
        (frame(GUID_JSON, b'{"id": 2}'), frame(GUID_PROTO, b"\x02\x02" + rex), []),
        (frame(5, b'{"id": 3}'), rex, [("__value_schema_id", guid_header(GUID_PROTO, [0]))]),
        (b'{"id": 4}', rex, [("__key_schema_id", guid_header(GUID_JSON)),
                             ("__value_schema_id", guid_header(GUID_PROTO))]),
        (b'{"id": 5}', rex, [("__key_schema_id", guid_header(GUID_V1)),
                             ("__value_schema_id", guid_header(GUID_PROTO, [1]))]),
    ]
    got = batch([v for _, v, _ in rows], [h for _, _, h in rows], [k for k, _, _ in rows])
    decs = [key_dec, value_dec]
    out = vd.decode_batch(got, decs, vd.output_schema(_arrow_schema(False), decs)).to_pydict()
    assert out["key"][:2] == [{"id": 1}, {"id": 2}]
    assert out["value"][:2] == [{"name": "rex"}, {"name": "rex"}]
    errors = out["_eddy_decode_error"]
    assert errors[:2] == [None, None]
    assert out["key"][2:] == [None] * 3 and out["value"][2:] == [None] * 3  # failed rows
    assert errors[2] == (f"value.format protobuf: schema guid {GUID_PROTO}: written as "
                         "message pets.Cat, the reader schema's is pets.Dog")
    assert errors[3] == ("value.format protobuf: header __value_schema_id: a varint runs "
                         "past the end of the value")
    assert errors[4] == (f"key.format json: schema guid {GUID_V1} is AVRO, not JSON")
    assert cat  # the other message, named by index [0] above


def test_caches_of_ids_and_guids_are_bounded(registry: Registry,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rc, "MAX_CACHED", 3)
    monkeypatch.setattr(wire, "MAX_REMEMBERED", 3)
    client = Registry()
    for n in range(10):
        with pytest.raises(RegistryError, match="unknown schema guid"):
            client.schema_by_guid(str(uuid.UUID(int=n)))
    assert len(client._by_id) == 3
    assert client.schema_by_id(1).schema == json.dumps(V1)
    assert client.schema_by_guid(GUID_V1).schema == json.dumps(V1)
    dec = vd.FieldDecoding("value", "avro", URL, "users-value",
                           reader=RegisteredSchema(json.dumps(V2), id=2))
    decoder: Any = vd.decoder(dec)
    values = [frame(str(uuid.UUID(int=n)), b"") for n in range(10)]
    _, errors = decoder.decode(values)
    assert all(e and "unknown schema guid" in e for e in errors)
    assert len(decoder._writers) == 3
