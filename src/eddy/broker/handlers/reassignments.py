"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46), KIP-455.

On a cluster the controller decides (``AlterReassignmentsRequest`` over the mesh; see
``eddy.metadata.reassignments`` for the model and the error codes) and the answer
goes back once this node's replica of the metadata shows the change, so a List sent here
next sees it. List answers from this node's replica of the metadata (every node holds one).

Alter needs ALTER on the cluster, List DESCRIBE (else CLUSTER_AUTHORIZATION_FAILED: at the
top and, for Alter, on each partition asked, as Kafka's error response).

A node outside any cluster is the only replica of every partition it has: reassigning one
to itself alone is a success with nothing to do, to anything else INVALID_REPLICA_ASSIGNMENT
(no such broker), a cancel NO_REASSIGNMENT_IN_PROGRESS; nothing is ever under way.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.cluster_metadata import APPLY_WAIT_S, CONTROLLER_WAIT_S
from eddy.broker.handlers.topic_results import CLUSTER_DENIED
from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.rpc import (
    AlterReassignmentsRequest,
    ReassignPartition,
    ReassignTopic,
    error_of,
)
from eddy.metadata import MetadataState
from eddy.metadata.reassignments import ReassignmentRecord
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation
from eddy.security.checks import cluster_allowed

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
from eddy.cluster.controller.outcomes import answer_every_partition, outcome_rows

__all__ = ["alter_partition_reassignments", "list_partition_reassignments"]

_NO_TIME = datetime.timedelta(0)
#: (topic, [(partition, target replicas or None)])
Asked = list[tuple[str, list[tuple[int, tuple[int, ...] | None]]]]
#: (topic, [(partition, error code, message)])
Results = list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]


def _asked(body: Any) -> Asked:
    return [(str(t.name), [(int(p.partition_index),
                            None if p.replicas is None else tuple(int(r) for r in p.replicas))
                           for p in t.partitions])
            for t in body.topics]


def _alter_response(mod: Any, code: ErrorCode, message: str | None, results: Results) -> Any:
    topics = tuple(
        build(mod.ReassignableTopicResponse, name=topic, partitions=tuple(
            build(mod.ReassignablePartitionResponse, partition_index=p, error_code=c,
                  error_message=m)
            for p, c, m in parts))
        for topic, parts in results)
    return build(mod.AlterPartitionReassignmentsResponse, throttle_time=_NO_TIME,
                 error_code=code, error_message=message, responses=topics)


def _all_failed(asked: Asked, code: ErrorCode, message: str | None) -> Results:
    return [(topic, [(p, code, message) for p, _ in parts]) for topic, parts in asked]


def _alone(broker: Broker, asked: Asked) -> Results:
    """A node outside any cluster: the only replica of each of its partitions."""
    me = broker.node_id
    out: Results = []
    for name, parts in asked:
        topic = broker.logs.get(name)
        rows: list[tuple[int, ErrorCode, str | None]] = []
        for p, target in parts:
            if topic is None or not 0 <= p < len(topic.partitions):
                rows.append((p, ErrorCode.unknown_topic_or_partition,
                             f"Partition {name}-{p} does not exist."))
            elif target is None:
                rows.append((p, ErrorCode.no_reassignment_in_progress,
                             f"{name}-{p}: no reassignment is in progress"))
            elif not target or len(set(target)) != len(target):
                rows.append((p, ErrorCode.invalid_replica_assignment,
                             f"{name}-{p}: the replica list {list(target)} is empty or names "
                             "a broker twice"))
            elif target != (me,):
                other = next(n for n in target if n != me)
                rows.append((p, ErrorCode.invalid_replica_assignment,
                             f"{name}-{p}: broker {other} is not registered"))
            else:
                rows.append((p, ErrorCode.none, None))
        out.append((name, rows))
    return out


def _shown(done: list[tuple[str, int, tuple[int, ...] | None]]
           ) -> Callable[[MetadataState], bool]:
    """Whether the local replica of the state shows each accepted change (or its
    completion)."""
    def check(state: MetadataState) -> bool:
        for name, index, target in done:
            ongoing = state.reassignment(name, index)
            part = state.partition(name, index)
            if part is None:
                continue  # deleted meanwhile
            if target is None:
                if ongoing is not None:
                    return False
            elif (ongoing is None or ongoing.target != target) and part.replicas != target:
                return False
        return True
    return check


async def alter_partition_reassignments(broker: Broker, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, req.api_version)
    asked = _asked(body)
    if not cluster_allowed(broker, req, AclOperation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return _alter_response(mod, code, CLUSTER_DENIED,
                               _all_failed(asked, code, CLUSTER_DENIED))
    cluster = broker.cluster
    if cluster is None:
        return _alter_response(mod, ErrorCode.none, None, _alone(broker, asked))
    if not asked:
        return _alter_response(mod, ErrorCode.none, None, [])
    timeout_s = body.timeout.total_seconds()
    if timeout_s <= 0:
        timeout_s = CONTROLLER_WAIT_S
    request = AlterReassignmentsRequest(tuple(
        ReassignTopic(t, tuple(ReassignPartition(p, r) for p, r in parts))
        for t, parts in asked))
    try:
        answer = await cluster.ask(request, timeout_s)
    except ControllerUnavailable as exc:
        return _alter_response(mod, ErrorCode.request_timed_out, str(exc),
                               _all_failed(asked, ErrorCode.request_timed_out, str(exc)))
    if answer.error_code != ErrorCode.none:
        code = error_of(answer)
        return _alter_response(mod, code, answer.message,
                               _all_failed(asked, code, answer.message))
    results = answer_every_partition([(t, [p for p, _ in parts]) for t, parts in asked],
                                     outcome_rows(answer.outcomes))
    targets = {(t, p): r for t, parts in asked for p, r in parts}
    done = [(topic, p, targets.get((topic, p))) for topic, rows in results
            for p, c, _ in rows if c == ErrorCode.none]
    if done:
        await cluster.wait_applied(_shown(done), APPLY_WAIT_S)
    return _alter_response(mod, ErrorCode.none, None, results)


def _ongoing(state: MetadataState, body: Any) -> list[ReassignmentRecord]:
    if body.topics is None:
        return state.reassignment_list()
    out: list[ReassignmentRecord] = []
    for t in body.topics:
        for p in t.partition_indexes:
            record = state.reassignment(str(t.name), int(p))
            if record is not None:
                out.append(record)
    return out


async def list_partition_reassignments(broker: Broker, req: Request) -> Any:
    """Unknown topics and partitions are left out, as Kafka's controller does."""
    body = req.body
    mod = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, req.api_version)
    if not cluster_allowed(broker, req, AclOperation.DESCRIBE):
        return build(mod.ListPartitionReassignmentsResponse, throttle_time=_NO_TIME,
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message=CLUSTER_DENIED, topics=())
    cluster = broker.cluster
    ongoing = [] if cluster is None else _ongoing(cluster.state, body)
    by_topic: dict[str, list[Any]] = {}
    for r in ongoing:
        part = cluster.state.partition(r.topic, r.partition) if cluster is not None else None
        replicas = part.replicas if part is not None else r.original
        by_topic.setdefault(r.topic, []).append(build(
            mod.OngoingPartitionReassignment, partition_index=r.partition, replicas=replicas,
            adding_replicas=r.adding, removing_replicas=r.removing))
    topics = tuple(build(mod.OngoingTopicReassignment, name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return build(mod.ListPartitionReassignmentsResponse, throttle_time=_NO_TIME,
                 error_code=ErrorCode.none, error_message=None, topics=topics)
