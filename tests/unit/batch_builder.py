"""Build and parse Kafka RecordBatch v2 bytes for tests, written from the Kafka format spec
(https://kafka.apache.org/documentation/#recordbatch), independently of eddy's own code.

Batch layout (big endian):
  baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
  attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
  producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records
batchLength counts from partitionLeaderEpoch to the end; the CRC32C covers attributes..end.

Record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
  keyLength varint | key | valueLength varint | value | headerCount varint |
  (headerKeyLength varint | headerKey | headerValueLength varint | headerValue)*
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import cramjam
from crc32c import crc32c

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
HEADER_SIZE = 61
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount (40 bytes)
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


@dataclass(frozen=True)
class Rec:
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    timestamp_delta: int = 0


@dataclass(frozen=True)
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class ParsedBatch:
    position: int
    size: int
    base_offset: int
    last_offset_delta: int
    magic: int
    crc: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    record_count: int
    raw: bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def crc_ok(self) -> bool:
        return crc32c(self.raw[21:]) == self.crc


# ---- varints --------------------------------------------------------------------------------


def zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        b = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def unzigzag(buf: bytes, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _field(data: bytes | None) -> bytes:
    if data is None:
        return zigzag(-1)
    return zigzag(len(data)) + data


def encode_record(rec: Rec, offset_delta: int) -> bytes:
    body = bytearray(b"\x00")  # attributes: unused
    body += zigzag(rec.timestamp_delta)
    body += zigzag(offset_delta)
    body += _field(rec.key)
    body += _field(rec.value)
    body += zigzag(len(rec.headers))
    for hk, hv in rec.headers:
        body += _field(hk.encode())
        body += _field(hv)
    return zigzag(len(body)) + bytes(body)


# ---- compression ----------------------------------------------------------------------------


def compress(codec: int, data: bytes, *, xerial: bool = False) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        if xerial:  # the Java client's framing: header, then [len i32][raw snappy block]*
            out = bytearray(_XERIAL_HEADER)
            for i in range(0, max(len(data), 1), 32 * 1024):
                block = bytes(cramjam.snappy.compress_raw(data[i : i + 32 * 1024]))
                out += struct.pack(">i", len(block)) + block
            return bytes(out)
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))  # LZ4 frame format, as Kafka uses
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(codec)


def decompress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        if data.startswith(_XERIAL_HEADER[:8]):
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(codec)


# ---- batches --------------------------------------------------------------------------------


def build_batch(
    records: Sequence[Rec | bytes],
    *,
    base_offset: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int | None = None,
    compression: int = NONE,
    xerial: bool = False,
    attributes_extra: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    magic: int = 2,
    record_count: int | None = None,
    last_offset_delta: int | None = None,
    fix_crc: bool = True,
) -> bytes:
    """A whole RecordBatch v2. `record_count`/`last_offset_delta` override the header
    values (to build inconsistent batches); the CRC is computed last unless fix_crc=False."""
    recs = [r if isinstance(r, Rec) else Rec(r) for r in records]
    payload = b"".join(encode_record(r, i) for i, r in enumerate(recs))
    payload = compress(compression, payload, xerial=xerial)
    if max_timestamp is None:
        max_timestamp = base_timestamp + max((r.timestamp_delta for r in recs), default=0)
    count = len(recs) if record_count is None else record_count
    lod = len(recs) - 1 if last_offset_delta is None else last_offset_delta
    tail = _TAIL.pack(
        compression | attributes_extra,
        lod,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + payload
    crc = crc32c(tail) if fix_crc else 0
    batch_length = 4 + 1 + 4 + len(tail)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, magic, crc)
        + tail
    )


def recrc(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC32C of a (modified) batch."""
    b = bytearray(batch)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def parse_batches(data: bytes, *, strict: bool = True) -> list[ParsedBatch]:
    """Every whole batch in data. strict: a partial trailing batch is an error."""
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            if strict:
                raise ValueError(f"{len(data) - pos} trailing bytes at {pos}")
            break
        base, length, _ple, magic, crc = struct.unpack_from(">qiibI", data, pos)
        size = length + 12
        if pos + size > len(data):
            if strict:
                raise ValueError(f"partial batch at {pos}")
            break
        attrs, lod, bts, mts, _pid, _pe, _seq, count = _TAIL.unpack_from(data, pos + 21)
        out.append(
            ParsedBatch(pos, size, base, lod, magic, crc, attrs, bts, mts, count,
                        bytes(data[pos : pos + size]))
        )
        pos += size
    return out


