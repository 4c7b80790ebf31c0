"""Per-partition producer state for idempotent produce (Kafka's ProducerStateManager).

Sans-IO: fed batch headers (never records), answers whether a batch is new, a duplicate
(with the offsets it was first written at) or out of order, and serialises itself into a
snapshot the partition writes beside its segments. Kafka's rules:

- an older epoch than the producer's current one is INVALID_PRODUCER_EPOCH;
- a new epoch must start at sequence 0 (unless the producer is unknown here);
- within an epoch a batch must start right after the last sequence (wrapping at 2^31-1);
- a batch equal (first and last sequence) to one of the producer's last five is a
  duplicate: answered with its original offsets, not written again.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from eddy.protocol.errors import ErrorCode, KafkaError

NO_SEQUENCE = -1
NO_EPOCH = -1
INT_MAX = 2**31 - 1
CACHED_BATCHES = 5


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int = -1  # first offset of the ongoing transaction, -1 if none
    #: the newest transaction coordinator epoch whose marker this partition took (-1: none)
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def _in_sequence(last_seq: int, first_seq: int) -> bool:
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT_MAX)


def _last_seq_of(first_seq: int, last_offset_delta: int) -> int:
    return (first_seq + last_offset_delta) % (INT_MAX + 1)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: aborted transactions: (producer id, first offset, marker offset), by marker
        self.aborted: list[tuple[int, int, int]] = []

    def check(self, producer_id: int, epoch: int, first_seq: int, last_offset_delta: int
              ) -> BatchMeta | None:
        """Validate an incoming batch. Returns the original BatchMeta of a duplicate,
        None for a new batch, or raises KafkaError."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {epoch} is older than the current {entry.epoch}",
            )
        last_seq = _last_seq_of(first_seq, last_offset_delta)
        if epoch == entry.epoch:
            for b in entry.batches:
                if b.first_seq == first_seq and b.last_seq == last_seq:
                    return b
        if epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id}: new epoch {epoch} must start at sequence 0, "
                    f"got {first_seq}",
                )
        elif entry.last_seq == NO_SEQUENCE:
            if first_seq != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id}: expected sequence 0, got {first_seq}",
                )
        elif not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {producer_id}: expected sequence {entry.last_seq + 1}, "
                f"got {first_seq}",
            )
        return None

    def record(self, producer_id: int, epoch: int, first_seq: int, last_offset_delta: int,
               first_offset: int, timestamp: int, transactional: bool = False) -> None:
        """Remember a batch that was appended at first_offset."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.batches.append(BatchMeta(first_seq, _last_seq_of(first_seq, last_offset_delta),
                                       first_offset, first_offset + last_offset_delta,
                                       timestamp))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int
                     ) -> tuple[ErrorCode, str] | None:
        """Why a marker must not be written (None: it may), as Kafka's partition checks it:
        from a coordinator older than one whose marker this partition already took
        (TRANSACTION_COORDINATOR_FENCED: a deposed coordinator), or for a producer epoch
        older than the partition has seen (INVALID_PRODUCER_EPOCH: that transaction was
        ended already, by a newer epoch's abort)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if coordinator_epoch < entry.coordinator_epoch:
            return (ErrorCode.transaction_coordinator_fenced,
                    f"marker from coordinator epoch {coordinator_epoch}, this partition "
                    f"took one from {entry.coordinator_epoch}")
        if epoch < entry.epoch:
            return (ErrorCode.invalid_producer_epoch,
                    f"marker for producer {producer_id} epoch {epoch}, this partition has "
                    f"seen epoch {entry.epoch}")
        return None

    def end_transaction(self, producer_id: int, epoch: int, timestamp: int,
                        commit: bool = True, marker_offset: int = -1,
                        coordinator_epoch: int = -1) -> int:
        """A commit/abort marker was written: returns the transaction's first offset."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first = entry.txn_first_offset
        entry.txn_first_offset = -1
        if not commit and first >= 0 and (producer_id, first, marker_offset) not in self.aborted:
            self.aborted.append((producer_id, first, marker_offset))
        if epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        return first

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle longer than producer.id.expiration.ms with no open txn."""
        dead = [pid for pid, e in self.producers.items()
                if e.txn_first_offset < 0 and e.last_timestamp < now_ms - expiration_ms]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    def aborted_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end)."""
        return [(pid, first) for pid, first, last in self.aborted
                if first < end and last >= start]

    def prune_aborted(self, log_start_offset: int) -> None:
        self.aborted = [a for a in self.aborted if a[2] >= log_start_offset]

    def first_ongoing_offset(self) -> int | None:
        """First offset of the oldest open transaction, None when none is open."""
        return min((e.txn_first_offset for e in self.producers.values()
                    if e.txn_first_offset >= 0), default=None)

    def truncate_after(self, offset: int) -> None:
        """Drop batches at or beyond offset (the log was truncated there)."""
        for pid in list(self.producers):
            e = self.producers[pid]
            kept = [b for b in e.batches if b.last_offset < offset]
            e.batches.clear()
            e.batches.extend(kept)
            if e.txn_first_offset >= offset:
                e.txn_first_offset = -1
        self.aborted = [a for a in self.aborted if a[2] < offset]

    # ---- snapshots -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            str(pid): {
                "epoch": e.epoch,
                "last_timestamp": e.last_timestamp,
                "txn_first_offset": e.txn_first_offset,
                "coordinator_epoch": e.coordinator_epoch,
                "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset,
                             b.timestamp] for b in e.batches],
            }
            for pid, e in self.producers.items()
        }

    def snapshot_bytes(self, offset: int) -> bytes:
        return json.dumps({"offset": offset, "producers": self.to_json(),
                           "aborted": self.aborted}).encode()

    @classmethod
    def from_snapshot(cls, data: bytes) -> tuple[ProducerStateManager, int]:
        raw = json.loads(data)
        mgr = cls()
        for pid, e in raw["producers"].items():
            entry = ProducerEntry(int(pid), int(e["epoch"]))
            entry.last_timestamp = int(e["last_timestamp"])
            entry.txn_first_offset = int(e["txn_first_offset"])
            entry.coordinator_epoch = int(e.get("coordinator_epoch", -1))
            for b in e["batches"]:
                entry.batches.append(BatchMeta(*(int(x) for x in b)))
            mgr.producers[int(pid)] = entry
        mgr.aborted = [(int(a), int(b), int(c)) for a, b, c in raw.get("aborted", [])]
        return mgr, int(raw["offset"])
