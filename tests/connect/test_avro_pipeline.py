"""Avro values written by confluent-kafka's AvroSerializer (registry: a real `eddy serve`
with its schema registry), with a schema that evolves mid-topic and poison records after
it, read by `format("eddy")` with value.format avro and by a pipeline into parquet; JSON
Schema and Protobuf values (its serializers too) read by `format("eddy")`."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from eddy.connect.deadletter import HEADER_ERROR, HEADER_SOURCE
from eddy.connect.formats.confluent_wire import frame

from .pipeline_helpers import create_topic, parquet_rows, produce, read_topic, run_text

FD = descriptor_pb2.FieldDescriptorProto
_URL_LINE = re.compile(r"schema registry on (http://\S+)")


def registry_url(proc: Any, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _URL_LINE.findall(proc.logs())
        if found:
            return str(found[0])
        time.sleep(0.05)
    raise AssertionError(f"no registry startup line:\n{proc.logs()}")


def schema(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "User", "namespace": "eddy.test",
                       "fields": list(fields)})


V1 = schema({"name": "name", "type": "string"}, {"name": "age", "type": "int"},
            {"name": "tags", "type": {"type": "array", "items": "string"}})
V2 = schema({"name": "name", "type": "string"}, {"name": "age", "type": "int"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "email", "type": "string", "default": "none"},
            {"name": "seen", "type": ["null", {"type": "long",
                                               "logicalType": "timestamp-millis"}],
             "default": None})


def person_class() -> Any:
    """eddytest/person.proto's Person, which uses eddytest/city.proto's City."""
    city = descriptor_pb2.FileDescriptorProto(name="eddytest/city.proto", package="eddytest",
                                              syntax="proto3")
    city.message_type.add(name="City").field.add(name="name", number=1, type=FD.TYPE_STRING,
                                                 label=FD.LABEL_OPTIONAL)
    person = descriptor_pb2.FileDescriptorProto(name="eddytest/person.proto",
                                                package="eddytest", syntax="proto3",
                                                dependency=["eddytest/city.proto"])
    msg = person.message_type.add(name="Person")
    msg.field.add(name="name", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    msg.field.add(name="scores", number=2, type=FD.TYPE_INT64, label=FD.LABEL_REPEATED)
    msg.field.add(name="city", number=3, type=FD.TYPE_MESSAGE, type_name=".eddytest.City",
                  label=FD.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(city)
    pool.Add(person)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("eddytest.Person"))


def test_avro_values_evolve_into_parquet_and_poison_to_dead_letters(
        eddy_factory: Callable[..., Any], spark: Any, tmp_path: Path) -> None:
    proc = eddy_factory("--set", "registry.listener=127.0.0.1:0")
    url = registry_url(proc)
    client = SchemaRegistryClient({"url": url})
    topic = "users"
    create_topic(proc.bootstrap, topic)
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, V1), AvroSerializer(client, V2)
    seen = datetime(2025, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    old = [{"name": f"u{i}", "age": 20 + i, "tags": ["a"] * (i % 3)} for i in range(5)]
    new = [{"name": f"n{i}", "age": 40 + i, "tags": ["b"], "email": f"n{i}@x",
            "seen": seen if i % 2 else None} for i in range(4)]
    values = [v1(r, ctx) for r in old] + [v2(r, ctx) for r in new]
    poison = {
        b"plain text": "magic byte is 0x70",
        b"\x01\x00\x00\x00\x01\x02a": "magic byte is 0x01",
        frame(4242, b"\x02a\x02"): "unknown schema id 4242",
        b"\x00\x00": "fewer than the 5-byte",
        values[-1][:-3]: "does not decode",
    }
    delivered = produce(proc.bootstrap, topic, [(None, v) for v in [*values, *poison]])
    assert [int.from_bytes(v[1:5], "big") for v in values] == [1] * 5 + [2] * 4

    # format("eddy") directly: a typed `value`, the raw bytes, and the error column
    df = (spark.read.format("eddy").option("kafka.bootstrap.servers", proc.bootstrap)
          .option("subscribe", topic).option("value.format", "avro")
          .option("schema.registry.url", url).load())
    assert df.schema["value"].dataType.simpleString() == (
        "struct<name:string,age:int,tags:array<string>,email:string,seen:timestamp>")
    rows = df.orderBy("offset").select("value", "_eddy_raw_value",
                                       "_eddy_decode_error").collect()
    assert len(rows) == len(delivered)
    assert [r["value"] and r["value"]["email"] for r in rows[:9]] == (
        ["none"] * 5 + [f"n{i}@x" for i in range(4)])
    assert [bytes(r["_eddy_raw_value"]) for r in rows] == [d.value for d in delivered]
    for row, why in zip(rows[9:], poison.values(), strict=True):
        assert row["value"] is None and why in row["_eddy_decode_error"]
    assert all(r["_eddy_decode_error"] is None for r in rows[:9])

    # a pinned reader schema (version 1): values written with v2 resolve against it, their
    # new fields dropped, as Avro's schema resolution says
    pinned = (spark.read.format("eddy").option("kafka.bootstrap.servers", proc.bootstrap)
              .option("subscribe", topic).option("value.format", "avro")
              .option("value.schema.version", "1").option("schema.registry.url", url).load())
    assert pinned.schema["value"].dataType.simpleString() == (
        "struct<name:string,age:int,tags:array<string>>")
    first = pinned.orderBy("offset").select("value").limit(9).collect()
    assert [r["value"].asDict(recursive=True) for r in first] == old + [
        {k: r[k] for k in ("name", "age", "tags")} for r in new]

    # a pipeline into parquet; the poison goes to the dead letters
    out = tmp_path / "out"
    prepared = run_text(spark, f"""
