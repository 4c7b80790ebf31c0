"""The ElectLeaders handler's per-partition results on a cluster, built from what the
controller plans and Raft applies (the sans-IO controller of test_controller, answers
round-tripped through the mesh encoding): every partition asked has a result, with Kafka's
code, a message when it is an error (Kafka's default text when the controller gave none)
and no message when it is not."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Sequence
from types import SimpleNamespace
from typing import Any

from kio.schema.elect_leaders.v2.request import ElectLeadersRequest as KafkaElect
from kio.schema.elect_leaders.v2.request import TopicPartitions
from kio.static.primitive import i8, i32, i32Timedelta
from test_controller import Cluster, _expand_isrs
from test_controller_elections import _moved_away

from eddy import postcard
from eddy.broker.handlers.elect_leaders import elect_leaders
from eddy.cluster.controller.batch_rpcs import ElectionRpcs
from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.elections import (
    ELIGIBLE_MESSAGE,
    NOT_NEEDED_MESSAGE,
    PREFERRED,
    PREFERRED_MESSAGE,
    UNCLEAN,
)
from eddy.cluster.controller.outcomes import error_message
from eddy.cluster.controller.rpc import (
    ControllerReply,
    ElectLeadersRequest,
    PartitionOutcome,
    TopicOutcome,
    decode_reply,
    reply,
)
from eddy.metadata import ApplyResult, MetadataCommand, MetadataState, encode_command
from eddy.metadata.commands import ChangeIsr
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode

E = ErrorCode
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))
#: (topic, partition) -> (error code, message)
Results = dict[tuple[str, int], tuple[int, str | None]]
Ask = Callable[[ElectLeadersRequest, float], Awaitable[ControllerReply]]


def _proposer(c: Cluster, refuse: str | None = None
              ) -> Callable[[Sequence[MetadataCommand]], Awaitable[list[ApplyResult]]]:
    """Applies proposals as Raft would; with ``refuse``, every one fails to be proposed
    with that message (what the controller service makes of an exception)."""
    async def propose_all(commands: Sequence[MetadataCommand]) -> list[ApplyResult]:
        if refuse is not None:
            return [ApplyResult(E.not_controller, refuse) for _ in commands]
        return [c.state.apply_bytes(encode_command(x)) for x in commands]
    return propose_all


def _controller(c: Cluster, refuse: str | None = None) -> Ask:
    rpcs = ElectionRpcs(c.controller, _proposer(c, refuse), 1)

    async def ask(request: ElectLeadersRequest, timeout_s: float) -> ControllerReply:
        answer = await rpcs.elect_leaders(request, c.now)
        return decode_reply(postcard.encode(answer))  # over the mesh
    return ask


def _elect(state: MetadataState, ask: Ask, election_type: int,
           asked: Sequence[tuple[str, Sequence[int]]] | None) -> tuple[int, Results]:
    """Run the handler on a broker whose cluster asks ``ask``: (top error, results)."""
    async def wait_applied(check: Callable[[MetadataState], bool], timeout_s: float) -> None:
        assert check(state)  # the stand-in applies synchronously

    broker: Any = SimpleNamespace(authorizer=None, cluster=SimpleNamespace(
        ask=ask, wait_applied=wait_applied, state=state))
    body = KafkaElect(election_type=i8(election_type), timeout=TIMEOUT, topic_partitions=None
                      if asked is None else tuple(TopicPartitions(
                          topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in asked))
    req = Request(ApiKey.ELECT_LEADERS, 2, 1, "test", body)
    resp = asyncio.run(elect_leaders(broker, req))
    results: Results = {}
    for t in resp.replica_election_results:
        for p in t.partition_result:
            assert (t.topic, int(p.partition_id)) not in results
            results[(t.topic, int(p.partition_id))] = (int(p.error_code), p.error_message)
    return int(resp.error_code), results


def test_preferred_elections_answer_every_partition_with_kafkas_code_and_message() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 6, 3)
    moved = _moved_away(c, "t")  # broker 1 is back in the ISR but leads nothing
    assert len(moved) >= 2
    elect, unavailable = moved[0], moved[1]
    leads = next(i for i, p in enumerate(c.parts("t")) if p.replicas[0] != 1)
    part = c.parts("t")[unavailable]
    c.apply([ChangeIsr("t", unavailable, tuple(n for n in part.isr if n != 1),
                       part.partition_epoch)])
    code, results = _elect(c.state, _controller(c), PREFERRED,
                           [("t", [elect, leads, unavailable, 9]), ("nope", [0])])
    assert code == E.none
    assert results == {
        ("t", elect): (E.none, None),
        ("t", leads): (E.election_not_needed, NOT_NEEDED_MESSAGE),
        ("t", unavailable): (E.preferred_leader_not_available, PREFERRED_MESSAGE),
        ("t", 9): (E.unknown_topic_or_partition, "No such partition as t-9"),
        ("nope", 0): (E.unknown_topic_or_partition, "No such topic as nope"),
    }
    assert c.parts("t")[elect].leader == 1
    # every partition: the ones needing no election are left out
    _expand_isrs(c, "t")
    code, results = _elect(c.state, _controller(c), PREFERRED, None)
    assert code == E.none and results == {("t", unavailable): (E.none, None)}


def test_unclean_election_without_a_live_replica_is_eligible_leaders_not_available() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 1, 1)
    c.create("led", 1, 3)
    only = c.parts("t")[0].replicas[0]
    c.run(3000, alive=tuple(n for n in (1, 2, 3) if n != only))
    code, results = _elect(c.state, _controller(c), UNCLEAN, [("t", [0]), ("led", [0])])
    assert code == E.none
    assert results == {("t", 0): (E.eligible_leaders_not_available, ELIGIBLE_MESSAGE),
                       ("led", 0): (E.election_not_needed, NOT_NEEDED_MESSAGE)}


def test_a_refused_proposal_without_a_message_gets_kafkas_default() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 6, 3)
    index = _moved_away(c, "t")[0]
    # e.g. a raft timeout whose exception has no text: str(exc) == ""
    code, results = _elect(c.state, _controller(c, refuse=""), PREFERRED, [("t", [index])])
    assert code == E.none
    assert results == {("t", index): (
        E.not_controller, "This is not the correct controller for this cluster.")}
    _, results = _elect(c.state, _controller(c, refuse="not the leader (leader hint: 2)"),
                        PREFERRED, [("t", [index])])
    assert results[("t", index)] == (E.not_controller, "not the leader (leader hint: 2)")


def test_an_incomplete_or_blank_controller_answer_is_made_whole() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 3, 3)

    async def sparse(request: ElectLeadersRequest, timeout_s: float) -> ControllerReply:
        # partition 1 left out, 0 a success with a blank message, 2 an error without one
        return reply(outcomes=(TopicOutcome("t", (
            PartitionOutcome(0, 0, ""), PartitionOutcome(2, int(E.election_not_needed), "  "),
            PartitionOutcome(5, 9999, None))),))

    code, results = _elect(c.state, sparse, PREFERRED, [("t", [0, 1, 2, 5]), ("u", [3])])
    assert code == E.none
    assert results == {
        ("t", 0): (E.none, None),
        ("t", 1): (E.unknown_server_error, "the controller gave no answer for t-1"),
        ("t", 2): (E.election_not_needed, NOT_NEEDED_MESSAGE),
        ("t", 5): (E.unknown_server_error, error_message(E.unknown_server_error, None)),
        ("u", 3): (E.unknown_server_error, "the controller gave no answer for u-3"),
    }


def test_no_controller_or_a_refusal_fails_every_partition_with_a_message() -> None:
    state = MetadataState()

    async def gone(request: ElectLeadersRequest, timeout_s: float) -> ControllerReply:
        raise ControllerUnavailable()

    async def refused(request: ElectLeadersRequest, timeout_s: float) -> ControllerReply:
        return reply(int(E.not_controller), None)

    asked = [("t", [0, 1])]
    code, results = _elect(state, gone, PREFERRED, asked)
    assert code == E.request_timed_out
    assert results == {("t", p): (E.request_timed_out, "The request timed out.")
                       for p in (0, 1)}
    code, results = _elect(state, refused, UNCLEAN, asked)
    assert code == E.not_controller
    assert set(results.values()) == {
        (E.not_controller, "This is not the correct controller for this cluster.")}
    # an unknown election type: INVALID_REQUEST with its reason, before any controller
    code, results = _elect(state, gone, 7, asked)
    assert code == E.invalid_request
    assert set(results.values()) == {(E.invalid_request, "Unknown election type 7")}


def test_error_message_rules() -> None:
    assert error_message(E.none, "") is None and error_message(E.none, "x") is None
    assert error_message(E.fenced_leader_epoch, "epoch 3 is old") == "epoch 3 is old"
    assert error_message(E.fenced_leader_epoch, None) == "Fenced leader epoch."
