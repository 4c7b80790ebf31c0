"""The asyncio side of the transaction coordinator: persists transaction metadata (in
__transaction_state on a node of its own; in a cluster in the ``offsets`` Raft group, see
``txn_raft``), writes commit/abort markers to every partition of a transaction (in a
cluster through each partition's leader), applies transactional offset commits on commit,
and finishes what a crash interrupted."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import struct
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from eddy.groups.records import (
    OffsetAndMetadata,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)
from eddy.log.partition import PartitionLog
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import TRANSACTIONAL_BIT
from eddy.protocol.records import build_batch, decode_batch_records
from eddy.txn.coordinator import (
    Markers,
    TransactionCoordinator,
    TxnMetadata,
    completed_state,
)
from eddy.txn.host import MarkerHost
from eddy.txn.markers import MarkerService, append_own, write_durably
from eddy.txn.raft_store import TxnRaftLog, pending_key, split, txn_key
from eddy.txn.rpc import WriteMarkersRequest

if TYPE_CHECKING:
    from eddy.groups.service import GroupService
    from eddy.txn.producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
_KEY_VERSION = struct.Struct(">h")


def _key(txn_id: str) -> bytes:
    return _KEY_VERSION.pack(0) + txn_id.encode()


class TxnHost(MarkerHost, Protocol):
    """The transaction coordinator service's view of its broker."""

    @property
    def groups(self) -> GroupService: ...

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...


