"""What the broker's services need of the broker that holds them, as protocols.

The group coordinator service, the transaction coordinator service and the marker writer
live inside ``Broker`` and use a few of its parts; typing them against these protocols
instead of ``Broker`` keeps ``broker.py`` the only module that knows the whole broker (no
import circle between it and its services). ``Broker`` satisfies each protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from eddy.broker.flusher import Flusher
    from eddy.broker.producers import ProducerStates
    from eddy.broker.waiters import AppendNotifier
    from eddy.clock import Clock
    from eddy.config import BrokerConfig
    from eddy.log.manager import LogManager
    from eddy.log.partition import PartitionLog
    from eddy.metadata.state import MetadataState
    from eddy.protocol.errors import ErrorCode
    from eddy.telemetry.counters import HotCounters

__all__ = ["ClusterView", "Counted", "LogHost", "MarkerHost", "Replicating"]


class Counted(Protocol):
    @property
    def counts(self) -> HotCounters: ...


class ClusterView(Protocol):
    @property
    def state(self) -> MetadataState: ...


class Replicating(Protocol):
    def leader_appended(self, plog: PartitionLog) -> None: ...

    async def wait_replicated(self, plog: PartitionLog, end_offset: int, min_isr: int,
                              timeout_s: float) -> ErrorCode: ...


class LogHost(Protocol):
    """The group coordinator service's view: config, clock, logs, metrics."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def producers(self) -> ProducerStates: ...

    @property
    def metrics(self) -> Counted: ...


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
