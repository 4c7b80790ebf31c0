"""Protobuf values of Confluent's wire format, decoded by a schema of the node's registry.

After the 5-byte frame (magic byte 0, schema id) come the message indexes, which name the
message type within the schema: zigzag varints, a count then the indexes (outermost
first), or the single byte 0 for the file's first message. The rest is the message, shown
as protobuf's JSON mapping (field names as declared).

Hostile bytes: the indexes are read with every varint and count bounded by the bytes left
(``read_indexes``); the message is parsed by the protobuf library, whose work is bounded
by the input's size and nesting (its own recursion limit). Any failure becomes a reason
the browser shows beside the raw bytes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from eddy.formats.base import MAX_DEPTH
from eddy.formats.protobuf.schema import ProtobufSchema, parse

#: message indexes one value may carry at most (nesting deeper than the registry allows
#: for a schema cannot name a message)
MAX_INDEXES = MAX_DEPTH
_VARINT_BYTES = 10


class NotDecoded(ValueError):
    """The bytes are not a value of the schema: the message says why."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(zigzag-decoded value, position after it) of the varint at ``pos``."""
    value = shift = 0
    for i in range(pos, min(len(data), pos + _VARINT_BYTES)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), i + 1
    if len(data) - pos < _VARINT_BYTES:
        raise NotDecoded("message indexes: the value ends inside a varint")
    raise NotDecoded("message indexes: a varint longer than 10 bytes")


def read_indexes(payload: bytes) -> tuple[list[int], int]:
    """(message indexes, where the message starts) at the start of ``payload``."""
    count, pos = read_varint(payload, 0)
    if count == 0:
        return [0], pos
    if count < 0 or count > MAX_INDEXES:
        raise NotDecoded(f"message indexes: a count of {count} (0..{MAX_INDEXES} allowed)")
    if count > len(payload) - pos:  # each index takes a byte at least
        raise NotDecoded(f"message indexes: a count of {count} with {len(payload) - pos} "
                         "bytes left")
    indexes = []
    for _ in range(count):
        index, pos = read_varint(payload, pos)
        if index < 0:
            raise NotDecoded(f"message indexes: a negative index {index}")
        indexes.append(index)
    return indexes, pos


def _pool(schema: ProtobufSchema) -> descriptor_pool.DescriptorPool:
    """A pool holding the schema's file and every file it imports (imports first)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(path: str, dep: ProtobufSchema, depth: int) -> None:
        if path in added or depth > MAX_DEPTH:
            return
        added.add(path)
        for sub in dep.model.all_imports():
            found = dep.dependencies.get(sub) or schema.dependencies.get(sub)
            if found is not None:
                add(sub, found, depth + 1)
        pool.Add(dep.descriptor)

    for path, dep in schema.dependencies.items():
        add(path, dep, 0)
    pool.Add(schema.descriptor)
    return pool


class ProtobufDecoder:
    """Decodes the payload (after the 5-byte frame) of one Protobuf schema to JSON text.
    Thread-safe: message classes are made once per type, under a lock."""

    label = "protobuf"

    def __init__(self, schema: ProtobufSchema) -> None:
        self._schema = schema
        self._pool = _pool(schema)
        self._classes: dict[str, type[Message]] = {}
        self._lock = threading.Lock()

    def _class(self, name: str) -> type[Message]:
        with self._lock:
            cls = self._classes.get(name)
            if cls is None:
                cls = message_factory.GetMessageClass(self._pool.FindMessageTypeByName(name))
                self._classes[name] = cls
            return cls

    def decode(self, payload: bytes) -> tuple[str, str]:
        """(JSON text, the message's full name)."""
        indexes, pos = read_indexes(payload)
        try:
            name = self._schema.message_name(indexes)
        except KeyError:
            raise NotDecoded(f"message indexes {indexes} name no message of the "
                             "schema") from None
        message = self._class(name).FromString(payload[pos:])
        shown = json_format.MessageToDict(message, preserving_proto_field_name=True)
        return json.dumps(shown, ensure_ascii=False), name


def load(schema_id: int, text: str, references: Mapping[str, str]
         ) -> tuple[ProtobufDecoder | None, str]:
    """A decoder of the Protobuf schema ``text`` (its imports' texts by import path), or
    why not. CPU work (the parser's): off the event loop."""
    try:
        return ProtobufDecoder(parse(text, references)), ""
    except Exception as exc:  # the registry checked it; still, never fail the page
        return None, f"schema id {schema_id} does not load: {str(exc)[:200]}"
