"""Gateway handlers for partition leadership: OffsetForLeaderEpoch (to each topic's owner,
like Fetch: consumers ask it after a leader change to detect a truncated log, KIP-320),
ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments (KIP-183/460/455).

The three admin APIs naming partitions go to the node owning each topic, whose broker asks
its controller (in a cluster every broker does) or answers for itself (a broker outside any
cluster leads all it holds); asking "every partition" (a null list) goes to every broker
node and the answers are merged, each partition once. The broker authorizes each op as the
client (the principal travels with it); what the gateway answers itself (topics it does not
route, nothing to forward) follows the broker's rules with the cluster's ACLs
(eddy.gateway.authz): a refused principal learns nothing of which topics exist.

The leader epochs a gateway's client knows are the gateway's (Metadata says 0): the current
epoch a consumer sends is not checked against the owner's, as in Fetch. The epoch it asks
about comes from the record batches the owner wrote, and is the owner's."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from eddy.broker.handlers.cluster_metadata import APPLY_WAIT_S, CONTROLLER_WAIT_S
from eddy.broker.handlers.topic_results import CLUSTER_DENIED
from eddy.cluster.controller.outcomes import error_message
from eddy.gateway import ops_admin as oa
from eddy.gateway.authz import Gate, unknown_topic_codes
from eddy.gateway.handlers.data import split_by_node
from eddy.gateway.handlers.manage import topic_node
from eddy.gateway.node import Gateway, as_code, failure_code
from eddy.gateway.ops import OpFailed, OpTimeout, OpUnavailable
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation

__all__ = ["alter_partition_reassignments", "elect_leaders", "list_partition_reassignments",
           "offset_for_leader_epoch"]

_NO_TIME = datetime.timedelta(0)
_FAILURES = (OpUnavailable, OpTimeout, OpFailed)
PREFERRED, UNCLEAN = 0, 1
#: the longest wait a client's timeout may ask of an owner
_MAX_TIMEOUT_MS = 1 << 30
#: (code, message) of each (topic, partition)
Rows = dict[tuple[str, int], tuple[ErrorCode, str | None]]


def _timeout_ms(value: Any) -> int:
    """A client's timeout in ms, within what an op's i32 carries."""
    ms = value // datetime.timedelta(milliseconds=1) if isinstance(
        value, datetime.timedelta) else int(value)
    return min(max(ms, 0), _MAX_TIMEOUT_MS)


def _controller_wait_ms(gw: Gateway, timeout_ms: int) -> int:
    """How long the gateway waits for an owner whose broker asks its controller: the
    client's timeout (the broker's default when none), the broker's wait for its replica of
    the metadata to show the change, and the mesh's own allowance."""
    asked = timeout_ms if timeout_ms > 0 else int(CONTROLLER_WAIT_S * 1000)
    return asked + int(APPLY_WAIT_S * 1000) + gw.request_timeout_ms


