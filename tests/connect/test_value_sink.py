"""The eddy sink writing values in Confluent's wire format (value.format avro, json,
protobuf) with a schema derived from the rows' Spark type and registered in a real
`eddy serve`'s schema registry; confluent-kafka's deserializers read them back equal
to the input rows. Then a round trip: an eddy source decoding those Avro values into
an eddy sink encoding them again gives the same records."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from eddy.connect.deadletter import HEADER_ERROR, HEADER_STAGE

from .pipeline_helpers import read_topic, run_text
from .test_avro_pipeline import registry_url

SCHEMA = ("id LONG, name STRING, amount DECIMAL(10,2), ts TIMESTAMP, day DATE, "
          "tags ARRAY<STRING>, attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip: INT>, "
          "score DOUBLE")
ROWS: list[dict[str, Any]] = [
    {"id": 1, "name": "ann", "amount": "12.30", "ts": "2025-01-02T03:04:05.678901Z",
     "day": "2025-01-02", "tags": ["a", "b"], "attrs": {"x": 1}, "addr": {"city": "Oslo",
                                                                         "zip": 150},
     "score": 0.5},
    {"id": 2, "name": None, "amount": None, "ts": None, "day": None, "tags": [],
     "attrs": {}, "addr": None, "score": -2.25},
    {"id": 3, "name": "cy", "amount": "-0.01", "ts": "1969-12-31T23:59:59.999999Z",
     "day": "1960-02-29", "tags": ["c"], "attrs": {"y": None}, "addr": {"city": None,
                                                                       "zip": None},
     "score": 3.0},
]
#: a row JSON cannot hold (NaN): the json sink's dead letter, written by the others
NAN_ROW = '{"id": 4, "name": "nan", "score": NaN, "tags": [], "attrs": {}}'


def typed(row: dict[str, Any]) -> dict[str, Any]:
    """An input row as Python values of its Spark types (Avro's decoded form)."""
    out = dict(row)
    out["amount"] = None if row["amount"] is None else Decimal(row["amount"])
    out["ts"] = None if row["ts"] is None else datetime.fromisoformat(row["ts"])
    out["day"] = None if row["day"] is None else date.fromisoformat(row["day"])
    return out


def protobuf_class(url: str, subject: str) -> Any:
    """The registered schema's first message as a Python class (from the registry's
    FileDescriptorProto, not the sink's)."""
    import base64
    import urllib.request

    with urllib.request.urlopen(f"{url}/subjects/{subject}/versions/latest"
                                "?format=serialized", timeout=10) as resp:
        doc = json.loads(resp.read())
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(doc["schema"]))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
        timestamp_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(
        fdp.message_type[0].name))


