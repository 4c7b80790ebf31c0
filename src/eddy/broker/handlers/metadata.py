"""Metadata: brokers, topics with ids, and auto-creation of requested topics, on a node of
its own (its logs) or in a cluster (its replica of the metadata, see ``cluster_metadata``).

Authorization is Kafka's (KafkaApis.handleTopicMetadataRequest): a list of every topic
holds only the topics the principal may DESCRIBE; a named topic it may not DESCRIBE comes
back TOPIC_AUTHORIZATION_FAILED whether or not it exists (by topic id: the id, no name);
auto-creation needs CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED.
Asked for them (v8+), each topic's authorized operations are filled in, and (v8-v10) the
cluster's when the principal may DESCRIBE the cluster (0 when not); with no authorizer
every operation of the type is reported, as Kafka does.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers import cluster_metadata
from eddy.log.manager import Topic, validate_topic_name
from eddy.metadata import MetadataState
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from eddy.security.checks import allowed, cluster_allowed, operations

NO_OPS = -2147483648  # authorized operations not requested


def _topic_entry(broker: Broker, mod: Any, topic: Topic) -> Any:
    node = broker.node_id
    parts = tuple(
        build(
            mod.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=p,
            leader_id=node,
            leader_epoch=plog.leader_epoch,
            replica_nodes=(node,),
            isr_nodes=(node,),
            offline_replicas=(),
        )
        for p, plog in enumerate(topic.partitions)
    )
    return build(
        mod.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=parts,
        topic_authorized_operations=NO_OPS,
    )


def _error_entry(mod: Any, name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> Any:
    return cluster_metadata.error_entry(mod, name, topic_id, code)


class _Local:
    """The topics of a node on its own: its logs."""

    def __init__(self, broker: Broker, mod: Any) -> None:
        self.broker, self.mod = broker, mod

    def names(self) -> list[str]:
        return list(self.broker.logs.topics)

    def entry(self, name: str) -> Any | None:
        topic = self.broker.logs.get(name)
        return None if topic is None else _topic_entry(self.broker, self.mod, topic)

    def by_id(self, topic_id: uuid.UUID) -> tuple[str, Any] | None:
        topic = self.broker.logs.by_id.get(topic_id)
        return None if topic is None else (topic.name, _topic_entry(self.broker, self.mod,
                                                                     topic))

    async def create(self, name: str) -> tuple[ErrorCode, Any | None]:
        return ErrorCode.none, _topic_entry(self.broker, self.mod, self.broker.auto_create(name))

    def brokers(self) -> list[tuple[int, str, int, str | None]]:
        return [(self.broker.node_id, self.broker.host, self.broker.port, None)]

    def cluster_id(self) -> str | None:
        return self.broker.cluster_id


class _Clustered(_Local):
    """The topics of a clustered broker: its replica of the metadata."""

    def names(self) -> list[str]:
        return self._state().topic_names()

    def _state(self) -> MetadataState:
        cluster = self.broker.cluster
        assert cluster is not None
        return cluster.state

    def entry(self, name: str) -> Any | None:
        state = self._state()
        record = state.topic(name)
        return None if record is None else cluster_metadata.topic_entry(state, self.mod, record)

    def by_id(self, topic_id: uuid.UUID) -> tuple[str, Any] | None:
        state = self._state()
        record = state.topic_by_id(topic_id.bytes)
        if record is None:
            return None
        return record.name, cluster_metadata.topic_entry(state, self.mod, record)

    async def create(self, name: str) -> tuple[ErrorCode, Any | None]:
        cluster = self.broker.cluster
        assert cluster is not None
        code = await cluster_metadata.auto_create(cluster, name) or ErrorCode.none
        entry = self.entry(name) if code == ErrorCode.none else None
        return (code, None) if entry is None else (ErrorCode.none, entry)

    def brokers(self) -> list[tuple[int, str, int, str | None]]:
        # this node as the listener the request came in on tells (answering: it is up)
        b = self.broker
        return sorted([*(x for x in cluster_metadata.live_brokers(
                             self._state(), getattr(b, "listener_name", None))
                         if x[0] != b.node_id),
                       (b.node_id, b.host, b.port, b.config.broker_rack)])

    def cluster_id(self) -> str | None:
        # the metadata log's id, never this node's own provisional one: None (which
        # clients take as "not known") until this node has caught up with the log
        return self._state().cluster_id or None


class _Gate:
    """The request's authorization decisions (all True with no authorizer)."""

    def __init__(self, broker: Broker, req: Request) -> None:
        self.broker, self.req = broker, req
        self.on = broker.authorizer is not None
        self._cluster_create: bool | None = None

    def describe(self, name: str) -> bool:
        return not self.on or allowed(self.broker, self.req, AclOperation.DESCRIBE,
                                      ResourceType.TOPIC, name)

    def create(self, name: str) -> bool:
        if not self.on:
            return True
        if self._cluster_create is None:
            self._cluster_create = cluster_allowed(self.broker, self.req, AclOperation.CREATE)
        return self._cluster_create or allowed(self.broker, self.req, AclOperation.CREATE,
                                               ResourceType.TOPIC, name)


