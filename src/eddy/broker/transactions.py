"""The asyncio side of the transaction coordinator: persists transaction metadata in
__transaction_state, writes commit/abort markers to every partition of a transaction,
applies transactional offset commits on commit, and finishes what a crash interrupted."""

from __future__ import annotations

import json
import logging
import struct
from collections import defaultdict
from typing import TYPE_CHECKING

from eddy.groups.records import (
    OffsetAndMetadata,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)
from eddy.log.partition import PartitionLog
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    ValidatedBatches,
    parse_header,
)
from eddy.protocol.records import build_batch, decode_batch_records
from eddy.txn.coordinator import Markers, TransactionCoordinator, TxnMetadata

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
_KEY_VERSION = struct.Struct(">h")


def _key(txn_id: str) -> bytes:
    return _KEY_VERSION.pack(0) + txn_id.encode()


def marker_batch(producer_id: int, epoch: int, commit: bool, now: int) -> bytearray:
    """A control batch with one record: key (version, type), value (version, coord epoch)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return build_batch([(key, value)], now, producer_id=producer_id, producer_epoch=epoch,
                       attributes=TRANSACTIONAL_BIT | CONTROL_BIT)


class TransactionService:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.coordinator = TransactionCoordinator(
            broker.config.transaction_max_timeout_ms, broker.producer_ids.allocate)
        # transactional offset commits waiting for their transaction's outcome
        self._pending_offsets: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        # markers already written for (producer id, epoch) of a transaction not yet complete
        self._marked: dict[tuple[int, int], set[tuple[str, int]]] = {}
        # a marker or completion could not be written (disk full): retried by maintenance
        self._unfinished = False

    def now(self) -> int:
        return self._broker.clock.now_ms()

    # ---- start-up ------------------------------------------------------------------------

    def load(self) -> None:
        topic = self._broker.logs.get(TXN_TOPIC)  # created on first use, not here
        for plog in topic.partitions if topic is not None else ():
            for seg in plog.segments:
                for bp in seg.scan():
                    for rec in decode_batch_records(seg.read_at(bp.position, bp.size)):
                        if rec.key is None or len(rec.key) < 2:
                            continue
                        txn_id = rec.key[2:].decode()
                        if rec.value is None:
                            self.coordinator.txns.pop(txn_id, None)
                        else:
                            self.coordinator.txns[txn_id] = TxnMetadata.from_json(
                                txn_id, json.loads(rec.value))
        for pid, records in self._broker.groups.open_txn_offsets.items():
            self._pending_offsets[pid].extend(records)
        self._broker.groups.open_txn_offsets.clear()
        for markers in self.coordinator.recovered():
            log.info("finishing transaction %s after restart (%s)", markers.transactional_id,
                     "commit" if markers.commit else "abort")
            self._finish(markers)

    # ---- persistence ---------------------------------------------------------------------

    def _append(self, plog: PartitionLog, batch: bytearray) -> int:
        """Append a batch the broker built itself (markers included: clients may not)."""
        h = parse_header(batch)
        validated = ValidatedBatches([h], [0], h.record_count, h.max_timestamp, 0)
        result = plog.append(batch, validated, self.now())
        self._broker.notifier.notify((plog.topic, plog.partition))
        return result.base_offset

    def _persist(self, meta: TxnMetadata) -> None:
        topic = self._broker.logs.get(TXN_TOPIC)
        if topic is None:
            topic = self._broker.logs.create_topic(
                TXN_TOPIC, self._broker.config.transaction_state_num_partitions,
                {"cleanup.policy": "compact", "segment.bytes": "104857600"}, self.now())
        plog = topic.partitions[partition_for(meta.transactional_id, len(topic.partitions))]
        value = json.dumps(meta.to_json()).encode()
        self._append(plog, build_batch([(_key(meta.transactional_id), value)], self.now()))

    def _finish(self, markers: Markers) -> None:
        """Write the markers and complete the transaction; if storage fails (disk full),
        the transaction stays prepared and maintenance retries (as Kafka's coordinator
        retries markers until they are written)."""
        try:
            self.write_markers(markers)
        except (KafkaError, OSError) as exc:
            if not self._unfinished:
                log.error("transaction %s: cannot write its markers yet, retrying: %s",
                          markers.transactional_id, exc)
            self._unfinished = True

    def write_markers(self, markers: Markers) -> None:
        """Write the markers to every partition of the transaction, then complete it."""
        now = self.now()
        logs = self._broker.logs
        done = self._marked.setdefault((markers.producer_id, markers.producer_epoch), set())
        for topic_name, index in sorted(markers.partitions):
            plog = logs.partition(topic_name, index)
            if plog is None or (topic_name, index) in done:
                continue  # the topic was deleted meanwhile, or marked by an earlier try
            offset = self._append(plog, marker_batch(markers.producer_id,
                                                     markers.producer_epoch, markers.commit,
                                                     now))
            done.add((topic_name, index))
            self._broker.producers.of(plog).end_transaction(
                markers.producer_id, markers.producer_epoch, now, markers.commit, offset)
        pending = self._pending_offsets.pop(markers.producer_id, [])
        if markers.commit:
            for key, value in pending:
                self._broker.groups.coordinator.replay(key, value)
        self._persist(self.coordinator.complete(markers.transactional_id, now))
        del self._marked[(markers.producer_id, markers.producer_epoch)]

    # ---- API operations ------------------------------------------------------------------

    async def init_producer_id(self, txn_id: str, timeout_ms: int, pid: int, epoch: int
                               ) -> tuple[ErrorCode, int, int]:
        code, meta, markers = self.coordinator.init_producer_id(
            txn_id, timeout_ms, pid, epoch, self.now())
        if code != ErrorCode.none or meta is None:
            return code, -1, -1
        try:
            if markers is not None:
                self._persist(meta)
                self.write_markers(markers)
                meta.state, meta.partitions = "Empty", set()
            self._persist(meta)
        except (KafkaError, OSError) as exc:
            return self._storage_failed(txn_id, exc), -1, -1
        return ErrorCode.none, meta.producer_id, meta.producer_epoch

    def _storage_failed(self, txn_id: str, exc: Exception) -> ErrorCode:
        """The transaction log could not be written: a retriable error for the client."""
        log.warning("transaction %s: %s", txn_id, exc)
        self._unfinished = True
        return ErrorCode.coordinator_not_available

    def add_partitions(self, txn_id: str, pid: int, epoch: int,
                       partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        logs = self._broker.logs
        unknown = [tp for tp in partitions if logs.partition(*tp) is None]
        if unknown:
            return {tp: (ErrorCode.unknown_topic_or_partition if tp in unknown
                         else ErrorCode.operation_not_attempted) for tp in partitions}
        code, meta = self.coordinator.add_partitions(txn_id, pid, epoch, partitions,
                                                     self.now())
        if meta is not None:
            try:
                self._persist(meta)
            except (KafkaError, OSError) as exc:
                code = self._storage_failed(txn_id, exc)
        return dict.fromkeys(partitions, code)

    def add_offsets(self, txn_id: str, pid: int, epoch: int, group_id: str) -> ErrorCode:
        topic = self._broker.groups.offsets_topic()
        tp = (OFFSETS_TOPIC, partition_for(group_id, len(topic.partitions)))
        return self.add_partitions(txn_id, pid, epoch, [tp])[tp]

    def txn_offset_commit(self, txn_id: str, pid: int, epoch: int, group_id: str,
                          offsets: list[tuple[str, int, int, int, str | None]]) -> ErrorCode:
        meta = self.coordinator.txns.get(txn_id)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        topic = self._broker.groups.offsets_topic()
        index = partition_for(group_id, len(topic.partitions))
        if meta.state != "Ongoing" or (OFFSETS_TOPIC, index) not in meta.partitions:
            return ErrorCode.invalid_txn_state  # AddOffsetsToTxn must come first
        now = self.now()
        records = [
            (encode_offset_commit_key(group_id, t, p),
             encode_offset_commit_value(OffsetAndMetadata(offset, leader_epoch, md or "", now)))
            for t, p, offset, leader_epoch, md in offsets
        ]
        batch = build_batch(records, now, producer_id=pid, producer_epoch=epoch,
                            attributes=TRANSACTIONAL_BIT)
        plog = topic.partitions[index]
        try:
            base = self._append(plog, batch)
        except (KafkaError, OSError) as exc:
            return self._storage_failed(txn_id, exc)
        self._broker.producers.of(plog).record(pid, epoch, -1, len(records) - 1, base, now,
                                               transactional=True)
        self._pending_offsets[pid].extend(records)
        return ErrorCode.none

    async def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        code, markers = self.coordinator.end_txn(txn_id, pid, epoch, commit, self.now())
        if code != ErrorCode.none:
            return code
        if markers is not None:
            try:
                self._persist(self.coordinator.txns[txn_id])
            except (KafkaError, OSError) as exc:  # prepared in memory: maintenance finishes
                return self._storage_failed(txn_id, exc)
            self._finish(markers)  # as in Kafka, markers are written after the answer
        return ErrorCode.none

    def abort_expired(self) -> None:
        if self._unfinished:  # prepared transactions whose markers failed: try again
            self._unfinished = False
            for markers in self.coordinator.recovered():
                self._finish(markers)
            if not self._unfinished:
                log.info("unfinished transactions completed")
        for markers in self.coordinator.expired(self.now()):
            log.info("aborting transaction %s: timed out", markers.transactional_id)
            try:
                self._persist(self.coordinator.txns[markers.transactional_id])
            except (KafkaError, OSError) as exc:
                self._storage_failed(markers.transactional_id, exc)
            self._finish(markers)
