"""Consumer-group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete. Each is a thin
translation between kio's wire types and the sans-IO coordinator (eddy.groups.state),
wrapped in seed 003's span."""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from eddy.broker.broker import Broker
from eddy.groups.state import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitEntry,
    OffsetFetchPartition,
    SyncGroupResponse,
)
from eddy.observe.tracing import span
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode

_NO_TIME = datetime.timedelta(0)
NO_OPS = -2147483648


def moved(broker: Broker, group_id: str) -> bool:
    """In a cluster: this broker does not coordinate ``group_id`` now (NOT_COORDINATOR sends
    the client to FindCoordinator again, so a group is never served by two brokers)."""
    if broker.cluster is None:
        return False
    return broker.groups.store is None or not broker.groups.serving


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


async def join_group(broker: Broker, req: Request) -> Any:
    b = req.body
    v = req.api_version
    svc = broker.groups
    with span("eddy.broker.group.join", group_id=b.group_id) as s:
        session_ms = _ms(b.session_timeout)
        if moved(broker, b.group_id):
            return _join_response(req, JoinGroupResponse(ErrorCode.not_coordinator))
        step = svc.coordinator.join_group(
            svc.now(),
            group_id=b.group_id,
            member_id=b.member_id,
            client_id=req.client_id or "",
            client_host=req.client_host,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=_ms(getattr(b, "rebalance_timeout", session_ms)),
            protocol_type=b.protocol_type,
            protocols=[(p.name, p.metadata) for p in b.protocols],
            group_instance_id=getattr(b, "group_instance_id", None),
            api_version=v,
        )
        r = await svc.call(step)
        if r.error_code == ErrorCode.none:
            with span("eddy.broker.coordinator.rebalance-complete",
                      generation_id=r.generation_id, leader_id=r.leader):
                pass
        s.set_attribute("error_code", int(r.error_code))
    return _join_response(req, r)


