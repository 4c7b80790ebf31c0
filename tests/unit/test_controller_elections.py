"""ElectLeaders and controlled shutdown in the sans-IO controller (virtual time), the RPC
messages that carry them, and the controller service's replies built from the applied
commands."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from test_controller import Cluster, _expand_isrs

from eddy import postcard
from eddy.cluster.controller import ControllerError
from eddy.cluster.controller.batch_rpcs import ElectionRpcs
from eddy.cluster.controller.elections import PREFERRED, UNCLEAN, ElectionOutcome
from eddy.cluster.controller.rpc import (
    ControlledShutdownRequest,
    ElectionTopic,
    ElectLeadersRequest,
    PartitionOutcome,
    TopicOutcome,
    decode_reply,
    decode_request,
    reply,
)
from eddy.metadata import NO_LEADER, ApplyResult, MetadataCommand, encode_command
from eddy.metadata.commands import ChangeIsr, ChangePartitionLeader
from eddy.protocol.errors import ErrorCode

E = ErrorCode


def moves(commands: Sequence[MetadataCommand]) -> list[ChangePartitionLeader]:
    return [c for c in commands if isinstance(c, ChangePartitionLeader)]


def outcomes(planned: list[tuple[str, list[ElectionOutcome]]]
             ) -> dict[tuple[str, int], ErrorCode]:
    return {(name, o.partition): o.code for name, outs in planned for o in outs}


def commands_of(planned: list[tuple[str, list[ElectionOutcome]]]
                ) -> list[ChangePartitionLeader]:
    return [o.command for _, outs in planned for o in outs if o.command is not None]


# -- controlled shutdown ---------------------------------------------------------------------
def test_controlled_shutdown_moves_leaders_within_the_isr_and_leaves_every_isr() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("orders", 9, 3)
    before = c.parts("orders")
    assert any(p.leader == 1 for p in before)
    c.apply(c.controller.controlled_shutdown(1, c.epochs[1], c.now))
    for old, new in zip(before, c.parts("orders"), strict=True):
        assert 1 not in new.isr
        assert new.isr == tuple(n for n in old.isr if n != 1)
        if old.leader == 1:
            assert new.leader == next(n for n in old.replicas if n in new.isr)
            assert new.leader_epoch == old.leader_epoch + 1
        else:
            assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch)
    assert c.state.is_live(1)  # not fenced: it serves until it exits
    assert c.controller.controlled_shutdown(1, c.epochs[1], c.now) == []  # nothing left


def test_a_partition_with_no_other_live_isr_member_stays_with_the_stopping_leader() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("solo", 3, 1)
    c.create("pair", 1, 2)
    led_by_1 = [i for i, p in enumerate(c.parts("solo")) if p.leader == 1]
    pair = c.parts("pair")[0]
    other = next(n for n in pair.replicas if n != pair.leader)
    c.apply([ChangeIsr("pair", 0, (pair.leader,), pair.partition_epoch)])  # follower lags
    stopping = pair.leader
    c.apply(c.controller.controlled_shutdown(stopping, c.epochs[stopping], c.now))
    after = c.parts("pair")[0]
    assert after.leader == stopping and after.isr == (stopping,)
    assert other not in after.isr
    assert [i for i, p in enumerate(c.parts("solo")) if p.leader == 1] == led_by_1


def test_a_stopping_broker_is_never_unfenced_elected_or_placed() -> None:
    c = Cluster(nodes=(1, 2, 3, 4))
    c.create("t", 12, 3)
    c.apply(c.controller.controlled_shutdown(1, c.epochs[1], c.now))
    # its own heartbeats still arrive for a while: nothing puts it back
    out = c.run(1000, alive=(1, 2, 3, 4))
    assert all(1 not in p.isr and p.leader != 1 for p in c.parts("t"))
    assert not any(isinstance(x, ChangePartitionLeader) and x.leader == 1 for x in out)
    assert 1 not in c.controller.placement_nodes(c.now)
    assert c.controller.rebalance_preferred_leaders(c.now) == []
    # another broker dies: its partitions go to live ISR members, never to 1
    c.run(4000, alive=(1, 3, 4))
    assert not c.state.is_live(2)
    assert all(p.leader not in (1, 2) for p in c.parts("t"))
    # it stops heartbeating and is fenced; a late heartbeat of that epoch does not unfence it
    c.run(7000, alive=(3, 4))
    assert not c.state.is_live(1)
    c.heartbeat(1)
    c.run(7500, alive=(1, 3, 4))
    assert not c.state.is_live(1)
    # restarted (a new epoch): a broker like any other again
    c.register(1)
    c.heartbeat(1)
    c.run(8000, alive=(1, 3, 4))
    assert c.state.is_live(1) and not c.controller.in_controlled_shutdown(1)
    assert 1 in c.controller.placement_nodes(c.now)


def test_controlled_shutdown_errors() -> None:
    c = Cluster(nodes=(1, 2, 3))
    with pytest.raises(ControllerError) as err:
        c.controller.controlled_shutdown(1, c.epochs[1] + 1, c.now)
    assert err.value.code == E.stale_broker_epoch
    with pytest.raises(ControllerError) as err:
        c.controller.controlled_shutdown(9, 1, c.now)
    assert err.value.code == E.broker_id_not_registered
    c.controller.stop()
    with pytest.raises(ControllerError) as err:
        c.controller.controlled_shutdown(1, c.epochs[1], c.now)
    assert err.value.code == E.not_controller


def test_a_new_controller_forgets_controlled_shutdowns() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.controller.controlled_shutdown(1, c.epochs[1], c.now)
    assert c.controller.in_controlled_shutdown(1)
    c.controller.stop()
    c.controller.start(c.now)
    assert not c.controller.in_controlled_shutdown(1)


# -- ElectLeaders ------------------------------------------------------------------------------
def _moved_away(c: Cluster, name: str) -> list[int]:
    """Broker 1 fenced and back, its ISR memberships restored: the partitions it is the
    preferred leader of are led by others."""
    c.run(3000, alive=(2, 3))
    c.heartbeat(1)
    c.run(3500, alive=(1, 2, 3))
    _expand_isrs(c, name)
    return [i for i, p in enumerate(c.parts(name)) if p.replicas[0] == 1]


def test_preferred_election_of_every_partition() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 9, 3)
    moved = _moved_away(c, "t")
    c.create("quiet", 1, 3)  # led by its preferred replica
    assert moved and all(c.parts("t")[i].leader != 1 for i in moved)
    epochs = [p.leader_epoch for p in c.parts("t")]
    planned = c.controller.elect_leaders(PREFERRED, None, c.now)
    # every topic is listed; partitions whose preferred replica leads are left out
    assert [name for name, _ in planned] == ["quiet", "t"]
    assert outcomes(planned) == {("t", i): E.none for i in moved}
    c.apply(commands_of(planned))
    for i, p in enumerate(c.parts("t")):
        assert p.leader == p.replicas[0]
        assert p.leader_epoch == epochs[i] + (i in moved)
    again = c.controller.elect_leaders(PREFERRED, None, c.now)
    assert again == [("quiet", []), ("t", [])]


def test_preferred_election_of_named_partitions() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 6, 3)
    c.run(3000, alive=(2, 3))
    c.heartbeat(1)
    c.run(3500, alive=(1, 2, 3))
    moved = [i for i, p in enumerate(c.parts("t")) if p.replicas[0] == 1]
    stays = next(i for i, p in enumerate(c.parts("t")) if p.replicas[0] != 1)
    first = moved[0]
    planned = c.controller.elect_leaders(
        PREFERRED, [("t", [first, stays, 6, -1]), ("nope", [0])], c.now)
    # broker 1 is live but not back in the ISR yet
    assert planned[0][1][0].code == E.preferred_leader_not_available
    assert planned[0][1][0].message == "The preferred leader was not available."
    assert planned[0][1][1].code == E.election_not_needed
    assert planned[0][1][1].message == "Leader election not needed for topic partition."
    assert [(o.code, o.message) for o in planned[0][1][2:]] == [
        (E.unknown_topic_or_partition, "No such partition as t-6"),
        (E.unknown_topic_or_partition, "No such partition as t--1")]
    assert planned[1] == ("nope", [ElectionOutcome(0, E.unknown_topic_or_partition,
                                                   "No such topic as nope")])
    _expand_isrs(c, "t")
    planned = c.controller.elect_leaders(PREFERRED, [("t", [first, first]), ("t", [first])],
                                         c.now)
    assert [o.code for _, outs in planned for o in outs] == [E.none]  # one outcome
    assert len(commands_of(planned)) == 1  # named three times, changed once
    # a stopping preferred replica is not available
    c.apply(c.controller.controlled_shutdown(1, c.epochs[1], c.now))
    planned = c.controller.elect_leaders(PREFERRED, [("t", [first])], c.now)
    assert planned[0][1][0].code == E.preferred_leader_not_available


def test_unclean_election() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 1, 3)
    part = c.parts("t")[0]
    planned = c.controller.elect_leaders(UNCLEAN, [("t", [0])], c.now)
    assert planned[0][1][0].code == E.election_not_needed  # it has a leader
    laggard = part.replicas[2]
    in_sync = tuple(n for n in part.replicas if n != laggard)
    c.apply([ChangeIsr("t", 0, in_sync, part.partition_epoch)])
    c.run(3000, alive=(laggard,))  # the whole ISR is gone: offline
    offline = c.parts("t")[0]
    assert offline.leader == NO_LEADER
    planned = c.controller.elect_leaders(UNCLEAN, None, c.now)
    assert outcomes(planned) == {("t", 0): E.none}
    c.apply(commands_of(planned))
    after = c.parts("t")[0]
    assert (after.leader, after.isr) == (laggard, (laggard,))
    assert after.leader_epoch == offline.leader_epoch + 1


def test_unclean_election_without_a_live_replica() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 1, 1)
    only = c.parts("t")[0].replicas[0]
    c.run(3000, alive=tuple(n for n in (1, 2, 3) if n != only))
    assert c.parts("t")[0].leader == NO_LEADER
    planned = c.controller.elect_leaders(UNCLEAN, [("t", [0])], c.now)
    assert planned[0][1] == [ElectionOutcome(
        0, E.eligible_leaders_not_available,
        "Eligible topic partition leaders are not available.")]
    planned = c.controller.elect_leaders(PREFERRED, [("t", [0])], c.now)
    assert planned[0][1][0].code == E.preferred_leader_not_available


def test_an_unknown_election_type_is_an_invalid_request() -> None:
    c = Cluster(nodes=(1,))
    with pytest.raises(ControllerError) as err:
        c.controller.elect_leaders(2, None, c.now)
    assert err.value.code == E.invalid_request
    assert err.value.message == "Unknown election type 2"


# -- RPC messages ------------------------------------------------------------------------------
def test_election_requests_and_replies_round_trip() -> None:
    for request in (ElectLeadersRequest(1, (ElectionTopic("t", (0, 5)),)),
                    ElectLeadersRequest(0, None),
                    ControlledShutdownRequest(3, 17)):
        assert decode_request(postcard.encode(request)) == request
    answer = reply(controller=2, value=1, outcomes=(
        TopicOutcome("t", (PartitionOutcome(0, 84, "not needed"),
                           PartitionOutcome(1, 0, None))),))
    assert decode_reply(postcard.encode(answer)) == answer


# -- the service's replies ---------------------------------------------------------------------
class _Proposer:
    """Applies proposals to the cluster's state as Raft would (after ``first``: entries of
    someone else that reach the log before them)."""

    def __init__(self, c: Cluster, first: Sequence[MetadataCommand] = ()) -> None:
        self.c = c
        self.first = list(first)
        self.proposed: list[MetadataCommand] = []

    async def __call__(self, commands: Sequence[MetadataCommand]) -> list[ApplyResult]:
        self.c.apply(self.first)
        self.first = []
        self.proposed.extend(commands)
        return [self.c.state.apply_bytes(encode_command(x)) for x in commands]


def test_service_answers_a_controlled_shutdown_once_applied() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 6, 3)
    c.create("solo", 2, 1)
    stuck = [i for i, p in enumerate(c.parts("solo")) if p.leader == 1]
    proposer = _Proposer(c)
    rpcs = ElectionRpcs(c.controller, proposer, 1)
    answer = asyncio.run(rpcs.controlled_shutdown(ControlledShutdownRequest(1, c.epochs[1]),
                                                  c.now))
    assert answer.error_code == 0 and answer.value == len(stuck)
    assert [p.partition for t in answer.outcomes for p in t.partitions] == stuck
    assert all(p.error_code == E.eligible_leaders_not_available
               for t in answer.outcomes for p in t.partitions)
    assert all(p.leader != 1 and 1 not in p.isr for p in c.parts("t"))
    assert moves(proposer.proposed)


def test_service_answers_an_election_with_the_states_refusal() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 6, 3)
    moved = _moved_away(c, "t")
    index = moved[0]
    part = c.parts("t")[index]
    third = next(n for n in part.replicas if n not in (1, part.leader))
    # another leader change reaches the log between the plan and its proposal
    race = ChangePartitionLeader("t", index, third, part.leader_epoch + 1, part.isr)
    rpcs = ElectionRpcs(c.controller, _Proposer(c, [race]), 1)
    request = ElectLeadersRequest(0, (ElectionTopic("t", (index, 99)),))
    answer = asyncio.run(rpcs.elect_leaders(request, c.now))
    results = {p.partition: (p.error_code, p.message)
               for t in answer.outcomes for p in t.partitions}
    assert results[99] == (E.unknown_topic_or_partition, "No such partition as t-99")
    assert results[index][0] == E.fenced_leader_epoch
    assert c.parts("t")[index].leader == third


def test_an_isr_change_may_not_add_a_stopping_broker() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 1, 3)
    c.apply(c.controller.controlled_shutdown(1, c.epochs[1], c.now))
    part = c.parts("t")[0]
    assert 1 not in part.isr
    c.controller.check_isr_joiners("t", 0, part.isr)  # shrinking or keeping is fine
    with pytest.raises(ControllerError) as err:
        c.controller.check_isr_joiners("t", 0, (*part.isr, 1))
    assert err.value.code == E.ineligible_replica
