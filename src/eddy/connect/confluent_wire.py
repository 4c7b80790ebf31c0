"""Confluent's wire format for schema-registry serialized keys and values.

A framed value is a magic byte 0, the writer schema's id as a 4-byte big-endian
integer, then the payload. Protobuf payloads start with the message indexes (which
message of the schema file was written): a zig-zag varint count, then that many
zig-zag varint indexes; a count of 0 stands for [0], the first message.

Everything is checked against the bytes present: a short value, another magic byte or
an index list running past the end is a FrameError saying which, never an IndexError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MAGIC = 0
HEADER_BYTES = 5
#: more message indexes than this is not a real schema (nesting depth of messages)
MAX_INDEXES = 100


class FrameError(ValueError):
    """A key or value that is not in Confluent's wire format; the message says why."""


def split_frame(value: bytes) -> tuple[int, int]:
    """(schema id, offset of the payload) of a framed value."""
    if len(value) < HEADER_BYTES:
        raise FrameError(f"{len(value)} byte(s), fewer than the 5-byte Confluent header "
                         "(magic byte 0 and a 4-byte schema id)")
    if value[0] != MAGIC:
        raise FrameError(f"magic byte is 0x{value[0]:02x}, not 0x00: not Confluent's wire "
                         "format")
    return int.from_bytes(value[1:HEADER_BYTES], "big"), HEADER_BYTES


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


def frame(schema_id: int, payload: bytes) -> bytes:
    """A framed value (for tests and tools): magic byte, id, payload."""
    if not 0 <= schema_id < 1 << 32:
        raise ValueError(f"schema id {schema_id} does not fit 4 bytes")
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload


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


def decode_values(values: Sequence[bytes | None], decode_one: Callable[[bytes], object],
                  expected: tuple[type[Exception], ...],
                  fatal: tuple[type[Exception], ...]) -> tuple[list[object], list[str | None]]:
    """(records, error per value) of ``decode_one`` over ``values``: a null value stays
    null; one that raises an ``expected`` error (not framed, a payload that does not parse)
    is null with the error's message; a ``fatal`` error (the registry unreachable) fails the
    whole batch; any other exception (a converter's surprise) costs the record, not the
    task."""
    errors: list[str | None] = [None] * len(values)
    records: list[object] = []
    for i, value in enumerate(values):
        record = None
        if value is not None:
            try:
                record = decode_one(value)
            except fatal:
                raise
            except expected as exc:
                errors[i] = str(exc)
            except Exception as exc:
                errors[i] = f"cannot convert the record ({type(exc).__name__}: {exc})"
        records.append(record)
    return records, errors
