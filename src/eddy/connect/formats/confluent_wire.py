"""Confluent's wire format for schema-registry serialized keys and values.

A framed value is a magic byte 0, the writer schema's id as a 4-byte big-endian
integer, then the payload; or (confluent-kafka 2.11+) a magic byte 1 and the schema's
16-byte GUID, then the payload. Protobuf payloads start with the message indexes (which
message of the schema file was written): a zig-zag varint count, then that many
zig-zag varint indexes; a count of 0 stands for [0], the first message.

The schema's id may also travel in a record header (`__value_schema_id`,
`__key_schema_id`: confluent-kafka's `header_schema_id_serializer`): the same magic
byte and id or GUID (and for Protobuf the message indexes), nothing after; the value
is then the bare payload. A reader looks at the header first, then the prefix, as
confluent-kafka's `dual_schema_id_deserializer` does.

Everything is checked against the bytes present: a short value, another magic byte or
an index list running past the end is a FrameError saying which, never an IndexError.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

MAGIC = 0
MAGIC_GUID = 1
HEADER_BYTES = 5
GUID_HEADER_BYTES = 17
#: the record headers that carry a key's / a value's schema id
HEADER_KEYS = {"key": "__key_schema_id", "value": "__value_schema_id"}
#: schemas (and failures) a decoder remembers per id or GUID before it forgets the oldest
MAX_REMEMBERED = 4096

#: a schema's id (magic byte 0) or GUID (magic byte 1, as canonical lower-case text)
SchemaKey = int | str
#: what a schema-id header says: (id or GUID, Protobuf message indexes or None)
HeaderId = tuple[SchemaKey, list[int] | None]
#: more message indexes than this is not a real schema (nesting depth of messages)
MAX_INDEXES = 100


class FrameError(ValueError):
    """A key or value that is not in Confluent's wire format; the message says why."""


def describe(key: SchemaKey) -> str:
    """`schema id N` or `schema guid G`, for messages."""
    return f"schema id {key}" if isinstance(key, int) else f"schema guid {key}"


def split_frame(value: bytes) -> tuple[SchemaKey, int]:
    """(schema id or GUID, offset of the payload) of a framed value."""
    if len(value) >= HEADER_BYTES and value[0] == MAGIC:
        return int.from_bytes(value[1:HEADER_BYTES], "big"), HEADER_BYTES
    if len(value) >= GUID_HEADER_BYTES and value[0] == MAGIC_GUID:
        return str(uuid.UUID(bytes=bytes(value[1:GUID_HEADER_BYTES]))), GUID_HEADER_BYTES
    if not value:
        raise FrameError("0 byte(s), fewer than the 5-byte Confluent header (magic byte 0 "
                         "and a 4-byte schema id)")
    if value[0] == MAGIC_GUID:
        raise FrameError(f"magic byte is 0x01 but {len(value)} byte(s), fewer than the "
                         "17-byte header (magic byte 1 and a 16-byte schema GUID)")
    if value[0] == MAGIC:
        raise FrameError(f"{len(value)} byte(s), fewer than the 5-byte Confluent header "
                         "(magic byte 0 and a 4-byte schema id)")
    raise FrameError(f"magic byte is 0x{value[0]:02x}, not 0x00 or 0x01: not Confluent's "
                     "wire format")


