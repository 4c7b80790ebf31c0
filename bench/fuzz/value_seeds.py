"""Seeds of the value decoder fuzzer (``bench.fuzz.value_decoders``): an in-memory schema
registry holding Avro, JSON Schema and Protobuf schemas (readers, evolved writers,
references, and writer schemas a hostile producer could register), a pipeline registry
client answering from it, and valid framed values of each format (made with fastavro,
protobuf and json), in each framing: magic byte 0 and an id, magic byte 1 and a GUID, and
the id in a record header with a bare payload.

An input is records separated by ``SEP``; a record is ``header HSEP value`` or a value
alone (the header is the schema-id header's value, ``__value_schema_id``)."""

from __future__ import annotations

import asyncio
import base64
import decimal
import io
import json
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

import fastavro
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from eddy.connect.formats.registry_client import RegistryClient
from eddy.connect.formats.registry_client import RegistryError as ClientError
from eddy.registry.contract import RegistryError
from eddy.registry.memory_log import MemoryLog
from eddy.registry.requests import SchemaRequest
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

SEP = b"\xff\x00\xfe\x00"
HSEP = b"\xfd\x00"
#: the pipeline client's registry URL (never dialled: MemoryClient answers)
URL = "http://value-fuzz.invalid"


def _j(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme", "fields": [
    {"name": "street", "type": "string"},
    {"name": "zip", "type": {"type": "fixed", "name": "Zip", "size": 5}}]}
PAY_OLD = {"type": "record", "name": "Payment", "fields": [
    {"name": "id", "type": "int"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None}]}
#: the pipeline's Avro reader: unions (nullable, int/long, general), maps, arrays, enums,
#: fixed and the logical types the column mapping types itself
PAY = {"type": "record", "name": "Payment", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "choice", "type": ["null", "string", "long", {
        "type": "record", "name": "Card", "fields": [
            {"name": "last4", "type": "string"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind",
                                      "symbols": ["VISA", "AMEX"]}}]}], "default": None},
    {"name": "n", "type": ["int", "long"], "default": 0},
    {"name": "tags", "type": {"type": "array", "items": {
        "type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": {"type": "array", "items": "double"}},
     "default": {}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"},
     "default": 0},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"},
     "default": 0},
    {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}, "default": 0},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}, "default": ""},
    {"name": "ratio", "type": ["float", "double"], "default": 0.5},
    {"name": "raw", "type": ["null", "bytes"], "default": None},
    {"name": "price", "type": {"type": "fixed", "name": "Price", "size": 8,
                               "logicalType": "decimal", "precision": 12, "scale": 3},
     "default": "\u0000" * 8}]}
ORDER_REF = {"type": "record", "name": "Shipment", "fields": [
    {"name": "to", "type": "com.acme.Address"},
    {"name": "stops", "type": {"type": "array", "items": "com.acme.Address"}}]}