def _in_order(pairs: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Partitions by topic, first-seen order, each (topic, partition) once."""
    out: dict[str, dict[int, None]] = {}
    for name, p in pairs:
        out.setdefault(name, {})[p] = None
    return {name: list(parts) for name, parts in out.items()}


async def _ask_owners(gw: Gateway, names: Iterable[str], op: int,
                      make: Callable[[list[str]], Any], wait_ms: int
                      ) -> tuple[dict[str, int], dict[int, Any]]:
    """Each routed name's owner, and each owner's answer to ``make(its names)`` (the
    exception when there is none)."""
    locate = topic_node(gw)
    owner: dict[str, int] = {}
    by_node: dict[int, list[str]] = {}
    for name in dict.fromkeys(names):
        node = locate(name)
        if node is not None:
            owner[name] = node
            by_node.setdefault(node, []).append(name)
    answers = await asyncio.gather(*(_call(gw, node, op, make(ns), wait_ms)
                                     for node, ns in by_node.items()))
    return owner, dict(zip(by_node, answers, strict=True))


async def _call(gw: Gateway, node: int, op: int, request: Any, wait_ms: int) -> Any:
    try:
        return await gw.call(node, op, request, wait_ms)
    except _FAILURES as exc:
        return exc


async def _ask_every_broker(gw: Gateway, op: int, request: Any, wait_ms: int
                            ) -> dict[int, Any]:
    nodes = gw.routes.broker_nodes()
    answers = await asyncio.gather(*(_call(gw, n, op, request, wait_ms) for n in nodes))
    return dict(zip(nodes, answers, strict=True))


def _failed(node: int, exc: Exception) -> tuple[ErrorCode, str]:
    # no broker to ask its controller: what Kafka's non-controllers answer (retriable)
    return failure_code(exc, ErrorCode.not_controller), f"node {node}: {exc}"


def _outcome_rows(answers: dict[int, Any], owner: dict[str, int]) -> Rows:
    """The rows each owner gave for its own topics; an owner that failed fails each
    partition asked of it."""
    rows: Rows = {}
    for node, answer in answers.items():
        if isinstance(answer, Exception):
            continue
        for t in answer.topics:
            if owner.get(t.name) != node:
                continue  # not asked of this node: not its answer to give
            for p in t.partitions:
                rows.setdefault((t.name, p.partition), (as_code(p.error_code), p.error_message))
    return rows


def _row(rows: Rows, answers: dict[int, Any], owner: dict[str, int], name: str, p: int
         ) -> tuple[ErrorCode, str | None]:
    got = rows.get((name, p))
    if got is not None:
        return got
    node = owner.get(name, -1)
    answer = answers.get(node)
    if isinstance(answer, Exception):
        return _failed(node, answer)
    return ErrorCode.unknown_server_error, f"node {node} gave no answer for {name}-{p}"


def _top(answers: dict[int, Any], field: str = "") -> tuple[ErrorCode, str | None] | None:
    """The first request-level error an owner answered, with its message (``field``)."""
    for answer in answers.values():
        if not isinstance(answer, Exception) and answer.error_code != ErrorCode.none:
            return as_code(answer.error_code), getattr(answer, field, None) if field else None
    return None


# ---- OffsetForLeaderEpoch ----------------------------------------------------------------


async def _unknown_epoch_codes(gw: Gateway, req: Request, names: Sequence[str]
                               ) -> dict[str, ErrorCode]:
    """The broker's checks for a topic the gateway does not route: CLUSTER_ACTION on the
    cluster allows every topic, else DESCRIBE on the topic (refused whether or not it
    exists)."""
    codes = await unknown_topic_codes(gw, req, AclOperation.DESCRIBE, names)
    if any(c == ErrorCode.topic_authorization_failed for c in codes.values()) and (
            await Gate(gw, req).cluster(AclOperation.CLUSTER_ACTION)):
        return dict.fromkeys(codes, ErrorCode.unknown_topic_or_partition)
    return codes


def _epoch_answers(op: oa.OffsetForLeaderEpochOp, resp: oa.OffsetForLeaderEpochOpResp
                   ) -> list[tuple[oa.EpochEndOffset, ...]]:
    """Each asked topic's rows. The owner answers in the order asked, so a partition asked
    twice (with two epochs) gets each its own row; an answer not in that shape is matched
    by partition, and a partition it leaves out is UNKNOWN_SERVER_ERROR."""
    if len(resp.topics) == len(op.topics) and all(
            a.name == q.name and [p.partition for p in a.partitions]
            == [p.partition for p in q.partitions]
            for a, q in zip(resp.topics, op.topics, strict=True)):
        return [a.partitions for a in resp.topics]
    by_name: dict[str, dict[int, oa.EpochEndOffset]] = {}
    for t in resp.topics:
        by_name.setdefault(t.name, {}).update((p.partition, p) for p in t.partitions)
    return [tuple(by_name.get(q.name, {}).get(p.partition) or oa.EpochEndOffset(
        p.partition, int(ErrorCode.unknown_server_error), -1, -1) for p in q.partitions)
        for q in op.topics]


async def offset_for_leader_epoch(gw: Gateway, req: Request) -> Any:
    topics = req.body.topics
    by_node, unknown = split_by_node(gw, [t.topic for t in topics])
    codes = await _unknown_epoch_codes(gw, req, [topics[i].topic for i in unknown])
    results: dict[int, list[oa.EpochEndOffset]] = {
        i: [oa.EpochEndOffset(p.partition, int(codes[topics[i].topic]), -1, -1)
            for p in topics[i].partitions] for i in unknown}

    async def one(node: int, idx: list[int]) -> None:
        op = oa.OffsetForLeaderEpochOp(tuple(
            oa.EpochTopicReq(topics[i].topic, tuple(
                oa.EpochPartitionReq(p.partition, -1, p.leader_epoch)
                for p in topics[i].partitions))
            for i in idx))
        try:
            resp = await gw.call(node, oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH, op,
                                 gw.request_timeout_ms)
        except _FAILURES as exc:
            code = int(failure_code(exc, ErrorCode.not_leader_or_follower))
            for i in idx:
                results[i] = [oa.EpochEndOffset(p.partition, code, -1, -1)
                              for p in topics[i].partitions]
            return
        for i, answer in zip(idx, _epoch_answers(op, resp), strict=True):
            results[i] = list(answer)

    await asyncio.gather(*(one(node, idx) for node, idx in by_node.items()))
    mod = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, req.api_version)
    return build(mod.OffsetForLeaderEpochResponse, throttle_time=_NO_TIME, topics=tuple(
        build(mod.OffsetForLeaderTopicResult, topic=t.topic, partitions=tuple(
            build(mod.EpochEndOffset, error_code=as_code(p.error_code), partition=p.partition,
                  leader_epoch=p.leader_epoch, end_offset=p.end_offset)
            for p in results[i]))
        for i, t in enumerate(topics)))


# ---- ElectLeaders ------------------------------------------------------------------------


def _elect_response(mod: Any, code: ErrorCode,
                    topics: Iterable[tuple[str, Iterable[tuple[int, ErrorCode, str | None]]]]
                    ) -> Any:
    return build(mod.ElectLeadersResponse, throttle_time=_NO_TIME, error_code=code,
                 replica_election_results=tuple(
                     build(mod.ReplicaElectionResult, topic=name, partition_result=tuple(
                         build(mod.PartitionResult, partition_id=p, error_code=c,
                               error_message=error_message(c, m))
                         for p, c, m in parts))
                     for name, parts in topics))


async def _elect_refusal(gate: Gate, election_type: int) -> tuple[ErrorCode, str] | None:
    """What a broker answers before looking at any partition: ALTER on the cluster, then the
    election type."""
    if not await gate.cluster(AclOperation.ALTER):
        return ErrorCode.cluster_authorization_failed, CLUSTER_DENIED
    if election_type not in (PREFERRED, UNCLEAN):
        return ErrorCode.invalid_request, f"Unknown election type {election_type}"
    return None


async def elect_leaders(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.ELECT_LEADERS, req.api_version)
    election_type = int(getattr(body, "election_type", PREFERRED))
    timeout_ms = _timeout_ms(body.timeout)
    wait_ms = _controller_wait_ms(gw, timeout_ms)
    gate = Gate(gw, req)
    if body.topic_partitions is None:  # every partition: every broker node's
        answers = await _ask_every_broker(
            gw, oa.KAFKA_OP_ELECT_LEADERS, oa.ElectLeadersOp(election_type, None, timeout_ms),
            wait_ms)
        if not answers:
            refused = await _elect_refusal(gate, election_type)
            return _elect_response(mod, refused[0] if refused else ErrorCode.none, [])
        return _elect_response(mod, *_merge_every(answers))
    asked = _in_order((t.topic, p) for t in body.topic_partitions for p in t.partitions)
    owner, answers = await _ask_owners(
        gw, asked, oa.KAFKA_OP_ELECT_LEADERS,
        lambda names: oa.ElectLeadersOp(election_type, tuple(
            oa.PartitionsOf(n, tuple(asked[n])) for n in names), timeout_ms), wait_ms)
    rows = _outcome_rows(answers, owner)
    refused = (await _elect_refusal(gate, election_type)
               if not answers or len(owner) < len(asked) else None)
    for name in asked:
        if name not in owner:  # not routed here: the broker's refusal, else unknown
            for p in asked[name]:
                rows[(name, p)] = refused or (ErrorCode.unknown_topic_or_partition,
                                              f"No such topic as {name}")
    top = _top(answers)
    code = top[0] if top else refused[0] if refused and not answers else ErrorCode.none
    return _elect_response(mod, code, [
        (name, [(p, *_row(rows, answers, owner, name, p)) for p in parts])
        for name, parts in asked.items()])


def _merge_every(answers: dict[int, Any]
                 ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]]:
    """Every node's answer to a null ElectLeaders, each partition once (a success over the
    same partition's other answers: in a cluster, the node whose election ran first)."""
    top = _top(answers)
    code = top[0] if top else ErrorCode.none
    merged: dict[str, dict[int, tuple[ErrorCode, str | None]]] = {}
    for node, answer in answers.items():
        if isinstance(answer, Exception):
            if code == ErrorCode.none:  # its partitions cannot be named: the request fails
                code = _failed(node, answer)[0]
            continue
        for t in answer.topics:
            parts = merged.setdefault(t.name, {})
            for p in t.partitions:
                got = parts.get(p.partition)
                if got is None or (got[0] != ErrorCode.none and p.error_code == ErrorCode.none):
                    parts[p.partition] = (as_code(p.error_code), p.error_message)
    return code, [(name, [(p, c, m) for p, (c, m) in parts.items()])
                  for name, parts in merged.items()]


# ---- AlterPartitionReassignments ---------------------------------------------------------


async def alter_partition_reassignments(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, req.api_version)
    timeout_ms = _timeout_ms(body.timeout)
    targets: dict[tuple[str, int], tuple[int, ...] | None] = {}
    for t in body.topics:
        for p in t.partitions:
            targets.setdefault((t.name, p.partition_index),
                               None if p.replicas is None else tuple(p.replicas))
    asked = _in_order(targets)
    owner, answers = await _ask_owners(
        gw, asked, oa.KAFKA_OP_ALTER_REASSIGNMENTS,
        lambda names: oa.AlterReassignmentsOp(tuple(
            oa.ReassignTopic(n, tuple(oa.ReassignPartition(p, targets[(n, p)])
                                      for p in asked[n]))
            for n in names), timeout_ms),
        _controller_wait_ms(gw, timeout_ms))
    rows = _outcome_rows(answers, owner)
    refused: tuple[ErrorCode, str] | None = None
    if (not answers or len(owner) < len(asked)) and not await Gate(gw, req).cluster(
            AclOperation.ALTER):
        refused = ErrorCode.cluster_authorization_failed, CLUSTER_DENIED
    for name in asked:
        if name not in owner:
            for p in asked[name]:
                rows[(name, p)] = refused or (ErrorCode.unknown_topic_or_partition,
                                              f"Partition {name}-{p} does not exist.")
    top = _top(answers, "error_message") or (refused if refused and not answers else None)
    code, message = top or (ErrorCode.none, None)
    return build(
        mod.AlterPartitionReassignmentsResponse, throttle_time=_NO_TIME, error_code=code,
        error_message=message, responses=tuple(
            build(mod.ReassignableTopicResponse, name=name, partitions=tuple(
                build(mod.ReassignablePartitionResponse, partition_index=p, error_code=c,
                      error_message=error_message(c, m))
                for p in parts for c, m in (_row(rows, answers, owner, name, p),)))
            for name, parts in asked.items()))


# ---- ListPartitionReassignments ----------------------------------------------------------


async def list_partition_reassignments(gw: Gateway, req: Request) -> Any:
    """Topics and partitions with no reassignment under way (or unknown) are left out, as
    Kafka's controller does."""
    body = req.body
    mod = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, req.api_version)
    timeout_ms = _timeout_ms(body.timeout)
    wait_ms = gw.request_timeout_ms
    owner: dict[str, int] = {}
    if body.topics is None:
        answers = await _ask_every_broker(
            gw, oa.KAFKA_OP_LIST_REASSIGNMENTS, oa.ListReassignmentsOp(None, timeout_ms),
            wait_ms)
    else:
        asked = _in_order((t.name, p) for t in body.topics for p in t.partition_indexes)
        owner, answers = await _ask_owners(
            gw, asked, oa.KAFKA_OP_LIST_REASSIGNMENTS,
            lambda names: oa.ListReassignmentsOp(tuple(
                oa.PartitionsOf(n, tuple(asked[n])) for n in names), timeout_ms), wait_ms)
    top = _top(answers, "error_message")
    if top is None:
        for node, answer in answers.items():
            if isinstance(answer, Exception):  # what it has under way cannot be told
                top = _failed(node, answer)
                break
    if top is None and not answers and not await Gate(gw, req).cluster(AclOperation.DESCRIBE):
        top = ErrorCode.cluster_authorization_failed, CLUSTER_DENIED
    if top is not None:
        return build(mod.ListPartitionReassignmentsResponse, throttle_time=_NO_TIME,
                     error_code=top[0], error_message=top[1], topics=())
    merged: dict[str, dict[int, oa.OngoingReassignment]] = {}
    for node, answer in answers.items():
        for t in answer.topics:
            if owner and owner.get(t.name) != node:
                continue  # not asked of this node
            parts = merged.setdefault(t.name, {})
            for p in t.partitions:
                parts.setdefault(p.partition, p)
    return build(
        mod.ListPartitionReassignmentsResponse, throttle_time=_NO_TIME,
        error_code=ErrorCode.none, error_message=None, topics=tuple(
            build(mod.OngoingTopicReassignment, name=name, partitions=tuple(
                build(mod.OngoingPartitionReassignment, partition_index=p.partition,
                      replicas=p.replicas, adding_replicas=p.adding,
                      removing_replicas=p.removing)
                for p in parts.values()))
            for name, parts in merged.items()))
