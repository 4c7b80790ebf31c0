"""Producer state of every partition: checks idempotent batches before they are appended,
snapshots beside the segments, rebuilt from batch headers after a crash."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence

from eddy.log.partition import PartitionLog
from eddy.log.state_files import atomic_write
from eddy.protocol import records
from eddy.protocol.record_batch import HEADER_SIZE, BatchHeader, ValidatedBatches, parse_header
from eddy.txn.producer_state import BatchMeta, ProducerStateManager

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "producer-state.json"
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


class ProducerStates:
    def __init__(self) -> None:
        self._by_log: dict[int, ProducerStateManager] = {}

    def of(self, plog: PartitionLog) -> ProducerStateManager:
        mgr = self._by_log.get(id(plog))
        if mgr is None:
            mgr = self._by_log[id(plog)] = self._load(plog)
        return mgr

    def last_stable_offset(self, plog: PartitionLog) -> int:
        """The LSO: below the first offset of any open transaction, at most the HWM."""
        first = self.of(plog).first_ongoing_offset()
        return plog.high_watermark if first is None else min(first, plog.high_watermark)

    def forget(self, plog: PartitionLog) -> None:
        self._by_log.pop(id(plog), None)

    # ---- produce -------------------------------------------------------------------------

    def check(self, plog: PartitionLog, batches: ValidatedBatches) -> BatchMeta | None:
        """Raise for an invalid sequence/epoch; return the original of a duplicate batch."""
        mgr = self.of(plog)
        for h in batches.headers:
            if h.producer_id >= 0:
                dup = mgr.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                h.last_offset_delta)
                if dup is not None:
                    return dup
        return None

    def appended(self, plog: PartitionLog, batches: ValidatedBatches, base_offset: int,
                 now_ms: int) -> None:
        mgr = self.of(plog)
        offset = base_offset
        for h in batches.headers:
            if h.producer_id >= 0:
                mgr.record(h.producer_id, h.producer_epoch, h.base_sequence,
                           h.last_offset_delta, offset, now_ms, h.is_transactional)
            offset += h.record_count

    def replicated(self, plog: PartitionLog, data: bytes | bytearray | memoryview,
                   headers: Sequence[BatchHeader], positions: Sequence[int]) -> None:
        """A follower's producer state follows the batches it copied from its leader
        (sequences, so a retry after failover is answered with the original offset;
        transaction markers, so the LSO and aborted list match the leader's, and with
        their coordinator epoch, so that as leader it fences a deposed coordinator's
        markers as its old leader did)."""
        mgr = self.of(plog)
        view = memoryview(data)
        for h, pos in zip(headers, positions, strict=True):
            if h.producer_id < 0:
                continue
            if h.is_control:
                kind, coordinator_epoch = marker_of(view[pos:pos + h.size])
                mgr.end_transaction(h.producer_id, h.producer_epoch, h.max_timestamp,
                                    kind == COMMIT, h.base_offset, coordinator_epoch)
            else:
                mgr.record(h.producer_id, h.producer_epoch, h.base_sequence,
                           h.last_offset_delta, h.base_offset, h.max_timestamp,
                           h.is_transactional)

    # ---- persistence ---------------------------------------------------------------------

    def snapshot(self, plog: PartitionLog) -> None:
        mgr = self._by_log.get(id(plog))
        if mgr is None or not mgr.producers:
            return
        atomic_write(os.path.join(plog.directory, SNAPSHOT_FILE),
                     mgr.snapshot_bytes(plog.log_end_offset))

    def snapshot_all(self, logs: list[PartitionLog]) -> None:
        for plog in logs:
            try:
                self.snapshot(plog)
            except OSError as exc:
                log.error("%s-%d: producer snapshot failed: %s", plog.topic, plog.partition,
                          exc)

    def _load(self, plog: PartitionLog) -> ProducerStateManager:
        mgr, start = ProducerStateManager(), plog.log_start_offset
        path = os.path.join(plog.directory, SNAPSHOT_FILE)
        try:
            with open(path, "rb") as f:
                loaded, offset = ProducerStateManager.from_snapshot(f.read())
            if offset <= plog.log_end_offset:
                mgr, start = loaded, max(offset, plog.log_start_offset)
                mgr.truncate_after(plog.log_end_offset)
        except FileNotFoundError:
            pass
        except (ValueError, KeyError) as exc:
            log.warning("%s: unreadable producer snapshot (%s): rebuilding from the log",
                        path, exc)
        self._replay(plog, mgr, start)
        return mgr

    @staticmethod
    def _replay(plog: PartitionLog, mgr: ProducerStateManager, start: int) -> None:
        for seg in plog.segments:
            if seg.next_offset <= start:
                continue
            for bp in seg.scan(seg.index.lookup(start)):
                if bp.last_offset < start:
                    continue
                h: BatchHeader = parse_header(seg.read_at(bp.position, HEADER_SIZE))
                if h.producer_id < 0:
                    continue
                if h.is_control:
                    kind, coordinator_epoch = marker_of(seg.read_at(bp.position, bp.size))
                    mgr.end_transaction(h.producer_id, h.producer_epoch, h.max_timestamp,
                                        kind == COMMIT, h.base_offset, coordinator_epoch)
                else:
                    mgr.record(h.producer_id, h.producer_epoch, h.base_sequence,
                               h.last_offset_delta, h.base_offset, h.max_timestamp,
                               h.is_transactional)