LINKED = {"type": "record", "name": "Node", "fields": [
    {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]}
#: writer schemas a hostile producer could register: arrays whose items take no bytes
#: (a block count then costs time and memory, not input), and a deep nest of unions
_HEAD = [{"name": "id", "type": "long"}, PAY["fields"][1]]
ZERO_WIDTH = [  # named as the reader's record, so that it resolves against it
    {"type": "record", "name": "Payment", "fields": [
        *_HEAD, {"name": "z", "type": {"type": "fixed", "name": "Empty", "size": 0}},
        {"name": "a", "type": {"type": "array", "items": "Empty"}}]},
    {"type": "record", "name": "Payment", "fields": [
        *_HEAD, {"name": "e", "type": {"type": "record", "name": "Nothing", "namespace": "ns",
                                       "fields": []}},
        {"name": "a", "type": {"type": "array", "items": "ns.Nothing"}}]},
    {"type": "record", "name": "Payment", "fields": [
        *_HEAD, {"name": "a", "type": {"type": "array", "items": {"type": "null"}}}]},
    {"type": "record", "name": "Payment", "fields": [
        *_HEAD, {"name": "a", "type": {"type": "map", "values": {
            "type": "array", "items": {"type": "record", "name": "N", "fields": [
                {"name": "x", "type": "null"}]}}}}]},
]
ORDERS = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
          "properties": {
              "id": {"type": "integer"}, "total": {"type": "number"},
              "paid": {"type": "boolean"}, "note": {"type": ["string", "null"]},
              "customer": {"$ref": "#/definitions/customer"},
              "lines": {"type": "array", "items": {"$ref": "#/definitions/line"}},
              "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
              "any": {},
              "either": {"oneOf": [{"type": "null"}, {"type": "string"}]},
              "mixed": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
              "extra": {"allOf": [{"properties": {"a": {"type": "string"}}},
                                  {"properties": {"b": {"type": "integer"}}}]}},
          "definitions": {
              "customer": {"type": "object", "properties": {
                  "name": {"type": "string"},
                  "address": {"type": "object", "properties": {
                      "street": {"type": "string"},
                      "geo": {"type": "array", "items": {"type": "number"}}}}}},
              "line": {"type": "object", "properties": {
                  "sku": {"type": "string"}, "qty": {"type": "integer"}}}}}
ORDERS_OLD = {"type": "object", "properties": {"id": {"type": "integer"},
                                               "total": {"type": "number"}}}
COMMON = 'syntax = "proto3";\npackage common;\nmessage Money { string currency = 1; ' \
         'int64 cents = 2; }\n'
SHOP = """syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  Line line = 4;
  common.Money price = 5;
  map<string, Line> lines = 6;
  Status status = 7;
  oneof pay { string card = 8; uint64 cash = 9; }
  google.protobuf.Timestamp at = 10;
  optional sint32 delta = 11;
  bytes blob = 12;
  repeated double weights = 13;
  fixed64 big = 14;
  message Line { int32 qty = 1; Inner inner = 2; message Inner { bool ok = 1; } }
  enum Status { NEW = 0; PAID = 1; }
}
message Refund { string reason = 1; }
message Tree { Tree child = 1; int32 depth = 2; }
"""
OTHER = 'syntax = "proto2";\npackage other;\nmessage Order { required int32 id = 1; ' \
        'optional string s = 2 [default = "x"]; }\n'