async def _named(view: _Local, gate: _Gate, mod: Any, item: Any, auto: bool
                 ) -> tuple[Any, str | None]:
    """One requested topic's entry, and its name when it is described (not an error)."""
    name = item.name
    topic_id = getattr(item, "topic_id", None)
    if name is None:
        if topic_id is None or topic_id.int == 0:
            return _error_entry(mod, None, None, ErrorCode.invalid_request), None
        found = view.by_id(topic_id)
        if found is None:
            return _error_entry(mod, None, topic_id, ErrorCode.unknown_topic_id), None
        if not gate.describe(found[0]):  # ids are not secret: the id comes back, no name
            return _error_entry(mod, None, topic_id, ErrorCode.topic_authorization_failed), None
        return found[1], found[0]
    if not gate.describe(name):  # before the lookup: its existence is not revealed
        return _error_entry(mod, name, None, ErrorCode.topic_authorization_failed), None
    entry = view.entry(name)
    if entry is not None:
        return entry, name
    if auto and not gate.create(name):
        return _error_entry(mod, name, None, ErrorCode.topic_authorization_failed), None
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return _error_entry(mod, name, None, exc.code), None
    if not auto:
        return _error_entry(mod, name, None, ErrorCode.unknown_topic_or_partition), None
    code, entry = await view.create(name)
    if entry is None:
        return _error_entry(mod, name, None, code), None
    return entry, name


async def handle(broker: Broker, req: Request) -> Any:
    body = req.body
    version = req.api_version
    mod = response_module(ApiKey.METADATA, version)
    view = _Local(broker, mod) if broker.cluster is None else _Clustered(broker, mod)
    if broker.cluster is not None:
        await cluster_metadata.await_cluster_id(broker.cluster)
    gate = _Gate(broker, req)
    requested = body.topics
    if version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    auto = (getattr(body, "allow_auto_topic_creation", True)
            and broker.config.auto_create_topics_enable)
    found: list[tuple[Any, str | None]] = []
    if requested is None:
        for name in view.names():
            entry = view.entry(name) if gate.describe(name) else None
            if entry is not None:
                found.append((entry, name))
    else:
        for item in requested:
            found.append(await _named(view, gate, mod, item, auto))
    if getattr(body, "include_topic_authorized_operations", False):
        found = [(e if n is None else dataclasses.replace(
            e, topic_authorized_operations=operations(broker, req, ResourceType.TOPIC, n)), n)
            for e, n in found]
    cluster_ops = NO_OPS
    if getattr(body, "include_cluster_authorized_operations", False):
        cluster_ops = (operations(broker, req, ResourceType.CLUSTER, CLUSTER_NAME)
                       if cluster_allowed(broker, req, AclOperation.DESCRIBE) else 0)
    brokers = tuple(build(mod.MetadataResponseBroker, node_id=n, host=h, port=p, rack=r)
                    for n, h, p, r in view.brokers())
    return build(
        mod.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id=view.cluster_id(),
        controller_id=broker.node_id if broker.cluster is None
        else broker.cluster.named_controller(),
        topics=tuple(e for e, _ in found),
        cluster_authorized_operations=cluster_ops,
    )
