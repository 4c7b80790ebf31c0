"""Metadata on a clustered broker: every live broker, and each partition's leader, replicas,
ISR and leader epoch as this node's replica of the ``metadata`` state has them; unknown
topics are created through the controller (auto.create.topics.enable).

The controller id it gives is its own, as a KRaft broker gives some live broker's (KIP-590):
every broker takes admin requests and forwards them to the real controller, and a client
(librdkafka caches it for topic.metadata.refresh.interval.ms, 5 minutes) is never pointed at
a controller that just died. DescribeCluster names the real one."""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from eddy.cluster.controller_client import ControllerUnavailable
from eddy.cluster.controller_rpc import CreateTopicRequest, error_of
from eddy.cluster.metadata import NO_LEADER, MetadataState
from eddy.cluster.metadata.endpoints import endpoint
from eddy.cluster.metadata.records import TopicRecord
from eddy.log.manager import validate_topic_name
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.cluster.service import ClusterService

NO_OPS = -2147483648  # authorized operations not requested
#: how long a request waits for the controller (and for its change to reach this node)
CONTROLLER_WAIT_S = 10.0
APPLY_WAIT_S = 2.0


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


async def handle(broker: Broker, req: Request) -> Any:
    cluster = broker.cluster
    assert cluster is not None
    state = cluster.state
    body = req.body
    version = req.api_version
    mod = response_module(ApiKey.METADATA, version)
    requested = body.topics
    if version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    allow_auto = getattr(body, "allow_auto_topic_creation", True)
    topics: list[Any] = []
    if requested is None:
        topics = [topic_entry(state, mod, t) for n in state.topic_names()
                  if (t := state.topic(n)) is not None]
    for item in requested or ():
        name = item.name
        topic_id = getattr(item, "topic_id", None)
        if name is None:
            if topic_id is not None and topic_id.int != 0:
                found = state.topic_by_id(topic_id.bytes)
                topics.append(topic_entry(state, mod, found) if found is not None else
                              error_entry(mod, None, topic_id, ErrorCode.unknown_topic_id))
            else:
                topics.append(error_entry(mod, None, None, ErrorCode.invalid_request))
            continue
        record = state.topic(name)
        if record is None:
            try:
                validate_topic_name(name)
            except KafkaError as exc:
                topics.append(error_entry(mod, name, None, exc.code))
                continue
            code = ErrorCode.unknown_topic_or_partition
            if allow_auto and broker.config.auto_create_topics_enable:
                code = await auto_create(cluster, name) or ErrorCode.none
                record = state.topic(name)
            if record is None or code != ErrorCode.none:
                topics.append(error_entry(mod, name, None, code))
                continue
        topics.append(topic_entry(state, mod, record))
    # this node as the listener the request came in on tells (answering: it is up)
    listener = getattr(broker, "listener_name", None)
    listed = sorted([*(b for b in live_brokers(state, listener) if b[0] != broker.node_id),
                     (broker.node_id, broker.host, broker.port, broker.config.broker_rack)])
    brokers = tuple(build(mod.MetadataResponseBroker, node_id=n, host=h, port=p, rack=r)
                    for n, h, p, r in listed)
    return build(mod.MetadataResponse, throttle_time=datetime.timedelta(0), brokers=brokers,
                 cluster_id=cluster.cluster_id, controller_id=broker.node_id,
                 topics=tuple(topics), cluster_authorized_operations=NO_OPS)