def _join_response(req: Request, r: JoinGroupResponse) -> Any:
    v = req.api_version
    mod = response_module(ApiKey.JOIN_GROUP, v)
    protocol_name = r.protocol_name if (v >= 7 or r.protocol_name is not None) else ""
    return build(
        mod.JoinGroupResponse,
        throttle_time=_NO_TIME,
        error_code=r.error_code,
        generation_id=r.generation_id,
        protocol_type=r.protocol_type,
        protocol_name=protocol_name,
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=tuple(
            build(mod.JoinGroupResponseMember, member_id=m.member_id,
                  group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in r.members
        ),
    )


async def sync_group(broker: Broker, req: Request) -> Any:
    b = req.body
    svc = broker.groups
    with span("eddy.broker.group.sync", group_id=b.group_id):
        if moved(broker, b.group_id):
            return _sync_response(req, SyncGroupResponse(ErrorCode.not_coordinator))
        step = svc.coordinator.sync_group(
            svc.now(),
            group_id=b.group_id,
            generation_id=b.generation_id,
            member_id=b.member_id,
            assignments=[(a.member_id, a.assignment) for a in b.assignments],
            group_instance_id=getattr(b, "group_instance_id", None),
            protocol_type=getattr(b, "protocol_type", None),
            protocol_name=getattr(b, "protocol_name", None),
        )
        r = await svc.call(step)
    return _sync_response(req, r)


def _sync_response(req: Request, r: SyncGroupResponse) -> Any:
    mod = response_module(ApiKey.SYNC_GROUP, req.api_version)
    return build(mod.SyncGroupResponse, throttle_time=_NO_TIME, error_code=r.error_code,
                 protocol_type=r.protocol_type, protocol_name=r.protocol_name,
                 assignment=r.assignment)


async def heartbeat(broker: Broker, req: Request) -> Any:
    b = req.body
    svc = broker.groups
    with span("eddy.broker.group.heartbeat", group_id=b.group_id):
        r = HeartbeatResponse(ErrorCode.not_coordinator) if moved(broker, b.group_id) \
            else await svc.call(svc.coordinator.heartbeat(
            svc.now(), group_id=b.group_id, generation_id=b.generation_id,
            member_id=b.member_id, group_instance_id=getattr(b, "group_instance_id", None)))
    mod = response_module(ApiKey.HEARTBEAT, req.api_version)
    return build(mod.HeartbeatResponse, throttle_time=_NO_TIME, error_code=r.error_code)


async def leave_group(broker: Broker, req: Request) -> Any:
    b = req.body
    svc = broker.groups
    if hasattr(b, "members"):
        members = [(m.member_id, m.group_instance_id) for m in b.members]
    else:
        members = [(b.member_id, None)]
    with span("eddy.broker.group.leave", group_id=b.group_id):
        r = LeaveGroupResponse(ErrorCode.not_coordinator) if moved(broker, b.group_id) \
            else await svc.call(svc.coordinator.leave_group(svc.now(), group_id=b.group_id,
                                                            members=members))
    mod = response_module(ApiKey.LEAVE_GROUP, req.api_version)
    error = r.error_code
    if req.api_version < 3 and error == ErrorCode.none and r.members:
        error = r.members[0].error_code  # v0-v2 carry the single member's error on top
    return build(
        mod.LeaveGroupResponse,
        throttle_time=_NO_TIME,
        error_code=error,
        members=tuple(
            build(mod.MemberResponse, member_id=m.member_id,
                  group_instance_id=m.group_instance_id, error_code=m.error_code)
            for m in r.members
        ) if hasattr(mod, "MemberResponse") else (),
    )


async def offset_commit(broker: Broker, req: Request) -> Any:
    b = req.body
    svc = broker.groups
    entries: list[OffsetCommitEntry] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for t in b.topics:
        count = broker.partition_count(t.name)
        for p in t.partitions:
            if count is None or not 0 <= p.partition_index < count:
                errors[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
                continue
            entries.append(OffsetCommitEntry(
                topic=t.name, partition=p.partition_index, offset=p.committed_offset,
                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                metadata=p.committed_metadata,
            ))
    with span("eddy.broker.group.offset-commit", group_id=b.group_id):
        retention = getattr(b, "retention_time", -1)
        if moved(broker, b.group_id):
            errors = {(t.name, p.partition_index): ErrorCode.not_coordinator
                      for t in b.topics for p in t.partitions}
        else:
            r = await svc.call(svc.coordinator.commit_offsets(
                svc.now(), group_id=b.group_id, offsets=entries,
                generation_id=b.generation_id_or_member_epoch, member_id=b.member_id,
                group_instance_id=getattr(b, "group_instance_id", None),
                retention_time_ms=_ms(retention) if retention is not None else -1,
                api_version=req.api_version))
            for pr in r.partitions:
                errors[(pr.topic, pr.partition)] = pr.error_code
    mod = response_module(ApiKey.OFFSET_COMMIT, req.api_version)
    return build(
        mod.OffsetCommitResponse,
        throttle_time=_NO_TIME,
        topics=tuple(
            build(mod.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(mod.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=errors.get((t.name, p.partition_index), ErrorCode.none))
                for p in t.partitions))
            for t in b.topics
        ),
    )


def _fetch_group(broker: Broker, group_id: str, topics: Any, current: bool
                 ) -> tuple[ErrorCode, dict[str, list[OffsetFetchPartition]]]:
    wanted = None if topics is None else [
        (t.name, p) for t in topics for p in t.partition_indexes
    ]
    if not current or moved(broker, group_id):
        return ErrorCode.not_coordinator, {}
    r = broker.groups.coordinator.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[OffsetFetchPartition]] = defaultdict(list)
    for p in r.partitions:
        by_topic[p.topic].append(p)
    return r.error_code, by_topic


def _fetch_topics(cls_topic: Any, cls_part: Any, by_topic: dict[str, list[Any]]) -> tuple[
        Any, ...]:
    return tuple(
        build(cls_topic, name=name, partitions=tuple(
            build(cls_part, partition_index=p.partition, committed_offset=p.committed_offset,
                  committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                  error_code=p.error_code)
            for p in parts))
        for name, parts in by_topic.items()
    )


