"""The broker's state as the scrape-time collectors read it (``collectors.StateSource``).

Bounded work per scrape: one pass over the partitions (sizes are sums of segment sizes
kept in memory), one over the committed offsets, one batch header read per partition a
group lags on (for the age of its oldest unconsumed record), one over the cluster's
partition records. Runs on the broker's event loop thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from eddy.cluster.raft.driver_types import RaftStatus
from eddy.metadata.records import NO_LEADER
from eddy.observe.collectors import PartitionStats
from eddy.protocol.errors import KafkaError
from eddy.protocol.record_batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, parse_header

if TYPE_CHECKING:
    from eddy.broker.broker import Broker


class BrokerState:
    """A :class:`~eddy.observe.collectors.StateSource` over a live ``Broker``."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def now_ms(self) -> int:
        return self._broker.clock.now_ms()

    def partitions(self) -> Iterator[PartitionStats]:
        for plog in self._broker.logs.all_partitions():
            yield PartitionStats(plog.topic, plog.partition, plog.size_bytes,
                                 len(plog.segments))

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        groups = self._broker.groups
        if not groups.serving:
            return  # another node coordinates the groups now: it reports their lag
        coordinator = groups.coordinator
        for group_id in coordinator.group_ids():
            for (topic, partition), committed in coordinator.committed_offsets(group_id).items():
                yield group_id, topic, partition, committed.offset

    def high_watermark(self, topic: str, partition: int) -> int | None:
        plog = self._broker.logs.partition(topic, partition)
        return None if plog is None else plog.high_watermark

    def timestamp_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The timestamp of the batch holding ``offset`` (or of the first batch kept after
        it): its first record's (exact when ``offset`` starts the batch, else older by at
        most the batch's time span), or the append time on a LogAppendTime batch."""
        plog = self._broker.logs.partition(topic, partition)
        if plog is None:
            return None
        start = max(offset, plog.log_start_offset)
        try:
            got = plog.read(start, HEADER_SIZE, plog.high_watermark, min_one=False)
            if got is None:
                return None
            data = got if isinstance(got, bytes) else got.read()
        except (KafkaError, OSError):
            return None  # deleted or unreadable meanwhile: no age this time
        if len(data) < HEADER_SIZE:
            return None
        header = parse_header(data)
        if header.attributes & TIMESTAMP_TYPE_BIT:
            return header.max_timestamp
        return header.base_timestamp

    def raft_groups(self) -> Iterable[RaftStatus]:
        cluster = self._broker.cluster
        return [] if cluster is None else cluster.multi.status()

    def replication(self) -> tuple[int, int]:
        broker = self._broker
        cluster = broker.cluster
        if cluster is None:
            return 0, 0
        node = broker.node_id
        controller = cluster.controller_id == node
        under = offline = 0
        for topic in list(cluster.state.topics.values()):
            for part in topic.partitions:
                if part.leader == node and len(part.isr) < len(part.replicas):
                    under += 1
                elif controller and part.leader == NO_LEADER:
                    offline += 1
        return under, offline
