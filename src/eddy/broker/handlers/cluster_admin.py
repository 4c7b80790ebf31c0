"""Topic administration on a clustered broker: CreateTopics, DeleteTopics and
CreatePartitions go to the controller (any node accepts them) and are answered once this
node's replica of the metadata state shows the change, so the client's next Metadata here
sees it; DescribeCluster names every live broker and the controller."""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.cluster_metadata import (
    APPLY_WAIT_S,
    CONTROLLER_WAIT_S,
    live_brokers,
)
from eddy.broker.handlers.topic_results import (
    configs_shown,
    created_configs,
    creation_partitions,
    creation_refused,
    deletion_refused,
    deletion_targets,
    may_topic,
    too_many_partitions,
    topic_denied,
    unknown_topic_id,
)
from eddy.cluster.controller.rpc import (
    ControllerReply,
    ControllerRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
)
from eddy.log.manager import validate_topic_name
from eddy.metadata import MetadataState
from eddy.metadata.records import ConfigEntry
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation
from eddy.security.checks import cluster_allowed

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.cluster.service import ClusterService

_NO_TIME = datetime.timedelta(0)
NO_ASSIGNMENTS = ("manual replica assignments are not taken by a cluster yet: give "
                  "num_partitions and replication_factor and the controller places them")


def _cluster(broker: Broker) -> ClusterService:
    assert broker.cluster is not None
    return broker.cluster


def has_topic(name: str, topic_id: bytes | None, partitions: int = 0
              ) -> Callable[[MetadataState], bool]:
    def check(state: MetadataState) -> bool:
        record = state.topic(name)
        return record is not None and topic_id in (None, record.topic_id) \
            and len(record.partitions) >= partitions
    return check


def lacks_topic(topic_id: bytes) -> Callable[[MetadataState], bool]:
    return lambda state: state.topic_by_id(topic_id) is None


async def ask(cluster: ClusterService, request: ControllerRequest) -> ControllerReply:
    """The controller's answer; its refusal as a ``KafkaError`` with its code and message."""
    return await cluster.ask_checked(request, CONTROLLER_WAIT_S)


async def create_topics(broker: Broker, req: Request) -> Any:
    cluster = _cluster(broker)
    body = req.body
    mod = response_module(ApiKey.CREATE_TOPICS, req.api_version)
    counts = Counter(t.name for t in body.topics)
    too_many = too_many_partitions(creation_partitions(body, broker.config.num_partitions))
    cluster_create = cluster_allowed(broker, req, AclOperation.CREATE)
    results = []
    for t in body.topics:
        code, message = ErrorCode.none, None
        topic_id = uuid.UUID(int=0)
        partitions, rf = t.num_partitions, t.replication_factor
        configs_out: tuple[Any, ...] = ()
        config_code = ErrorCode.none
        try:
            refused = creation_refused(broker, req, t.name, cluster_create)
            if refused is not None:
                raise refused
            if too_many is not None:
                raise too_many
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"Create topics request from client contains duplicate "
                                 f"topic {t.name}")
            if t.assignments:
                raise KafkaError(ErrorCode.invalid_request, NO_ASSIGNMENTS)
            validate_topic_name(t.name)
            configs = {c.name: c.value for c in t.configs}
            entries = tuple(ConfigEntry(k, v) for k, v in sorted(configs.items())
                            if v is not None)
            answer = await ask(cluster, CreateTopicRequest(t.name, partitions, rf, entries,
                                                           body.validate_only))
            if answer.topic_id is not None and not body.validate_only:
                await cluster.wait_applied(has_topic(t.name, answer.topic_id), APPLY_WAIT_S)
                topic_id = uuid.UUID(bytes=answer.topic_id)
            record = cluster.state.topic(t.name)
            if record is not None and not body.validate_only:
                partitions = len(record.partitions)
                rf = len(record.partitions[0].replicas) if record.partitions else rf
            else:
                partitions = answer.value or partitions
                rf = broker.config.default_replication_factor if rf == -1 else rf
            configs_out = created_configs(broker, mod, {k: v for k, v in configs.items()
                                                        if v is not None})
            if not configs_shown(broker, req, t.name):
                partitions, rf, configs_out = -1, -1, ()
                config_code = ErrorCode.topic_authorization_failed
        except KafkaError as exc:
            code, message = exc.code, exc.message
            partitions, rf, configs_out = -1, -1, ()
        results.append(build(mod.CreatableTopicResult, name=t.name, topic_id=topic_id,
                             error_code=code, error_message=message,
                             num_partitions=partitions, replication_factor=rf,
                             configs=configs_out, topic_config_error_code=config_code))
    return build(mod.CreateTopicsResponse, throttle_time=_NO_TIME, topics=tuple(results))


