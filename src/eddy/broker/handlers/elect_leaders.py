"""ElectLeaders (API 43, KIP-183 / KIP-460): preferred or unclean leader elections.

On a cluster the controller decides (``ElectLeadersRequest`` over the mesh, see
``eddy.cluster.controller.elections`` for each partition's answer) and the answer goes back
once this node's replica of the metadata shows the new leaders. A node outside any cluster
is the only replica of every partition it has, which already leads it: each partition is
ELECTION_NOT_NEEDED (an unknown one UNKNOWN_TOPIC_OR_PARTITION), as a one-broker Kafka
answers.

As Kafka: election type 0 PREFERRED, 1 UNCLEAN (v1+; v0 is always preferred), anything else
INVALID_REQUEST; ALTER on the cluster or CLUSTER_AUTHORIZATION_FAILED for the request and
each partition asked; ``topic_partitions`` null means every partition (those answered
ELECTION_NOT_NEEDED are left out), an empty list an empty answer. Every partition named
gets a result; one with an error always a message (Kafka's default text when nothing more
is known), one without none.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.cluster_metadata import APPLY_WAIT_S, CONTROLLER_WAIT_S
from eddy.broker.handlers.topic_results import CLUSTER_DENIED
from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.elections import NOT_NEEDED_MESSAGE, PREFERRED, UNCLEAN
from eddy.cluster.controller.rpc import (
    ElectionTopic,
    ElectLeadersRequest,
    error_of,
)
from eddy.metadata import NO_LEADER, MetadataState
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation
from eddy.security.checks import cluster_allowed

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
from eddy.cluster.controller.outcomes import answer_every_partition, error_message, outcome_rows

__all__ = ["elect_leaders"]

_NO_TIME = datetime.timedelta(0)
#: (topic, [(partition, error code, message)])
Results = list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]


def _asked(body: Any) -> list[tuple[str, tuple[int, ...]]] | None:
    if body.topic_partitions is None:
        return None
    return [(t.topic, tuple(t.partitions)) for t in body.topic_partitions]


def _all_failed(asked: Sequence[tuple[str, Sequence[int]]] | None, code: ErrorCode,
                message: str | None) -> Results:
    """Every partition asked answered with ``code`` (Kafka's getErrorResponse)."""
    return [(topic, [(p, code, message) for p in parts]) for topic, parts in asked or ()]


def _response(mod: Any, code: ErrorCode, results: Results) -> Any:
    """The response; a row's message is normalised (None without an error, never blank
    with one) whatever built it."""
    topics = tuple(
        build(mod.ReplicaElectionResult, topic=topic, partition_result=tuple(
            build(mod.PartitionResult, partition_id=p, error_code=c,
                  error_message=error_message(c, m))
            for p, c, m in parts))
        for topic, parts in results)
    return build(mod.ElectLeadersResponse, throttle_time=_NO_TIME, error_code=code,
                 replica_election_results=topics)


def _alone(broker: Broker, asked: Sequence[tuple[str, Sequence[int]]] | None) -> Results:
    """A node outside any cluster: the only replica, and the leader, of each partition."""
    if asked is None:
        return [(name, []) for name in sorted(broker.logs.topics)]
    out: Results = []
    for name, parts in asked:
        topic = broker.logs.get(name)
        rows: list[tuple[int, ErrorCode, str | None]] = []
        for p in parts:
            if topic is None:
                rows.append((p, ErrorCode.unknown_topic_or_partition,
                             f"No such topic as {name}"))
            elif not 0 <= p < len(topic.partitions):
                rows.append((p, ErrorCode.unknown_topic_or_partition,
                             f"No such partition as {name}-{p}"))
            else:
                rows.append((p, ErrorCode.election_not_needed, NOT_NEEDED_MESSAGE))
        out.append((name, rows))
    return out


def _elected(election_type: int, done: list[tuple[str, int]]
             ) -> Callable[[MetadataState], bool]:
    def check(state: MetadataState) -> bool:
        for name, index in done:
            part = state.partition(name, index)
            if part is None:
                continue
            if election_type == PREFERRED and part.replicas and part.leader != part.replicas[0]:
                return False
            if election_type == UNCLEAN and part.leader == NO_LEADER:
                return False
        return True
    return check


async def elect_leaders(broker: Broker, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.ELECT_LEADERS, req.api_version)
    election_type = int(getattr(body, "election_type", PREFERRED))
    asked = _asked(body)
    if not cluster_allowed(broker, req, AclOperation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return _response(mod, code, _all_failed(asked, code, CLUSTER_DENIED))
    if election_type not in (PREFERRED, UNCLEAN):
        return _response(mod, ErrorCode.invalid_request, _all_failed(
            asked, ErrorCode.invalid_request, f"Unknown election type {election_type}"))
    if asked is not None and not asked:
        return _response(mod, ErrorCode.none, [])
    cluster = broker.cluster
    if cluster is None:
        return _response(mod, ErrorCode.none, _alone(broker, asked))
    timeout_s = body.timeout.total_seconds()
    if timeout_s <= 0:
        timeout_s = CONTROLLER_WAIT_S
    topics = None if asked is None else tuple(ElectionTopic(t, p) for t, p in asked)
    try:
        answer = await cluster.ask(ElectLeadersRequest(election_type, topics), timeout_s)
    except ControllerUnavailable as exc:
        return _response(mod, ErrorCode.request_timed_out,
                         _all_failed(asked, ErrorCode.request_timed_out, str(exc)))
    if answer.error_code != ErrorCode.none:
        code = error_of(answer)
        return _response(mod, code, _all_failed(asked, code, answer.message))
    results = answer_every_partition(asked, outcome_rows(answer.outcomes))
    done = [(topic, p) for topic, rows in results for p, c, _ in rows if c == ErrorCode.none]
    if done:
        await cluster.wait_applied(_elected(election_type, done), APPLY_WAIT_S)
    return _response(mod, ErrorCode.none, results)
