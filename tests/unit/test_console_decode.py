"""The message browser's decoding of framed values (Confluent's wire format) by the schemas
of a real registry service: Avro, JSON Schema and Protobuf (message indexes, nested
messages, imports through references); hostile bytes are shown raw with the reason, and
nothing raises."""

from __future__ import annotations

import asyncio
import json
import random
import struct
from types import SimpleNamespace
from typing import Any

import pytest

from eddy.observe.console.decode.protobuf import NotDecoded, read_indexes, read_varint
from eddy.observe.console.decode.values import (
    MAX_JSON_DEPTH,
    SHOWN_BYTES,
    Found,
    SchemaLookup,
    Shown,
    show_bytes,
)
from eddy.observe.console.messages import _format
from eddy.registry.memory_log import MemoryLog
from eddy.registry.requests import SchemaRequest
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

SHOP = """syntax = "proto3";
package shop;
import "common.proto";
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  Line line = 4;
  common.Money price = 5;
  message Line { int32 qty = 1; }
}
message Refund { string reason = 1; }
message Tree { Tree child = 1; int32 depth = 2; }
"""
COMMON = """syntax = "proto3";
package common;
message Money { string currency = 1; int64 cents = 2; }
"""
ORDER_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"},
                                                  "item": {"type": "string"}}}
AVRO = {"type": "record", "name": "Payment", "fields": [{"name": "id", "type": "long"}]}
AVRO_MONEY = {"type": "record", "name": "Money", "namespace": "shop",
              "fields": [{"name": "cents", "type": "long"}]}
AVRO_PRICED = {"type": "record", "name": "Priced", "namespace": "shop",
               "fields": [{"name": "price", "type": "shop.Money"}]}


class Registry:
    """A registry service over an in-memory log, with what the console reads of a node's
    registry role (``ready``, ``service``)."""

    def __init__(self) -> None:
        state = SchemaState()
        self.service = RegistryService(MemoryLog(state.apply), state)
        self.ready = asyncio.Event()
        self.ready.set()

    def register(self, subject: str, schema: str, schema_type: str,
                 references: list[dict[str, Any]] | None = None) -> int:
        request = SchemaRequest.from_body({"schema": schema, "schemaType": schema_type,
                                           "references": references or []})
        return int(asyncio.run(self.service.register(subject, request))["id"])


@pytest.fixture(scope="module")
def registry() -> dict[str, Any]:
    reg = Registry()
    common = reg.register("common", COMMON, "PROTOBUF")
    shop = reg.register("shop-value", SHOP, "PROTOBUF", [
        {"name": "common.proto", "subject": "common", "version": 1}])
    orders = reg.register("orders-value", json.dumps(ORDER_SCHEMA), "JSON")
    avro = reg.register("payments-value", json.dumps(AVRO), "AVRO")
    reg.register("money", json.dumps(AVRO_MONEY), "AVRO")
    priced = reg.register("priced-value", json.dumps(AVRO_PRICED), "AVRO", [
        {"name": "shop.Money", "subject": "money", "version": 1}])
    lookup = SchemaLookup(reg)  # type: ignore[arg-type]
    ids = {"common": common, "shop": shop, "json": orders, "avro": avro, "priced": priced}
    found = asyncio.run(lookup.resolve([*ids.values(), 999]))
    return {"ids": ids, "found": found, "lookup": lookup}


