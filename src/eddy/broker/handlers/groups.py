"""Consumer-group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete. Each is a thin
translation between kio's wire types and the sans-IO coordinator (eddy.groups.state),
wrapped in seed 003's span.

With an authorizer each checks what Kafka's KafkaApis checks, before anything else: READ on
the group to join, sync, heartbeat, leave and commit (and READ on each committed topic);
DESCRIBE on the group to fetch offsets (topics it may not DESCRIBE are left out of a
fetch-all, TOPIC_AUTHORIZATION_FAILED when named) and to describe it; DELETE to delete a
group or (with READ on each topic) its offsets. ListGroups lists every group to a principal
that may DESCRIBE the cluster, else the groups it may DESCRIBE."""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from eddy.broker.broker import Broker
from eddy.groups.state import (
    DescribedGroup,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitEntry,
    OffsetFetchPartition,
    SyncGroupResponse,
)
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed, cluster_allowed, operations
from eddy.telemetry.tracing import span

_NO_TIME = datetime.timedelta(0)
NO_OPS = -2147483648
READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP_DENIED = ErrorCode.group_authorization_failed
TOPIC_DENIED = ErrorCode.topic_authorization_failed


def group_allowed(broker: Broker, req: Request, op: AclOperation, group_id: str) -> bool:
    return broker.authorizer is None or allowed(broker, req, op, ResourceType.GROUP, group_id)


def topic_allowed(broker: Broker, req: Request, op: AclOperation, topic: str) -> bool:
    return broker.authorizer is None or allowed(broker, req, op, ResourceType.TOPIC, topic)


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
        if not group_allowed(broker, req, READ, b.group_id):
            return _join_response(req, JoinGroupResponse(GROUP_DENIED, member_id=b.member_id))
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
        if not group_allowed(broker, req, READ, b.group_id):
            return _sync_response(req, SyncGroupResponse(GROUP_DENIED))
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
        r = HeartbeatResponse(GROUP_DENIED) if not group_allowed(broker, req, READ, b.group_id) \
            else HeartbeatResponse(ErrorCode.not_coordinator) if moved(broker, b.group_id) \
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
        r = LeaveGroupResponse(GROUP_DENIED) if not group_allowed(broker, req, READ, b.group_id) \
            else LeaveGroupResponse(ErrorCode.not_coordinator) if moved(broker, b.group_id) \
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
    group_ok = group_allowed(broker, req, READ, b.group_id)
    for t in b.topics if group_ok else ():
        if not topic_allowed(broker, req, READ, t.name):
            errors.update({(t.name, p.partition_index): TOPIC_DENIED for p in t.partitions})
            continue
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
        if not group_ok:
            errors = {(t.name, p.partition_index): GROUP_DENIED
                      for t in b.topics for p in t.partitions}
        elif moved(broker, b.group_id):
            errors = {(t.name, p.partition_index): ErrorCode.not_coordinator
                      if errors.get((t.name, p.partition_index)) != TOPIC_DENIED else TOPIC_DENIED
                      for t in b.topics for p in t.partitions}
        elif entries or TOPIC_DENIED not in errors.values():  # Kafka: none allowed, no call
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


def _no_offset(topic: str, partition: int, code: ErrorCode) -> OffsetFetchPartition:
    return OffsetFetchPartition(topic, partition, -1, -1, "", code)