@dataclass
class Registered:
    """The fuzz registry: a service over an in-memory log, and what it holds."""

    service: RegistryService
    loop: asyncio.AbstractEventLoop
    ids: dict[str, int] = field(default_factory=dict)
    guids: dict[str, str] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def call(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


def build_registry() -> Registered:
    """A registry service holding the fuzz schemas; also what the console reads of a
    node's registry role (``ready``, ``service``)."""
    state = SchemaState()
    loop = asyncio.new_event_loop()
    reg = Registered(RegistryService(MemoryLog(state.apply), state, default_level="NONE"),
                     loop)
    reg.ready.set()

    def add(name: str, subject: str, text: str, kind: str,
            refs: list[dict[str, Any]] | None = None) -> None:
        request = SchemaRequest.from_body({"schema": text, "schemaType": kind,
                                           "references": refs or []})
        schema_id = int(reg.call(reg.service.register(subject, request))["id"])
        entry = state.schema_by_id(schema_id)
        assert entry is not None
        reg.ids[name] = schema_id
        reg.guids[name] = entry.guid

    add("pay_old", "pay-old", _j(PAY_OLD), "AVRO")
    add("pay", "pay-value", _j(PAY), "AVRO")
    add("address", "address", _j(ADDRESS), "AVRO")
    add("shipment", "ship-value", _j(ORDER_REF), "AVRO",
        [{"name": "com.acme.Address", "subject": "address", "version": 1}])
    add("linked", "linked", _j(LINKED), "AVRO")
    for i, zero in enumerate(ZERO_WIDTH):
        add(f"zero{i}", f"zero{i}", _j(zero), "AVRO")
    add("orders", "orders-value", _j(ORDERS), "JSON")
    add("orders_old", "orders-old", _j(ORDERS_OLD), "JSON")
    add("common", "common", COMMON, "PROTOBUF")
    add("shop", "shop-value", SHOP, "PROTOBUF",
        [{"name": "common.proto", "subject": "common", "version": 1}])
    add("other", "other", OTHER, "PROTOBUF")
    return reg


class MemoryClient(RegistryClient):
    """The pipelines' registry client answering from a ``Registered`` service instead of
    HTTP: the same paths and query, the same JSON bodies, Confluent's error codes."""

    def __init__(self, reg: Registered) -> None:
        super().__init__(URL)
        self.reg = reg
        self.requests = 0

    def _get(self, url: str, data: bytes | None = None) -> Any:
        self.requests += 1
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        fmt = query.get("format")
        path = [urllib.parse.unquote(p) for p in parts.path.strip("/").split("/")]
        service = self.reg.service
        try:
            if path[:2] == ["schemas", "ids"] and len(path) == 3 and path[2].isdigit():
                body = self.reg.call(service.schema_by_id(int(path[2]), fmt=fmt))
            elif path[:2] == ["schemas", "guids"] and len(path) == 3:
                body = self.reg.call(service.schema_by_guid(path[2], fmt=fmt))
            elif path[0] == "subjects" and len(path) == 4 and path[2] == "versions":
                body = self.reg.call(service.get_version(path[1], path[3], fmt=fmt))
            else:
                raise ClientError(f"schema registry {url}: HTTP 404", 404)
        except RegistryError as exc:
            raise ClientError(f"schema registry {url}: HTTP {exc.status} (error "
                              f"{exc.code}): {exc.message}", exc.code) from None
        return json.loads(json.dumps(body))


# -- values ------------------------------------------------------------------------------------
def avro_payload(schema: Any, record: Any, named: dict[str, Any] | None = None) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas=named or {}),
                               record)
    return out.getvalue()


def _proto_classes(reg: Registered) -> dict[str, type[Message]]:
    """Message classes of the registered Protobuf schemas (from their serialized form)."""
    pool = descriptor_pool.DescriptorPool()
    from google.protobuf import timestamp_pb2

    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
        timestamp_pb2.DESCRIPTOR.serialized_pb))
    for name, file_name in (("common", "common.proto"), ("shop", "shop.proto"),
                            ("other", "other.proto")):
        body = reg.call(reg.service.schema_by_id(reg.ids[name], fmt="serialized"))
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"]))
        fdp.name = file_name
        pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n))
            for n in ("common.Money", "shop.Order", "shop.Order.Line", "shop.Refund",
                      "shop.Tree", "other.Order")}


