"""Confluent-framed Protobuf values decoded into Arrow columns
(eddy.connect.formats.protobuf_columns), without Spark or a network: schemas as serialized
FileDescriptorProtos behind a fake registry."""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.connect.formats.confluent_wire import frame
from eddy.connect.formats.protobuf_columns import ProtobufDecoder
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError

FD = descriptor_pb2.FieldDescriptorProto


def field(msg: Any, name: str, number: int, kind: int, type_name: str = "",
          repeated: bool = False) -> None:
    f = msg.field.add(name=name, number=number, type=kind,
                      label=FD.LABEL_REPEATED if repeated else FD.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name


def order_file(first: str = "Order") -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop",
                                             syntax="proto3")
    fdp.dependency.append("google/protobuf/timestamp.proto")
    fdp.enum_type.add(name="Kind").value.add(name="NONE", number=0)
    fdp.enum_type[0].value.add(name="BIG", number=1)
    other = descriptor_pb2.DescriptorProto(name="Other")
    field(other, "x", 1, FD.TYPE_INT32)
    order = descriptor_pb2.DescriptorProto(name="Order")
    field(order, "id", 1, FD.TYPE_INT32)
    field(order, "total", 2, FD.TYPE_UINT64)
    field(order, "kind", 3, FD.TYPE_ENUM, ".shop.Kind")
    field(order, "tags", 4, FD.TYPE_STRING, repeated=True)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, FD.TYPE_STRING)
    field(entry, "value", 2, FD.TYPE_INT64)
    field(order, "attrs", 5, FD.TYPE_MESSAGE, ".shop.Order.AttrsEntry", repeated=True)
    field(order, "at", 6, FD.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    field(order, "other", 7, FD.TYPE_MESSAGE, ".shop.Other")
    field(order, "price", 8, FD.TYPE_DOUBLE)
    for m in ([order, other] if first == "Order" else [other, order]):
        fdp.message_type.append(m)
    return fdp


def b64(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.b64encode(fdp.SerializeToString()).decode()


class Registry(RegistryClient):
    def __init__(self, by_id: dict[int, str], kinds: dict[int, str] | None = None) -> None:
        super().__init__("http://registry.invalid")
        self.by_id = by_id
        self.kinds = kinds or {}

    def get_json(self, path: str) -> Any:
        assert path.endswith("?format=serialized"), path
        path = path.removesuffix("?format=serialized")
        if path == "/subjects/orders-value/versions/1":
            return {"schema": self.by_id[1], "schemaType": "PROTOBUF"}
        schema_id = int(path.rsplit("/", 1)[1])
        if schema_id not in self.by_id:
            raise RegistryError("HTTP 404 (error 40403): Schema not found", 40403)
        return {"schema": self.by_id[schema_id],
                "schemaType": self.kinds.get(schema_id, "PROTOBUF")}


def message_class(fdp: descriptor_pb2.FileDescriptorProto, name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
        timestamp_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def make_decoder() -> ProtobufDecoder:
    registry = Registry({1: b64(order_file()), 2: b64(order_file("Other")), 3: "AAAA"},
                        {3: "AVRO"})
    return ProtobufDecoder(registry, RegisteredSchema(b64(order_file()), "PROTOBUF", id=1,
                                                      subject="orders-value", version=1))


def test_types_and_values() -> None:
    dec = make_decoder()
    assert dec.arrow_type == pa.struct([
        ("id", pa.int32()), ("total", pa.decimal128(20, 0)), ("kind", pa.string()),
        ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())),
        ("at", pa.timestamp("us", tz="UTC")), ("other", pa.struct([("x", pa.int32())])),
        ("price", pa.float64())])
    order = message_class(order_file(), "shop.Order")
    at = datetime.datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.UTC)
    full = order(id=7, total=(1 << 64) - 1, kind=1, tags=["a", "b"], attrs={"k": 5},
                 price=2.5)
    full.at.FromDatetime(at)
    full.other.x = 3
    payload = full.SerializeToString()
    values = [
        frame(1, b"\x00" + payload),               # index [0] written short
        frame(1, b"\x02\x00" + payload),           # index [0] written long
        frame(2, b"\x02\x02" + payload),           # another file where Order is [1]
        frame(1, b"\x00" + order(id=1).SerializeToString()),
        None,
        frame(2, b"\x00" + payload),               # [0] there is shop.Other
        frame(1, b"\x02\x08" + payload),           # index 4: no such message
        frame(9, b"\x00"),
        frame(3, b"\x00"),
        frame(1, b"\x00\xff\xff"),
        b"\x00\x00",
    ]
    array, errors = dec.decode(values)
    rows = array.to_pylist()
    expected = {"id": 7, "total": decimal.Decimal((1 << 64) - 1), "kind": "BIG",
                "tags": ["a", "b"], "attrs": [("k", 5)], "at": at, "other": {"x": 3},
                "price": 2.5}
    assert rows[:3] == [expected] * 3 and errors[:3] == [None] * 3
    # proto3 scalars take their defaults; unset messages are null
    assert rows[3] == {"id": 1, "total": decimal.Decimal(0), "kind": "NONE", "tags": [],
                       "attrs": [], "at": None, "other": None, "price": 0.0}
    assert rows[4] is None and errors[4] is None
    reasons = {5: "written as message shop.Other", 6: "not in the writer schema",
               7: "unknown schema id 9", 8: "is AVRO, not PROTOBUF", 9: "does not decode",
               10: "fewer than the 5-byte"}
    for i, why in reasons.items():
        assert rows[i] is None and errors[i] is not None and why in errors[i], (i, errors[i])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=15))