def frame(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def zigzag(*values: int) -> bytes:
    out = bytearray()
    for v in values:
        n = (v << 1) ^ (v >> 63)
        while n & ~0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def field(number: int, wire: int, body: bytes) -> bytes:
    return bytes([number << 3 | wire]) + body


def length_delimited(number: int, body: bytes) -> bytes:
    return field(number, 2, bytes([len(body)]) + body)


def show(registry: dict[str, Any], kind: str, payload: bytes) -> Shown:
    found: dict[int, Found] = registry["found"]
    return show_bytes(frame(registry["ids"][kind], payload), found)


def test_protobuf_values_decode_by_their_message_indexes(registry: dict[str, Any]) -> None:
    money = length_delimited(1, b"EUR") + field(2, 0, b"\xe8\x07")  # cents 1000
    order = (field(1, 0, b"\x07") + length_delimited(2, b"pen") + length_delimited(3, b"a")
             + length_delimited(3, b"b") + length_delimited(4, field(1, 0, b"\x02"))
             + length_delimited(5, money))
    shown = show(registry, "shop", b"\x00" + order)  # the single 0: the first message
    assert (shown.format, shown.detail, shown.note) == ("protobuf", "shop.Order", "")
    assert json.loads(shown.text or "") == {
        "id": "7", "item": "pen", "tags": ["a", "b"], "line": {"qty": 2},
        "price": {"currency": "EUR", "cents": "1000"}}
    assert _format(shown) == f"protobuf #{registry['ids']['shop']} shop.Order"

    refund = show(registry, "shop", zigzag(1, 1) + length_delimited(1, b"late"))
    assert (refund.detail, json.loads(refund.text or "")) == ("shop.Refund",
                                                              {"reason": "late"})
    line = show(registry, "shop", zigzag(2, 0, 0) + field(1, 0, b"\x05"))
    assert (line.detail, json.loads(line.text or "")) == ("shop.Order.Line", {"qty": 5})
    # the imported file's own schema id decodes its own messages
    money_shown = show(registry, "common", b"\x00" + money)
    assert money_shown.detail == "common.Money"


def test_json_schema_and_avro_values_decode(registry: dict[str, Any]) -> None:
    shown = show(registry, "json", b'{"id": 7, "item": "z\xc3\xab"}')
    assert (shown.format, shown.text) == ("json", '{"id": 7, "item": "zë"}')
    assert _format(shown) == f"json #{registry['ids']['json']}"
    avro = show(registry, "avro", b"\x54")  # long 42, zigzag
    assert (avro.format, avro.text) == ("avro", '{"id": 42}')
    priced = show(registry, "priced", b"\xd0\x0f")  # a type from a reference: cents 1000
    assert (priced.format, priced.text) == ("avro", '{"price": {"cents": 1000}}')
    unknown = show_bytes(frame(999, b"hi"), registry["found"])
    assert (unknown.format, unknown.text) == ("hex", frame(999, b"hi").hex(" "))
    assert "999 is not registered" in unknown.note


@pytest.mark.parametrize(("payload", "reason"), [
    (b"", "ends inside a varint"),
    (b"\x80\x80", "ends inside a varint"),
    (b"\xff" * 11, "longer than 10 bytes"),
    (zigzag(-1), "a count of -1"),
    (zigzag(10_000) + b"\x00" * 10, "a count of 10000"),
    (zigzag(5, 0), "a count of 5 with 1 bytes left"),
    (zigzag(1, -3), "a negative index"),
    (zigzag(1, 7), "name no message"),
    (zigzag(2, 1, 0), "name no message"),
    (b"\x00" + length_delimited(2, b"pen")[:-1], "DecodeError"),  # cut short
    (b"\x00\x12\x02\xff\xfe", "DecodeError"),  # a string that is not UTF-8
])
def test_hostile_protobuf_bytes_are_shown_raw_with_why(
        registry: dict[str, Any], payload: bytes, reason: str) -> None:
    shown = show(registry, "shop", payload)
    assert shown.format in ("hex", "utf8") and shown.schema_id == registry["ids"]["shop"]
    assert reason in shown.note, shown.note
    assert shown.note.startswith(f"schema id {registry['ids']['shop']}")


def test_nesting_past_the_parsers_limit_is_refused(registry: dict[str, Any]) -> None:
    tree = field(2, 0, b"\x01")
    for _ in range(150):  # more levels than protobuf's recursion limit (100)
        tree = field(1, 2, _varint(len(tree)) + tree)
    shown = show(registry, "shop", zigzag(1, 2) + tree)
    assert shown.format == "hex" and "does not decode as protobuf" in shown.note
    shallow = field(1, 2, b"\x02" + field(2, 0, b"\x01"))
    assert json.loads(show(registry, "shop", zigzag(1, 2) + shallow).text or "") == {
        "child": {"depth": 1}}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.mark.parametrize(("payload", "reason"), [
    (b"{\"id\": ", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested deeper"),
    (b'{"n": ' + b"9" * 5000 + b"}", "not JSON"),  # past Python's digits limit
])
def test_hostile_json_values_are_shown_raw_with_why(
        registry: dict[str, Any], payload: bytes, reason: str) -> None:
    shown = show(registry, "json", payload)
    assert shown.format in ("hex", "utf8") and reason in shown.note, shown


def test_deep_json_inside_strings_is_not_counted(registry: dict[str, Any]) -> None:
    text = json.dumps({"s": "[" * 1000, "esc": 'a\\"[['})
    shown = show(registry, "json", text.encode())
    assert shown.format == "json" and json.loads(shown.text or "") == json.loads(text)


def test_random_bytes_never_raise(registry: dict[str, Any]) -> None:
    rng = random.Random(17)
    for kind in ("shop", "json", "avro"):
        for _ in range(300):
            payload = rng.randbytes(rng.randrange(0, 64))
            shown = show(registry, kind, payload)
            assert shown.format in ("protobuf", "json", "avro", "utf8", "hex")
            assert shown.size == len(payload) + 5


def test_long_values_are_cut() -> None:
    shown = show_bytes(b"x" * (SHOWN_BYTES + 10), {})
    assert (shown.format, len(shown.text or ""), shown.size) == ("utf8", SHOWN_BYTES,
                                                                 SHOWN_BYTES + 10)


def test_varints() -> None:
    assert read_varint(zigzag(300), 0) == (300, 2)
    assert read_varint(zigzag(-2), 0) == (-2, 1)
    assert read_indexes(b"\x00rest") == ([0], 1)
    assert read_indexes(zigzag(3, 1, 0, 2)) == ([1, 0, 2], 4)
    with pytest.raises(NotDecoded):
        read_indexes(b"")


def test_lookup_without_a_ready_registry() -> None:
    assert asyncio.run(SchemaLookup(None).resolve([7])) == {
        7: (None, "no schema registry on this node")}
    waiting = SimpleNamespace(ready=asyncio.Event())
    lookup = SchemaLookup(waiting)  # type: ignore[arg-type]
    assert asyncio.run(lookup.resolve([7]))[7] == (None, "registry not ready")


def test_schemas_that_cannot_load_say_why(registry: dict[str, Any]) -> None:
    reg = Registry()
    recursive = reg.register("r", json.dumps({"type": "record", "name": "N", "fields": [
        {"name": "next", "type": ["null", "N"]}]}), "AVRO")
    found = asyncio.run(SchemaLookup(reg).resolve([recursive]))  # type: ignore[arg-type]
    assert found[recursive][0] is None and "recursive" in found[recursive][1]
    shown = show_bytes(frame(recursive, b"\x00"), found)
    assert shown.format == "hex" and "recursive" in shown.note


def test_avro_references_are_checked_like_the_schema() -> None:
    """A type from a reference is decoded with it, and refused as the schema would be: an
    array of zero-width items, or a type that contains itself."""
    from eddy.observe.console.decode.avro import load

    nothing = json.dumps({"type": "record", "name": "Holder", "namespace": "r", "fields": [
        {"name": "xs", "type": {"type": "array", "items": {
            "type": "fixed", "name": "Nothing", "size": 0}}}]})
    uses = json.dumps({"type": "record", "name": "Top", "fields": [
        {"name": "h", "type": "r.Holder"}]})
    decoder, why = load(7, uses, {"holder": nothing})
    assert decoder is None and "take no bytes" in why
    node = json.dumps({"type": "record", "name": "Node", "namespace": "r", "fields": [
        {"name": "next", "type": ["null", "r.Node"]}]})
    decoder, why = load(8, json.dumps({"type": "record", "name": "List", "fields": [
        {"name": "head", "type": "r.Node"}]}), {"node": node})
    assert decoder is None and "recursive" in why