class TransactionService:
    def __init__(self, broker: TxnHost) -> None:
        self._broker = broker
        self.coordinator = TransactionCoordinator(
            broker.config.transaction_max_timeout_ms, broker.producer_ids.allocate)
        # transactional offset commits waiting for their transaction's outcome
        self._pending_offsets: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        # markers already written for (producer id, epoch) of a transaction not yet complete
        self._marked: dict[tuple[int, int], set[tuple[str, int]]] = {}
        # a marker or completion could not be written (disk full): retried by maintenance
        self._unfinished = False
        #: in a cluster: the offsets group holding the state, and the markers' messenger
        self.raft: TxnRaftLog | None = None
        self.markers: MarkerService | None = None
        #: sent with markers: partitions refuse those of an older coordinator (Kafka's
        #: coordinator epoch); in a cluster the offsets group's term when this node began
        #: serving, on a node of its own 0
        self.coordinator_epoch = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._finishing: set[tuple[int, int]] = set()  # (producer id, epoch) being finished
        self._local: list[tuple[bytes, bytes]] = []

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
        # what this node kept on its own, for a cluster it joins (``local_records``)
        self._local = [(txn_key(m.transactional_id), json.dumps(m.to_json()).encode())
                       for m in self.coordinator.txns.values()]
        self._local += [(pending_key(pid, k), v) for pid, held in self._pending_offsets.items()
                        for k, v in held if v is not None]
        recovered = self.coordinator.recovered()
        for markers in recovered:
            log.info("transaction %s is prepared (%s): finishing it after the restart",
                     markers.transactional_id, "commit" if markers.commit else "abort")
        # finished by the first maintenance pass; in a cluster by the coordinator that
        # takes these transactions (``absorb``)
        self._unfinished = bool(recovered) and not self._broker.config.clustered

    @property
    def serving(self) -> bool:
        """Whether this broker coordinates transactions now: always on a node of its own,
        in a cluster where the offsets group's leader (with the group coordinator) is."""
        if self._broker.cluster is None:
            return True
        return self.raft is not None and self._broker.groups.serving

    def activate(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """This node leads the offsets group now: the coordinator starts over from its
        records, and finishes the transactions a previous leader left prepared."""
        txns, held = split(records)
        self.coordinator.txns = txns
        self._pending_offsets = defaultdict(list, held)
        self._marked.clear()
        if self.raft is not None:
            self.coordinator_epoch = min(self.raft.driver.status().term, 2**31 - 1)
        if txns:
            log.info("transaction coordinator serving from the offsets group (%d ids)",
                     len(txns))
        for markers in self.coordinator.recovered():
            self._spawn(self._finish(markers))

    def local_records(self) -> list[tuple[bytes, bytes]]:
        """The transactions this node coordinated on its own (its ``__transaction_state``)
        and their held offset commits, as records of a cluster's offsets group: a node
        joining a cluster brings its open transactions along."""
        return list(self._local)

    def absorb(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Records imported into the offsets group here (its leader) from a joining node:
        its transactions join the coordinator's (an id it has is kept) and prepared ones
        are finished."""
        txns, held = split(records)
        fresh = {t: m for t, m in txns.items() if t not in self.coordinator.txns}
        self.coordinator.txns.update(fresh)
        for pid, more in held.items():
            self._pending_offsets[pid].extend(more)
        for markers in self.coordinator.recovered():
            if markers.transactional_id in fresh:
                self._spawn(self._finish(markers))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="txn-finish")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- persistence ---------------------------------------------------------------------

    def _append(self, plog: PartitionLog, batch: bytearray) -> int:
        return append_own(self._broker, plog, batch)

    async def _persist(self, meta: TxnMetadata) -> None:
        if self.raft is not None:
            await self.raft.persist(meta)
            return
        topic = self._broker.logs.get(TXN_TOPIC)
        if topic is None:
            topic = self._broker.logs.create_topic(
                TXN_TOPIC, self._broker.config.transaction_state_num_partitions,
                {"cleanup.policy": "compact", "segment.bytes": "104857600"}, self.now())
        plog = topic.partitions[partition_for(meta.transactional_id, len(topic.partitions))]
        value = json.dumps(meta.to_json()).encode()
        self._append(plog, build_batch([(_key(meta.transactional_id), value)], self.now()))

    async def _finish(self, markers: Markers) -> None:
        """Write the markers and complete the transaction; if storage fails (disk full, a
        leader out of reach), the transaction stays prepared and maintenance retries (as
        Kafka's coordinator retries markers until they are written)."""
        key = (markers.producer_id, markers.producer_epoch)
        if key in self._finishing:
            return  # already under way (a retry met the first try)
        self._finishing.add(key)
        try:
            await self.write_markers(markers)
        except (KafkaError, OSError) as exc:
            if not self._unfinished:
                log.error("transaction %s: cannot write its markers yet, retrying: %s",
                          markers.transactional_id, exc)
            self._unfinished = True
        finally:
            self._finishing.discard(key)

    async def write_markers(self, markers: Markers) -> None:
        """Write the markers to every partition of the transaction, then complete it.
        Raises ``KafkaError`` if a partition could not be marked (retried later)."""
        done = self._marked.setdefault((markers.producer_id, markers.producer_epoch), set())
        request = WriteMarkersRequest(markers.producer_id, markers.producer_epoch,
                                      markers.commit, (), self.coordinator_epoch)
        by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for tp in sorted(markers.partitions - done):
            if tp[0] == OFFSETS_TOPIC and self.raft is not None:
                continue  # the group coordinator's: settled below, in the offsets group
            by_leader[self._leader_of(*tp)].append(tp)
        failed: list[tuple[tuple[str, int], ErrorCode]] = []
        for leader, tps in sorted(by_leader.items()):
            if leader == self._broker.node_id or self.markers is None:
                codes = list(await asyncio.gather(*(self._mark_here(request, topic, index)
                                                    for topic, index in tps)))
            else:
                codes = await self.markers.ask(leader, dataclasses.replace(
                    request, partitions=tuple(tps)))
            for tp, code in zip(tps, codes, strict=True):
                if code in (ErrorCode.none, ErrorCode.unknown_topic_or_partition,
                            ErrorCode.invalid_producer_epoch):
                    # marked; or the topic was deleted meanwhile; or a newer epoch of the
                    # producer ended the transaction there already (Kafka gives up too)
                    done.add(tp)
                else:
                    failed.append((tp, code))
        if failed:
            raise KafkaError(failed[0][1], f"markers not written to {len(failed)} partitions, "
                                           f"first {failed[0][0]}: {failed[0][1].name}")
        pending = self._pending_offsets.get(markers.producer_id, [])
        now = self.now()
        if self.raft is not None:
            # the completion is written before the transaction counts as done here, with the
            # held offsets settled in the same entry: a coordinator taking over (a leader
            # change of the offsets group) finds it complete and writes no markers again; a
            # failed write leaves it prepared, and markers are written again only then
            meta = self.coordinator.txns[markers.transactional_id]
            finished = dataclasses.replace(meta, state=completed_state(meta.state),
                                           partitions=set(), last_update_ms=now)
            if pending:
                await self.raft.settle_offsets(markers.producer_id, pending, markers.commit,
                                               finished)
            else:
                await self.raft.persist(finished)
            self.coordinator.complete(markers.transactional_id, now)
        else:
            await self._persist(self.coordinator.complete(markers.transactional_id, now))
        self._pending_offsets.pop(markers.producer_id, None)
        self._broker.metrics.counts.transaction_ended(markers.commit)
        if markers.commit:
            for key, value in pending:
                self._broker.groups.coordinator.replay(key, value)
        del self._marked[(markers.producer_id, markers.producer_epoch)]

    def _leader_of(self, topic: str, index: int) -> int:
        """Who writes ``topic-index``'s marker: its leader in a cluster (-1: none), else
        this node."""
        cluster = self._broker.cluster
        if cluster is None:
            return self._broker.node_id
        part = cluster.state.partition(topic, index)
        return self._broker.node_id if part is None else part.leader

    async def _mark_here(self, request: WriteMarkersRequest, topic: str, index: int) -> ErrorCode:
        if self._broker.cluster is None and self._broker.logs.partition(topic, index) is None:
            return ErrorCode.unknown_topic_or_partition
        return await write_durably(self._broker, request, topic, index)

    # ---- API operations ------------------------------------------------------------------

    async def init_producer_id(self, txn_id: str, timeout_ms: int, pid: int, epoch: int
                               ) -> tuple[ErrorCode, int, int]:
        if not self.serving:
            return ErrorCode.not_coordinator, -1, -1
        code, meta, markers = self.coordinator.init_producer_id(
            txn_id, timeout_ms, pid, epoch, self.now())
        if code != ErrorCode.none or meta is None:
            return code, -1, -1
        try:
            if markers is not None:
                await self._persist(meta)
                await self.write_markers(markers)
                meta.state, meta.partitions = "Empty", set()
            await self._persist(meta)
        except (KafkaError, OSError) as exc:
            return self._storage_failed(txn_id, exc), -1, -1
        return ErrorCode.none, meta.producer_id, meta.producer_epoch

    def _storage_failed(self, txn_id: str, exc: Exception) -> ErrorCode:
        """The transaction log could not be written: a retriable error for the client."""
        log.warning("transaction %s: %s", txn_id, exc)
        self._unfinished = True
        return ErrorCode.coordinator_not_available

    def _known(self, topic: str, index: int) -> bool:
        cluster = self._broker.cluster
        if cluster is None:
            return self._broker.logs.partition(topic, index) is not None
        if topic == OFFSETS_TOPIC:  # a name only: the offsets live in the offsets group
            return 0 <= index < self._broker.config.offsets_topic_num_partitions
        return cluster.state.partition(topic, index) is not None

    async def add_partitions(self, txn_id: str, pid: int, epoch: int,
                             partitions: list[tuple[str, int]]
                             ) -> dict[tuple[str, int], ErrorCode]:
        if not self.serving:
            return dict.fromkeys(partitions, ErrorCode.not_coordinator)
        unknown = [tp for tp in partitions if not self._known(*tp)]
        if unknown:
            return {tp: (ErrorCode.unknown_topic_or_partition if tp in unknown
                         else ErrorCode.operation_not_attempted) for tp in partitions}
        code, meta = self.coordinator.add_partitions(txn_id, pid, epoch, partitions,
                                                     self.now())
        if meta is not None:
            try:
                await self._persist(meta)
            except (KafkaError, OSError) as exc:
                code = self._storage_failed(txn_id, exc)
        return dict.fromkeys(partitions, code)

    def _offsets_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition standing for ``group_id`` in a transaction
        (in a cluster only a name: the offsets live in the offsets group)."""
        if self.raft is not None:
            return partition_for(group_id, self._broker.config.offsets_topic_num_partitions)
        return partition_for(group_id, len(self._broker.groups.offsets_topic().partitions))

    async def add_offsets(self, txn_id: str, pid: int, epoch: int, group_id: str
                          ) -> ErrorCode:
        tp = (OFFSETS_TOPIC, self._offsets_partition(group_id))
        return (await self.add_partitions(txn_id, pid, epoch, [tp]))[tp]

    async def txn_offset_commit(self, txn_id: str, pid: int, epoch: int, group_id: str,
                                offsets: list[tuple[str, int, int, int, str | None]]
                                ) -> ErrorCode:
        if not self.serving:
            return ErrorCode.not_coordinator
        meta = self.coordinator.txns.get(txn_id)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        index = self._offsets_partition(group_id)
        if meta.state != "Ongoing" or (OFFSETS_TOPIC, index) not in meta.partitions:
            return ErrorCode.invalid_txn_state  # AddOffsetsToTxn must come first
        now = self.now()
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(group_id, t, p),
             encode_offset_commit_value(OffsetAndMetadata(offset, leader_epoch, md or "", now)))
            for t, p, offset, leader_epoch, md in offsets
        ]
        try:
            if self.raft is not None:
                await self.raft.hold_offsets(pid, records)
            else:
                self._append_offsets(pid, epoch, index, records)
        except (KafkaError, OSError) as exc:
            return self._storage_failed(txn_id, exc)
        self._pending_offsets[pid].extend(records)
        return ErrorCode.none

    def _append_offsets(self, pid: int, epoch: int, index: int,
                        records: list[tuple[bytes, bytes | None]]) -> None:
        """Transactional offset commits into this node's ``__consumer_offsets``."""
        now = self.now()
        batch = build_batch(records, now, producer_id=pid, producer_epoch=epoch,
                            attributes=TRANSACTIONAL_BIT)
        plog = self._broker.groups.offsets_topic().partitions[index]
        base = self._append(plog, batch)
        self._broker.producers.of(plog).record(pid, epoch, -1, len(records) - 1, base, now,
                                               transactional=True)

    async def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        if not self.serving:
            return ErrorCode.not_coordinator
        code, markers = self.coordinator.end_txn(txn_id, pid, epoch, commit, self.now())
        if code != ErrorCode.none:
            return code
        if markers is not None:
            try:
                await self._persist(self.coordinator.txns[txn_id])
            except (KafkaError, OSError) as exc:  # prepared in memory: maintenance finishes
                return self._storage_failed(txn_id, exc)
            # Kafka answers before its markers are written; here they are written first,
            # so a read_committed consumer sees a committed transaction once it is told
            await self._finish(markers)
        return ErrorCode.none

    async def abort_expired(self) -> None:
        if not self.serving:
            return
        if self._unfinished:  # prepared transactions whose markers failed: try again
            self._unfinished = False
            for markers in self.coordinator.recovered():
                await self._finish(markers)
            if not self._unfinished:
                log.info("unfinished transactions completed")
        for markers in self.coordinator.expired(self.now()):
            log.info("aborting transaction %s: timed out", markers.transactional_id)
            try:
                await self._persist(self.coordinator.txns[markers.transactional_id])
            except (KafkaError, OSError) as exc:
                self._storage_failed(markers.transactional_id, exc)
            await self._finish(markers)
