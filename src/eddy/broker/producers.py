"""Producer state of every partition: checks idempotent batches before they are appended,
snapshots beside the segments, rebuilt from batch headers after a crash."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from eddy.log.partition import PartitionLog
from eddy.log.state_files import atomic_write
from eddy.protocol.markers import COMMIT, marker_of
from eddy.protocol.record_batch import HEADER_SIZE, BatchHeader, ValidatedBatches, parse_header
from eddy.txn.producer_state import BatchMeta, ProducerStateManager

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "producer-state.json"

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
