"""OffsetForLeaderEpoch (API 23): where a leader epoch ended in this leader's log.

A returning follower (KIP-101/279) asks with its latest epoch and truncates to the answer;
a consumer (KIP-320, replica id -1) asks after a leader change to detect a truncated log.
Both get the same answer: the epoch history's end offset (LeaderEpochCache.end_offset_for),
after the fencing checks Kafka makes on the current leader epoch.

With an authorizer, as Kafka (KIP-320 opened the API to consumers): CLUSTER_ACTION on the
cluster allows every topic; without it each topic needs DESCRIBE, else its partitions are
TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from eddy.broker.broker import Broker
from eddy.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed, cluster_allowed

log = logging.getLogger(__name__)

_NO_TIME = datetime.timedelta(0)


def epoch_end_offset(broker: Broker, topic: str, partition: int, current_leader_epoch: int,
                     leader_epoch: int) -> tuple[ErrorCode, int, int]:
    """(error, epoch, end offset) for one partition, checked as Kafka checks it: the
    partition exists here, this broker leads it, the caller's current epoch is this one."""
    local = broker.logs.get(topic)
    plog = local.partitions[partition] if local is not None and 0 <= partition < len(
        local.partitions) else None
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    refused = broker.partition_error(topic, partition)
    if refused is not None:
        return refused, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if 0 <= current_leader_epoch != plog.leader_epoch:
        code = (ErrorCode.fenced_leader_epoch if current_leader_epoch < plog.leader_epoch
                else ErrorCode.unknown_leader_epoch)
        return code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if plog.epochs.latest_epoch() < plog.leader_epoch:
        # a leader's own epoch is in its history (Kafka assigns it on becoming leader, at
        # the log end): a node on its own never "becomes" leader, so it is added here
        try:
            plog.epochs.assign(plog.leader_epoch, plog.log_end_offset)
        except OSError as exc:
            log.warning("%s-%d: cannot record leader epoch %d: %s", topic, partition,
                        plog.leader_epoch, exc)
            return ErrorCode.kafka_storage_error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    epoch, end = plog.epochs.end_offset_for(leader_epoch, plog.log_end_offset)
    return ErrorCode.none, epoch, end


async def handle(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, req.api_version)
    topics = []
    # a replica's (or any CLUSTER_ACTION holder's) request is allowed as a whole
    per_topic = broker.authorizer is not None and not cluster_allowed(
        broker, req, AclOperation.CLUSTER_ACTION)
    for t in req.body.topics:
        denied = per_topic and not allowed(broker, req, AclOperation.DESCRIBE,
                                           ResourceType.TOPIC, t.topic)
        parts = []
        for p in t.partitions:
            if denied:
                code, epoch, end = (ErrorCode.topic_authorization_failed, UNDEFINED_EPOCH,
                                    UNDEFINED_EPOCH_OFFSET)
            else:
                code, epoch, end = epoch_end_offset(
                    broker, t.topic, p.partition, getattr(p, "current_leader_epoch", -1),
                    p.leader_epoch)
            parts.append(build(mod.EpochEndOffset, error_code=code, partition=p.partition,
                               leader_epoch=epoch, end_offset=end))
        topics.append(build(mod.OffsetForLeaderTopicResult, topic=t.topic,
                            partitions=tuple(parts)))
    return build(mod.OffsetForLeaderEpochResponse, throttle_time=_NO_TIME,
                 topics=tuple(topics))
