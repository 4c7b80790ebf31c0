"""KIP-951: a partition refused as not this node's to serve comes with the leader and epoch
the metadata names, and the responses carry where those leaders listen, so a client goes
there at once instead of after a Metadata round trip (Produce v10+, Fetch v12+/v16+)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eddy.metadata.endpoints import endpoint
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

#: the errors that mean "not here": the partition's leader is named with them
MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


def leader_hint(broker: Broker, topic: str | None, partition: int, code: ErrorCode
                ) -> tuple[int, int] | None:
    """(leader, leader epoch) for a partition refused with ``code`` (None: nothing to say:
    not a move, not in a cluster, no leader, or this node)."""
    cluster = broker.cluster
    if code not in MOVED or cluster is None or topic is None:
        return None
    part = cluster.state.partition(topic, partition)
    if part is None or part.leader < 0 or part.leader == broker.node_id:
        return None
    return part.leader, part.leader_epoch


def endpoints(broker: Broker, nodes: set[int]) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of each registered node in ``nodes``, on the listener
    the request came in on (``broker`` is then that listener's view of the node)."""
    listener: str | None = getattr(broker, "listener_name", None)
    cluster = broker.cluster
    out: list[tuple[int, str, int, str | None]] = []
    if cluster is None:
        return out
    for node in sorted(nodes):
        record = cluster.state.broker(node)
        if record is None:
            continue
        found = endpoint(record.kafka_addr, listener)
        if found is not None:
            out.append((node, found[0], found[1], record.rack))
    return out
