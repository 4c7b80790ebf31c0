"""A view of Kafka RecordBatch v2 headers: validate, patch offsets, never decode records.

Layout (big endian), offsets in bytes:
  0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
  17 crc u32 (CRC32C of bytes 21..end) | 21 attributes i16 | 23 lastOffsetDelta i32
  27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16
  53 baseSequence i32 | 57 recordCount i32 | 61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from eddy.protocol.errors import ErrorCode, KafkaError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted by batchLength
CRC_START = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LEN = struct.Struct(">qi")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: the fewest bytes one record can take: length, attributes, timestamp delta, offset delta,
#: key length, value length and header count, one varint byte each
MIN_RECORD_SIZE = 7
#: a compressed batch may decompress to at most the larger of this and MAX_COMPRESSION_RATIO
#: times its own size: room for any real producer's batch (librdkafka caps a batch at 1 MB
#: before compression, Java's batch.size counts compressed bytes), far below what a
#: decompression bomb of max.message.bytes would expand to (zstd: thousands of times)
MIN_DECOMPRESSED_LIMIT = 64 << 20
MAX_COMPRESSION_RATIO = 64


def decompressed_limit(batch_size: int) -> int:
    """The most bytes the records of a batch of `batch_size` bytes may decompress to."""
    return max(MIN_DECOMPRESSED_LIMIT, MAX_COMPRESSION_RATIO * batch_size)


#: the most records any compressed batch may claim without a look at its size
_FLOOR_RECORDS = MIN_DECOMPRESSED_LIMIT // MIN_RECORD_SIZE


def max_record_count(size: int, compression: int) -> int:
    """The most records a batch of `size` bytes can hold (uncompressed: what its bytes
    can hold; compressed: what its decompression limit can)."""
    room = size - HEADER_SIZE if compression == 0 else decompressed_limit(size)
    return room // MIN_RECORD_SIZE


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def peek_offset_and_size(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(base offset, total size) of the batch at pos: the 12 bytes every magic shares."""
    base, length = _OFFSET_LEN.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + size])


@dataclass(frozen=True, slots=True)
class ValidatedBatches:
    """Batches of one produce request, checked, with where each starts in the buffer."""

    headers: list[BatchHeader]
    positions: list[int]
    record_count: int
    max_timestamp: int
    offset_of_max_timestamp: int  # relative to the first batch's offsets


def validate_batches(
    data: bytes | bytearray,
    *,
    max_batch_bytes: int,
) -> ValidatedBatches:
    """Check every batch of a produce payload the way Kafka's LogValidator does for v2,
    without looking inside the records. Raises KafkaError with the precise code."""
    total = len(data)
    if total == 0:
        raise KafkaError(ErrorCode.invalid_record, "empty record set")
    view = memoryview(data)
    pos = 0
    headers: list[BatchHeader] = []
    positions: list[int] = []
    count = 0
    next_rel = 0
    max_ts = -1
    max_ts_rel = -1
    while pos < total:
        if total - pos < LOG_OVERHEAD + 5:
            raise KafkaError(ErrorCode.corrupt_message, "truncated batch header")
        magic = view[pos + 16]
        if magic != 2:
            # Produce v3+ may only carry magic 2 (Kafka: ProduceRequest.validateRecords)
            raise KafkaError(
                ErrorCode.invalid_record,
                f"record batch magic {magic} is not supported; only magic 2",
            )
        if total - pos < HEADER_SIZE:
            raise KafkaError(ErrorCode.corrupt_message, "truncated batch header")
        h = parse_header(view, pos)
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > total:
            raise KafkaError(
                ErrorCode.corrupt_message, f"batch length {h.batch_length} does not fit the data"
            )
        if size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {size} bytes exceeds max.message.bytes={max_batch_bytes}",
            )
        if batch_crc(view, pos, size) != h.crc:
            raise KafkaError(ErrorCode.corrupt_message, "record batch CRC32C mismatch")
        records = h.record_count
        if records <= 0:
            raise KafkaError(ErrorCode.invalid_record, "record batch holds no records")
        if h.last_offset_delta != records - 1:
            raise KafkaError(
                ErrorCode.invalid_record,
                f"lastOffsetDelta {h.last_offset_delta} does not match record count {records}",
            )
        codec = h.attributes & COMPRESSION_MASK
        if codec not in COMPRESSION_NAMES:
            raise KafkaError(ErrorCode.invalid_record, f"unknown compression codec {codec}")
        if records * MIN_RECORD_SIZE > size - HEADER_SIZE and (
            codec == 0 or (records > _FLOOR_RECORDS and records > max_record_count(size, codec))
        ):
            # checked without decoding: a batch may not claim offsets its bytes cannot hold
            raise KafkaError(
                ErrorCode.corrupt_message,
                f"record count {records} does not fit a batch of {size} bytes",
            )
        if h.attributes & CONTROL_BIT:
            raise KafkaError(
                ErrorCode.invalid_record, "clients may not produce control batches"
            )
        if h.max_timestamp > max_ts:
            max_ts = h.max_timestamp
            max_ts_rel = next_rel + h.last_offset_delta
        headers.append(h)
        positions.append(pos)
        count += records
        next_rel += records
        pos += size
    return ValidatedBatches(headers, positions, count, max_ts, max_ts_rel)


def patch_base_offset(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Assign the batch its log offset and leader epoch: neither is covered by the CRC."""
    _I64.pack_into(buf, pos, base_offset)
    _I32.pack_into(buf, pos + 12, leader_epoch)


def set_log_append_time(buf: bytearray, pos: int, size: int, timestamp_ms: int) -> None:
    """Stamp LogAppendTime: set the timestamp-type bit and maxTimestamp, then re-CRC."""
    (attrs,) = _I16.unpack_from(buf, pos + 21)
    _I16.pack_into(buf, pos + 21, attrs | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + 35, timestamp_ms)
    _U32.pack_into(buf, pos + 17, batch_crc(buf, pos, size))


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole v2 batch in buf; stops at the first partial one."""
    pos = 0
    total = len(buf)
    while total - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > total:
            return
        yield pos, h
        pos += h.size