def parse_header(header: bytes, protobuf: bool) -> HeaderId:
    """A schema-id header's value: magic byte 0 and a 4-byte id or magic byte 1 and a
    16-byte GUID, then (`protobuf`) the message indexes, and nothing else."""
    if not header or header[0] not in (MAGIC, MAGIC_GUID):
        first = f"0x{header[0]:02x}" if header else "missing"
        raise FrameError(f"magic byte is {first}, not 0x00 or 0x01")
    size = HEADER_BYTES if header[0] == MAGIC else GUID_HEADER_BYTES
    if len(header) < size or (len(header) > size and not protobuf):
        what = "a 4-byte schema id" if size == HEADER_BYTES else "a 16-byte schema GUID"
        raise FrameError(f"{len(header)} byte(s); magic byte {header[0]} and {what} "
                         f"take {size}" + (" plus the message indexes" if protobuf else ""))
    key, pos = split_frame(header)
    if not protobuf:
        return key, None
    indexes, pos = message_indexes(header, pos)
    if pos != len(header):
        raise FrameError(f"{len(header) - pos} byte(s) after the message indexes")
    return key, indexes


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 10 bytes at `pos`: (value, next position)."""
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise FrameError("a varint runs past the end of the value")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise FrameError("a varint longer than 10 bytes")


def read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = read_varint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def message_indexes(data: bytes, pos: int) -> tuple[list[int], int]:
    """Protobuf message indexes at `pos` (after the header): (indexes, payload offset)."""
    count, pos = read_zigzag(data, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > MAX_INDEXES:
        raise FrameError(f"message index count {count} is not in 0..{MAX_INDEXES}")
    if count > len(data) - pos:  # every index takes at least one byte
        raise FrameError(f"{count} message indexes announced, {len(data) - pos} byte(s) left")
    indexes: list[int] = []
    for _ in range(count):
        index, pos = read_zigzag(data, pos)
        if index < 0:
            raise FrameError(f"message index {index} is negative")
        indexes.append(index)
    return indexes, pos


def frame(schema_id: SchemaKey, payload: bytes) -> bytes:
    """A framed value (for tests and tools): magic byte, id (or GUID), payload."""
    if isinstance(schema_id, str):
        return bytes([MAGIC_GUID]) + uuid.UUID(schema_id).bytes + payload
    if not 0 <= schema_id < 1 << 32:
        raise ValueError(f"schema id {schema_id} does not fit 4 bytes")
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload


K = TypeVar("K")


def remember(cache: dict[K, Any], key: K, value: Any) -> None:
    """cache[key] = value, forgetting the oldest entry past MAX_REMEMBERED (ids and GUIDs
    come from the records: a hostile producer must not grow a cache without bound)."""
    if key not in cache and len(cache) >= MAX_REMEMBERED:
        del cache[next(iter(cache))]
    cache[key] = value


def arrow_rows(records: list[object], arrow_type: object, errors: list[str | None]) -> object:
    """An Arrow array of decoded records; a record Arrow refuses (a decimal too wide, a
    string with a lone surrogate...) becomes a null with its error in `errors`."""
    import pyarrow as pa

    refused = (pa.ArrowException, ValueError, TypeError, OverflowError)
    try:
        return pa.array(records, type=arrow_type)
    except refused:
        pass
    parts = []
    for i, record in enumerate(records):
        try:
            parts.append(pa.array([record], type=arrow_type))
        except refused as exc:
            errors[i] = f"a value does not fit the column type ({str(exc)[:200]})"
            parts.append(pa.nulls(1, arrow_type))
    return pa.concat_arrays(parts) if parts else pa.array([], type=arrow_type)


def decode_values(values: Sequence[bytes | None], decode_one: Callable[..., object],
                  expected: tuple[type[Exception], ...],
                  fatal: tuple[type[Exception], ...],
                  located: Sequence[HeaderId | None] | None = None
                  ) -> tuple[list[object], list[str | None]]:
    """(records, error per value) of ``decode_one`` over ``values``: a null value stays
    null; one that raises an ``expected`` error (not framed, a payload that does not parse)
    is null with the error's message; a ``fatal`` error (the registry unreachable) fails the
    whole batch; any other exception (a converter's surprise) costs the record, not the
    task. ``located[i]``, when set, is the schema id the record's header gave: then
    ``decode_one(value, located[i])`` (the value is the bare payload)."""
    errors: list[str | None] = [None] * len(values)
    records: list[object] = []
    for i, value in enumerate(values):
        record = None
        if value is not None:
            try:
                at = None if located is None else located[i]
                record = decode_one(value) if at is None else decode_one(value, at)
            except fatal:
                raise
            except expected as exc:
                errors[i] = str(exc)
            except Exception as exc:
                errors[i] = f"cannot convert the record ({type(exc).__name__}: {exc})"
        records.append(record)
    return records, errors