def test_sink_writes_avro_json_protobuf_and_round_trips(
        eddy_factory: Callable[..., Any], spark: Any, tmp_path: Path) -> None:
    proc = eddy_factory("--set", "registry.listener=127.0.0.1:0")
    url = registry_url(proc)
    client = SchemaRegistryClient({"url": url})
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "rows.json").write_text(
        "\n".join(json.dumps(r) for r in ROWS) + "\n" + NAN_ROW + "\n")

    run_text(spark, f"""
name: to-topics
source: {{type: files, format: json, path: "{inbox}", schema: "{SCHEMA}"}}
transforms:
  - select: ["CAST(id AS STRING) AS key", "*"]
sinks:
  - {{type: eddy, bootstrap: "{proc.bootstrap}", topic: rows-avro, value.format: avro,
     key.format: avro, schema.registry.url: "{url}"}}
  - {{type: eddy, bootstrap: "{proc.bootstrap}", topic: rows-json, value.format: json,
     schema.registry.url: "{url}"}}
  - {{type: eddy, bootstrap: "{proc.bootstrap}", topic: rows-proto, value.format: protobuf,
     schema.registry.url: "{url}"}}
checkpoint: {tmp_path / "ck1"}
trigger: available-now
""")
    expected = [typed(r) for r in ROWS]

    # Avro: the derived record schema registered under rows-avro-value, the key as string
    avro = read_topic(proc.bootstrap, "rows-avro")
    value_ctx = SerializationContext("rows-avro", MessageField.VALUE)
    key_ctx = SerializationContext("rows-avro", MessageField.KEY)
    avro_de = AvroDeserializer(client)
    got = sorted((avro_de(r.value, value_ctx) for r in avro), key=lambda v: v["id"])
    assert got[:3] == expected
    assert got[3]["score"] != got[3]["score"] and got[3]["name"] == "nan"  # NaN is Avro
    assert sorted(avro_de(r.key, key_ctx) for r in avro) == ["1", "2", "3", "4"]
    registered = json.loads(client.get_latest_version("rows-avro-value").schema.schema_str)
    assert registered["name"] == "topLevelRecord"
    fields = {f["name"]: f for f in registered["fields"]}
    assert list(fields) == ["id", "name", "amount", "ts", "day", "tags", "attrs", "addr",
                            "score"]
    assert fields["ts"] == {"name": "ts", "type": ["null", {
        "type": "long", "logicalType": "timestamp-micros"}], "default": None}
    assert fields["amount"]["type"][1] == {"type": "bytes", "logicalType": "decimal",
                                           "precision": 10, "scale": 2}
    assert fields["addr"]["type"][1]["namespace"] == "topLevelRecord"
    assert fields["attrs"]["type"][1] == {"type": "map", "values": ["null", "int"]}
    key_schema = client.get_latest_version("rows-avro-key").schema.schema_str
    assert json.loads(key_schema) == "string"

    # JSON Schema: the NaN row is a dead letter of the json sink, the rest decode
    json_de = JSONDeserializer(None, schema_registry_client=client)
    ctx = SerializationContext("rows-json", MessageField.VALUE)
    docs = sorted((json_de(r.value, ctx) for r in read_topic(proc.bootstrap, "rows-json")),
                  key=lambda v: v["id"])
    assert docs == [{**r, "amount": None if r["amount"] is None else float(r["amount"])}
                    for r in ROWS]
    json_schema = json.loads(client.get_latest_version("rows-json-value").schema.schema_str)
    assert json_schema["properties"]["ts"] == {"type": ["string", "null"],
                                               "format": "date-time"}
    dead = sorted(read_topic(proc.bootstrap, "to-topics.dead-letter"),
                  key=lambda d: d.headers[HEADER_STAGE])
    assert [(d.headers[HEADER_STAGE], d.key) for d in dead] == [
        (b"sinks[1]:eddy", b"4"), (b"sinks[2]:eddy", b"3")]
    json_error, proto_error = (d.headers[HEADER_ERROR].decode() for d in dead)
    assert json_error.startswith("value.format json: `score`: nan has no JSON form"), \
        json_error
    assert json.loads(dead[0].value or b"")["name"] == "nan"
    # a null map value: Protobuf maps cannot hold one
    assert proto_error.startswith("value.format protobuf: `attrs`: map value for 'y' is "
                                  "null"), proto_error
    assert json.loads(dead[1].value or b"")["attrs"] == {"y": None}

    # Protobuf: read with the registered schema's own message class
    person = protobuf_class(url, "rows-proto-value")
    proto_de = ProtobufDeserializer(person, {"use.deprecated.format": False})
    ctx = SerializationContext("rows-proto", MessageField.VALUE)
    msgs = sorted((proto_de(r.value, ctx) for r in read_topic(proc.bootstrap, "rows-proto")),
                  key=lambda m: m.id)
    assert [m.id for m in msgs] == [1, 2, 4]
    first, second, fourth = msgs
    assert (first.name, first.amount, first.day) == ("ann", "12.30", 20090)
    assert first.ts.ToDatetime(tzinfo=UTC) == expected[0]["ts"]
    assert list(first.tags) == ["a", "b"] and dict(first.attrs) == {"x": 1}
    assert (first.addr.city, first.addr.zip) == ("Oslo", 150)
    assert not second.HasField("name") and not second.HasField("ts")
    assert not second.HasField("addr") and second.score == -2.25
    assert fourth.score != fourth.score and fourth.name == "nan"  # NaN is Protobuf

    # round trip: the Avro topic through an eddy source and sink, both value.format avro
    run_text(spark, f"""
name: round-trip
source:
  type: eddy
  bootstrap: "{proc.bootstrap}"
  topic: rows-avro
  value.format: avro
  schema.registry.url: "{url}"
sinks:
  - {{type: eddy, topic: rows-again, value.format: avro, schema.registry.url: "{url}"}}
checkpoint: {tmp_path / "ck2"}
trigger: available-now
""")
    again = read_topic(proc.bootstrap, "rows-again")
    ctx = SerializationContext("rows-again", MessageField.VALUE)
    back = sorted((avro_de(r.value, ctx) for r in again), key=lambda v: v["id"])
    assert back[:3] == expected and back[3]["name"] == "nan"
    assert sorted(r.key for r in again if r.key) == sorted(r.key for r in avro if r.key)
