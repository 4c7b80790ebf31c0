"""ListOffsets: earliest, latest, max timestamp, and first offset at or after a timestamp.
In a cluster only a partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, as Kafka):
a follower's high watermark lags the leader's. With an authorizer each topic needs DESCRIBE
(else TOPIC_AUTHORIZATION_FAILED, whether or not it exists), as Kafka."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from eddy.broker.broker import Broker
from eddy.log.partition import PartitionLog
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.records import CorruptRecordError, decode_batch_records
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
CONSUMER = -1
DEBUG_REPLICA = -2


def _lookup(plog: PartitionLog, timestamp: int, latest: int) -> tuple[int, int]:
    """(timestamp, offset) Kafka answers for one partition."""
    if timestamp == LATEST:
        return -1, latest
    if timestamp == EARLIEST:
        return -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        ts, _ = plog.max_timestamp_batch()
        if ts < 0:
            return -1, -1
        bp = plog.offset_for_timestamp(ts)
        if bp is None:
            return -1, -1
        seg_data = _batch_bytes(plog, bp)
        best = (-1, -1)
        for rec in decode_batch_records(seg_data):
            if rec.timestamp > best[0]:
                best = (rec.timestamp, rec.offset)
        return best
    if timestamp < 0:
        raise KafkaError(ErrorCode.invalid_request, f"unsupported timestamp {timestamp}")
    bp = plog.offset_for_timestamp(timestamp)
    if bp is None:
        return -1, -1
    for rec in decode_batch_records(_batch_bytes(plog, bp)):
        if rec.timestamp >= timestamp and rec.offset >= plog.log_start_offset:
            return rec.timestamp, rec.offset
    return -1, -1


def _batch_bytes(plog: PartitionLog, bp: Any) -> bytes:
    for seg in plog.segments:
        if seg.base_offset <= bp.base_offset < seg.next_offset:
            return seg.read_at(bp.position, bp.size)
    return b""


async def handle(broker: Broker, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.LIST_OFFSETS, req.api_version)
    read_committed = getattr(body, "isolation_level", 0) == 1
    # a consumer (-1) is answered by the leader only, as Kafka does; -2 (a debugging
    # consumer) by any replica, and, as any non-consumer, with the log end as the latest
    replica_id = getattr(body, "replica_id", CONSUMER)
    consumer, debug = replica_id == CONSUMER, replica_id == DEBUG_REPLICA
    topics = []
    authorizing = broker.authorizer is not None
    for t in body.topics:
        denied = authorizing and not allowed(broker, req, AclOperation.DESCRIBE,
                                             ResourceType.TOPIC, t.name)
        topic = None if denied else broker.logs.get(t.name)
        parts = []
        for p in t.partitions:
            plog = topic.partitions[p.partition_index] if topic and 0 <= p.partition_index < len(
                topic.partitions) else None
            code, ts, off = ErrorCode.none, -1, -1
            epoch = getattr(p, "current_leader_epoch", -1)
            refused = None if debug or denied else broker.partition_error(
                t.name, p.partition_index)
            if denied:
                code = ErrorCode.topic_authorization_failed
            elif refused is not None:
                code = refused
            elif plog is None:
                code = ErrorCode.unknown_topic_or_partition
            elif epoch >= 0 and epoch != plog.leader_epoch:
                code = (ErrorCode.fenced_leader_epoch if epoch < plog.leader_epoch
                        else ErrorCode.unknown_leader_epoch)
            else:
                try:
                    latest = (plog.log_end_offset if not consumer  # as Kafka: its own end
                              else broker.producers.last_stable_offset(plog) if read_committed
                              else plog.high_watermark)
                    ts, off = _lookup(plog, p.timestamp, latest)
                except KafkaError as exc:
                    code = exc.code
                except CorruptRecordError as exc:  # a stored batch's records do not decode
                    log.warning("ListOffsets on %s-%d: %s", t.name, p.partition_index, exc)
                    code = ErrorCode.corrupt_message
                except OSError as exc:
                    log.warning("ListOffsets on %s-%d: %s", t.name, p.partition_index, exc)
                    code = ErrorCode.kafka_storage_error
            parts.append(
                build(
                    mod.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=off,
                    leader_epoch=plog.leader_epoch if plog is not None and off >= 0 else -1,
                )
            )
        topics.append(build(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return build(mod.ListOffsetsResponse, throttle_time=datetime.timedelta(0),
                 topics=tuple(topics))
