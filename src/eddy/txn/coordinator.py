"""The transaction coordinator's state machine (sans-IO): one TxnMetadata per
transactional id, Kafka's transitions, and what the adapter must do about them.

States: Empty -> Ongoing (partitions added) -> PrepareCommit/PrepareAbort (EndTxn) ->
CompleteCommit/CompleteAbort (markers written) -> Ongoing again on the next add.
InitProducerId on an id with an ongoing transaction aborts it and bumps the epoch, which
fences the old producer (PRODUCER_FENCED for its later requests)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from eddy.protocol.errors import ErrorCode

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
MAX_EPOCH = 32767 - 1

TopicPartition = tuple[str, int]


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1

    def to_json(self) -> dict[str, Any]:
        return {
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms, "state": self.state,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "start_ms": self.start_ms, "last_update_ms": self.last_update_ms,
        }

    @classmethod
    def from_json(cls, txn_id: str, d: dict[str, Any]) -> TxnMetadata:
        return cls(txn_id, int(d["producer_id"]), int(d["producer_epoch"]),
                   int(d["timeout_ms"]), str(d["state"]),
                   {(str(t), int(p)) for t, p in d["partitions"]},
                   int(d["start_ms"]), int(d["last_update_ms"]))


def completed_state(prepared: str) -> str:
    """The state a prepared transaction ends in once its markers are written."""
    return COMPLETE_COMMIT if prepared == PREPARE_COMMIT else COMPLETE_ABORT


@dataclass(frozen=True)
class Markers:
    """Write these markers, then call complete()."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


class TransactionCoordinator:
    def __init__(self, max_timeout_ms: int, allocate_pid: Callable[[], int]) -> None:
        self.max_timeout_ms = max_timeout_ms
        self._allocate = allocate_pid
        self.txns: dict[str, TxnMetadata] = {}

    def _check(self, txn_id: str, pid: int, epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        meta = self.txns.get(txn_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping, None
        if meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping, meta
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced, meta
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, meta
        return ErrorCode.none, meta

    def init_producer_id(self, txn_id: str, timeout_ms: int, pid: int, epoch: int, now: int
                         ) -> tuple[ErrorCode, TxnMetadata | None, Markers | None]:
        """(error, metadata to persist, markers aborting an ongoing transaction first)."""
        if not txn_id:
            return ErrorCode.invalid_request, None, None
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, None, None
        meta = self.txns.get(txn_id)
        if meta is None:
            meta = TxnMetadata(txn_id, self._allocate(), 0, timeout_ms, EMPTY,
                               last_update_ms=now)
            self.txns[txn_id] = meta
            return ErrorCode.none, meta, None
        if pid >= 0 and (pid, epoch) != (meta.producer_id, meta.producer_epoch):
            # KIP-360: a producer retrying with an id/epoch that is not the current one
            return ErrorCode.producer_fenced, None, None
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, None, None
        markers = None
        if meta.state == ONGOING:
            # abort it with the next epoch, which fences the old producer on every partition
            old = self._prepare(meta, commit=False, now=now)
            markers = Markers(old.transactional_id, old.producer_id,
                              min(old.producer_epoch + 1, MAX_EPOCH), False, old.partitions)
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            meta.producer_id, meta.producer_epoch = self._allocate(), 0
        else:
            meta.producer_epoch += 1
        meta.timeout_ms = timeout_ms
        meta.last_update_ms = now
        if markers is None:
            meta.state, meta.partitions = EMPTY, set()
        return ErrorCode.none, meta, markers

    def add_partitions(self, txn_id: str, pid: int, epoch: int,
                       partitions: Iterable[TopicPartition], now: int
                       ) -> tuple[ErrorCode, TxnMetadata | None]:
        code, meta = self._check(txn_id, pid, epoch)
        if code != ErrorCode.none or meta is None:
            return code, None
        new = set(partitions) - meta.partitions
        if meta.state != ONGOING:
            meta.state, meta.partitions, meta.start_ms = ONGOING, set(), now
        meta.partitions |= new
        meta.last_update_ms = now
        return ErrorCode.none, meta

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool, now: int
                ) -> tuple[ErrorCode, Markers | None]:
        code, meta = self._check(txn_id, pid, epoch)
        if code != ErrorCode.none or meta is None:
            return code, None
        if meta.state == ONGOING:
            return ErrorCode.none, self._prepare(meta, commit, now)
        if (meta.state == COMPLETE_COMMIT and commit) or (
                meta.state == COMPLETE_ABORT and not commit):
            return ErrorCode.none, None  # a retry of a finished EndTxn
        if meta.state == EMPTY and not commit:
            return ErrorCode.none, None  # abort of nothing
        return ErrorCode.invalid_txn_state, None

    def _prepare(self, meta: TxnMetadata, commit: bool, now: int) -> Markers:
        meta.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        meta.last_update_ms = now
        return Markers(meta.transactional_id, meta.producer_id, meta.producer_epoch, commit,
                       frozenset(meta.partitions))

    def complete(self, txn_id: str, now: int) -> TxnMetadata:
        meta = self.txns[txn_id]
        meta.state = completed_state(meta.state)
        meta.partitions = set()
        meta.last_update_ms = now
        return meta

    def expired(self, now: int) -> list[Markers]:
        """Abort transactions past their timeout, bumping the epoch to fence the producer."""
        out = []
        for meta in self.txns.values():
            if meta.state == ONGOING and now - meta.start_ms > meta.timeout_ms:
                markers = self._prepare(meta, commit=False, now=now)
                # the markers carry the next epoch: the timed-out producer is fenced on
                # every partition of the transaction (Kafka's prepareFenceProducerEpoch)
                meta.producer_epoch = min(meta.producer_epoch + 1, MAX_EPOCH)
                out.append(Markers(markers.transactional_id, markers.producer_id,
                                   meta.producer_epoch, False, markers.partitions))
        return out

    def recovered(self) -> list[Markers]:
        """After a restart: prepared transactions complete. Ongoing ones stay open, as in
        Kafka: their producer may still commit, and if it is gone the transaction timeout
        aborts them (with the fencing epoch bump of expired())."""
        return [
            Markers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                    meta.state == PREPARE_COMMIT, frozenset(meta.partitions))
            for meta in self.txns.values()
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT)
        ]
