"""``ReplicaSync``: a clustered broker's local logs follow the metadata state.

After every change to this node's replica of the ``metadata`` state (coalesced: one pass per
loop turn), the broker creates the topics that have a partition here (with the cluster's
topic id and configs), adds partitions, applies config changes, drops a local topic whose
name now belongs to another topic id, and records which partitions it leads (Produce and
Fetch answer NOT_LEADER_OR_FOLLOWER for the others). A topic deleted from the cluster is
deleted here when the controller's storage GC orders it (``delete_ids``), or at once when the
name is reused.

Only the data of the partitions a node is a replica of is kept; the replication manager
(``broker.replication``) is handed every hosted partition with its record after each pass:
it leads or follows each as the record says.

A node taken out of a partition's replicas (a completed reassignment, committed in the
metadata) deletes its copy once the replication manager has stopped serving it: the whole
local topic when no partition of it is left here, else that partition's data (an empty log
stays in its place). ``ReplicaMembership`` guards against a stale replica of the metadata
(one replayed after a restart) asking for that.

A restarted broker replays its local copy of the metadata log first, which may be stale
(changes the controller made while this node was down, not committed then, are committed
later): until ``ready()`` says this process registered and the replica caught up with the
controller (KRaft: a broker stays fenced until it caught up), the broker leads and follows
nothing and deletes no stray copy; its local topics are made, nothing more.

Nothing the cluster did not make is ever deleted: the ids of the topics this node created
from the metadata are kept in ``cluster-topics.json``; a topic the node held before it
joined (a single node's data dir given ``controller.quorum.voters``) is imported instead:
it becomes a cluster topic with the same id, all of it on this node (``import_local``). If
its name is taken by another cluster topic, it is kept on disk, unserved, and logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from eddy.broker.producers import SNAPSHOT_FILE
from eddy.broker.replica_membership import ReplicaMembership
from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.rpc import ImportOffsetsRequest, ImportTopicRequest
from eddy.log.partition import PartitionLog
from eddy.log.state_files import atomic_write
from eddy.metadata import MetadataState
from eddy.metadata.records import ConfigEntry, PartitionRecord
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.cluster.service import ClusterService

log = logging.getLogger(__name__)

MADE_FILE = "cluster-topics.json"
OFFSETS_MARK = "offsets-imported"
#: the most records (and bytes) one ImportOffsetsRequest carries
CHUNK_RECORDS = 1000
CHUNK_BYTES = 1 << 20


def _chunks(records: list[tuple[bytes, bytes]]) -> list[list[tuple[bytes, bytes]]]:
    out: list[list[tuple[bytes, bytes]]] = []
    size = 0
    for record in records:
        if not out or len(out[-1]) >= CHUNK_RECORDS or size >= CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(record)
        size += len(record[0]) + len(record[1])
    return out
IMPORT_WAIT_S = 30.0
#: a topic this node could not host (out of file descriptors, a full disk) is tried again
#: after this long, until it can
SYNC_RETRY_S = 1.0


class ReplicaSync:
    def __init__(self, broker: Broker, state: MetadataState,
                 ready: Callable[[], bool] | None = None) -> None:
        self.broker = broker
        self.state = state
        #: may the metadata's partition roles be acted on yet (None: always)
        self.ready = ready
        self._waiting_logged = False
        self.passes = 0
        self._scheduled = False
        self._retry: asyncio.TimerHandle | None = None
        self._made_path = os.path.join(broker.config.data_dir, MADE_FILE)
        self.made = self._load_made()  # topic ids (hex) this node created from the cluster
        self.membership = ReplicaMembership(broker.config.data_dir)

    def _load_made(self) -> set[str]:
        try:
            with open(self._made_path, encoding="utf-8") as f:
                return {str(x) for x in json.load(f)}
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as exc:
            # unreadable: nothing counts as the cluster's, so nothing is deleted
            log.error("%s unreadable (%s): no local topic will be deleted", MADE_FILE, exc)
            return set()

    def _mark_made(self, topic_id: uuid.UUID, made: bool) -> None:
        before = set(self.made)
        (self.made.add if made else self.made.discard)(topic_id.hex)
        if self.made != before:
            atomic_write(self._made_path, json.dumps(sorted(self.made)).encode())

    def schedule(self, _index: int = 0) -> None:
        """Called on the metadata state's changes (Raft's task): sync on the next turn."""
        if self._scheduled:
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._run)

    def _retry_now(self) -> None:
        self._retry = None
        self.schedule()

    def stop(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _run(self) -> None:
        self._scheduled = False
        try:
            self.sync()
        except Exception:  # a failing disk here must not stop the metadata service
            log.exception("syncing local logs with the cluster's metadata failed")

    def sync(self) -> None:
        broker, state = self.broker, self.state
        me = broker.node_id
        logs = broker.logs
        now = broker.clock.now_ms()
        broker.dynamic_configs.apply()  # before topics are made: they resolve with them
        led: set[tuple[str, int]] = set()
        hosted: dict[tuple[str, int], tuple[PartitionLog, PartitionRecord]] = {}
        stray: list[tuple[str, int]] = []  # copies to delete: no longer a replica here
        failed = False
        for name in state.topic_names():
            record = state.topic(name)
            assert record is not None
            topic_id = uuid.UUID(bytes=record.topic_id)
            local = logs.get(name)
            if local is not None and not local.is_internal and local.topic_id != topic_id:
                if local.topic_id.hex not in self.made:
                    log.error("local topic %s (id %s) is not the cluster's %s (id %s): kept "
                              "on disk, not served", name, local.topic_id, name, topic_id)
                    continue
                self._delete(name, "the name belongs to another topic now")
                local = None
            elif local is not None:
                self._mark_made(topic_id, True)  # imported (its answer may have been lost)
            if local is not None and not local.is_internal and topic_id.hex in self.made:
                stray.extend((name, index) for index, part in enumerate(record.partitions)
                             if me not in part.replicas
                             and self.membership.removable(topic_id.hex, index, part))
            if not any(me in p.replicas for p in record.partitions):
                continue
            configs = {e.name: e.value for e in record.configs}
            try:
                if local is None:
                    self._mark_made(topic_id, True)
                    local = logs.create_topic(name, len(record.partitions), configs, now,
                                              topic_id=topic_id)
                if len(local.partitions) < len(record.partitions):
                    logs.add_partitions(name, len(record.partitions), now, False)
                if local.configs != configs:
                    logs.alter_topic_configs(name, configs)
                for index, part in enumerate(record.partitions):
                    if me in part.replicas:
                        self.membership.hosting(topic_id.hex, index, part)
                        local.partitions[index].set_leader_epoch(part.leader_epoch)
                        hosted[(name, index)] = (local.partitions[index], part)
                    if part.leader == me:
                        led.add((name, index))
            except KafkaError as exc:
                failed = True
                log.error("cannot host %s as the cluster asks: %s (trying again in %.0f s)",
                          name, exc.message, SYNC_RETRY_S)
        if failed and self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(SYNC_RETRY_S, self._retry_now)
        self._save_membership()
        if self.ready is not None and not self.ready():
            # a replay of the local log, maybe stale: no partition led or followed from it
            broker.led = set()
            if not self._waiting_logged:
                self._waiting_logged = True
                log.info("not leading or following any partition until registered and "
                         "caught up with the controller's metadata")
        else:
            broker.led = led
            if broker.replication is not None:
                broker.replication.apply(hosted)  # stops serving the stray copies first
            if stray:
                self._remove_stray(stray)
        if state.cluster_id:
            broker.cluster_id = state.cluster_id
        self.passes += 1

    def _save_membership(self) -> None:
        try:
            self.membership.save()
        except OSError as exc:  # safe: a partition not on disk there is never deleted
            log.error("cannot record the partitions hosted here (%s): their copies will "
                      "not be deleted after a restart", exc)

    def _remove_stray(self, stray: list[tuple[str, int]]) -> None:
        """Delete the copies of partitions this node is no longer a replica of: the whole
        local topic when none of its partitions is left here, else each one's data."""
        by_topic: dict[str, list[int]] = {}
        for name, index in stray:
            by_topic.setdefault(name, []).append(index)
        me = self.broker.node_id
        for name, indexes in by_topic.items():
            record, local = self.state.topic(name), self.broker.logs.get(name)
            if record is None or local is None:
                continue
            tid = local.topic_id.hex
            held = [i for i in range(len(local.partitions)) if self.membership.known(tid, i)]
            if not any(me in p.replicas for p in record.partitions) \
                    and set(held) <= set(indexes):
                self._delete(name, "no longer a replica of any of its partitions")
                self.membership.forget(tid)
                continue
            for index in indexes:
                try:
                    plog = self.broker.logs.empty_partition(name, index, (SNAPSHOT_FILE,))
                except KafkaError as exc:
                    log.error("cannot delete the data of %s-%d: %s", name, index,
                              exc.message)
                    continue
                self.broker.producers.forget(plog)
                self.membership.forget(tid, index)
        self._save_membership()

    def hosted(self) -> list[bytes]:
        """The ids of the cluster's topics this node holds data for (heartbeats report
        them: storage GC's input)."""
        return [t.topic_id.bytes for t in self.broker.logs.topics.values()
                if not t.is_internal and t.topic_id.hex in self.made]

    def delete_ids(self, topic_ids: list[bytes]) -> None:
        """Storage GC's order: delete the data of these topics (unknown to the cluster)."""
        wanted = set(topic_ids)
        for topic in list(self.broker.logs.topics.values()):
            if topic.topic_id.bytes in wanted and not topic.is_internal \
                    and topic.topic_id.hex in self.made \
                    and self.state.topic_by_id(topic.topic_id.bytes) is None:
                self._delete(topic.name, "deleted from the cluster")

    async def import_local(self, cluster: ClusterService) -> None:
        """Offer the controller every local topic the cluster does not know (once this
        broker is registered): each becomes a cluster topic with its id, on this node."""
        agent = cluster.agent
        if agent is None:
            return
        await agent.registered.wait()
        floor = self.broker.producer_ids.floor
        if floor > 0:
            # ids this node handed out on its own live on in its partitions' producer
            # state: the cluster's ids move above them before those partitions are served
            try:
                await self.broker.producer_ids.ensure()
            except KafkaError as exc:
                log.error("producer ids not moved above %d: %s; local topics not imported",
                          floor, exc.message)
                return
        for topic in list(self.broker.logs.topics.values()):
            if topic.is_internal or topic.topic_id.hex in self.made \
                    or self.state.topic_by_id(topic.topic_id.bytes) is not None:
                continue
            request = ImportTopicRequest(
                topic.name, topic.topic_id.bytes, len(topic.partitions),
                tuple(ConfigEntry(k, v) for k, v in sorted(topic.configs.items())))
            try:
                answer = await cluster.ask(request, IMPORT_WAIT_S)
            except ControllerUnavailable as exc:
                log.error("could not import local topic %s: %s", topic.name, exc)
                continue
            if answer.error_code == ErrorCode.none:
                self._mark_made(topic.topic_id, True)
                log.info("local topic %s (%d partitions) is now the cluster's", topic.name,
                         len(topic.partitions))
            else:
                log.error("local topic %s not imported (%s): kept on disk, not served",
                          topic.name, answer.message)
        await self.broker.dynamic_configs.import_local(cluster)
        await self._import_offsets(cluster)

    async def _import_offsets(self, cluster: ClusterService) -> None:
        """This node's own committed offsets and groups (its ``__consumer_offsets``) and its
        transactions (``__transaction_state``) into the offsets group, once
        (``offsets-imported`` marks it done)."""
        mark = os.path.join(self.broker.config.data_dir, OFFSETS_MARK)
        if os.path.exists(mark):
            return
        loop = asyncio.get_running_loop()
        records: list[tuple[bytes, bytes]] = await loop.run_in_executor(
            None, self.broker.groups.local_records)
        records += self.broker.transactions.local_records()  # open transactions too
        for chunk in _chunks(records):
            try:
                answer = await cluster.ask(ImportOffsetsRequest(tuple(chunk)), IMPORT_WAIT_S)
            except ControllerUnavailable as exc:
                answer = None
                log.error("group records not imported: %s (tried again at the next start)",
                          exc)
            if answer is None or answer.error_code != ErrorCode.none:
                if answer is not None:
                    log.error("group records not imported: %s (tried again at the next "
                              "start)", answer.message)
                return
        atomic_write(mark, b"")
        if records:
            log.info("%d group records of this node's own are now the cluster's",
                     len(records))

    def _delete(self, name: str, why: str) -> None:
        try:
            topic = self.broker.logs.delete_topic(name)
        except KafkaError as exc:
            log.error("cannot delete local topic %s (%s): %s", name, why, exc.message)
            return
        for plog in topic.partitions:
            self.broker.producers.forget(plog)
        self._mark_made(topic.topic_id, False)
        log.info("deleted local topic %s: %s", name, why)
