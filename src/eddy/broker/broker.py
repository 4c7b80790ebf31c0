"""The broker's state shared by every connection: config, clock, logs, waiters."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from eddy.broker.dynamic_configs import DynamicConfigs
from eddy.broker.flusher import Flusher, GroupCommit
from eddy.broker.producers import ProducerStates
from eddy.broker.settings import BrokerSettings
from eddy.broker.waiters import AppendNotifier
from eddy.clock import Clock
from eddy.groups.service import GroupService
from eddy.log import compaction
from eddy.log.manager import INTERNAL_TOPICS, LogManager, Topic
from eddy.log.partition import PartitionLog
from eddy.log.state_files import atomic_write
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.telemetry.counters import BrokerReports
from eddy.txn.producer_ids import ProducerIdAllocator
from eddy.txn.service import TransactionService

if TYPE_CHECKING:  # the node wires the cluster service in; the broker only reads it
    from eddy.cluster.replication.manager import ReplicaManager
    from eddy.cluster.service import ClusterService
    from eddy.security.authorizer import Authorizer

log = logging.getLogger(__name__)

META_FILE = "meta.json"


def load_cluster_id(data_dir: str, node_id: int) -> str:
    """This node's cluster id, made up and saved on first start."""
    path = os.path.join(data_dir, META_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            meta: dict[str, Any] = json.load(f)
        return str(meta["cluster_id"])
    except FileNotFoundError:
        pass
    os.makedirs(data_dir, exist_ok=True)
    cluster_id = uuid.uuid4().hex[:22]
    atomic_write(path, json.dumps({"cluster_id": cluster_id, "node_id": node_id}).encode())
    return cluster_id


class Broker:
    def __init__(self, config: BrokerSettings, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.node_id = config.node_id
        #: what its parts report: handlers bump ``metrics.counts``; listeners are watched
        #: (the admin listener's Prometheus metrics read both when scraped)
        self.metrics = BrokerReports(config.metrics_enable)
        self.logs = LogManager(config.data_dir, config.topic_defaults())
        self.dynamic_configs = DynamicConfigs(self)
        self.notifier = AppendNotifier()
        self.flusher = Flusher(clock, GroupCommit(config.group_commit_window_us / 1e6,
                                                  config.group_commit_max_bytes,
                                                  config.group_commit_max_writes))
        self.groups = GroupService(self)
        self.producers = ProducerStates()
        self.producer_ids = ProducerIdAllocator(config.data_dir)
        self.transactions = TransactionService(self)
        self.cluster_id = ""
        self.host, self.port = config.advertised_address
        self._maintenance: asyncio.Task[None] | None = None
        self._cleaner: asyncio.Task[None] | None = None
        self._last_clean_ms = 0
        self._failing: set[tuple[str, int]] = set()  # partitions whose maintenance fails
        #: the metadata service, when this broker is part of a cluster (None: on its own)
        self.cluster: ClusterService | None = None
        #: the partitions this broker leads in a cluster (None: every local one)
        self.led: set[tuple[str, int]] | None = None
        #: ISR replication, in a cluster (None: every partition here is its only replica)
        self.replication: ReplicaManager | None = None
        #: ACL decisions (authorizer.class.name set; None: every request is allowed)
        self.authorizer: Authorizer | None = None

    def load(self) -> None:
        os.makedirs(self.config.data_dir, exist_ok=True)
        self.cluster_id = load_cluster_id(self.config.data_dir, self.node_id)
        self.dynamic_configs.load()
        self.logs.load(self.clock.now_ms())
        self.groups.load()
        self.transactions.load()

    def set_advertised_port(self, port: int) -> None:
        """When listening on port 0, clients must be told the port the OS picked."""
        if self.config.advertised is None:
            self.port = port

    # ---- topics --------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has: the cluster's count, or the local topic's
        (None: no such topic)."""
        if self.cluster is not None and topic not in INTERNAL_TOPICS:
            record = self.cluster.state.topic(topic)
            return None if record is None else len(record.partitions)
        local = self.logs.get(topic)
        return None if local is None else len(local.partitions)

    def partition_error(self, topic: str, partition: int) -> ErrorCode | None:
        """In a cluster, why this broker may not serve ``topic-partition`` to clients:
        unknown to the cluster, or led by another broker (None: it may)."""
        if self.cluster is None or self.led is None or (topic, partition) in self.led \
                or topic in INTERNAL_TOPICS:  # each broker's own, until the offsets group
            return None
        if self.cluster.state.partition(topic, partition) is None:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    def auto_create(self, name: str) -> Topic:
        return self.logs.create_topic(
            name, self.config.num_partitions, {}, self.clock.now_ms()
        )

    # ---- background maintenance ----------------------------------------------------------

    def start_maintenance(self) -> None:
        self._maintenance = asyncio.get_running_loop().create_task(self._maintain())

    async def _clean_logs(self, now: int) -> None:
        """Compact every partition that needs it, one at a time, off the event loop."""
        loop = asyncio.get_running_loop()
        for topic in list(self.logs.topics.values()):
            for plog in topic.partitions:
                if not plog.config.compact:
                    continue
                state = self.producers.of(plog)
                lso = self.producers.last_stable_offset(plog)
                active = {pid: e.batches[-1].last_offset
                          for pid, e in state.producers.items() if e.batches}
                try:
                    if not compaction.needs_cleaning(plog, now, last_stable_offset=lso):
                        continue
                    plan = compaction.plan_cleaning(plog, now, last_stable_offset=lso,
                                                    producer_last_offsets=active)
                    if plan is None:
                        continue
                    result = await loop.run_in_executor(None, compaction.clean, plan)
                    if self.logs.partition(plog.topic, plog.partition) is plog:
                        compaction.commit_swap(plog, result)
                    else:
                        compaction.abort(result)  # the topic went away meanwhile
                except (compaction.CompactionError, OSError) as exc:
                    log.error("compaction of %s-%d failed: %s", plog.topic, plog.partition,
                              exc)

    async def stop(self) -> None:
        if self._cleaner is not None:
            self._cleaner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cleaner
        self.groups.stop()
        self.producers.snapshot_all(self.logs.all_partitions())
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        self.logs.close(clean=True)

    async def _maintain(self) -> None:
        last_retention = self.clock.now_ms()
        while True:
            await asyncio.sleep(0.1)
            now = self.clock.now_ms()
            try:
                await self.maintenance_tick(now, now - last_retention >=
                                            self.config.log_retention_check_interval_ms)
                if now - last_retention >= self.config.log_retention_check_interval_ms:
                    last_retention = now
            except Exception:
                log.exception("log maintenance failed; will retry")

    async def maintenance_tick(self, now: int, retention_due: bool) -> None:
        await self.transactions.abort_expired()
        if now - self._last_clean_ms >= self.config.log_cleaner_backoff_ms:
            self._last_clean_ms = now
            if self._cleaner is None or self._cleaner.done():
                self._cleaner = asyncio.get_running_loop().create_task(self._clean_logs(now))
        for plog in self.logs.all_partitions():
            try:
                await self._maintain_partition(plog, now, retention_due)
            except (KafkaError, OSError) as exc:
                # a full disk or no fd left: this partition waits, the others carry on
                key = (plog.topic, plog.partition)
                if key not in self._failing:
                    log.error("%s-%d: maintenance failed, retrying: %s", plog.topic,
                              plog.partition, exc)
                self._failing.add(key)
                continue
            if self._failing and (plog.topic, plog.partition) in self._failing:
                self._failing.discard((plog.topic, plog.partition))
                log.info("%s-%d: maintenance works again", plog.topic, plog.partition)
        if retention_due:
            self.producers.snapshot_all(self.logs.all_partitions())

    async def _maintain_partition(self, plog: PartitionLog, now: int, retention_due: bool
                                  ) -> None:
        plog.roll_if_due(now)
        rolled = plog.rolled_segments_to_flush()
        if rolled or plog.flush_due(now):
            upto = plog.log_end_offset if plog.flush_due(now) else rolled[-1].next_offset
            await self.flusher.flush(plog, upto)
        if retention_due:
            plog.apply_retention(now)
            state = self.producers.of(plog)
            state.expire(now, self.config.producer_id_expiration_ms)
            state.prune_aborted(plog.log_start_offset)
