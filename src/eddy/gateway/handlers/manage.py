"""Gateway handlers for cluster management: DeleteTopics, CreatePartitions, DeleteRecords
(split by the node owning each topic, forwarded in parallel, merged in request order),
DeleteGroups and OffsetDelete (to each group's owner), DescribeLogDirs (every broker node),
and DescribeCluster, which the gateway answers for itself: it is the only broker and the
controller its clients see (configs: handlers_configs). What the gateway answers itself
(unknown topics, DescribeCluster's operations, DescribeLogDirs' refusal) follows a broker's
authorization rules with the cluster's ACLs (eddy.gateway.authz).

A node that cannot be reached fails only its own topics or groups, with the code a client
retries on (NOT_CONTROLLER for topic creation and deletion, as Kafka's non-controllers
answer; LEADER_NOT_AVAILABLE / NOT_LEADER_OR_FOLLOWER for topic data and configs,
COORDINATOR_NOT_AVAILABLE for groups; REQUEST_TIMED_OUT when the node was too slow)."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from eddy.broker.handlers.topic_results import CLUSTER_DENIED, TOPIC_DENIED
from eddy.gateway import ops_admin as oa
from eddy.gateway.authz import Gate, unknown_topic_codes
from eddy.gateway.node import Gateway, as_code, failure_code
from eddy.gateway.ops import OpFailed, OpTimeout, OpUnavailable
from eddy.gateway.routes import TopicRoute
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, ResourceType

_NO_TIME = datetime.timedelta(0)
_ZERO_ID = uuid.UUID(int=0)
NO_OPS = -2147483648
_FAILURES = (OpUnavailable, OpTimeout, OpFailed)
#: the longest wait a client's timeout may ask of an owner (it rides the op as an i32)
_MAX_TIMEOUT_MS = 1 << 30
BROKER_ENDPOINTS = 1

T = TypeVar("T")
R = TypeVar("R")


def _timeout_ms(value: Any) -> int:
    ms = value // datetime.timedelta(milliseconds=1) if isinstance(
        value, datetime.timedelta) else int(value)
    return min(max(ms, 0), _MAX_TIMEOUT_MS)


def topic_node(gw: Gateway) -> Callable[[str], int | None]:
    def locate(name: str) -> int | None:
        route = gw.routes.topic(name)
        return None if route is None else route.node_id
    return locate


async def by_owner(items: Sequence[T], key: Callable[[T], str | None],
                   locate: Callable[[str], int | None],
                   run: Callable[[int, list[T]], Awaitable[list[R]]],
                   missing: Callable[[T], R]) -> list[R]:
    """Split `items` by the node owning each (locate(key(item))), run one op per node in
    parallel, and return one result per item in item order. An item with no key or no owner
    gets missing(item); `run` must return one result per item it is given."""
    out: dict[int, R] = {}
    by_node: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        k = key(item)
        node = None if k is None else locate(k)
        if node is None:
            out[i] = missing(item)
        else:
            by_node.setdefault(node, []).append(i)
    answers = await asyncio.gather(*(run(node, [items[i] for i in idx])
                                     for node, idx in by_node.items()))
    for idx, results in zip(by_node.values(), answers, strict=True):
        out.update(zip(idx, results, strict=True))
    return [out[i] for i in range(len(items))]


async def owner_answers(gw: Gateway, node: int, op: int, request: Any, timeout_ms: int,
                        field: str, count: int) -> tuple[Any, ...] | Exception:
    """The owner's `count` results (its answer's `field`), or why there are none."""
    try:
        resp = await gw.call(node, op, request, timeout_ms)
    except _FAILURES as exc:
        return exc
    got = tuple(getattr(resp, field))
    if len(got) != count:
        return OpFailed(f"node {node} answered {len(got)} results for {count}")
    return got


def why_failed(node: int, exc: Exception) -> str:
    return f"node {node}: {exc}"


# ---- DeleteTopics ------------------------------------------------------------------------


async def delete_topics(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DELETE_TOPICS, req.api_version)
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if hasattr(b, "topic_names"):
        wanted = [(n, None) for n in b.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in b.topics]
    timeout_ms = _timeout_ms(b.timeout)

    async def run(node: int, items: list[tuple[str | None, uuid.UUID | None]]
                  ) -> list[oa.DeletedTopic]:
        names = tuple(n or "" for n, _ in items)
        got = await owner_answers(gw, node, oa.KAFKA_OP_DELETE_TOPICS,
                                  oa.DeleteTopicsOp(names, timeout_ms),
                                  timeout_ms + gw.request_timeout_ms, "topics", len(names))
        if isinstance(got, Exception):
            code = int(failure_code(got, ErrorCode.not_controller))
            return [oa.DeletedTopic(n, code, why_failed(node, got), bytes(16)) for n in names]
        for t in got:
            if t.error_code == ErrorCode.none:
                gw.routes.forget_topic(t.name)
        return list(got)

    def missing(item: tuple[str | None, uuid.UUID | None]) -> oa.DeletedTopic:
        name, tid = item
        if name is not None:
            return oa.DeletedTopic(name, int(ErrorCode.unknown_topic_or_partition),
                                   f"Topic '{name}' does not exist.", bytes(16))
        if tid is not None and tid.int != 0:  # ids are not known to the gateway
            return oa.DeletedTopic("", int(ErrorCode.unknown_topic_id),
                                   f"unknown topic id {tid}", bytes(16))
        return oa.DeletedTopic("", int(ErrorCode.invalid_request), "neither name nor id given",
                               bytes(16))

    # the broker's checks for what is answered here: DESCRIBE on a name it does not know
    # (refused whether or not it exists), and an id to a principal with no topic rights
    gate = Gate(gw, req)
    local = [n for n, _ in wanted if n is not None and topic_node(gw)(n) is None]
    codes = await unknown_topic_codes(gw, req, AclOperation.DESCRIBE, local)
    ids_known = (not any(n is None and t is not None and t.int != 0 for n, t in wanted)
                 or await gate.any(AclOperation.DESCRIBE, ResourceType.TOPIC))

    def answered_here(item: tuple[str | None, uuid.UUID | None]) -> oa.DeletedTopic:
        name, tid = item
        if name is not None and codes.get(name) == ErrorCode.topic_authorization_failed:
            return oa.DeletedTopic(name, int(ErrorCode.topic_authorization_failed),
                                   TOPIC_DENIED, bytes(16))
        if name is None and tid is not None and tid.int != 0 and not ids_known:
            return oa.DeletedTopic("", int(ErrorCode.topic_authorization_failed),
                                   TOPIC_DENIED, bytes(16))
        return missing(item)

    results = await by_owner(wanted, lambda w: w[0], topic_node(gw), run, answered_here)
    return build(mod.DeleteTopicsResponse, throttle_time=_NO_TIME, responses=tuple(
        build(mod.DeletableTopicResult, name=name, error_code=as_code(r.error_code),
              error_message=r.error_message,
              topic_id=uuid.UUID(bytes=r.topic_id) if len(r.topic_id) == 16
              and any(r.topic_id) else tid or _ZERO_ID)
        for (name, tid), r in zip(wanted, results, strict=True)))


# ---- CreatePartitions --------------------------------------------------------------------


async def create_partitions(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.CREATE_PARTITIONS, req.api_version)
    timeout_ms = _timeout_ms(b.timeout)
    refused: dict[str, str] = {}  # by name: assignments naming another broker
    for t in b.topics:
        if t.assignments is not None and any(list(a.broker_ids) != [gw.node_id]
                                             for a in t.assignments):
            refused[t.name] = f"replica assignments may name only node {gw.node_id}"
    wanted = [oa.NewPartitions(t.name, t.count,
                               -1 if t.assignments is None else len(t.assignments))
              for t in b.topics]

    async def run(node: int, items: list[oa.NewPartitions]) -> list[oa.TopicError]:
        got = await owner_answers(gw, node, oa.KAFKA_OP_CREATE_PARTITIONS,
                                  oa.CreatePartitionsOp(tuple(items), timeout_ms, b.validate_only),
                                  timeout_ms + gw.request_timeout_ms, "topics", len(items))
        if isinstance(got, Exception):
            code = int(failure_code(got, ErrorCode.not_controller))
            return [oa.TopicError(t.name, code, why_failed(node, got)) for t in items]
        for t, r in zip(items, got, strict=True):
            if r.error_code == ErrorCode.none and not b.validate_only:
                gw.routes.note_topic(t.name, TopicRoute(node, t.count))
        return list(got)

    def missing(t: oa.NewPartitions) -> oa.TopicError:
        if t.name in refused:
            return oa.TopicError(t.name, int(ErrorCode.invalid_replica_assignment),
                                 refused[t.name])
        return oa.TopicError(t.name, int(ErrorCode.unknown_topic_or_partition),
                             f"The topic '{t.name}' does not exist.")

    # ALTER on the topic comes first on a broker: before the gateway's own refusals
    alterable = await Gate(gw, req).names(AclOperation.ALTER, ResourceType.TOPIC,
                                          (t.name for t in wanted))
    for t in wanted:
        if t.name not in alterable:
            refused[t.name] = TOPIC_DENIED

    def answered_here(t: oa.NewPartitions) -> oa.TopicError:
        if t.name not in alterable:
            return oa.TopicError(t.name, int(ErrorCode.topic_authorization_failed), TOPIC_DENIED)
        return missing(t)

    results = await by_owner(wanted, lambda t: None if t.name in refused else t.name,
                             topic_node(gw), run, answered_here)
    return build(mod.CreatePartitionsResponse, throttle_time=_NO_TIME, results=tuple(
        build(mod.CreatePartitionsTopicResult, name=r.name, error_code=as_code(r.error_code),
              error_message=r.error_message) for r in results))


# ---- DeleteRecords -----------------------------------------------------------------------


async def delete_records(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DELETE_RECORDS, req.api_version)
    timeout_ms = _timeout_ms(b.timeout)
    wanted = [oa.DeleteRecordsTopic(t.name, tuple((p.partition_index, p.offset)
                                                  for p in t.partitions))
              for t in b.topics]

    def failed(t: oa.DeleteRecordsTopic, code: ErrorCode) -> oa.DeleteRecordsTopicResp:
        return oa.DeleteRecordsTopicResp(t.name, tuple((p, -1, int(code))
                                                       for p, _ in t.partitions))

    async def run(node: int, items: list[oa.DeleteRecordsTopic]
                  ) -> list[oa.DeleteRecordsTopicResp]:
        got = await owner_answers(gw, node, oa.KAFKA_OP_DELETE_RECORDS,
                                  oa.DeleteRecordsOp(tuple(items), timeout_ms),
                                  timeout_ms + gw.request_timeout_ms, "topics", len(items))
        if isinstance(got, Exception):
            code = failure_code(got, ErrorCode.not_leader_or_follower)
            return [failed(t, code) for t in items]
        return list(got)

    codes = await unknown_topic_codes(gw, req, AclOperation.DELETE,
                                      (t.name for t in wanted if topic_node(gw)(t.name) is None))
    results = await by_owner(wanted, lambda t: t.name, topic_node(gw), run,
                             lambda t: failed(t, codes.get(t.name,
                                                           ErrorCode.unknown_topic_or_partition)))
    return build(mod.DeleteRecordsResponse, throttle_time=_NO_TIME, topics=tuple(
        build(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(
            build(mod.DeleteRecordsPartitionResult, partition_index=p, low_watermark=low,
                  error_code=as_code(e)) for p, low, e in t.partitions))
        for t in results))


# ---- DescribeCluster (answered here) -----------------------------------------------------


async def describe_cluster(gw: Gateway, req: Request) -> Any:
    """No check (Kafka's); the principal's operations on the cluster when asked."""
    mod = response_module(ApiKey.DESCRIBE_CLUSTER, req.api_version)
    endpoint_type = getattr(req.body, "endpoint_type", BROKER_ENDPOINTS)
    if endpoint_type != BROKER_ENDPOINTS:
        return build(mod.DescribeClusterResponse, throttle_time=_NO_TIME,
                     error_code=ErrorCode.unsupported_endpoint_type,
                     error_message="only broker endpoints are served",
                     endpoint_type=endpoint_type, cluster_id=gw.cluster_id, controller_id=-1,
                     brokers=(), cluster_authorized_operations=NO_OPS)
    return build(
        mod.DescribeClusterResponse, throttle_time=_NO_TIME, error_code=ErrorCode.none,
        error_message=None, endpoint_type=BROKER_ENDPOINTS, cluster_id=gw.cluster_id,
        controller_id=gw.node_id,
        brokers=(build(mod.DescribeClusterBroker, broker_id=gw.node_id, host=gw.host,
                       port=gw.port, rack=None),),
        cluster_authorized_operations=await Gate(gw, req).cluster_operations()
        if getattr(req.body, "include_cluster_authorized_operations", False) else NO_OPS)


# ---- DeleteGroups / OffsetDelete ---------------------------------------------------------


async def delete_groups(gw: Gateway, req: Request) -> Any:
    mod = response_module(ApiKey.DELETE_GROUPS, req.api_version)
    unique = list(dict.fromkeys(req.body.groups_names))  # one result per group, as Kafka

    async def run(node: int, items: list[str]) -> list[int]:
        try:
            r = await gw.call(node, oa.KAFKA_OP_DELETE_GROUPS, oa.DeleteGroupsOp(tuple(items)),
                              gw.request_timeout_ms)
        except _FAILURES as exc:
            return [int(failure_code(exc, ErrorCode.coordinator_not_available))] * len(items)
        codes = dict(r.groups)
        return [codes.get(g, int(ErrorCode.unknown_server_error)) for g in items]

    codes = await by_owner(unique, lambda g: g, gw.routes.group_owner, run,
                           lambda g: int(ErrorCode.coordinator_not_available))
    return build(mod.DeleteGroupsResponse, throttle_time=_NO_TIME, results=tuple(
        build(mod.DeletableGroupResult, group_id=g, error_code=as_code(c))
        for g, c in zip(unique, codes, strict=True)))


async def offset_delete(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.OFFSET_DELETE, req.api_version)
    op = oa.OffsetDeleteOp(b.group_id, tuple((t.name, p.partition_index)
                                             for t in b.topics for p in t.partitions))
    owner = gw.routes.group_owner(b.group_id)
    code, codes = ErrorCode.coordinator_not_available, {}
    if owner is not None:
        try:
            r = await gw.call(owner, oa.KAFKA_OP_OFFSET_DELETE, op, gw.request_timeout_ms)
            code = as_code(r.error_code)
            codes = {(t, p): e for t, p, e in r.partitions}
        except _FAILURES as exc:
            code = failure_code(exc, ErrorCode.coordinator_not_available)
    return build(mod.OffsetDeleteResponse, error_code=code, throttle_time=_NO_TIME, topics=tuple(
        build(mod.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            build(mod.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                  error_code=as_code(codes.get((t.name, p.partition_index), 0)))
            for p in t.partitions))
        for t in b.topics) if code == ErrorCode.none else ())


# ---- DescribeLogDirs ---------------------------------------------------------------------


async def describe_log_dirs(gw: Gateway, req: Request) -> Any:
    """Every broker node's log directories, each node asked only for its own topics. Paths
    two nodes share are told apart by a "node N:" prefix; an unreachable node shows as a
    directory in KAFKA_STORAGE_ERROR."""
    mod = response_module(ApiKey.DESCRIBE_LOG_DIRS, req.api_version)
    if not await Gate(gw, req).cluster(AclOperation.DESCRIBE):
        # as a broker: the top-level error (v3+) and no results; older versions have no
        # top-level error, so one result without a directory carries it
        code = ErrorCode.cluster_authorization_failed
        refused: tuple[Any, ...] = ()
        if req.api_version < 3:
            refused = (build(mod.DescribeLogDirsResult, error_code=code, log_dir="",
                             topics=(), total_bytes=-1, usable_bytes=-1),)
        return build(mod.DescribeLogDirsResponse, throttle_time=_NO_TIME, error_code=code,
                     error_message=CLUSTER_DENIED, results=refused)
    asked = req.body.topics
    nodes = gw.routes.broker_nodes()
    per_node: dict[int, list[oa.LogDirTopicReq]] = {n: [] for n in nodes}
    for t in asked or ():
        route = gw.routes.topic(t.topic)
        if route is not None and route.node_id in per_node:
            per_node[route.node_id].append(oa.LogDirTopicReq(t.topic, tuple(t.partitions)))

    async def one(node: int) -> list[oa.LogDir]:
        op = oa.DescribeLogDirsOp(None if asked is None else tuple(per_node[node]))
        try:
            r = await gw.call(node, oa.KAFKA_OP_DESCRIBE_LOG_DIRS, op, gw.request_timeout_ms)
        except _FAILURES as exc:
            return [oa.LogDir(int(ErrorCode.kafka_storage_error), f"node {node}: {exc}", (),
                              -1, -1)]
        if r.error_code != ErrorCode.none:  # refused there: a directory carries the code
            return [oa.LogDir(r.error_code, f"node {node}", (), -1, -1)]
        return list(r.dirs)

    answers = await asyncio.gather(*(one(n) for n in nodes))
    counts: dict[str, int] = {}
    for dirs in answers:
        for d in dirs:
            counts[d.path] = counts.get(d.path, 0) + 1
    results = []
    for node, dirs in zip(nodes, answers, strict=True):
        for d in dirs:
            path = d.path if counts[d.path] == 1 else f"node {node}:{d.path}"
            results.append(build(
                mod.DescribeLogDirsResult, error_code=as_code(d.error_code), log_dir=path,
                total_bytes=d.total_bytes, usable_bytes=d.usable_bytes, topics=tuple(
                    build(mod.DescribeLogDirsTopic, name=t.name, partitions=tuple(
                        build(mod.DescribeLogDirsPartition, partition_index=p.partition,
                              partition_size=p.size, offset_lag=p.offset_lag,
                              is_future_key=p.is_future) for p in t.partitions))
                    for t in d.topics)))
    return build(mod.DescribeLogDirsResponse, throttle_time=_NO_TIME, error_code=ErrorCode.none,
                 results=tuple(results))