def test_garbage_never_raises(payloads: list[bytes]) -> None:
    values = [frame(1, p) if i % 3 else p for i, p in enumerate(payloads)]
    array, errors = _DECODER.decode(list(values))
    assert len(array) == len(values) == len(errors)
    for row, err in zip(array.to_pylist(), errors, strict=True):
        assert (row is None) == (err is not None)


_DECODER = make_decoder()


def payment_file() -> descriptor_pb2.FileDescriptorProto:
    """A file that imports Confluent's built-in google/type/money.proto (no reference)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="payment.proto", package="shop",
                                             syntax="proto3")
    fdp.dependency.append("google/type/money.proto")
    pay = fdp.message_type.add(name="Payment")
    field(pay, "id", 1, FD.TYPE_INT32)
    field(pay, "amount", 2, FD.TYPE_MESSAGE, ".google.type.Money")
    return fdp


def test_a_built_in_import_decodes_without_a_reference() -> None:
    """google/type/*.proto are resolved as the registry resolves them (Confluent's
    built-ins): the reader neither asks the registry for them nor refuses them."""
    from eddy.connect.formats.protobuf_encoding import load_message_class
    from eddy.formats.protobuf.schema import known_files

    serialized = b64(payment_file())
    registry = Registry({1: serialized})
    dec = ProtobufDecoder(registry, RegisteredSchema(serialized, "PROTOBUF", id=1,
                                                     subject="orders-value", version=1))
    money = pa.struct([("currency_code", pa.string()), ("units", pa.int64()),
                       ("nanos", pa.int32())])
    assert dec.arrow_type == pa.struct([("id", pa.int32()), ("amount", money)])
    pool = descriptor_pool.DescriptorPool()
    for file in known_files("google/type/money.proto") or []:
        pool.Add(file)
    pool.Add(payment_file())
    payment = message_class_in(pool, "shop.Payment")
    value = payment(id=3)
    value.amount.currency_code, value.amount.units, value.amount.nanos = "EUR", 12, 500_000_000
    rows, errors = dec.decode([frame(1, b"\x00" + value.SerializeToString())])
    assert errors == [None]
    assert rows.to_pylist() == [{"id": 3, "amount": {"currency_code": "EUR", "units": 12,
                                                     "nanos": 500_000_000}}]
    # the sink side loads the same file into a message class it can write with
    cls = load_message_class(serialized)
    assert cls.FromString(value.SerializeToString()).amount.currency_code == "EUR"


def message_class_in(pool: Any, name: str) -> Any:
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
