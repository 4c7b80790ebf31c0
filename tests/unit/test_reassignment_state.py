"""Partition reassignments (KIP-455) in the metadata state and on the controller."""

from __future__ import annotations

import dataclasses

import pytest

from eddy import postcard
from eddy.cluster.controller import Controller, ControllerConfig
from eddy.cluster.controller.reassign import completions, plan_reassignments
from eddy.cluster.placement import HashRing
from eddy.metadata import MetadataSnapshotError, MetadataState
from eddy.metadata.commands import (
    AlterReassignment,
    ChangeIsr,
    ChangePartitionLeader,
    CompleteReassignment,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataCommand,
    RegisterBroker,
    UnfenceBroker,
    decode_command,
    encode_command,
)
from eddy.metadata.reassignments import ReassignmentsSection
from eddy.metadata.records import SNAPSHOT_VERSION, PartitionRecord
from eddy.metadata.result import ApplyResult
from eddy.protocol.errors import ErrorCode

E = ErrorCode


def register(node: int) -> RegisterBroker:
    return RegisterBroker(node, bytes([node]) * 32, None, f"10.0.0.{node}:9092",
                          f"10.0.0.{node}:7000", 1)


def ok(state: MetadataState, cmd: MetadataCommand) -> ApplyResult:
    result = state.apply(cmd)
    assert result.ok, result
    return result


def rejected(state: MetadataState, cmd: MetadataCommand, code: ErrorCode) -> None:
    before = state.snapshot()
    result = state.apply(cmd)
    assert result.code == code, result
    assert result.message
    assert state.snapshot() == before


def cluster(nodes: int = 4) -> MetadataState:
    """Brokers 1..nodes, live; topic t: partition 0 on (1, 2), partition 1 on (2, 1)."""
    state = MetadataState()
    for n in range(1, nodes + 1):
        ok(state, register(n))
        ok(state, UnfenceBroker(n, 1))
    ok(state, CreateTopic("t", (7).to_bytes(16, "big"), ((1, 2), (2, 1)), ()))
    return state


def part(state: MetadataState, p: int = 0) -> PartitionRecord:
    record = state.partition("t", p)
    assert record is not None
    return record


def grow_isr(state: MetadataState, isr: tuple[int, ...], p: int = 0) -> None:
    ok(state, ChangeIsr("t", p, isr, part(state, p).partition_epoch))


def test_start_merges_target_first_and_lists_adding_removing() -> None:
    state = cluster()
    before = part(state)
    ok(state, AlterReassignment("t", 0, (3, 2)))
    now = part(state)
    assert now.replicas == (3, 2, 1)  # the target first, then the rest
    assert now.isr == (1, 2) and now.leader == 1
    assert now.leader_epoch == before.leader_epoch
    assert now.partition_epoch == before.partition_epoch + 1
    r = state.reassignment("t", 0)
    assert r is not None and r.adding == (3,) and r.removing == (1,)
    assert r.original == (1, 2) and r.target == (3, 2)


def test_completes_only_once_every_target_replica_is_in_sync() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 2)))
    assert completions(state) == []
    rejected(state, CompleteReassignment("t", 0, (3, 2)), E.invalid_request)
    grow_isr(state, (1, 2, 3))
    assert completions(state) == [CompleteReassignment("t", 0, (3, 2))]
    epoch = part(state).leader_epoch
    ok(state, CompleteReassignment("t", 0, (3, 2)))
    done = part(state)
    assert done.replicas == (3, 2)
    assert done.isr == (2, 3)  # ISR ∩ target, in ISR order
    assert done.leader == 3 and done.leader_epoch == epoch + 1  # leader 1 left: first of T
    assert state.reassignment("t", 0) is None
    assert completions(state) == []
    assert [(t, p) for t, p, _ in state.partitions_of(1)] == [("t", 1)]


def test_leader_in_target_keeps_leading_without_a_new_epoch() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (1, 3)))
    grow_isr(state, (1, 2, 3))
    epoch = part(state).leader_epoch
    ok(state, CompleteReassignment("t", 0, (1, 3)))
    assert part(state).leader == 1 and part(state).leader_epoch == epoch
    assert part(state).replicas == (1, 3) and part(state).isr == (1, 3)