async def delete_topics(broker: Broker, req: Request) -> Any:
    cluster = _cluster(broker)
    body = req.body
    mod = response_module(ApiKey.DELETE_TOPICS, req.api_version)
    wanted = deletion_targets(body)
    results = []
    for name, topic_id in wanted:
        code, message = ErrorCode.none, None
        try:
            by_id = topic_id is not None and topic_id.int != 0
            if name is None:
                if not by_id:
                    raise KafkaError(ErrorCode.invalid_request, "neither name nor id given")
                assert topic_id is not None
                found = cluster.state.topic_by_id(topic_id.bytes)
                if found is None:
                    raise unknown_topic_id(broker, req, topic_id)
                name = found.name
            record = cluster.state.topic(name)
            refused = deletion_refused(broker, req, name, by_id, record is not None)
            if refused is not None:
                name, error = refused
                raise error
            sent_id = topic_id.bytes if by_id and topic_id is not None else None
            await ask(cluster, DeleteTopicRequest(name, sent_id))
            if record is not None:
                topic_id = uuid.UUID(bytes=record.topic_id)
                await cluster.wait_applied(lacks_topic(record.topic_id), APPLY_WAIT_S)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(build(mod.DeletableTopicResult, name=name,
                             topic_id=topic_id or uuid.UUID(int=0), error_code=code,
                             error_message=message))
    return build(mod.DeleteTopicsResponse, throttle_time=_NO_TIME, responses=tuple(results))


async def create_partitions(broker: Broker, req: Request) -> Any:
    cluster = _cluster(broker)
    body = req.body
    mod = response_module(ApiKey.CREATE_PARTITIONS, req.api_version)
    counts = Counter(t.name for t in body.topics)
    existing = {t.name: len(r.partitions) for t in body.topics
                if (r := cluster.state.topic(t.name)) is not None}
    too_many = too_many_partitions(sum(max(t.count - existing.get(t.name, t.count), 0)
                                       for t in body.topics))
    results = []
    for t in body.topics:
        code, message = ErrorCode.none, None
        try:
            if too_many is not None:
                raise too_many
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.invalid_request, f"duplicate topic {t.name}")
            if not may_topic(broker, req, AclOperation.ALTER, t.name):
                raise topic_denied()
            if t.assignments is not None:
                raise KafkaError(ErrorCode.invalid_request, NO_ASSIGNMENTS)
            await ask(cluster, CreatePartitionsRequest(t.name, t.count, body.validate_only))
            if not body.validate_only:
                await cluster.wait_applied(has_topic(t.name, None, t.count), APPLY_WAIT_S)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(build(mod.CreatePartitionsTopicResult, name=t.name, error_code=code,
                             error_message=message))
    return build(mod.CreatePartitionsResponse, throttle_time=_NO_TIME, results=tuple(results))


def describe_cluster(broker: Broker, req: Request, mod: Any, authorized_operations: int) -> Any:
    cluster = _cluster(broker)
    endpoint_type = getattr(req.body, "endpoint_type", 1)
    listener = getattr(broker, "listener_name", None)
    brokers = tuple(build(mod.DescribeClusterBroker, broker_id=n, host=h, port=p, rack=r,
                          is_fenced=False)
                    for n, h, p, r in live_brokers(cluster.state, listener)
                    ) if endpoint_type == 1 else ()
    code = ErrorCode.none if endpoint_type == 1 else ErrorCode.unsupported_endpoint_type
    message = None if endpoint_type == 1 else "only broker endpoints are served"
    cluster_id = cluster.state.cluster_id  # the metadata log's, never a provisional one
    if not cluster_id:  # not caught up with the metadata log yet: retriable
        code, brokers = ErrorCode.request_timed_out, ()
        message = "this node has not caught up with the cluster's metadata yet; retry"
    return build(mod.DescribeClusterResponse, throttle_time=_NO_TIME, error_code=code,
                 error_message=message, endpoint_type=endpoint_type, cluster_id=cluster_id,
                 controller_id=cluster.named_controller() if endpoint_type == 1 else -1,
                 brokers=brokers, cluster_authorized_operations=authorized_operations)
