"""Gateway handlers for consumer groups (seed 003): each request becomes a group op sent to
the group's owner; the answer is re-encoded for the client's version. No group state here."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from eddy.gateway import ops
from eddy.gateway.authz import Gate
from eddy.gateway.node import Gateway, as_code, failure_code
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, ResourceType
from eddy.telemetry.tracing import span

_NO_TIME = datetime.timedelta(0)
NO_OPS = -2147483648
_FAILURES = (ops.OpUnavailable, ops.OpTimeout, ops.OpFailed)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


async def _to_owner(gw: Gateway, group_id: str, op: int, request: Any,
                    timeout_ms: int) -> Any | ErrorCode:
    """The owner's answer, or the error code the client gets instead."""
    owner = gw.routes.group_owner(group_id)
    if owner is None:
        return ErrorCode.coordinator_not_available
    try:
        return await gw.call(owner, op, request, timeout_ms)
    except _FAILURES as exc:
        return failure_code(exc, ErrorCode.coordinator_not_available)


async def join_group(gw: Gateway, req: Request) -> Any:
    b = req.body
    v = req.api_version
    session_ms = _ms(b.session_timeout)
    rebalance_ms = _ms(getattr(b, "rebalance_timeout", -1))
    op = ops.JoinGroupOp(
        b.group_id, b.member_id, b.protocol_type, session_ms,
        tuple((p.name, p.metadata) for p in b.protocols), rebalance_ms,
        getattr(b, "group_instance_id", None), getattr(b, "reason", None),
        req.client_id or "", req.client_host, v)
    with span("eddy.gateway.group.join", group_id=b.group_id):
        # a join waits for the rebalance, up to the rebalance timeout
        r = await _to_owner(gw, b.group_id, ops.KAFKA_OP_JOIN_GROUP, op,
                            max(rebalance_ms, session_ms) + gw.request_timeout_ms)
    mod = response_module(ApiKey.JOIN_GROUP, v)
    if isinstance(r, ErrorCode):
        return build(mod.JoinGroupResponse, throttle_time=_NO_TIME, error_code=r,
                     generation_id=-1, protocol_type=None,
                     protocol_name=None if v >= 7 else "", leader="", skip_assignment=False,
                     member_id=b.member_id, members=())
    ids = r.member_instance_ids + (None,) * (len(r.members) - len(r.member_instance_ids))
    return build(
        mod.JoinGroupResponse, throttle_time=_NO_TIME, error_code=as_code(r.error_code),
        generation_id=r.generation_id, protocol_type=r.protocol_type,
        protocol_name=r.protocol_name if (r.has_protocol_name or v < 7) else None,
        leader=r.leader_id, skip_assignment=r.skip_assignment, member_id=r.member_id,
        members=tuple(build(mod.JoinGroupResponseMember, member_id=m, group_instance_id=i,
                            metadata=meta)
                      for (m, meta), i in zip(r.members, ids, strict=False)),
    )


async def sync_group(gw: Gateway, req: Request) -> Any:
    b = req.body
    op = ops.SyncGroupOp(
        b.group_id, b.member_id, b.generation_id,
        tuple((a.member_id, a.assignment) for a in b.assignments),
        getattr(b, "group_instance_id", None), getattr(b, "protocol_type", None),
        getattr(b, "protocol_name", None), req.api_version)
    with span("eddy.gateway.group.sync", group_id=b.group_id):
        # followers wait for the leader's assignment
        r = await _to_owner(gw, b.group_id, ops.KAFKA_OP_SYNC_GROUP, op,
                            2 * gw.request_timeout_ms)
    mod = response_module(ApiKey.SYNC_GROUP, req.api_version)
    if isinstance(r, ErrorCode):
        return build(mod.SyncGroupResponse, throttle_time=_NO_TIME, error_code=r,
                     protocol_type=None, protocol_name=None, assignment=b"")
    return build(mod.SyncGroupResponse, throttle_time=_NO_TIME,
                 error_code=as_code(r.error_code), protocol_type=r.protocol_type,
                 protocol_name=r.protocol_name, assignment=r.assignment)


async def heartbeat(gw: Gateway, req: Request) -> Any:
    b = req.body
    op = ops.HeartbeatOp(b.group_id, b.member_id, b.generation_id,
                         getattr(b, "group_instance_id", None), req.api_version)
    with span("eddy.gateway.group.heartbeat", group_id=b.group_id):
        r = await _to_owner(gw, b.group_id, ops.KAFKA_OP_HEARTBEAT, op, gw.request_timeout_ms)
    code = r if isinstance(r, ErrorCode) else as_code(r.error_code)
    mod = response_module(ApiKey.HEARTBEAT, req.api_version)
    return build(mod.HeartbeatResponse, throttle_time=_NO_TIME, error_code=code)


