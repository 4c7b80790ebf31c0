"""The schema registry served by a real `eddy serve`, used by confluent-kafka's own clients:
SchemaRegistryClient, Avro / JSON Schema / Protobuf serializers and deserializers round-trip
records through a topic (a Protobuf message using google.type.Money, which no reference
brings, included); schema evolution under BACKWARD (a new field with a default
registers, an incompatible change is 409); a registry killed with SIGKILL and started again
on the same data dir serves the same ids."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from google.type import money_pb2  # googleapis-common-protos (confluent-kafka[protobuf])
from kafka_helpers import consume_all, create_topic, produce

_URL_LINE = re.compile(r"schema registry on (http://\S+)")


def registry_url(proc: Any, starts: int = 1, timeout: float = 15.0) -> str:
    """The registry's URL from the node's startup log line (the ``starts``-th one: the log
    file is appended to across restarts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _URL_LINE.findall(proc.logs())
        if len(found) >= starts:
            return str(found[starts - 1])
        time.sleep(0.05)
    raise AssertionError(f"no registry startup line:\n{proc.logs()}")


@pytest.fixture
def registry(eddy_factory: Callable[..., Any]) -> tuple[Any, SchemaRegistryClient]:
    proc = eddy_factory("--set", "registry.listener=127.0.0.1:0")
    return proc, SchemaRegistryClient({"url": registry_url(proc)})


def round_trip(proc: Any, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` to a new topic and read them back, in order."""
    create_topic(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, values)
    read = consume_all(proc.bootstrap, topic, 1)[0]
    return [value for _, _, value in read if value is not None]


def value_ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def avro_record(*fields: tuple[str, str, Any]) -> str:
    """An Avro record ``User``: (name, type, default or ...) per field."""
    out = []
    for name, kind, default in fields:
        field: dict[str, Any] = {"name": name, "type": kind}
        if default is not ...:
            field["default"] = default
        out.append(field)
    return json.dumps({"type": "record", "name": "User", "namespace": "eddy.test",
                       "fields": out})


USER_V1 = avro_record(("name", "string", ...), ("age", "int", ...))
USER_V2 = avro_record(("name", "string", ...), ("age", "int", ...),
                      ("email", "string", "none"))
USER_BAD = avro_record(("name", "string", ...), ("age", "int", ...), ("phone", "string", ...))


# -- Avro --------------------------------------------------------------------------------------


def test_avro_round_trip_with_evolution(registry: tuple[Any, SchemaRegistryClient]) -> None:
    proc, client = registry
    topic = "users-avro"
    ctx = value_ctx(topic)
    v1 = AvroSerializer(client, USER_V1)
    v2 = AvroSerializer(client, USER_V2)
    values = [v1({"name": "ann", "age": 30}, ctx), v1({"name": "bob", "age": 41}, ctx),
              v2({"name": "cy", "age": 22, "email": "cy@example.org"}, ctx)]
    # the Confluent wire format: magic byte 0 and the 4-byte schema id
    assert [v[0] for v in values] == [0, 0, 0]
    assert [int.from_bytes(v[1:5], "big") for v in values] == [1, 1, 2]
    assert client.get_subjects() == ["users-avro-value"]
    assert client.get_versions("users-avro-value") == [1, 2]
    latest = client.get_latest_version("users-avro-value")
    assert (latest.schema_id, latest.version) == (2, 2)

    read = round_trip(proc, topic, values)
    assert read == values
    as_written = AvroDeserializer(client)
    assert [as_written(v, ctx) for v in read] == [
        {"name": "ann", "age": 30}, {"name": "bob", "age": 41},
        {"name": "cy", "age": 22, "email": "cy@example.org"}]
    # old records read with the evolved schema get the new field's default
    as_v2 = AvroDeserializer(client, USER_V2)
    assert as_v2(read[0], ctx) == {"name": "ann", "age": 30, "email": "none"}

    # a field without a default breaks BACKWARD: 409 with Confluent's message
    assert client.test_compatibility("users-avro-value", Schema(USER_BAD, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as info:
        client.register_schema("users-avro-value", Schema(USER_BAD, "AVRO"))
    assert (info.value.http_status_code, info.value.error_code) == (409, 409)
    assert "incompatible with an earlier schema" in info.value.error_message
    with pytest.raises(SchemaRegistryError) as info:
        AvroSerializer(client, USER_BAD)({"name": "d", "age": 1, "phone": "1"}, ctx)
    assert info.value.http_status_code == 409
    assert client.get_versions("users-avro-value") == [1, 2]


def test_client_admin_calls_and_error_codes(registry: tuple[Any, SchemaRegistryClient]) -> None:
    _, client = registry
    registered = client.register_schema("a/b", Schema(USER_V1, "AVRO"))  # URL-encoded subject
    assert client.get_subjects() == ["a/b"]
    assert client.lookup_schema("a/b", Schema(USER_V1, "AVRO")).version == 1
    assert client.get_version("a/b", 1).schema_id == registered
    assert client.get_schema(registered).schema_type == "AVRO"
    assert client.get_compatibility() == "BACKWARD"
    client.set_compatibility("a/b", "FULL")
    assert client.get_compatibility("a/b") == "FULL"
    assert client.update_mode("a/b", "READONLY") == "READONLY"
    assert client.get_mode("a/b") == "READONLY"
    with pytest.raises(SchemaRegistryError) as info:
        client.register_schema("a/b", Schema(USER_V2, "AVRO"))
    assert (info.value.http_status_code, info.value.error_code) == (422, 42205)
    assert client.delete_mode("a/b") == "READONLY"
    cases: list[tuple[Callable[[], object], int, int]] = [
        (lambda: client.get_version("nope", 1), 404, 40401),
        (lambda: client.get_version("a/b", 7), 404, 40402),
        (lambda: client.get_schema(999), 404, 40403),
        (lambda: client.get_mode("a/b"), 404, 40409),
        (lambda: client.get_compatibility("nope"), 404, 40408),
        (lambda: client.set_compatibility(level="SIDEWAYS"), 422, 42203),
    ]
    for call, status, code in cases:
        with pytest.raises(SchemaRegistryError) as info:
            call()
        assert (info.value.http_status_code, info.value.error_code) == (status, code)
    assert client.delete_subject("a/b") == [1]
    with pytest.raises(SchemaRegistryError) as info:
        client.delete_subject("a/b")
    assert info.value.error_code == 40404
    assert client.delete_subject("a/b", permanent=True) == [1]
    assert client.get_subjects() == []


# -- JSON Schema -------------------------------------------------------------------------------

ORDER_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id", "item"],
})


def test_json_schema_round_trip(registry: tuple[Any, SchemaRegistryClient]) -> None:
    proc, client = registry
    topic = "orders-json"
    ctx = value_ctx(topic)
    serialize = JSONSerializer(ORDER_SCHEMA, client)
    orders = [{"id": 1, "item": "tea"}, {"id": 2, "item": "cake"}]
    values = [serialize(order, ctx) for order in orders]
    assert {int.from_bytes(v[1:5], "big") for v in values} == {1}
    registered = client.get_latest_version("orders-json-value")
    assert registered.schema.schema_type == "JSON"
    read = round_trip(proc, topic, values)
    with_writer_schema = JSONDeserializer(None, schema_registry_client=client)
    assert [with_writer_schema(v, ctx) for v in read] == orders
    with_reader_schema = JSONDeserializer(ORDER_SCHEMA)
    assert [with_reader_schema(v, ctx) for v in read] == orders


# -- Protobuf ----------------------------------------------------------------------------------


def _proto_files() -> list[descriptor_pb2.FileDescriptorProto]:
    """eddytest/address.proto, and eddytest/person.proto which imports it."""
    address = descriptor_pb2.FileDescriptorProto(
        name="eddytest/address.proto", package="eddytest", syntax="proto3")
    msg = address.message_type.add(name="Address")
    msg.field.add(name="street", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    person = descriptor_pb2.FileDescriptorProto(
        name="eddytest/person.proto", package="eddytest", syntax="proto3",
        dependency=["eddytest/address.proto"])
    msg = person.message_type.add(name="Person")
    msg.field.add(name="name", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    msg.field.add(name="home", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                  type_name=".eddytest.Address",
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    return [address, person]


def person_class() -> type[Message]:
    """The Person message class, built at run time from its descriptors."""
    pool = descriptor_pool.DescriptorPool()
    for file in _proto_files():
        pool.Add(file)
    found: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("eddytest.Person"))
    return found


def test_protobuf_round_trip_with_an_import(registry: tuple[Any, SchemaRegistryClient]) -> None:
    proc, client = registry
    topic = "people-proto"
    ctx = value_ctx(topic)
    person = person_class()
    serialize = ProtobufSerializer(person, client, {"use.deprecated.format": False})
    people = [person(name="ann"), person(name="bob")]
    people[0].home.street = "1 Main St"
    values = [serialize(p, ctx) for p in people]
    # the import was registered first, under its file name, and is referenced
    assert client.get_subjects() == ["eddytest/address.proto", "people-proto-value"]
    latest = client.get_latest_version("people-proto-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in latest.schema.references or []] == [
        ("eddytest/address.proto", "eddytest/address.proto", 1)]
    assert "import \"eddytest/address.proto\"" in (latest.schema.schema_str or "")
    read = round_trip(proc, topic, values)
    deserialize = ProtobufDeserializer(person, {"use.deprecated.format": False}, client)
    decoded = [deserialize(v, ctx) for v in read]
    assert decoded == people
    assert decoded[0].home.street == "1 Main St"


def payment_class(with_tip: bool = False) -> type[Message]:
    """eddytest.Payment, whose ``amount`` is a ``google.type.Money`` (a file Confluent resolves
    without a reference), built at run time; ``with_tip`` adds a second Money field."""
    payment = descriptor_pb2.FileDescriptorProto(
        name="eddytest/payment.proto", package="eddytest", syntax="proto3",
        dependency=["google/type/money.proto"])
    msg = payment.message_type.add(name="Payment")
    msg.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    for name, number in [("amount", 2), *([("tip", 3)] if with_tip else [])]:
        msg.field.add(name=name, number=number,
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                      type_name=".google.type.Money",
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(money_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(payment)
    found: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("eddytest.Payment"))
    return found


def test_protobuf_with_google_type_money_needs_no_reference(
        registry: tuple[Any, SchemaRegistryClient]) -> None:
    # issue 30: confluent-kafka skips google/type/* (its "known types") when it registers the
    # references, so the registry must resolve google/type/money.proto itself, as Confluent's
    proc, client = registry
    topic = "payments-proto"
    ctx = value_ctx(topic)
    payment = payment_class()
    serialize = ProtobufSerializer(payment, client, {"use.deprecated.format": False})
    first = payment(id="p1")
    first.amount.currency_code, first.amount.units, first.amount.nanos = "EUR", 12, 500_000_000
    values = [serialize(first, ctx)]
    assert client.get_subjects() == ["payments-proto-value"]
    latest = client.get_latest_version("payments-proto-value")
    assert latest.schema.references in (None, [])
    assert 'import "google/type/money.proto";' in (latest.schema.schema_str or "")
    # it evolves: a second Money field is BACKWARD compatible
    with_tip = payment_class(with_tip=True)
    second = with_tip(id="p2")
    second.tip.currency_code, second.tip.units = "EUR", 1
    values.append(ProtobufSerializer(with_tip, client, {"use.deprecated.format": False})(
        second, ctx))
    assert client.get_versions("payments-proto-value") == [1, 2]
    read = round_trip(proc, topic, values)
    deserialize = ProtobufDeserializer(with_tip, {"use.deprecated.format": False}, client)
    decoded = [deserialize(v, ctx) for v in read]
    assert (decoded[0].amount.currency_code, decoded[0].amount.units) == ("EUR", 12)
    assert decoded[0].amount.nanos == 500_000_000
    assert (decoded[1].id, decoded[1].tip.units) == ("p2", 1)


# -- restart -----------------------------------------------------------------------------------


def test_restarted_registry_serves_the_same_ids(
        registry: tuple[Any, SchemaRegistryClient]) -> None:
    proc, client = registry
    ids = {
        "u-value": client.register_schema("u-value", Schema(USER_V1, "AVRO")),
        "o-value": client.register_schema("o-value", Schema(ORDER_SCHEMA, "JSON")),
    }
    ids["u2"] = client.register_schema("u-value", Schema(USER_V2, "AVRO"))
    texts = {schema_id: client.get_schema(schema_id).schema_str for schema_id in ids.values()}
    assert sorted(ids.values()) == [1, 2, 3]

    proc.kill()  # SIGKILL: no shutdown work at all
    proc.start()
    again = SchemaRegistryClient({"url": registry_url(proc, starts=2)})
    for schema_id, text in texts.items():
        assert again.get_schema(schema_id).schema_str == text
    assert again.get_versions("u-value") == [1, 2]
    assert again.register_schema("u-value", Schema(USER_V2, "AVRO")) == ids["u2"]
    assert again.lookup_schema("o-value", Schema(ORDER_SCHEMA, "JSON")).schema_id == ids[
        "o-value"]
    # a new schema gets the next id: none is handed out twice
    fresh = avro_record(("name", "string", ...), ("age", "int", ...), ("x", "int", 0))
    assert again.register_schema("u-value", Schema(fresh, "AVRO")) == 4
