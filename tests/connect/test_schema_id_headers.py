"""confluent-kafka's newer schema-id framings read by `format("eddy")` (registry: a real
`eddy serve` with its schema registry): Avro and Protobuf values written with
`schema.id.serializer: header_schema_id_serializer` (the schema's GUID in the
`__value_schema_id` header, the bare payload as the value), a value framed with magic
byte 1 and the GUID, and the classic framing beside them; a bad header goes to the
decode errors. Headers are read to find the ids even when the query does not ask for
the `headers` column.

confluent-kafka's serializers take the GUID from the registry's answer to a register
(Confluent 8 answers with it); eddy's registry answers `{"id": N}`, so the client here
adds the GUID of the registered content (eddy.registry.guid, which the registry serves
`GET /schemas/guids/{guid}` by: the reader then fetches the schema by it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    header_schema_id_serializer,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from eddy.connect.formats.confluent_wire import frame

from .pipeline_helpers import create_topic
from .test_avro_pipeline import person_class, registry_url

USER = json.dumps({"type": "record", "name": "User", "namespace": "eddy.hdr", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
HEADER_SERDE = {"schema.id.serializer": header_schema_id_serializer}


def produce(bootstrap: str, topic: str,
            records: list[tuple[bytes | None, list[tuple[str, bytes]]]]) -> None:
    """Produce (value, headers) in order, acks=all; fail unless every one is delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "log_level": 3})
    failed: list[str] = []
    for value, headers in records:
        producer.produce(topic, value=value, headers=headers or None,
                         on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
    assert producer.flush(30) == 0 and not failed, failed


def read(spark: Any, bootstrap: str, url: str, topic: str, fmt: str,
         **options: str) -> list[Any]:
    reader = (spark.read.format("eddy").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("value.format", fmt)
              .option("schema.registry.url", url))
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(reader.load().collect(), key=lambda r: r["offset"])


def test_header_and_guid_framings(eddy_factory: Callable[..., Any], spark: Any) -> None:
    proc = eddy_factory("--set", "registry.listener=127.0.0.1:0")
    url = registry_url(proc)
    client = SchemaRegistryClient({"url": url})  # unchanged: the GUID comes from Eddy

    # Avro: the header framing (confluent-kafka's serializer), the classic one, a GUID prefix
    create_topic(proc.bootstrap, "hdr-users")
    by_header = AvroSerializer(client, USER, conf=HEADER_SERDE)
    by_prefix = AvroSerializer(client, USER)
    records: list[tuple[bytes | None, list[tuple[str, bytes]]]] = []
    for i in range(3):
        headers: list[tuple[str, bytes]] = [("trace", b"t%d" % i)]
        value = by_header({"name": f"header-{i}", "age": i},
                          SerializationContext("hdr-users", MessageField.VALUE, headers))
        records.append((value, headers))
    header = dict(records[0][1])["__value_schema_id"]
    assert header[0] == 1 and len(header) == 17  # magic byte 1 and the schema's GUID
    # confluent-kafka's own (dual) deserializer reads what it wrote
    read_back = AvroDeserializer(client)(records[0][0], SerializationContext(
        "hdr-users", MessageField.VALUE, records[0][1]))
    assert read_back == {"name": "header-0", "age": 0}
    classic = by_prefix({"name": "c", "age": 9},
                        SerializationContext("hdr-users", MessageField.VALUE))
    records += [
        (classic, []),
        (frame(str(_guid(header)), classic[5:]), []),   # magic byte 1 + GUID prefix
        (classic[5:], [("__value_schema_id", header[:9])]),          # a cut header
        (classic[5:], [("__value_schema_id", b"\x01" + bytes(16))]),  # an unknown GUID
    ]
    produce(proc.bootstrap, "hdr-users", records)
    rows = read(spark, proc.bootstrap, url, "hdr-users", "avro", includeHeaders="false")
    assert "headers" not in rows[0].asDict()
    assert [r["value"].asDict() if r["value"] else None for r in rows] == [
        {"name": "header-0", "age": 0}, {"name": "header-1", "age": 1},
        {"name": "header-2", "age": 2},
        {"name": "c", "age": 9}, {"name": "c", "age": 9}, None, None]
    errors = [r["_eddy_decode_error"] for r in rows]
    assert errors[:5] == [None] * 5
    assert errors[5] == ("value.format avro: header __value_schema_id: 9 byte(s); magic "
                         "byte 1 and a 16-byte schema GUID take 17")
    assert errors[6] == ("value.format avro: unknown schema guid "
                         "00000000-0000-0000-0000-000000000000 (the registry has no such "
                         "schema)")

    # Protobuf: the GUID and the message indexes in the header; the headers column kept
    person = person_class()
    to_proto = ProtobufSerializer(person, client, {"use.deprecated.format": False,
                                                   **HEADER_SERDE})
    create_topic(proc.bootstrap, "hdr-people")
    people = []
    for name in ("ann", "bob"):
        headers = []
        value = to_proto(person(name=name, scores=[len(name)]),
                         SerializationContext("hdr-people", MessageField.VALUE, headers))
        people.append((value, headers))
    produce(proc.bootstrap, "hdr-people", people)
    got = read(spark, proc.bootstrap, url, "hdr-people", "protobuf")
    assert [r["value"].asDict(recursive=True) for r in got] == [
        {"name": "ann", "scores": [3], "city": None},
        {"name": "bob", "scores": [3], "city": None}]
    assert [r["_eddy_decode_error"] for r in got] == [None, None]
    assert [[(h["key"], bytes(h["value"])) for h in r["headers"]] for r in got] == [
        h for _, h in people]


def _guid(header: bytes) -> Any:
    import uuid

    return uuid.UUID(bytes=header[1:17])
