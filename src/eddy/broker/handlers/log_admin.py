"""DeleteRecords (DELETE on each topic) and DescribeLogDirs (DESCRIBE on the cluster)."""

from __future__ import annotations

import datetime
import os
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers.topic_results import CLUSTER_DENIED, may_topic
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation
from eddy.security.checks import cluster_allowed

_NO_TIME = datetime.timedelta(0)
HIGH_WATERMARK = -1


async def delete_records(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DELETE_RECORDS, req.api_version)
    topics = []
    for t in req.body.topics:
        may_delete = may_topic(broker, req, AclOperation.DELETE, t.name)
        topic = broker.logs.get(t.name) if may_delete else None
        parts = []
        for p in t.partitions:
            code, low = ErrorCode.none, -1
            plog = topic.partitions[p.partition_index] if topic and 0 <= p.partition_index < len(
                topic.partitions) else None
            if not may_delete:
                code = ErrorCode.topic_authorization_failed
            elif plog is None:
                code = ErrorCode.unknown_topic_or_partition
            elif (refused := broker.partition_error(t.name, p.partition_index)) is not None:
                code = refused  # in a cluster: the leader deletes (clients send it there)
            elif not plog.config.delete:
                code = ErrorCode.policy_violation  # Kafka: only topics with delete policy
            else:
                target = plog.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                if target < 0 or target > plog.high_watermark:
                    code = ErrorCode.offset_out_of_range
                else:
                    try:
                        plog.set_log_start_offset(target)
                        low = plog.log_start_offset
                    except KafkaError as exc:  # the checkpoint could not be written
                        code = exc.code
            parts.append(build(mod.DeleteRecordsPartitionResult,
                               partition_index=p.partition_index, low_watermark=low,
                               error_code=code))
        topics.append(build(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts)))
    return build(mod.DeleteRecordsResponse, throttle_time=_NO_TIME, topics=tuple(topics))


async def describe_log_dirs(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_LOG_DIRS, req.api_version)
    if not cluster_allowed(broker, req, AclOperation.DESCRIBE):
        # Kafka: the top-level error (v3+) and no results; older versions have no
        # top-level error, so one result without a directory carries it
        code = ErrorCode.cluster_authorization_failed
        results: tuple[Any, ...] = ()
        if req.api_version < 3:
            results = (build(mod.DescribeLogDirsResult, error_code=code, log_dir="",
                             topics=(), total_bytes=-1, usable_bytes=-1),)
        return build(mod.DescribeLogDirsResponse, throttle_time=_NO_TIME, error_code=code,
                     error_message=CLUSTER_DENIED, results=results)
    logs = broker.logs
    wanted = req.body.topics
    if wanted is None:
        selection = [(t.name, list(range(len(t.partitions)))) for t in logs.topics.values()]
    else:
        selection = [(w.topic, list(w.partitions)) for w in wanted]
    topics = []
    for name, indexes in selection:
        topic = logs.get(name)
        if topic is None:
            continue
        parts = [
            build(mod.DescribeLogDirsPartition, partition_index=i,
                  partition_size=topic.partitions[i].size_bytes, offset_lag=0,
                  is_future_key=False)
            for i in indexes if 0 <= i < len(topic.partitions)
        ]
        topics.append(build(mod.DescribeLogDirsTopic, name=name, partitions=tuple(parts)))
    path = os.path.abspath(logs.topics_dir)
    st = os.statvfs(path)
    result = build(mod.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=path,
                   topics=tuple(topics), total_bytes=st.f_blocks * st.f_frsize,
                   usable_bytes=st.f_bavail * st.f_frsize)
    return build(mod.DescribeLogDirsResponse, throttle_time=_NO_TIME, error_code=ErrorCode.none,
                 results=(result,))