name: users-lake
source:
  type: eddy
  bootstrap: "{proc.bootstrap}"
  topic: {topic}
  value.format: avro
  schema.registry.url: "{url}"
transforms:
  - select: ["offset", "value.*"]
sinks:
  - {{type: files, format: parquet, path: "{out}"}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    lake = spark.read.parquet(str(out))
    assert [(f.name, f.dataType.simpleString()) for f in lake.schema.fields] == [
        ("offset", "bigint"), ("name", "string"), ("age", "int"), ("tags", "array<string>"),
        ("email", "string"), ("seen", "timestamp")]
    got = parquet_rows(spark, out, order_by="offset")
    expected: list[dict[str, Any]] = [{**r, "email": "none", "seen": None} for r in old] + new
    assert [{k: v for k, v in g.items() if k != "offset"} for g in got] == [
        {**e, "seen": e["seen"].astimezone().replace(tzinfo=None) if e["seen"] else None}
        for e in expected]
    dead = read_topic(proc.bootstrap, "users-lake.dead-letter")
    by_position = {d.position: d for d in delivered}
    assert sorted(d.headers[HEADER_SOURCE].decode() for d in dead) == sorted(
        d.position for d in delivered[9:])
    for letter in dead:
        original = by_position[letter.headers[HEADER_SOURCE].decode()]
        assert letter.value == original.value
        error = letter.headers[HEADER_ERROR].decode()
        assert error.startswith("source: value.format avro: "), error
        assert original.value is not None and poison[original.value] in error
    assert sum(b.dead_letters for b in prepared.batches) == len(poison)

    # JSON Schema values (confluent-kafka's JSONSerializer) through format("eddy")
    json_schema = json.dumps({"type": "object", "properties": {
        "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object", "properties": {"city": {"type": "string"}}}}})
    ctx = SerializationContext("events", MessageField.VALUE)
    to_json = JSONSerializer(json_schema, client)
    docs = [{"id": i, "tags": ["t"] * i, "where": {"city": f"c{i}"}} for i in range(3)]
    create_topic(proc.bootstrap, "events")
    produce(proc.bootstrap, "events", [(None, to_json(d, ctx)) for d in docs] + [
        (None, b"\x00\x00\x00\x00\x03{broken")])
    events = (spark.read.format("eddy").option("kafka.bootstrap.servers", proc.bootstrap)
              .option("subscribe", "events").option("value.format", "json")
              .option("schema.registry.url", url).load())
    assert events.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,tags:array<string>,where:struct<city:string>>")
    got_events = events.select("offset", "value", "_eddy_decode_error").collect()
    got_events.sort(key=lambda r: r["offset"])
    assert [r["value"].asDict(recursive=True) if r["value"] else None
            for r in got_events] == [*docs, None]
    assert "not JSON text" in got_events[-1]["_eddy_decode_error"]

    # Protobuf values (ProtobufSerializer, with a referenced import) through format("eddy")
    person = person_class()
    to_proto = ProtobufSerializer(person, client, {"use.deprecated.format": False})
    ctx = SerializationContext("people", MessageField.VALUE)
    people = [person(name="ann", scores=[1, 2]), person(name="bob")]
    people[0].city.name = "Oslo"
    create_topic(proc.bootstrap, "people")
    produce(proc.bootstrap, "people", [(None, to_proto(p, ctx)) for p in people] + [
        (None, frame(4242, b"\x00"))])
    read = (spark.read.format("eddy").option("kafka.bootstrap.servers", proc.bootstrap)
            .option("subscribe", "people").option("value.format", "protobuf")
            .option("schema.registry.url", url).load())
    assert read.schema["value"].dataType.simpleString() == (
        "struct<name:string,scores:array<bigint>,city:struct<name:string>>")
    got_people = sorted(read.select("offset", "value", "_eddy_decode_error").collect(),
                        key=lambda r: r["offset"])
    assert [r["value"].asDict(recursive=True) if r["value"] else None
            for r in got_people] == [
        {"name": "ann", "scores": [1, 2], "city": {"name": "Oslo"}},
        {"name": "bob", "scores": [], "city": None}, None]
    assert "unknown schema id 4242" in got_people[-1]["_eddy_decode_error"]