def decode_records(batch: bytes | ParsedBatch) -> list[DecodedRecord]:
    pb = batch if isinstance(batch, ParsedBatch) else parse_batches(batch)[0]
    payload = decompress(pb.attributes & 0x07, pb.raw[HEADER_SIZE:])
    out = []
    pos = 0
    for _ in range(pb.record_count):
        length, pos = unzigzag(payload, pos)
        end = pos + length
        pos += 1
        ts_delta, pos = unzigzag(payload, pos)
        off_delta, pos = unzigzag(payload, pos)
        fields: list[bytes | None] = []
        for _f in range(2):
            n, pos = unzigzag(payload, pos)
            fields.append(None if n < 0 else payload[pos : pos + n])
            pos += max(n, 0)
        nh, pos = unzigzag(payload, pos)
        headers = []
        for _h in range(nh):
            n, pos = unzigzag(payload, pos)
            hk = payload[pos : pos + n].decode()
            pos += n
            n, pos = unzigzag(payload, pos)
            hv = None if n < 0 else payload[pos : pos + n]
            pos += max(n, 0)
            headers.append((hk, hv))
        assert pos == end, "record length does not match its fields"
        ts = pb.max_timestamp if pb.attributes & 0x08 else pb.base_timestamp + ts_delta
        out.append(DecodedRecord(pb.base_offset + off_delta, ts, fields[0], fields[1],
                                 tuple(headers)))
    return out


def values_in(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a byte range of whole batches."""
    return [(r.offset, r.value) for b in parse_batches(data) for r in decode_records(b)]


# ---- raw Kafka requests (non-flexible versions, request header v1) ---------------------------


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request(api_key: int, version: int, correlation_id: int, body: bytes,
            client_id: str | None = "eddy-test") -> bytes:
    """A size-prefixed request frame with a v1 header."""
    payload = struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id) + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_request(correlation_id: int, version: int = 0) -> bytes:
    return request(18, version, correlation_id, b"")


def metadata_request(correlation_id: int, topics: Sequence[str] | None,
                     allow_auto_create: bool = False) -> bytes:
    """Metadata v4: topics (nullable array of string), allow_auto_topic_creation."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(_str(t) for t in topics)
    body += b"\x01" if allow_auto_create else b"\x00"
    return request(3, 4, correlation_id, body)


def produce_request(correlation_id: int, topic: str, partition: int, records: bytes,
                    acks: int = -1, timeout_ms: int = 5000) -> bytes:
    """Produce v3: transactional_id, acks, timeout, [topic [partition records]]."""
    body = _str(None) + struct.pack(">hi", acks, timeout_ms)
    body += struct.pack(">i", 1) + _str(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition)
    body += struct.pack(">i", len(records)) + records
    return request(0, 3, correlation_id, body)


# ---- flexible versions (request header v2, compact types, tagged fields) --------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstr(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def flexible_request(api_key: int, version: int, correlation_id: int, body: bytes,
                     client_id: str | None = "eddy-test") -> bytes:
    """A size-prefixed request frame with a v2 header (client id stays a plain string)."""
    payload = (struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id)
               + uvarint(0) + body)
    return struct.pack(">i", len(payload)) + payload


def metadata_request_v12(correlation_id: int, topics: Sequence[str] | None,
                         allow_auto_create: bool = False) -> bytes:
    if topics is None:
        body = uvarint(0)
    else:
        body = uvarint(len(topics) + 1) + b"".join(
            b"\x00" * 16 + _cstr(t) + uvarint(0) for t in topics)
    body += (b"\x01" if allow_auto_create else b"\x00") + b"\x00" + uvarint(0)
    return flexible_request(3, 12, correlation_id, body)


def produce_request_v9(correlation_id: int, topic: str, partition: int, records: bytes,
                       acks: int = -1, timeout_ms: int = 5000) -> bytes:
    body = _cstr(None) + struct.pack(">hi", acks, timeout_ms)
    body += uvarint(2) + _cstr(topic)
    body += uvarint(2) + struct.pack(">i", partition) + uvarint(len(records) + 1) + records
    body += uvarint(0)  # partition tagged fields
    body += uvarint(0)  # topic tagged fields
    body += uvarint(0)  # request tagged fields
    return flexible_request(0, 9, correlation_id, body)


def api_versions_request_v3(correlation_id: int, version: int = 3) -> bytes:
    body = _cstr("eddy-test") + _cstr("1.0") + uvarint(0)
    return flexible_request(18, version, correlation_id, body)
