"""Transaction markers (Kafka's control records) as the broker reads the ones it wrote or
replicated: COMMIT or ABORT, and the coordinator epoch, with unreadable markers taken as
ABORT rather than failing the reader."""

from __future__ import annotations

import logging
import struct

from eddy.protocol import records

log = logging.getLogger(__name__)

COMMIT, ABORT = 1, 0
#: a control record's key: version int16, type int16 (Kafka's ControlRecordType)
_MARKER_KEY = struct.Struct(">hh")
#: an end transaction marker's value: version int16, coordinator epoch int32 (Kafka's
#: EndTransactionMarker); later versions may append fields
_MARKER_VALUE = struct.Struct(">hi")
NO_COORDINATOR_EPOCH = -1


def control_type(batch: bytes) -> int:
    """COMMIT or ABORT from a control batch the broker wrote; an unreadable marker counts
    as ABORT (its records are then hidden from read_committed consumers, never shown)."""
    try:
        return records.control_type(batch)
    except records.CorruptRecordError as exc:
        log.warning("unreadable transaction marker, taken as ABORT: %s", exc)
        return ABORT


def marker_of(batch: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(COMMIT or ABORT, coordinator epoch) of a transaction marker batch the broker wrote
    or replicated, from its one control record (bounds checked by the record decoder). An
    unreadable key counts as ABORT, as ``control_type``; an unreadable value (missing,
    short, a negative version or epoch) leaves the coordinator epoch unknown (-1): the
    marker still ends its transaction, it only fences no coordinator."""
    try:
        rec = next(iter(records.decode_batch_records(batch)), None)
    except records.CorruptRecordError as exc:
        log.warning("unreadable transaction marker, taken as ABORT: %s", exc)
        return ABORT, NO_COORDINATOR_EPOCH
    if rec is None or rec.key is None or len(rec.key) < _MARKER_KEY.size:
        log.warning("transaction marker without a 4-byte control key, taken as ABORT")
        return ABORT, NO_COORDINATOR_EPOCH
    key_version, kind = _MARKER_KEY.unpack_from(rec.key)
    if key_version < 0:
        log.warning("transaction marker key version %d, taken as ABORT", key_version)
        return ABORT, NO_COORDINATOR_EPOCH
    value = rec.value
    if value is None or len(value) < _MARKER_VALUE.size:
        log.warning("transaction marker value of %d bytes (needs %d): coordinator epoch "
                    "unknown", 0 if value is None else len(value), _MARKER_VALUE.size)
        return int(kind), NO_COORDINATOR_EPOCH
    value_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if value_version < 0 or coordinator_epoch < 0:
        log.warning("transaction marker value version %d, coordinator epoch %d: coordinator "
                    "epoch unknown", value_version, coordinator_epoch)
        return int(kind), NO_COORDINATOR_EPOCH
    return int(kind), coordinator_epoch
