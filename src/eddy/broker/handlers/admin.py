"""Topic administration and cluster description: CreateTopics, DeleteTopics,
CreatePartitions, DescribeCluster."""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers import cluster_admin, cluster_metadata
from eddy.broker.handlers.topic_results import (
    MAX_PARTITIONS_PER_REQUEST,
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
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from eddy.security.checks import cluster_allowed, operations

_NO_TIME = datetime.timedelta(0)
#: cluster_authorized_operations when the client did not ask for them (Kafka's INT32 min)
NOT_ASKED = -2147483648
__all__ = ["MAX_PARTITIONS_PER_REQUEST", "create_partitions", "create_topics",
           "delete_topics", "describe_cluster"]


def _check_replicas(broker: Broker, replication_factor: int, assignments: Any) -> None:
    node = broker.node_id
    if replication_factor not in (-1, 1) and not assignments:
        if replication_factor <= 0:
            raise KafkaError(ErrorCode.invalid_replication_factor,
                             "Replication factor must be larger than 0, or -1 to use the default.")
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: 1.",
        )
    for a in assignments or ():
        if list(a.broker_ids) != [node]:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"replicas {list(a.broker_ids)} name brokers other than node {node}",
            )


async def create_topics(broker: Broker, req: Request) -> Any:
    if broker.cluster is not None:
        return await cluster_admin.create_topics(broker, req)
    body = req.body
    mod = response_module(ApiKey.CREATE_TOPICS, req.api_version)
    counts = Counter(t.name for t in body.topics)
    results = []
    now = broker.clock.now_ms()
    too_many = too_many_partitions(creation_partitions(body, broker.config.num_partitions))
    cluster_create = cluster_allowed(broker, req, AclOperation.CREATE)
    for t in body.topics:
        code, message = ErrorCode.none, None
        topic_id = uuid.UUID(int=0)
        num_partitions = t.num_partitions
        rf = t.replication_factor
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
                if num_partitions != -1 or rf != -1:
                    raise KafkaError(ErrorCode.invalid_request,
                                     "Both numPartitions or replicationFactor and "
                                     "replicasAssignments were set.")
                num_partitions = len(t.assignments)
            elif num_partitions == -1:
                num_partitions = broker.config.num_partitions
            _check_replicas(broker, rf, t.assignments)
            rf = 1
            configs = {c.name: c.value for c in t.configs}
            if body.validate_only:
                clean = broker.logs.check_create(t.name, num_partitions, configs)
            else:
                topic = broker.logs.create_topic(t.name, num_partitions, configs, now)
                topic_id = topic.topic_id
                clean = topic.configs
            configs_out = created_configs(broker, mod, clean)
            if not configs_shown(broker, req, t.name):
                num_partitions, rf, configs_out = -1, -1, ()
                config_code = ErrorCode.topic_authorization_failed
        except KafkaError as exc:
            code, message = exc.code, exc.message
            num_partitions, rf, configs_out = -1, -1, ()
        results.append(
            build(
                mod.CreatableTopicResult,
                name=t.name,
                topic_id=topic_id,
                error_code=code,
                error_message=message,
                num_partitions=num_partitions,
                replication_factor=rf,
                configs=configs_out,
                topic_config_error_code=config_code,
            )
        )
    return build(mod.CreateTopicsResponse, throttle_time=_NO_TIME, topics=tuple(results))


async def delete_topics(broker: Broker, req: Request) -> Any:
    if broker.cluster is not None:
        return await cluster_admin.delete_topics(broker, req)
    body = req.body
    mod = response_module(ApiKey.DELETE_TOPICS, req.api_version)
    wanted = deletion_targets(body)
    results = []
    for name, topic_id in wanted:
        code, message = ErrorCode.none, None
        try:
            by_id = name is None
            if name is None:
                if topic_id is None or topic_id.int == 0:
                    raise KafkaError(ErrorCode.invalid_request, "neither name nor id given")
                found = broker.logs.by_id.get(topic_id)
                if found is None:
                    raise unknown_topic_id(broker, req, topic_id)
                name = found.name
            refused = deletion_refused(broker, req, name, by_id,
                                       broker.logs.get(name) is not None)
            if refused is not None:
                name, error = refused
                raise error
            topic = broker.logs.delete_topic(name)
            topic_id = topic.topic_id
            for plog in topic.partitions:
                broker.producers.forget(plog)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(
            build(mod.DeletableTopicResult, name=name, topic_id=topic_id or uuid.UUID(int=0),
                  error_code=code, error_message=message)
        )
    return build(mod.DeleteTopicsResponse, throttle_time=_NO_TIME, responses=tuple(results))


async def create_partitions(broker: Broker, req: Request) -> Any:
    if broker.cluster is not None:
        return await cluster_admin.create_partitions(broker, req)
    body = req.body
    mod = response_module(ApiKey.CREATE_PARTITIONS, req.api_version)
    counts = Counter(t.name for t in body.topics)
    results = []
    existing = {t.name: len(topic.partitions) for t in body.topics
                if (topic := broker.logs.get(t.name)) is not None}
    too_many = too_many_partitions(sum(max(t.count - existing.get(t.name, t.count), 0)
                                        for t in body.topics))
    for t in body.topics:
        code, message = ErrorCode.none, None
        try:
            if too_many is not None:
                raise too_many
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.invalid_request, f"duplicate topic {t.name}")
            if not may_topic(broker, req, AclOperation.ALTER, t.name):
                raise topic_denied()
            topic = broker.logs.get(t.name)
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                 f"The topic '{t.name}' does not exist.")
            if t.assignments is not None:
                if len(t.assignments) != t.count - len(topic.partitions):
                    raise KafkaError(ErrorCode.invalid_replica_assignment,
                                     f"Increasing the number of partitions by "
                                     f"{t.count - len(topic.partitions)} but "
                                     f"{len(t.assignments)} assignments provided.")
                _check_replicas(broker, 1, t.assignments)
            broker.logs.add_partitions(t.name, t.count, broker.clock.now_ms(), body.validate_only)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(build(mod.CreatePartitionsTopicResult, name=t.name, error_code=code,
                             error_message=message))
    return build(mod.CreatePartitionsResponse, throttle_time=_NO_TIME, results=tuple(results))


def cluster_operations(node: Any, req: Request) -> int:
    """DescribeCluster's cluster_authorized_operations: no check to describe the cluster,
    but the operations the principal may do on it when asked (every one with no
    authorizer, as Kafka)."""
    if not getattr(req.body, "include_cluster_authorized_operations", False):
        return NOT_ASKED
    return operations(node, req, ResourceType.CLUSTER, CLUSTER_NAME)


async def describe_cluster(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_CLUSTER, req.api_version)
    if broker.cluster is not None:
        await cluster_metadata.await_cluster_id(broker.cluster)
        return cluster_admin.describe_cluster(broker, req, mod, cluster_operations(broker, req))
    endpoint_type = getattr(req.body, "endpoint_type", 1)
    if endpoint_type != 1:
        return build(mod.DescribeClusterResponse, throttle_time=_NO_TIME,
                     error_code=ErrorCode.unsupported_endpoint_type,
                     error_message="only broker endpoints are served", endpoint_type=endpoint_type,
                     cluster_id=broker.cluster_id, controller_id=-1, brokers=(),
                     cluster_authorized_operations=NOT_ASKED)
    return build(
        mod.DescribeClusterResponse,
        throttle_time=_NO_TIME,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=(build(mod.DescribeClusterBroker, broker_id=broker.node_id, host=broker.host,
                       port=broker.port, rack=None),),
        cluster_authorized_operations=cluster_operations(broker, req),
    )