async def leave_group(gw: Gateway, req: Request) -> Any:
    b = req.body
    v = req.api_version
    if hasattr(b, "members"):
        op = ops.LeaveGroupOp(b.group_id, "", tuple((m.member_id, m.group_instance_id)
                                                    for m in b.members), v)
    else:
        op = ops.LeaveGroupOp(b.group_id, b.member_id, (), v)
    with span("eddy.gateway.group.leave", group_id=b.group_id):
        r = await _to_owner(gw, b.group_id, ops.KAFKA_OP_LEAVE_GROUP, op,
                            gw.request_timeout_ms)
    mod = response_module(ApiKey.LEAVE_GROUP, v)
    members: tuple[tuple[str, str | None, int], ...]
    if isinstance(r, ErrorCode):
        code, members = r, ()
    else:
        code, members = as_code(r.error_code), r.members
        if v < 3 and code == ErrorCode.none and members:
            code = as_code(members[0][2])  # v0-v2 carry the single member's error on top
    return build(
        mod.LeaveGroupResponse, throttle_time=_NO_TIME, error_code=code,
        members=tuple(build(mod.MemberResponse, member_id=m, group_instance_id=i,
                            error_code=as_code(e)) for m, i, e in members)
        if hasattr(mod, "MemberResponse") else (),
    )


def _known_partition(gw: Gateway, topic: str, partition: int) -> bool:
    route = gw.routes.topic(topic)
    return route is not None and 0 <= partition < route.partitions


async def offset_commit(gw: Gateway, req: Request) -> Any:
    b = req.body
    # the group's owner need not hold the topic: the gateway checks it against its routes
    wanted = [(t.name, p) for t in b.topics for p in t.partitions
              if _known_partition(gw, t.name, p.partition_index)]
    retention = getattr(b, "retention_time", None)
    op = ops.OffsetCommitOp(
        b.group_id,
        tuple((n, p.partition_index, p.committed_offset, p.committed_metadata)
              for n, p in wanted),
        b.generation_id_or_member_epoch, b.member_id, getattr(b, "group_instance_id", None),
        _ms(retention) if retention is not None else -1,
        tuple(getattr(p, "committed_leader_epoch", -1) for _, p in wanted), req.api_version)
    with span("eddy.gateway.group.offset-commit", group_id=b.group_id):
        r = await _to_owner(gw, b.group_id, ops.KAFKA_OP_OFFSET_COMMIT, op,
                            gw.request_timeout_ms)
    codes: dict[tuple[str, int], ErrorCode] = {}
    if not isinstance(r, ErrorCode):
        codes = {(t, p): as_code(e) for t, p, e in r.results}
    # partitions the gateway does not know: the broker's checks first (READ on the group,
    # then on the topic), so a refused principal learns nothing of which topics exist
    unknown = [t.name for t in b.topics for p in t.partitions
               if not _known_partition(gw, t.name, p.partition_index)]
    group_ok, readable = True, set(unknown)
    if unknown:
        gate = Gate(gw, req)
        group_ok = await gate.allowed(AclOperation.READ, ResourceType.GROUP, b.group_id)
        if group_ok:
            readable = await gate.names(AclOperation.READ, ResourceType.TOPIC, unknown)

    def code(topic: str, partition: int) -> ErrorCode:
        if not _known_partition(gw, topic, partition):
            if not group_ok:
                return ErrorCode.group_authorization_failed
            if topic not in readable:
                return ErrorCode.topic_authorization_failed
            return ErrorCode.unknown_topic_or_partition
        if isinstance(r, ErrorCode):
            return r
        return codes.get((topic, partition), ErrorCode.unknown_server_error)

    mod = response_module(ApiKey.OFFSET_COMMIT, req.api_version)
    return build(
        mod.OffsetCommitResponse, throttle_time=_NO_TIME,
        topics=tuple(
            build(mod.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(mod.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=code(t.name, p.partition_index))
                for p in t.partitions))
            for t in b.topics
        ),
    )


async def _fetch_offsets(gw: Gateway, group_id: str, topics: Any, require_stable: bool,
                         version: int) -> ops.OffsetFetchOpResp | ErrorCode:
    partitions = () if topics is None else tuple(
        (t.name, p) for t in topics for p in t.partition_indexes)
    op = ops.OffsetFetchOp(group_id, partitions, require_stable, version)
    with span("eddy.gateway.group.offset-fetch", group_id=group_id):
        r: ops.OffsetFetchOpResp | ErrorCode = await _to_owner(
            gw, group_id, ops.KAFKA_OP_OFFSET_FETCH, op, gw.request_timeout_ms)
    return r


def _offset_topics(cls_topic: Any, cls_part: Any, r: ops.OffsetFetchOpResp) -> tuple[Any, ...]:
    epochs = r.leader_epochs + (-1,) * (len(r.offsets) - len(r.leader_epochs))
    by_topic: dict[str, list[Any]] = {}
    for (topic, part, offset, meta, err), epoch in zip(r.offsets, epochs, strict=False):
        by_topic.setdefault(topic, []).append(build(
            cls_part, partition_index=part, committed_offset=offset,
            committed_leader_epoch=epoch, metadata=meta, error_code=as_code(err)))
    return tuple(build(cls_topic, name=n, partitions=tuple(ps)) for n, ps in by_topic.items())