def _fetch_group(broker: Broker, req: Request, group_id: str, topics: Any, current: bool
                 ) -> tuple[ErrorCode, dict[str, list[OffsetFetchPartition]]]:
    if not group_allowed(broker, req, DESCRIBE, group_id):
        if req.api_version < 2 and topics:  # no group error field: on each partition
            return GROUP_DENIED, {t.name: [_no_offset(t.name, p, GROUP_DENIED)
                                           for p in t.partition_indexes] for t in topics}
        return GROUP_DENIED, {}
    denied = [] if topics is None else [t for t in topics
                                        if not topic_allowed(broker, req, DESCRIBE, t.name)]
    refused = {t.name for t in denied}
    wanted = None if topics is None else [
        (t.name, p) for t in topics if t.name not in refused for p in t.partition_indexes
    ]
    if not current or moved(broker, group_id):
        return ErrorCode.not_coordinator, {}
    r = broker.groups.coordinator.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[OffsetFetchPartition]] = defaultdict(list)
    for p in r.partitions:
        # fetch-all: the topics it may not DESCRIBE are left out, as Kafka
        if topics is not None or topic_allowed(broker, req, DESCRIBE, p.topic):
            by_topic[p.topic].append(p)
    for t in denied:
        by_topic[t.name].extend(_no_offset(t.name, p, TOPIC_DENIED) for p in t.partition_indexes)
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
                code, by_topic = _fetch_group(broker, req, g.group_id, g.topics, current)
            groups.append(build(
                mod.OffsetFetchResponseGroup, group_id=g.group_id, error_code=code,
                topics=_fetch_topics(mod.OffsetFetchResponseTopics,
                                     mod.OffsetFetchResponsePartitions, by_topic)))
        return build(mod.OffsetFetchResponse, throttle_time=_NO_TIME, groups=tuple(groups))
    with span("eddy.broker.group.offset-fetch", group_id=b.group_id):
        code, by_topic = _fetch_group(broker, req, b.group_id, b.topics, current)
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
    everything = broker.authorizer is None or cluster_allowed(broker, req, DESCRIBE)
    mod = response_module(ApiKey.LIST_GROUPS, req.api_version)
    return build(
        mod.ListGroupsResponse, throttle_time=_NO_TIME, error_code=r.error_code,
        groups=tuple(
            build(mod.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type,
                  group_state=g.group_state, group_type=g.group_type)
            for g in r.groups
            if everything or group_allowed(broker, req, DESCRIBE, g.group_id)
        ),
    )


async def describe_groups(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DESCRIBE_GROUPS, req.api_version)
    refused = {gid for gid in b.groups if not group_allowed(broker, req, DESCRIBE, gid)}
    ok = [gid for gid in b.groups if gid not in refused]
    found = iter(broker.groups.coordinator.describe_groups(ok) if ok else ())
    described = [DescribedGroup(GROUP_DENIED, gid, "", "", "", ()) if gid in refused
                 else next(found) for gid in b.groups]
    with_ops = getattr(b, "include_authorized_operations", False)
    return build(
        mod.DescribeGroupsResponse,
        throttle_time=_NO_TIME,
        groups=tuple(
            build(
                mod.DescribedGroup, error_code=g.error_code, group_id=g.group_id,
                group_state=g.group_state, protocol_type=g.protocol_type,
                protocol_data=g.protocol_data,
                authorized_operations=operations(broker, req, ResourceType.GROUP, g.group_id)
                if with_ops and g.error_code == ErrorCode.none else NO_OPS,
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
    names = list(req.body.groups_names)
    refused = {gid for gid in names if not group_allowed(broker, req, DELETE, gid)}
    ok = [gid for gid in names if gid not in refused]
    results: list[tuple[str, ErrorCode]] = []
    if ok:
        results = list((await svc.call(svc.coordinator.delete_groups(svc.now(), ok))).results)
    results += [(gid, GROUP_DENIED) for gid in dict.fromkeys(names) if gid in refused]
    mod = response_module(ApiKey.DELETE_GROUPS, req.api_version)
    return build(
        mod.DeleteGroupsResponse, throttle_time=_NO_TIME,
        results=tuple(build(mod.DeletableGroupResult, group_id=gid, error_code=code)
                      for gid, code in results),
    )


async def offset_delete(broker: Broker, req: Request) -> Any:
    b = req.body
    svc = broker.groups
    mod = response_module(ApiKey.OFFSET_DELETE, req.api_version)
    if not group_allowed(broker, req, DELETE, b.group_id):
        return build(mod.OffsetDeleteResponse, error_code=GROUP_DENIED, throttle_time=_NO_TIME,
                     topics=())
    codes: dict[tuple[str, int], ErrorCode] = {}
    parts = []
    for t in b.topics:
        if topic_allowed(broker, req, READ, t.name):
            parts += [(t.name, p.partition_index) for p in t.partitions]
        else:
            codes.update({(t.name, p.partition_index): TOPIC_DENIED for p in t.partitions})
    r = await svc.call(svc.coordinator.delete_offsets(svc.now(), group_id=b.group_id,
                                                      partitions=parts))
    codes.update({(p.topic, p.partition): p.error_code for p in r.partitions})
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