async def _confirmed(broker: Broker) -> bool:
    """In a cluster: this node's coordinator is still the current one (see
    ``RaftGroupStore.confirm``); on a node of its own, always."""
    store = broker.groups.store
    return broker.cluster is None or (store is not None and await store.confirm())


async def offset_fetch(broker: Broker, req: Request) -> Any:
    b = req.body
    v = req.api_version
    mod = response_module(ApiKey.OFFSET_FETCH, v)
    current = await _confirmed(broker)
    if v >= 8:
        groups = []
        for g in b.groups:
            with span("eddy.broker.group.offset-fetch", group_id=g.group_id):
                code, by_topic = _fetch_group(broker, g.group_id, g.topics, current)
            groups.append(build(
                mod.OffsetFetchResponseGroup, group_id=g.group_id, error_code=code,
                topics=_fetch_topics(mod.OffsetFetchResponseTopics,
                                     mod.OffsetFetchResponsePartitions, by_topic)))
        return build(mod.OffsetFetchResponse, throttle_time=_NO_TIME, groups=tuple(groups))
    with span("eddy.broker.group.offset-fetch", group_id=b.group_id):
        code, by_topic = _fetch_group(broker, b.group_id, b.topics, current)
    return build(
        mod.OffsetFetchResponse,
        throttle_time=_NO_TIME,
        error_code=code,
        topics=_fetch_topics(mod.OffsetFetchResponseTopic, mod.OffsetFetchResponsePartition,
                             by_topic),
    )


async def list_groups(broker: Broker, req: Request) -> Any:
    b = req.body
    r = broker.groups.coordinator.list_groups(
        tuple(getattr(b, "states_filter", ()) or ()), tuple(getattr(b, "types_filter", ()) or ())
    )
    mod = response_module(ApiKey.LIST_GROUPS, req.api_version)
    return build(
        mod.ListGroupsResponse, throttle_time=_NO_TIME, error_code=r.error_code,
        groups=tuple(
            build(mod.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type,
                  group_state=g.group_state, group_type=g.group_type)
            for g in r.groups
        ),
    )


async def describe_groups(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DESCRIBE_GROUPS, req.api_version)
    described = broker.groups.coordinator.describe_groups(b.groups)
    return build(
        mod.DescribeGroupsResponse,
        throttle_time=_NO_TIME,
        groups=tuple(
            build(
                mod.DescribedGroup, error_code=g.error_code, group_id=g.group_id,
                group_state=g.group_state, protocol_type=g.protocol_type,
                protocol_data=g.protocol_data, authorized_operations=NO_OPS,
                members=tuple(
                    build(mod.DescribedGroupMember, member_id=m.member_id,
                          group_instance_id=m.group_instance_id, client_id=m.client_id,
                          client_host=m.client_host, member_metadata=m.member_metadata,
                          member_assignment=m.member_assignment)
                    for m in g.members
                ),
            )
            for g in described
        ),
    )


async def delete_groups(broker: Broker, req: Request) -> Any:
    svc = broker.groups
    r = await svc.call(svc.coordinator.delete_groups(svc.now(), list(req.body.groups_names)))
    mod = response_module(ApiKey.DELETE_GROUPS, req.api_version)
    return build(
        mod.DeleteGroupsResponse, throttle_time=_NO_TIME,
        results=tuple(build(mod.DeletableGroupResult, group_id=gid, error_code=code)
                      for gid, code in r.results),
    )


async def offset_delete(broker: Broker, req: Request) -> Any:
    b = req.body
    svc = broker.groups
    parts = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    r = await svc.call(svc.coordinator.delete_offsets(svc.now(), group_id=b.group_id,
                                                      partitions=parts))
    codes = {(p.topic, p.partition): p.error_code for p in r.partitions}
    mod = response_module(ApiKey.OFFSET_DELETE, req.api_version)
    return build(
        mod.OffsetDeleteResponse,
        error_code=r.error_code,
        throttle_time=_NO_TIME,
        topics=tuple(
            build(mod.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
                build(mod.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                      error_code=codes.get((t.name, p.partition_index), ErrorCode.none))
                for p in t.partitions))
            for t in b.topics
        ) if r.error_code == ErrorCode.none else (),
    )
