"""What a follower checks in the record batches its leader sends before appending them.

The leader's bytes go to the follower's log as they came (no offsets assigned, no re-CRC),
so each batch is checked here: magic 2, a length that fits the bytes present, the CRC32C,
a record count that agrees with the offset delta, and offsets that continue the follower's
log exactly (the first batch starts at the fetch offset, each next one where the last
ended). A fetch response may end with a batch cut short by the size limit: that tail is
dropped and fetched again next time. Anything else is a ``KafkaError`` naming what is wrong
(CORRUPT_MESSAGE): the follower appends nothing from that response and fetches again.
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    batch_crc,
    parse_header,
)

__all__ = ["ReplicaBatches", "check_replica_batches"]


@dataclass(frozen=True, slots=True)
class ReplicaBatches:
    """The whole batches at the start of a fetched record set, checked."""

    headers: list[BatchHeader]
    positions: list[int]
    length: int  # bytes of whole batches (a cut tail excluded)
    record_count: int

    @property
    def next_offset(self) -> int:
        return self.headers[-1].last_offset + 1 if self.headers else -1


def check_replica_batches(data: bytes | bytearray | memoryview, fetch_offset: int,
                          max_batch_bytes: int) -> ReplicaBatches:
    """Check the batches of ``data`` fetched at ``fetch_offset`` (see the module doc)."""
    view = memoryview(data)
    total = len(view)
    pos = 0
    expected = fetch_offset
    headers: list[BatchHeader] = []
    positions: list[int] = []
    count = 0
    while total - pos >= LOG_OVERHEAD + 5:
        if view[pos + 16] != 2:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"batch at byte {pos}: magic {view[pos + 16]} is not 2")
        if total - pos < HEADER_SIZE:
            break  # a cut header: fetched again
        h = parse_header(view, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"batch at byte {pos}: batch length {h.batch_length} is too small")
        if h.size > max_batch_bytes:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"batch at byte {pos}: {h.size} bytes is over the "
                             f"{max_batch_bytes} a replica takes")
        if pos + h.size > total:
            break  # cut by the fetch's size limit
        if batch_crc(view, pos, h.size) != h.crc:
            raise KafkaError(ErrorCode.corrupt_message, f"batch at byte {pos}: CRC32C mismatch")
        if h.record_count <= 0 or h.last_offset_delta != h.record_count - 1:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"batch at byte {pos}: record count {h.record_count} and last "
                             f"offset delta {h.last_offset_delta} disagree")
        if h.base_offset != expected:
            # a follower's log ends on a batch boundary of its leader's (it holds copies of
            # the same batches), so the first batch starts exactly at the fetch offset
            raise KafkaError(ErrorCode.corrupt_message,
                             f"batch at byte {pos}: base offset {h.base_offset}, "
                             f"expected {expected}")
        headers.append(h)
        positions.append(pos)
        count += h.record_count
        expected = h.last_offset + 1
        pos += h.size
    return ReplicaBatches(headers, positions, pos, count)
