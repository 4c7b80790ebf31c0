"""Decode the records inside a v2 batch, for the few features that need them (the keyless
check of compacted topics, ListOffsets by timestamp, compaction, transaction markers, the
offsets topic). Never used on the produce/fetch hot path.

A batch may come from a hostile peer, so nothing in it is trusted: every length and count is
checked against the bytes present before it is used, varints against their width (Kafka's
varint: 5 bytes and an int32 value; varlong: 10 bytes and an int64), a compressed payload
against `decompressed_limit` while it is decompressed. Bad input raises CorruptRecordError (a
ValueError) naming the field; what a batch can make the decoder allocate is bounded by that
limit, whatever its lengths and counts say.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import cramjam
from crc32c import crc32c

from eddy.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_RECORD_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    decompressed_limit,
    parse_header,
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, version i32, compatible version i32
_I32 = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: a record's fields after its length: attributes, three varints and the header count
_MIN_RECORD_BODY = MIN_RECORD_SIZE - 1


class CorruptRecordError(ValueError):
    """Bytes that do not follow Kafka's v2 record format; the message names the field."""


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    #: the record's headers as stored (after their count), checked; `headers` decodes them
    raw_headers: bytes = b""
    header_count: int = 0

    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]:
        """(key, value) of each header, decoded on use (keys as UTF-8, bad bytes replaced)."""
        out = []
        buf, pos, end = self.raw_headers, 0, len(self.raw_headers)
        for _ in range(self.header_count):
            hk, pos = _field(buf, pos, end, "header key", nullable=False)
            hv, pos = _field(buf, pos, end, "header value")
            out.append(((hk or b"").decode("utf-8", "replace"), hv))
        return tuple(out)


class RecordSpan(NamedTuple):
    """Where one record's fields are in a batch's (decompressed) records section."""

    attributes: int
    timestamp_delta: int
    offset_delta: int
    key_pos: int  # where the key length varint starts
    key: bytes | None
    value_pos: int  # where the value's bytes start
    value_size: int  # -1: null
    headers_pos: int  # where the first header starts (after the header count)
    header_count: int
    end: int  # one past the record's last byte


# ---- varints --------------------------------------------------------------------------------


def _varint_tail(buf: Any, pos: int, end: int, width: int, what: str) -> tuple[int, int]:
    raw = 0
    for i in range(width):
        if pos + i >= end:
            raise CorruptRecordError(f"{what}: the varint runs past the end of its record")
        b = buf[pos + i]
        raw |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            value = (raw >> 1) ^ -(raw & 1)
            low, high = (_INT32_MIN, _INT32_MAX) if width == 5 else (_INT64_MIN, _INT64_MAX)
            if not low <= value <= high:
                raise CorruptRecordError(f"{what}: varint {value} overflows its type")
            return value, pos + i + 1
    raise CorruptRecordError(f"{what}: varint longer than {width} bytes")


def read_varint(buf: Any, pos: int, end: int | None = None, what: str = "varint"
                ) -> tuple[int, int]:
    """Kafka's varint (zig-zag int32, at most 5 bytes) at pos, read no further than `end`
    (default: the end of buf): (value, new position)."""
    stop = len(buf) if end is None else end
    if pos < stop:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    return _varint_tail(buf, pos, stop, 5, what)


def read_varlong(buf: Any, pos: int, end: int | None = None, what: str = "varlong"
                 ) -> tuple[int, int]:
    """Kafka's varlong (zig-zag int64, at most 10 bytes), as read_varint."""
    stop = len(buf) if end is None else end
    if pos < stop:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    return _varint_tail(buf, pos, stop, 10, what)


def write_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _length(buf: Any, pos: int, end: int, what: str, nullable: bool) -> tuple[int, int]:
    """A field's length varint, checked against the bytes left before `end`."""
    b = buf[pos] if pos < end else 0x80
    if b < 0x80:
        n, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        n, pos = _varint_tail(buf, pos, end, 5, f"{what} length")
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise CorruptRecordError(f"{what}: length {n}")
    if n > end - pos:
        raise CorruptRecordError(
            f"{what}: length {n} runs past its record ({end - pos} bytes left)")
    return n, pos


