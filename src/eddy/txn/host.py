"""What the transaction coordinator service and the marker writer need of the broker that
holds them, as a protocol (besides the group coordinator's ``LogHost``): the cluster,
replication, flushes. ``Broker`` satisfies it; it is never imported by them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from eddy.groups.host import LogHost

if TYPE_CHECKING:
    from eddy.broker.flusher import Flusher
    from eddy.broker.waiters import AppendNotifier
    from eddy.log.partition import PartitionLog
    from eddy.metadata.state import MetadataState
    from eddy.protocol.errors import ErrorCode

__all__ = ["ClusterView", "MarkerHost", "Replicating"]


class ClusterView(Protocol):
    @property
    def state(self) -> MetadataState: ...


class Replicating(Protocol):
    def leader_appended(self, plog: PartitionLog) -> None: ...

    async def wait_replicated(self, plog: PartitionLog, end_offset: int, min_isr: int,
                              timeout_s: float) -> ErrorCode: ...


class MarkerHost(LogHost, Protocol):
    """What writing transaction markers needs besides: the cluster, replication, flushes."""

    @property
    def node_id(self) -> int: ...

    @property
    def flusher(self) -> Flusher: ...

    @property
    def notifier(self) -> AppendNotifier: ...

    @property
    def replication(self) -> Replicating | None: ...

    @property
    def cluster(self) -> ClusterView | None: ...

    def partition_error(self, topic: str, partition: int) -> ErrorCode | None: ...
