"""Metadata on a clustered broker (the helpers metadata.py answers with): every live broker,
and each partition's leader, replicas, ISR and leader epoch as this node's replica of the
``metadata`` state has them; unknown topics are created through the controller
(auto.create.topics.enable).

The controller id it gives is its own, as a KRaft broker gives some live broker's (KIP-590):
every broker takes admin requests and forwards them to the real controller, and a client
(librdkafka caches it for topic.metadata.refresh.interval.ms, 5 minutes) is never pointed at
a controller that just died. DescribeCluster names the real one."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.rpc import CreateTopicRequest, error_of
from eddy.metadata import NO_LEADER, MetadataState
from eddy.metadata.endpoints import endpoint
from eddy.metadata.records import TopicRecord
from eddy.protocol.codec import build
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.cluster.service import ClusterService

NO_OPS = -2147483648  # authorized operations not requested
#: how long a request waits for the controller (and for its change to reach this node)
CONTROLLER_WAIT_S = 10.0
APPLY_WAIT_S = 2.0
#: how long Metadata and DescribeCluster wait for a node to learn the cluster's id
CLUSTER_ID_WAIT_S = 3.0


async def await_cluster_id(cluster: ClusterService, timeout_s: float = CLUSTER_ID_WAIT_S
                           ) -> str | None:
    """The cluster's id as the metadata log has it; a node that has not caught up with the
    log yet (a new node before the first controller's SetClusterId reaches it) waits up to
    ``timeout_s`` for it, then None. Its own provisional id is never answered: a client
    that saw two ids would think it talks to two clusters (librdkafka warns "reports
    different ClusterId"), and a Kafka broker takes no request before it has caught up."""
    if not cluster.state.cluster_id:
        await cluster.wait_applied(lambda state: bool(state.cluster_id), timeout_s)
    return cluster.state.cluster_id or None


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def live_brokers(state: MetadataState, listener: str | None = None
                 ) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of every registered, unfenced broker, on ``listener``
    (the registrations' first address when None)."""
    out = []
    for b in state.live_brokers():
        host, port = endpoint(b.kafka_addr, listener) or ("", 0)
        out.append((b.node_id, host, port, b.rack))
    return sorted(out)


def topic_entry(state: MetadataState, mod: Any, topic: TopicRecord) -> Any:
    parts = []
    for index, p in enumerate(topic.partitions):
        offline = tuple(r for r in p.replicas if not state.is_live(r))
        parts.append(build(
            mod.MetadataResponsePartition,
            error_code=ErrorCode.leader_not_available if p.leader == NO_LEADER
            else ErrorCode.none,
            partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas, isr_nodes=p.isr, offline_replicas=offline,
        ))
    return build(mod.MetadataResponseTopic, error_code=ErrorCode.none, name=topic.name,
                 topic_id=uuid.UUID(bytes=topic.topic_id), is_internal=False,
                 partitions=tuple(parts), topic_authorized_operations=NO_OPS)


def error_entry(mod: Any, name: str | None, topic_id: uuid.UUID | None, code: ErrorCode
                ) -> Any:
    return build(mod.MetadataResponseTopic, error_code=code, name=name,
                 topic_id=topic_id or uuid.UUID(int=0), is_internal=False, partitions=(),
                 topic_authorized_operations=NO_OPS)


async def auto_create(cluster: ClusterService, name: str) -> ErrorCode | None:
    """Ask the controller for ``name`` with the defaults; None once it is here."""
    try:
        answer = await cluster.ask(CreateTopicRequest(name, -1, -1, (), False),
                                   CONTROLLER_WAIT_S)
    except ControllerUnavailable:
        return ErrorCode.leader_not_available
    if answer.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
        return error_of(answer)
    if await cluster.wait_applied(lambda s: s.topic(name) is not None, APPLY_WAIT_S):
        return None
    return ErrorCode.leader_not_available