def test_new_leader_must_be_live() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 4)))
    grow_isr(state, (1, 2, 3, 4))
    ok(state, FenceBroker(3, 1))
    ok(state, CompleteReassignment("t", 0, (3, 4)))
    assert part(state).leader == 4  # 3 is in the ISR but fenced: the next one


def test_cancel_reverts_to_the_original_replicas() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 4)))
    grow_isr(state, (1, 2, 3))
    ok(state, AlterReassignment("t", 0, None))
    assert part(state).replicas == (1, 2) and part(state).isr == (1, 2)
    assert state.reassignment("t", 0) is None
    rejected(state, AlterReassignment("t", 0, None), E.no_reassignment_in_progress)


def test_a_new_target_replaces_the_ongoing_one_keeping_the_original() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 2)))
    grow_isr(state, (1, 2, 3))
    ok(state, AlterReassignment("t", 0, (4, 2)))
    assert part(state).replicas == (4, 2, 1)  # 3 dropped: not original, not target
    assert part(state).isr == (1, 2)
    r = state.reassignment("t", 0)
    assert r is not None and r.original == (1, 2) and r.adding == (4,)
    # asking for the original replicas again is a cancel
    ok(state, AlterReassignment("t", 0, (1, 2)))
    assert state.reassignment("t", 0) is None and part(state).replicas == (1, 2)


def test_reassigning_to_the_current_replicas_changes_nothing() -> None:
    state = cluster()
    before = state.snapshot()
    assert ok(state, AlterReassignment("t", 0, (1, 2))).value == 0
    assert state.snapshot() == before


@pytest.mark.parametrize(("target", "code"), [
    ((), E.invalid_replica_assignment),
    ((3, 3), E.invalid_replica_assignment),
    ((3, 9), E.invalid_replica_assignment),  # not registered
    ((3, -1), E.invalid_replica_assignment),
])
def test_invalid_targets(target: tuple[int, ...], code: ErrorCode) -> None:
    rejected(cluster(), AlterReassignment("t", 0, target), code)


def test_fenced_target_and_unknown_partitions() -> None:
    state = cluster()
    ok(state, FenceBroker(4, 1))
    rejected(state, AlterReassignment("t", 0, (4, 2)), E.invalid_replica_assignment)
    rejected(state, AlterReassignment("t", 5, (3, 2)), E.unknown_topic_or_partition)
    rejected(state, AlterReassignment("nope", 0, (3, 2)), E.unknown_topic_or_partition)
    rejected(state, AlterReassignment("t", 5, None), E.unknown_topic_or_partition)


def test_cancel_refused_when_no_original_replica_is_in_sync() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 4)))
    grow_isr(state, (1, 2, 3, 4))
    ok(state, ChangePartitionLeader("t", 0, 3, part(state).leader_epoch + 1, (3, 4)))
    rejected(state, AlterReassignment("t", 0, None), E.invalid_replica_assignment)


def test_isr_changes_during_a_move_may_name_adding_replicas() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 2)))
    grow_isr(state, (1, 2, 3))
    assert part(state).isr == (1, 2, 3)
    stale = ChangeIsr("t", 0, (1, 2), part(state).partition_epoch - 1)
    rejected(state, stale, E.invalid_update_version)


def test_delete_topic_drops_its_reassignments() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 1, (3, 1)))
    ok(state, DeleteTopic("t", None))
    assert state.reassignment_list() == []


def test_commands_round_trip_and_keep_their_discriminants() -> None:
    for cmd in (AlterReassignment("t", 0, (3, 2)), AlterReassignment("t", 1, None),
                CompleteReassignment("t", 0, (3,))):
        data = encode_command(cmd)
        assert decode_command(data) == cmd
    assert encode_command(AlterReassignment("t", 0, None))[0] == 20
    assert encode_command(CompleteReassignment("t", 0, ()))[0] == 21


def test_snapshot_without_reassignments_is_the_version_2_layout() -> None:
    state = cluster()
    data = state.snapshot()
    assert data[0] == SNAPSHOT_VERSION == 2
    # what older code wrote: the version-2 struct and nothing after it
    assert postcard.encode(state.to_snapshot()) == data
    again = MetadataState()
    again.restore(data)
    assert again.snapshot() == data


