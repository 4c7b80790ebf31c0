"""The owner's side of the admin KafkaOps (eddy.gateway.ops_admin): each op becomes the Kafka
request a direct client would send, run through the broker's own handler (admin.py,
configs.py, log_admin.py, groups.py, leader_epoch.py, elect_leaders.py, reassignments.py) at
the newest version it serves, and the answer is converted to the op's response struct."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers import (
    admin,
    configs,
    elect_leaders,
    groups,
    leader_epoch,
    log_admin,
    reassignments,
)
from eddy.gateway import ops_admin as oa
from eddy.protocol.apis import SUPPORTED, ApiKey
from eddy.protocol.codec import Request, build, request_module
from eddy.security.session import Session


def _td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _newest(key: ApiKey) -> tuple[int, Any]:
    """The newest version served and its kio request module."""
    v = SUPPORTED[key].max
    return v, request_module(key, v)


def _request(key: ApiKey, version: int, body: Any, session: Session | None = None) -> Request:
    return Request(key, version, 0, None, body, "", session)


def _by_topic(items: tuple[tuple[str, int], ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name, partition in items:
        out.setdefault(name, []).append(partition)
    return out


async def delete_topics(broker: Broker, op: oa.DeleteTopicsOp,
                        session: Session | None = None) -> oa.DeleteTopicsOpResp:
    v, mod = _newest(ApiKey.DELETE_TOPICS)
    body = build(mod.DeleteTopicsRequest, timeout=_td(op.timeout_ms), topic_names=op.names,
                 topics=tuple(build(mod.DeleteTopicState, name=n, topic_id=None)
                              for n in op.names))
    r = await admin.delete_topics(broker, _request(ApiKey.DELETE_TOPICS, v, body, session=session))
    return oa.DeleteTopicsOpResp(tuple(
        oa.DeletedTopic(t.name or "", int(t.error_code), getattr(t, "error_message", None),
                        t.topic_id.bytes if getattr(t, "topic_id", None) else bytes(16))
        for t in r.responses))


async def create_partitions(broker: Broker, op: oa.CreatePartitionsOp,
                            session: Session | None = None) -> oa.CreatePartitionsOpResp:
    v, mod = _newest(ApiKey.CREATE_PARTITIONS)
    me = (broker.node_id,)
    body = build(
        mod.CreatePartitionsRequest, timeout=_td(op.timeout_ms), validate_only=op.validate_only,
        topics=tuple(
            build(mod.CreatePartitionsTopic, name=t.name, count=t.count,
                  assignments=None if t.assignments < 0 else tuple(
                      build(mod.CreatePartitionsAssignment, broker_ids=me)
                      # a peer's count is not trusted: one more than any request may add
                      # is enough for the handler to refuse a wrong one
                      for _ in range(min(t.assignments, admin.MAX_PARTITIONS_PER_REQUEST + 1))))
            for t in op.topics))
    request = _request(ApiKey.CREATE_PARTITIONS, v, body, session=session)
    r = await admin.create_partitions(broker, request)
    return oa.CreatePartitionsOpResp(tuple(
        oa.TopicError(t.name, int(t.error_code), t.error_message) for t in r.results))


async def describe_configs(broker: Broker, op: oa.DescribeConfigsOp,
                           session: Session | None = None) -> oa.DescribeConfigsOpResp:
    v, mod = _newest(ApiKey.DESCRIBE_CONFIGS)
    body = build(mod.DescribeConfigsRequest, include_synonyms=op.include_synonyms,
                 include_documentation=op.include_documentation,
                 resources=tuple(build(mod.DescribeConfigsResource,
                                       resource_type=r.resource_type, resource_name=r.name,
                                       configuration_keys=r.keys)
                                 for r in op.resources))
    request = _request(ApiKey.DESCRIBE_CONFIGS, v, body, session=session)
    resp = await configs.describe_configs(broker, request)
    return oa.DescribeConfigsOpResp(tuple(
        oa.DescribedResource(
            int(r.resource_type), r.resource_name, int(r.error_code), r.error_message,
            tuple(oa.DescribedConfig(
                c.name, c.value, c.read_only, int(c.config_source), c.is_sensitive,
                tuple(oa.ConfigSynonym(s.name, s.value, int(s.source)) for s in c.synonyms),
                int(c.config_type), c.documentation)
                for c in r.configs))
        for r in resp.results))


def _altered(resp: Any) -> oa.AlterConfigsOpResp:
    return oa.AlterConfigsOpResp(tuple(
        oa.AlteredResource(int(r.resource_type), r.resource_name, int(r.error_code),
                           r.error_message)
        for r in resp.responses))


async def alter_configs(broker: Broker, op: oa.AlterConfigsOp,
                        session: Session | None = None) -> oa.AlterConfigsOpResp:
    v, mod = _newest(ApiKey.ALTER_CONFIGS)
    body = build(mod.AlterConfigsRequest, validate_only=op.validate_only, resources=tuple(
        build(mod.AlterConfigsResource, resource_type=r.resource_type, resource_name=r.name,
              configs=tuple(build(mod.AlterableConfig, name=n, value=val)
                            for n, val in r.configs))
        for r in op.resources))
    return _altered(await configs.alter_configs(broker, _request(ApiKey.ALTER_CONFIGS, v,
                                                                 body, session=session)))


async def incremental_alter_configs(broker: Broker, op: oa.IncrementalAlterConfigsOp,
                                    session: Session | None = None) -> oa.AlterConfigsOpResp:
    v, mod = _newest(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    body = build(mod.IncrementalAlterConfigsRequest, validate_only=op.validate_only,
                 resources=tuple(
                     build(mod.AlterConfigsResource, resource_type=r.resource_type,
                           resource_name=r.name,
                           configs=tuple(build(mod.AlterableConfig, name=c.name,
                                               config_operation=c.operation, value=c.value)
                                         for c in r.configs))
                     for r in op.resources))
    resp = await configs.incremental_alter_configs(
        broker, _request(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, body, session=session))
    return _altered(resp)


async def delete_records(broker: Broker, op: oa.DeleteRecordsOp,
                         session: Session | None = None) -> oa.DeleteRecordsOpResp:
    v, mod = _newest(ApiKey.DELETE_RECORDS)
    body = build(mod.DeleteRecordsRequest, timeout=_td(op.timeout_ms), topics=tuple(
        build(mod.DeleteRecordsTopic, name=t.name, partitions=tuple(
            build(mod.DeleteRecordsPartition, partition_index=p, offset=o)
            for p, o in t.partitions))
        for t in op.topics))
    request = _request(ApiKey.DELETE_RECORDS, v, body, session=session)
    r = await log_admin.delete_records(broker, request)
    return oa.DeleteRecordsOpResp(tuple(
        oa.DeleteRecordsTopicResp(t.name, tuple(
            (p.partition_index, p.low_watermark, int(p.error_code)) for p in t.partitions))
        for t in r.topics))


async def delete_groups(broker: Broker, op: oa.DeleteGroupsOp,
                        session: Session | None = None) -> oa.DeleteGroupsOpResp:
    v, mod = _newest(ApiKey.DELETE_GROUPS)
    body = build(mod.DeleteGroupsRequest, groups_names=op.groups)
    r = await groups.delete_groups(broker, _request(ApiKey.DELETE_GROUPS, v, body, session=session))
    return oa.DeleteGroupsOpResp(tuple((g.group_id, int(g.error_code)) for g in r.results))


async def offset_delete(broker: Broker, op: oa.OffsetDeleteOp,
                        session: Session | None = None) -> oa.OffsetDeleteOpResp:
    v, mod = _newest(ApiKey.OFFSET_DELETE)
    body = build(mod.OffsetDeleteRequest, group_id=op.group_id, topics=tuple(
        build(mod.OffsetDeleteRequestTopic, name=n, partitions=tuple(
            build(mod.OffsetDeleteRequestPartition, partition_index=p) for p in ps))
        for n, ps in _by_topic(op.partitions).items()))
    r = await groups.offset_delete(broker, _request(ApiKey.OFFSET_DELETE, v, body, session=session))
    return oa.OffsetDeleteOpResp(int(r.error_code), tuple(
        (t.name, p.partition_index, int(p.error_code)) for t in r.topics for p in t.partitions))


async def describe_log_dirs(broker: Broker, op: oa.DescribeLogDirsOp,
                            session: Session | None = None) -> oa.DescribeLogDirsOpResp:
    v, mod = _newest(ApiKey.DESCRIBE_LOG_DIRS)
    body = build(mod.DescribeLogDirsRequest, topics=None if op.topics is None else tuple(
        build(mod.DescribableLogDirTopic, topic=t.name, partitions=t.partitions)
        for t in op.topics))
    request = _request(ApiKey.DESCRIBE_LOG_DIRS, v, body, session=session)
    r = await log_admin.describe_log_dirs(broker, request)
    return oa.DescribeLogDirsOpResp(int(getattr(r, "error_code", 0)), tuple(
        oa.LogDir(int(d.error_code), d.log_dir, tuple(
            oa.LogDirTopic(t.name, tuple(
                oa.LogDirPartition(p.partition_index, p.partition_size, p.offset_lag,
                                   p.is_future_key)
                for p in t.partitions))
            for t in d.topics), getattr(d, "total_bytes", -1), getattr(d, "usable_bytes", -1))
        for d in r.results))


async def offset_for_leader_epoch(broker: Broker, op: oa.OffsetForLeaderEpochOp,
                                  session: Session | None = None
                                  ) -> oa.OffsetForLeaderEpochOpResp:
    v, mod = _newest(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    body = build(mod.OffsetForLeaderEpochRequest, replica_id=-1, topics=tuple(
        build(mod.OffsetForLeaderTopic, topic=t.name, partitions=tuple(
            build(mod.OffsetForLeaderPartition, partition=p.partition,
                  current_leader_epoch=p.current_leader_epoch, leader_epoch=p.leader_epoch)
            for p in t.partitions))
        for t in op.topics))
    request = _request(ApiKey.OFFSET_FOR_LEADER_EPOCH, v, body, session=session)
    r = await leader_epoch.handle(broker, request)
    return oa.OffsetForLeaderEpochOpResp(tuple(
        oa.EpochTopicResp(t.topic, tuple(
            oa.EpochEndOffset(p.partition, int(p.error_code), p.leader_epoch, p.end_offset)
            for p in t.partitions))
        for t in r.topics))


def _outcomes(topics: Any, name: str, rows: str, index: str) -> tuple[oa.TopicOutcomes, ...]:
    return tuple(
        oa.TopicOutcomes(getattr(t, name), tuple(
            oa.PartitionOutcome(getattr(p, index), int(p.error_code), p.error_message)
            for p in getattr(t, rows)))
        for t in topics)


async def elect_leaders_op(broker: Broker, op: oa.ElectLeadersOp,
                           session: Session | None = None) -> oa.ElectLeadersOpResp:
    v, mod = _newest(ApiKey.ELECT_LEADERS)
    body = build(mod.ElectLeadersRequest, election_type=op.election_type,
                 timeout=_td(op.timeout_ms),
                 topic_partitions=None if op.topics is None else tuple(
                     build(mod.TopicPartitions, topic=t.name, partitions=t.partitions)
                     for t in op.topics))
    r = await elect_leaders.elect_leaders(
        broker, _request(ApiKey.ELECT_LEADERS, v, body, session=session))
    return oa.ElectLeadersOpResp(int(getattr(r, "error_code", 0)), _outcomes(
        r.replica_election_results, "topic", "partition_result", "partition_id"))


async def alter_reassignments(broker: Broker, op: oa.AlterReassignmentsOp,
                              session: Session | None = None) -> oa.AlterReassignmentsOpResp:
    v, mod = _newest(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    body = build(mod.AlterPartitionReassignmentsRequest, timeout=_td(op.timeout_ms),
                 allow_replication_factor_change=True, topics=tuple(
                     build(mod.ReassignableTopic, name=t.name, partitions=tuple(
                         build(mod.ReassignablePartition, partition_index=p.partition,
                               replicas=p.replicas)
                         for p in t.partitions))
                     for t in op.topics))
    r = await reassignments.alter_partition_reassignments(
        broker, _request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, v, body, session=session))
    return oa.AlterReassignmentsOpResp(int(r.error_code), r.error_message, _outcomes(
        r.responses, "name", "partitions", "partition_index"))


async def list_reassignments(broker: Broker, op: oa.ListReassignmentsOp,
                             session: Session | None = None) -> oa.ListReassignmentsOpResp:
    v, mod = _newest(ApiKey.LIST_PARTITION_REASSIGNMENTS)
    body = build(mod.ListPartitionReassignmentsRequest, timeout=_td(op.timeout_ms),
                 topics=None if op.topics is None else tuple(
                     build(mod.ListPartitionReassignmentsTopics, name=t.name,
                           partition_indexes=t.partitions)
                     for t in op.topics))
    r = await reassignments.list_partition_reassignments(
        broker, _request(ApiKey.LIST_PARTITION_REASSIGNMENTS, v, body, session=session))
    return oa.ListReassignmentsOpResp(int(r.error_code), r.error_message, tuple(
        oa.OngoingTopic(t.name, tuple(
            oa.OngoingReassignment(p.partition_index, tuple(p.replicas),
                                   tuple(p.adding_replicas), tuple(p.removing_replicas))
            for p in t.partitions))
        for t in r.topics))


_Runner = Callable[[Broker, Any, Session | None], Awaitable[Any]]

#: the runner of every admin op (merged into eddy.gateway.executor.RUNNERS)
ADMIN_RUNNERS: dict[int, _Runner] = {
    oa.KAFKA_OP_DELETE_TOPICS: delete_topics,
    oa.KAFKA_OP_CREATE_PARTITIONS: create_partitions,
    oa.KAFKA_OP_DESCRIBE_CONFIGS: describe_configs,
    oa.KAFKA_OP_ALTER_CONFIGS: alter_configs,
    oa.KAFKA_OP_INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
    oa.KAFKA_OP_DELETE_RECORDS: delete_records,
    oa.KAFKA_OP_DELETE_GROUPS: delete_groups,
    oa.KAFKA_OP_OFFSET_DELETE: offset_delete,
    oa.KAFKA_OP_DESCRIBE_LOG_DIRS: describe_log_dirs,
    oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    oa.KAFKA_OP_ELECT_LEADERS: elect_leaders_op,
    oa.KAFKA_OP_ALTER_REASSIGNMENTS: alter_reassignments,
    oa.KAFKA_OP_LIST_REASSIGNMENTS: list_reassignments,
}
