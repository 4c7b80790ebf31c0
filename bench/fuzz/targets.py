"""The in-process fuzz targets, without atheris: each takes one input and returns
normally for every outcome the broker handles (a documented error); anything else it
lets escape is a finding. The atheris harnesses and the smoke test call these.

- ``decode_frame``: a request frame (size prefix removed) driven the way
  ``KafkaServer.dispatch`` drives it: peek_header, supported_version, decode_request.
  Only MalformedRequest is documented.
- ``validate_records``: the ``records`` field of one Produce partition, driven the way
  the produce handler does: validate_batches (KafkaError is documented), then, as for a
  compacted topic, each batch's records: batch_payload, then iter_records and the
  compiled record_scan.keyless_records (what the handler's keyless check calls; native
  code, so its aborts are findings too) and decode_batch_records (compaction, ListOffsets
  by time).
  Documented: records.CorruptRecordError where the module has it (the handler maps it to
  CORRUPT_MESSAGE), else ValueError and OSError (what the handler caught before). The
  first input byte is a flag byte: bit 0 set makes the harness recompute each batch's
  CRC32C first, as any attacker can, so mutations get past the checksum.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

from eddy.protocol import records as _records
from eddy.protocol.codec import MalformedRequest, decode_request, peek_header, supported_version
from eddy.protocol.errors import KafkaError
from eddy.protocol.record_batch import (
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    batch_crc,
    validate_batches,
)

RECORD_ERRORS: tuple[type[Exception], ...] = (
    (_records.CorruptRecordError,) if hasattr(_records, "CorruptRecordError")
    else (ValueError, OSError)
)

def _iter_all(payload: bytes, count: int) -> None:
    for _ in _records.iter_records(payload, count):
        pass


_SCANS: list[Callable[[bytes, int], object]] = [_iter_all]
try:  # the compiled keyless-record scan the produce handler prefers (native code)
    from eddy.protocol.record_scan import keyless_records as _keyless

    _SCANS.append(lambda payload, count: _keyless(payload, count, 1000))
except ImportError:
    pass

MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes
_OFFSET_LEN = struct.Struct(">qi")
_U32 = struct.Struct(">I")


def decode_frame(frame: bytes) -> None:
    try:
        raw = peek_header(frame)
    except MalformedRequest:
        return
    key = supported_version(raw.api_key, raw.api_version)
    if key is None:
        return  # dispatch answers ApiVersions or closes the connection: no decoding
    try:
        decode_request(frame, key, raw.api_version, "fuzz")
    except MalformedRequest:
        return


def fix_crcs(data: bytearray) -> None:
    """Recompute the CRC32C of every batch whose length fits the data."""
    pos = 0
    while len(data) - pos >= HEADER_SIZE:
        _, length = _OFFSET_LEN.unpack_from(data, pos)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > len(data):
            return
        _U32.pack_into(data, pos + CRC_START - 4, batch_crc(data, pos, size))
        pos += size


def validate_records(data: bytes) -> None:
    if not data:
        return
    records = bytearray(data[1:])
    if data[0] & 1:
        fix_crcs(records)
    try:
        batches = validate_batches(records, max_batch_bytes=MAX_MESSAGE_BYTES)
    except KafkaError:
        return
    for h, pos in zip(batches.headers, batches.positions, strict=True):
        batch = bytes(records[pos : pos + h.size])
        if hasattr(_records, "batch_payload"):
            try:
                _, payload = _records.batch_payload(memoryview(batch))
            except RECORD_ERRORS:
                payload = None
            if payload is not None:
                for scan in _SCANS:
                    with contextlib.suppress(RECORD_ERRORS):
                        scan(payload, h.record_count)
        try:
            for _ in _records.decode_batch_records(batch):
                pass
        except RECORD_ERRORS:
            pass