def test_old_version_2_snapshot_bytes_still_restore() -> None:
    # a snapshot written before reassignments existed (bytes of the version-2 layout,
    # built field by field so this test does not depend on the code that writes them)
    old = bytes([2,  # version
                 0,  # brokers
                 1, 1, ord("t"), 16, *(7).to_bytes(16, "big"),  # topic "t", id
                 # one partition (signed ints zigzag: 1 -> 2, 2 -> 4): replicas (1, 2),
                 # leader 1, epoch 0, ISR (1, 2), partition epoch 0; no configs
                 1, 2, 2, 4, 2, 0, 2, 2, 4, 0, 0,
                 0, 0, 0, 0, 0,  # broker configs, producer id, scram, acls, pipelines
                 2, ord("c"), ord("x")])  # cluster id "cx"
    state = MetadataState()
    state.restore(old)
    assert state.partition("t", 0) == PartitionRecord((1, 2), 1, 0, (1, 2), 0)
    assert state.cluster_id == "cx" and state.reassignment_list() == []
    assert state.snapshot() == old


def test_snapshot_with_reassignments_round_trips_as_version_3() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 1, (3, 1)))
    ok(state, AlterReassignment("t", 0, (4, 2)))
    data = state.snapshot()
    assert data[0] == 3
    restored = MetadataState()
    restored.restore(data)
    assert restored.reassignment_list() == state.reassignment_list()
    assert restored.snapshot() == data
    # and the restored one goes on the same way
    for s in (state, restored):
        grow_isr(s, (2, 1, 3), 1)
        ok(s, CompleteReassignment("t", 1, (3, 1)))
    assert restored.snapshot() == state.snapshot()


def test_inconsistent_reassignment_section_is_refused() -> None:
    state = cluster()
    ok(state, AlterReassignment("t", 0, (3, 2)))
    head = postcard.encode(state.to_snapshot())
    r = state.reassignment_list()[0]
    for bad in (ReassignmentsSection((r, r)),
                ReassignmentsSection((dataclasses.replace(r, target=(4, 2)),)),
                ReassignmentsSection((dataclasses.replace(r, partition=9),))):
        with pytest.raises(MetadataSnapshotError):
            MetadataState().restore(head + postcard.encode(bad))
    with pytest.raises(MetadataSnapshotError):  # version 2 followed by bytes
        MetadataState().restore(cluster().snapshot() + b"\x00")


def test_plan_checks_like_the_state_and_refuses_duplicates() -> None:
    state = cluster()
    planned = plan_reassignments(state, [
        ("t", [(0, (3, 2)), (0, (4,))]),
        ("nope", [(0, (1,))]),
        ("t", [(1, (1, 2))]),  # the current replicas of partition 1, in another order
    ])
    assert [o.code for o in planned[0][1]] == [E.invalid_request, E.invalid_request]
    assert planned[1][1][0].code == E.unknown_topic_or_partition
    only = planned[2][1][0]
    assert only.code == E.none and only.command == AlterReassignment("t", 1, (1, 2))
    cancel = plan_reassignments(state, [("t", [(1, None)])])[0][1][0]
    assert cancel.code == E.no_reassignment_in_progress and cancel.command is None


def test_controller_tick_completes_a_caught_up_reassignment() -> None:
    state = cluster()
    controller = Controller(state, ControllerConfig(), HashRing())
    controller.start(0)
    for n in (1, 2, 3, 4):
        controller.on_heartbeat(n, 1, 0)
    outcomes = controller.alter_reassignments([("t", [(0, (3, 2))])])
    command = outcomes[0][1][0].command
    assert command is not None
    ok(state, command)
    assert not any(isinstance(c, CompleteReassignment) for c in controller.tick(10))
    grow_isr(state, (1, 2, 3))
    out = controller.tick(20)
    assert CompleteReassignment("t", 0, (3, 2)) in out
    # not asked again while in flight
    assert CompleteReassignment("t", 0, (3, 2)) not in controller.tick(30)