async def offset_fetch(gw: Gateway, req: Request) -> Any:
    b = req.body
    v = req.api_version
    mod = response_module(ApiKey.OFFSET_FETCH, v)
    stable = getattr(b, "require_stable", False)
    if v >= 8:
        answers = await asyncio.gather(*(
            _fetch_offsets(gw, g.group_id, g.topics, stable, v) for g in b.groups))
        return build(mod.OffsetFetchResponse, throttle_time=_NO_TIME, groups=tuple(
            build(mod.OffsetFetchResponseGroup, group_id=g.group_id, error_code=r, topics=())
            if isinstance(r, ErrorCode) else
            build(mod.OffsetFetchResponseGroup, group_id=g.group_id,
                  error_code=as_code(r.error_code),
                  topics=_offset_topics(mod.OffsetFetchResponseTopics,
                                        mod.OffsetFetchResponsePartitions, r))
            for g, r in zip(b.groups, answers, strict=True)))
    r = await _fetch_offsets(gw, b.group_id, b.topics, stable, v)
    if isinstance(r, ErrorCode):
        return build(mod.OffsetFetchResponse, throttle_time=_NO_TIME, error_code=r,
                     topics=())
    return build(mod.OffsetFetchResponse, throttle_time=_NO_TIME,
                 error_code=as_code(r.error_code),
                 topics=_offset_topics(mod.OffsetFetchResponseTopic,
                                       mod.OffsetFetchResponsePartition, r))


async def list_groups(gw: Gateway, req: Request) -> Any:
    """Every broker node's groups (the gateway is the only coordinator clients see)."""
    b = req.body
    op = ops.ListGroupsOp(tuple(getattr(b, "states_filter", ()) or ()),
                          tuple(getattr(b, "types_filter", ()) or ()))
    code = ErrorCode.none
    listed: list[ops.ListedGroup] = []

    async def one(node: int) -> None:
        nonlocal code
        try:
            r = await gw.call(node, ops.KAFKA_OP_LIST_GROUPS, op, gw.request_timeout_ms)
        except _FAILURES as exc:
            code = failure_code(exc, ErrorCode.coordinator_not_available)
            return
        if r.error_code != ErrorCode.none:
            code = as_code(r.error_code)
        listed.extend(r.groups)

    await asyncio.gather(*(one(n) for n in gw.routes.broker_nodes()))
    mod = response_module(ApiKey.LIST_GROUPS, req.api_version)
    return build(mod.ListGroupsResponse, throttle_time=_NO_TIME, error_code=code,
                 groups=tuple(build(mod.ListedGroup, group_id=g.group_id,
                                    protocol_type=g.protocol_type, group_state=g.group_state,
                                    group_type=g.group_type)
                              for g in sorted(listed, key=lambda g: g.group_id)))


async def describe_groups(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DESCRIBE_GROUPS, req.api_version)

    async def one(group_id: str) -> ops.DescribedGroup:
        r = await _to_owner(gw, group_id, ops.KAFKA_OP_DESCRIBE_GROUPS,
                            ops.DescribeGroupsOp((group_id,)), gw.request_timeout_ms)
        if isinstance(r, ErrorCode) or len(r.groups) != 1:
            code = r if isinstance(r, ErrorCode) else ErrorCode.unknown_server_error
            return ops.DescribedGroup(int(code), group_id, "", "", "", ())
        found: ops.DescribedGroup = r.groups[0]
        return found

    described = await asyncio.gather(*(one(g) for g in b.groups))
    allowed_ops: dict[str, int] = {}
    if getattr(b, "include_authorized_operations", False):
        allowed_ops = await Gate(gw, req).operations(
            ResourceType.GROUP, (g.group_id for g in described
                                 if g.error_code == ErrorCode.none))
    return build(
        mod.DescribeGroupsResponse, throttle_time=_NO_TIME,
        groups=tuple(
            build(mod.DescribedGroup, error_code=as_code(g.error_code), group_id=g.group_id,
                  group_state=g.group_state, protocol_type=g.protocol_type,
                  protocol_data=g.protocol_data,
                  authorized_operations=allowed_ops.get(g.group_id, NO_OPS)
                  if g.error_code == ErrorCode.none else NO_OPS,
                  members=tuple(
                      build(mod.DescribedGroupMember, member_id=m.member_id,
                            group_instance_id=m.group_instance_id, client_id=m.client_id,
                            client_host=m.client_host, member_metadata=m.member_metadata,
                            member_assignment=m.member_assignment)
                      for m in g.members))
            for g in described
        ),
    )