def _field(buf: bytes, pos: int, end: int, what: str, nullable: bool = True
           ) -> tuple[bytes | None, int]:
    n, pos = _length(buf, pos, end, what, nullable)
    if n < 0:
        return None, pos
    return buf[pos : pos + n], pos + n


# ---- compression ----------------------------------------------------------------------------
#
# cramjam decompresses into a buffer given to it and stops with an error when the buffer is
# full, so the buffer is the bound. It starts at the size of the first frame as its header
# announces it (zstd's frame content size, LZ4's content size, gzip's ISIZE) or as its blocks
# bound it (zstd and LZ4 blocks say their size or their maximum), but never above what the
# input could plausibly expand to, so that a lying header cannot make us allocate much more
# than the input; it grows 4x while the output does not fit, up to the limit, so what is
# allocated stays within 4x of what the data really decompresses to.

#: the most one byte of a raw snappy block expands to (a 3-byte copy of 64 bytes: 21.3)
_SNAPPY_MAX_RATIO = 22
#: the first buffer is at most this many times the input (then it grows as the output needs)
_FIRST_RATIO = 256
_MIN_FIRST = 64 << 10
#: without an announced size, the first buffer is this many times the input
_GUESS_RATIO = 16
_GROWTH = 4
#: blocks looked at for a frame's size (a real frame has one per 64 KiB to 4 MiB of content)
_MAX_BLOCKS = 4096
_ZSTD_BLOCK_MAX = 1 << 17  # the spec's Block_Maximum_Size is at most 128 KiB
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _zstd_size(data: memoryview) -> int | None:
    """The first zstd frame's content size from its header, else the sum of its blocks'
    sizes (raw and RLE blocks exactly, compressed ones at most the block maximum)."""
    if len(data) < 6 or bytes(data[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    fhd = data[4]
    single = (fhd >> 5) & 1
    fcs_size = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    if pos + fcs_size > len(data):
        return None
    if fcs_size:
        fcs = int.from_bytes(data[pos : pos + fcs_size], "little")
        return fcs + 256 if fcs_size == 2 else fcs
    total = 0
    for _ in range(_MAX_BLOCKS):
        if pos + 3 > len(data):
            return total
        header = int.from_bytes(data[pos : pos + 3], "little")
        kind, size = (header >> 1) & 3, header >> 3
        total += _ZSTD_BLOCK_MAX if kind == 2 else size
        pos += 3 + (1 if kind == 1 else size)
        if header & 1:
            return total
    return None


def _lz4_size(data: memoryview) -> int | None:
    """The first LZ4 frame's content size from its header, else the sum of its blocks'
    sizes (stored blocks exactly, compressed ones at most the block maximum)."""
    if len(data) < 7 or bytes(data[:4]) != b"\x04\x22\x4d\x18":
        return None
    flg = data[4]
    if flg & 0x08:
        return int.from_bytes(data[6:14], "little") if len(data) >= 14 else None
    block_max = _LZ4_BLOCK_MAX.get((data[5] >> 4) & 7)
    if block_max is None:
        return None
    pos = 6 + (4 if flg & 0x01 else 0) + 1  # dictionary id, header checksum
    block_checksum = 4 if flg & 0x10 else 0
    total = 0
    for _ in range(_MAX_BLOCKS):
        if pos + 4 > len(data):
            return total
        word = int.from_bytes(data[pos : pos + 4], "little")
        if word == 0:
            return total
        size = word & 0x7FFFFFFF
        total += size if word & 0x80000000 else block_max
        pos += 4 + size + block_checksum
    return None


def _gzip_size(data: memoryview) -> int | None:
    """The last member's ISIZE: a single member's size (mod 2^32)."""
    return int.from_bytes(data[-4:], "little") if len(data) >= 18 else None


_STREAM_CODECS: dict[int, tuple[str, Any, Any]] = {
    1: ("gzip", cramjam.gzip, _gzip_size),
    3: ("lz4", cramjam.lz4, _lz4_size),
    4: ("zstd", cramjam.zstd, _zstd_size),
}


def _decompress_bounded(codec: int, data: memoryview, limit: int) -> bytes:
    """gzip, lz4 or zstd into a buffer of at most `limit` bytes (see above)."""
    name, mod, announced = _STREAM_CODECS[codec]
    size = announced(data)
    if size is None:
        size = _GUESS_RATIO * len(data)
    size = min(limit, max(1, size), max(_MIN_FIRST, _FIRST_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = int(mod.decompress_into(data, out))
        except Exception as exc:  # cramjam.DecompressionError
            too_small = "buffer" in str(exc)  # "failed to write whole buffer": more follows
            if too_small and size < limit:
                del out  # before the bigger one is allocated
                size = min(limit, size * _GROWTH)
                continue
            if too_small:
                raise CorruptRecordError(
                    f"{name} records decompress to more than {limit} bytes") from None
            raise CorruptRecordError(f"{name} records do not decompress: {exc}") from None
        return bytes(out) if n == size else bytes(memoryview(out)[:n])


def _snappy_blocks(data: memoryview) -> Iterator[memoryview]:
    if bytes(data[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        yield data
        return
    # xerial framing (Java client): 16-byte header, then [length i32][raw block] chunks
    pos = _XERIAL_HEADER_SIZE
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordError("snappy records: a truncated xerial chunk length")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > len(data) - pos:
            raise CorruptRecordError(
                f"snappy records: xerial chunk length {n} runs past the records "
                f"({len(data) - pos} bytes left)")
        yield data[pos : pos + n]
        pos += n


def _snappy_size(block: memoryview) -> int:
    try:
        size = int(cramjam.snappy.decompress_raw_len(block))
    except Exception as exc:
        raise CorruptRecordError(f"snappy records: {exc}") from None
    if size > _SNAPPY_MAX_RATIO * len(block):
        raise CorruptRecordError(f"snappy records: a block of {len(block)} bytes announces {size}")
    return size


def _snappy(data: memoryview, limit: int) -> bytes:
    """Raw or xerial-framed snappy: every block's announced size is checked against what
    its bytes can hold, and their sum against the limit, before anything is allocated."""
    total = sum(_snappy_size(block) for block in _snappy_blocks(data))
    if total > limit:
        raise CorruptRecordError(f"snappy records decompress to {total} bytes, more than {limit}")
    out = bytearray(total)
    with memoryview(out) as view:
        pos = 0
        for block in _snappy_blocks(data):
            size = _snappy_size(block)
            try:
                n = int(cramjam.snappy.decompress_raw_into(block, view[pos : pos + size]))
            except Exception as exc:
                raise CorruptRecordError(f"snappy records: {exc}") from None
            if n != size:
                raise CorruptRecordError(f"snappy records: a block of {n} bytes announced {size}")
            pos += size
    return bytes(out)


def decompress(codec: int, data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """A batch's records section, decompressed: CorruptRecordError if it does not
    decompress, the codec is unknown, or it would take more than `limit` bytes."""
    view = memoryview(data)
    if codec == 0:
        if len(view) > limit:
            raise CorruptRecordError(f"{len(view)} bytes of records, more than {limit}")
        return bytes(view)
    if codec == 2:
        return _snappy(view, limit)
    if codec not in _STREAM_CODECS:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    return _decompress_bounded(codec, view, limit)


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


# ---- records --------------------------------------------------------------------------------


def batch_payload(batch: bytes | bytearray | memoryview) -> tuple[BatchHeader, bytes]:
    """The header of the batch that `batch` starts with and its records section
    (decompressed), after checking what the header says against the bytes present."""
    if len(batch) < HEADER_SIZE:
        raise CorruptRecordError(
            f"a batch of {len(batch)} bytes is shorter than the {HEADER_SIZE}-byte header")
    h = parse_header(batch)
    if h.magic != 2:
        raise CorruptRecordError(f"magic {h.magic}: only record batch v2 is decoded")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.size > len(batch):
        raise CorruptRecordError(
            f"batch length {h.batch_length} does not fit the {len(batch)} bytes present")
    if h.record_count < 0:
        raise CorruptRecordError(f"record count {h.record_count}")
    records = memoryview(batch)[HEADER_SIZE : h.size]
    return h, decompress(h.compression, records, decompressed_limit(h.size))


def _record_at(payload: bytes, pos: int, total: int) -> RecordSpan:
    """The record at pos, checked against its own length and the records' end `total`."""
    length, pos = read_varint(payload, pos, total, "length")
    if length < _MIN_RECORD_BODY or length > total - pos:
        raise CorruptRecordError(
            f"length {length} does not fit the records ({total - pos} bytes left, at least "
            f"{_MIN_RECORD_BODY} needed)")
    end = pos + length
    attributes = payload[pos]
    ts_delta, p = read_varlong(payload, pos + 1, end, "timestamp delta")
    off_delta, p = read_varint(payload, p, end, "offset delta")
    key_pos = p
    key_size, p = _length(payload, p, end, "key", True)
    key = None
    if key_size >= 0:
        key = payload[p : p + key_size]
        p += key_size
    value_size, p = _length(payload, p, end, "value", True)
    value_pos = p
    if value_size > 0:
        p += value_size
    n_headers, p = read_varint(payload, p, end, "header count")
    if n_headers < 0 or n_headers > (end - p) // 2:  # a header takes at least 2 bytes
        raise CorruptRecordError(
            f"header count {n_headers} does not fit its record ({end - p} bytes left)")
    headers_pos = p
    for _ in range(n_headers):
        hk, p = _length(payload, p, end, "header key", False)
        hv, p = _length(payload, p + hk, end, "header value", True)
        if hv > 0:
            p += hv
    if p != end:
        raise CorruptRecordError(
            f"length {length} does not match its fields ({p - end + length} bytes)")
    return RecordSpan._make((attributes, ts_delta, off_delta, key_pos, key, value_pos,
                             value_size, headers_pos, n_headers, end))


def iter_records(payload: bytes, count: int) -> Iterator[RecordSpan]:
    """Every record of a records section that holds `count` of them, each checked against
    its own length and the section's end; the section may not hold more or fewer."""
    total = len(payload)
    if count < 0 or count > total // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"record count {count} does not fit {total} bytes of records")
    pos = 0
    for i in range(count):
        try:
            span = _record_at(payload, pos, total)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record {i} {exc}") from None
        yield span
        pos = span.end
    if pos != total:
        raise CorruptRecordError(f"{total - pos} bytes after the batch's {count} records")


def decode_batch_records(batch: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record of one whole batch (offsets and timestamps made absolute). Raises
    CorruptRecordError for a batch that does not follow the format."""
    h, payload = batch_payload(batch)
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    for r in iter_records(payload, h.record_count):
        value = payload[r.value_pos : r.value_pos + r.value_size] if r.value_size >= 0 else None
        ts = h.max_timestamp if log_append else h.base_timestamp + r.timestamp_delta
        raw_headers = payload[r.headers_pos : r.end] if r.header_count else b""
        yield Record(h.base_offset + r.offset_delta, ts, r.key, value, raw_headers,
                     r.header_count)


def control_type(batch: bytes | bytearray | memoryview) -> int:
    """The type of a control batch's record (0 ABORT, 1 COMMIT; Kafka passes others on)
    from its key, version int16 and type int16, as Kafka's ControlRecordType.parse."""
    for rec in decode_batch_records(batch):
        key = rec.key
        if key is None or len(key) < _CONTROL_KEY.size:
            raise CorruptRecordError(
                f"control record key of {0 if key is None else len(key)} bytes, needs 4")
        version, kind = _CONTROL_KEY.unpack_from(key)
        if version < 0:
            raise CorruptRecordError(f"control record key version {version}")
        return int(kind)
    raise CorruptRecordError("a control batch without a record")


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