def zigzag(*values: int) -> bytes:
    out = bytearray()
    for v in values:
        n = (v << 1) ^ (v >> 63)
        while n & ~0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def frame(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def frame_guid(guid: str, payload: bytes) -> bytes:
    return b"\x01" + uuid.UUID(guid).bytes + payload


def payloads(reg: Registered) -> list[tuple[str, bytes, bytes]]:
    """(schema name, Protobuf message indexes or b"", payload) of valid values."""
    pay = {"id": 7, "amount": decimal.Decimal("12.34"), "note": "hi",
           "choice": ("Card", {"last4": "4242", "kind": "AMEX"}), "n": 3,
           "tags": ["RED", "BLUE"], "attrs": {"a": [1.5, -2.0], "b": []}, "day": 19000,
           "at": 1_700_000_000_000, "at_us": 1_700_000_000_000_000, "local": 5, "t": 1000,
           "uid": str(uuid.UUID(int=5)), "ratio": 0.25, "raw": b"\x00\xff",
           "price": decimal.Decimal("1.500")}
    named: dict[str, Any] = {}
    fastavro.parse_schema(ADDRESS, named_schemas=named)
    addr = {"street": "Main", "zip": b"12345"}
    head = {"id": 5, "amount": decimal.Decimal("1.00")}
    out = [
        ("pay", b"", avro_payload(PAY, pay)),
        ("pay", b"", avro_payload(PAY, {**pay, "choice": 99, "note": None, "raw": None})),
        ("pay", b"", avro_payload(PAY, {**pay, "choice": "text", "attrs": {}})),
        ("pay_old", b"", avro_payload(PAY_OLD, {"id": 1, "amount": decimal.Decimal("-0.01"),
                                                "note": None})),
        ("shipment", b"", avro_payload(ORDER_REF, {"to": addr, "stops": [addr, addr]},
                                       named)),
        ("linked", b"", avro_payload(LINKED, {"v": 1, "next": {"v": 2, "next": None}})),
        ("zero0", b"", avro_payload(ZERO_WIDTH[0], {**head, "z": b"", "a": [b"", b""]})),
        ("zero1", b"", avro_payload(ZERO_WIDTH[1], {**head, "e": {}, "a": [{}]})),
        ("zero2", b"", avro_payload(ZERO_WIDTH[2], {**head, "a": [None]})),
        ("zero3", b"", avro_payload(ZERO_WIDTH[3], {**head, "a": {"k": [{"x": None}]}})),
    ]
    docs = [{"id": 1, "total": 9.5, "paid": True, "note": None,
             "customer": {"name": "Ann", "address": {"street": "x", "geo": [1.5, 2]}},
             "lines": [{"sku": "a", "qty": 2}, None], "attrs": {"k": 3}, "any": [1, {"x": 2}],
             "either": "s", "mixed": 3, "extra": {"a": "x", "b": 1}},
            {"id": 2, "total": 1}]
    out += [("orders", b"", json.dumps(d).encode()) for d in docs]
    out.append(("orders_old", b"", b'{"id": 3, "total": 0.5}'))
    cls = _proto_classes(reg)
    order = cls["shop.Order"]()
    order.id, order.item, order.status, order.cash, order.delta = 7, "pen", 1, 2**63, -3
    order.tags.extend(["a", "b"])
    order.line.qty, order.line.inner.ok = 2, True
    order.price.currency, order.price.cents = "EUR", 1000
    order.lines["x"].qty = 5
    order.at.seconds, order.at.nanos = 1_700_000_000, 500_000
    order.blob, order.big = b"\x00\x01", 2**64 - 1
    order.weights.extend([0.5, -1.0])
    line = cls["shop.Order.Line"]()
    line.qty = 4
    tree = cls["shop.Tree"]()
    tree.child.child.depth = 2
    money = cls["common.Money"]()
    money.currency, money.cents = "USD", -5
    other = cls["other.Order"]()
    other.id = 1
    out += [("shop", b"\x00", order.SerializeToString()),
            ("shop", zigzag(2, 0, 0), line.SerializeToString()),
            ("shop", zigzag(1, 1), b"\x0a\x04late"),
            ("shop", zigzag(1, 2), tree.SerializeToString()),
            ("common", b"\x00", money.SerializeToString()),
            ("other", b"\x00", other.SerializeToString())]
    return out


def valid_values(reg: Registered) -> list[tuple[str, bytes]]:
    """(schema name, framed value) of every payload, framed by id."""
    return [(name, frame(reg.ids[name], idx + body)) for name, idx, body in payloads(reg)]


def seed_inputs(reg: Registered) -> list[bytes]:
    """Each valid value alone by id, by GUID and with its id in a header; then batches of
    several (one of each format, and mixed framings)."""
    singles: list[bytes] = []
    for name, idx, body in payloads(reg):
        singles.append(frame(reg.ids[name], idx + body))
        singles.append(frame_guid(reg.guids[name], idx + body))
        singles.append(frame(reg.ids[name], idx) + HSEP + body)
    batches = [SEP.join(singles[i::7]) for i in range(7)]
    return [*singles, *batches, SEP.join([*singles[:3], b"", b"\x00"])]
