"""Metadata: brokers, topics with ids, and auto-creation of requested topics."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers import cluster_metadata
from eddy.log.manager import Topic, validate_topic_name
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError

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
    return build(
        mod.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id or uuid.UUID(int=0),
        is_internal=False,
        partitions=(),
        topic_authorized_operations=NO_OPS,
    )


async def handle(broker: Broker, req: Request) -> Any:
    if broker.cluster is not None:
        return await cluster_metadata.handle(broker, req)
    body = req.body
    version = req.api_version
    mod = response_module(ApiKey.METADATA, version)
    logs = broker.logs
    requested = body.topics
    if version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    allow_auto = getattr(body, "allow_auto_topic_creation", True)
    topics: list[Any] = []
    if requested is None:
        topics = [_topic_entry(broker, mod, t) for t in logs.topics.values()]
    else:
        for item in requested:
            name = item.name
            topic_id = getattr(item, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                t = logs.by_id.get(topic_id)
                topics.append(
                    _topic_entry(broker, mod, t)
                    if t
                    else _error_entry(mod, None, topic_id, ErrorCode.unknown_topic_id)
                )
                continue
            if name is None:
                topics.append(_error_entry(mod, None, None, ErrorCode.invalid_request))
                continue
            t = logs.get(name)
            if t is None:
                try:
                    validate_topic_name(name)
                except KafkaError as exc:
                    topics.append(_error_entry(mod, name, None, exc.code))
                    continue
                if allow_auto and broker.config.auto_create_topics_enable:
                    t = broker.auto_create(name)
                else:
                    code = ErrorCode.unknown_topic_or_partition
                    topics.append(_error_entry(mod, name, None, code))
                    continue
            topics.append(_topic_entry(broker, mod, t))
    brokers = (
        build(mod.MetadataResponseBroker, node_id=broker.node_id, host=broker.host,
              port=broker.port, rack=None),
    )
    return build(
        mod.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=NO_OPS,
    )
