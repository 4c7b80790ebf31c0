"""``ReplicaSync``: a clustered broker's local logs follow the metadata state.

After every change to this node's replica of the ``metadata`` state (coalesced: one pass per
loop turn), the broker creates the topics that have a partition here (with the cluster's
topic id and configs), adds partitions, applies config changes, drops a local topic whose
name now belongs to another topic id, and records which partitions it leads (Produce and
Fetch answer NOT_LEADER_OR_FOLLOWER for the others). A topic deleted from the cluster is
deleted here when the controller's storage GC orders it (``delete_ids``), or at once when the
name is reused.

Only the data of the partitions a node is a replica of is kept; until replication lands
(the next issue) a follower's copy stays empty.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from eddy.cluster.metadata import MetadataState
from eddy.protocol.errors import KafkaError

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

log = logging.getLogger(__name__)


class ReplicaSync:
    def __init__(self, broker: Broker, state: MetadataState) -> None:
        self.broker = broker
        self.state = state
        self.passes = 0
        self._scheduled = False

    def schedule(self, _index: int = 0) -> None:
        """Called on the metadata state's changes (Raft's task): sync on the next turn."""
        if self._scheduled:
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._run)

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
        led: set[tuple[str, int]] = set()
        for name in state.topic_names():
            record = state.topic(name)
            assert record is not None
            topic_id = uuid.UUID(bytes=record.topic_id)
            local = logs.get(name)
            if local is not None and not local.is_internal and local.topic_id != topic_id:
                self._delete(name, "the name belongs to another topic now")
                local = None
            if not any(me in p.replicas for p in record.partitions):
                continue
            configs = {e.name: e.value for e in record.configs}
            try:
                if local is None:
                    local = logs.create_topic(name, len(record.partitions), configs, now,
                                              topic_id=topic_id)
                if len(local.partitions) < len(record.partitions):
                    logs.add_partitions(name, len(record.partitions), now, False)
                if local.configs != configs:
                    logs.alter_topic_configs(name, configs)
                for index, part in enumerate(record.partitions):
                    if me in part.replicas:
                        local.partitions[index].set_leader_epoch(part.leader_epoch)
                    if part.leader == me:
                        led.add((name, index))
            except KafkaError as exc:
                log.error("cannot host %s as the cluster asks: %s", name, exc.message)
        broker.led = led
        if state.cluster_id:
            broker.cluster_id = state.cluster_id
        self.passes += 1

    def hosted(self) -> list[bytes]:
        """The topic ids this node holds data for (heartbeats report them)."""
        return [t.topic_id.bytes for t in self.broker.logs.topics.values()
                if not t.is_internal]

    def delete_ids(self, topic_ids: list[bytes]) -> None:
        """Storage GC's order: delete the data of these topics (unknown to the cluster)."""
        wanted = set(topic_ids)
        for topic in list(self.broker.logs.topics.values()):
            if topic.topic_id.bytes in wanted and not topic.is_internal \
                    and self.state.topic_by_id(topic.topic_id.bytes) is None:
                self._delete(topic.name, "deleted from the cluster")

    def _delete(self, name: str, why: str) -> None:
        try:
            topic = self.broker.logs.delete_topic(name)
        except KafkaError as exc:
            log.error("cannot delete local topic %s (%s): %s", name, why, exc.message)
            return
        for plog in topic.partitions:
            self.broker.producers.forget(plog)
        log.info("deleted local topic %s: %s", name, why)
