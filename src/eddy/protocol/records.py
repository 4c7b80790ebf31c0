"""Decode the records inside a v2 batch, for the few features that need them
(ListOffsets by timestamp, compaction). Never used on the produce/fetch hot path."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cramjam
from crc32c import crc32c

from eddy.protocol.record_batch import HEADER_SIZE, parse_header

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _snappy(data: bytes) -> bytes:
    if data.startswith(_XERIAL_MAGIC):
        # xerial framing (Java client): 16-byte header, then [len i32][block] chunks
        out = bytearray()
        pos = 16
        while pos + 4 <= len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
            pos += n
        return bytes(out)
    return bytes(cramjam.snappy.decompress_raw(data))


def decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.decompress(data))
    if codec == 2:
        return _snappy(data)
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint (Kafka's varint/varlong): (value, new position)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def write_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _bytes_field(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise ValueError("truncated record field")
    return buf[pos : pos + n], pos + n


def decode_batch_records(batch: bytes) -> Iterator[Record]:
    """Every record of one whole batch (offsets and timestamps made absolute)."""
    h = parse_header(batch)
    payload = decompress(h.compression, batch[HEADER_SIZE : h.size])
    pos = 0
    for _ in range(h.record_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = read_varint(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        key, pos = _bytes_field(payload, pos)
        value, pos = _bytes_field(payload, pos)
        n_headers, pos = read_varint(payload, pos)
        headers = []
        for _ in range(n_headers):
            hk, pos = _bytes_field(payload, pos)
            hv, pos = _bytes_field(payload, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise ValueError("record length does not match its fields")
        ts = h.max_timestamp if h.attributes & 0x08 else h.base_timestamp + ts_delta
        yield Record(h.base_offset + off_delta, ts, key, value, tuple(headers))


def _bytes_out(value: bytes | None) -> bytes:
    return write_varint(-1) if value is None else write_varint(len(value)) + value


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytearray:
    """An uncompressed v2 batch at base offset 0, for records the broker writes itself
    (the offsets topic, control records)."""
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = b"\x00" + write_varint(0) + write_varint(i) + _bytes_out(key) + _bytes_out(value)
        rec += write_varint(0)  # no headers
        body += write_varint(len(rec)) + rec
    n = len(records)
    header = struct.pack(
        ">hiqqqhii", attributes, n - 1, timestamp_ms, timestamp_ms, producer_id,
        producer_epoch, base_sequence, n,
    )
    crc = crc32c(header + body)
    batch_length = 4 + 1 + 4 + len(header) + len(body)  # epoch + magic + crc + rest
    out = bytearray(struct.pack(">qiibI", 0, batch_length, -1, 2, crc))
    out += header
    out += body
    return out
