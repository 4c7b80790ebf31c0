"""Partition reassignments (KIP-455), as Kafka's controller keeps them.

Reassigning a partition whose replicas are ``current`` to ``target`` makes its replicas
``target`` followed by the members of ``current`` not in it (the preferred leader is then the
target's first); ``adding`` is target - current, ``removing`` current - target. The new
replicas fetch from the leader like any follower and the leader adds them to the ISR when
they catch up (AlterPartition). Once every target replica is in the ISR, the controller
completes the reassignment (``CompleteReassignment``): replicas = target, ISR = ISR ∩ target,
and a leader outside the target hands over (leader epoch + 1) to the target's first live
ISR member. Cancelling (a null target) goes back to the original replicas the same way.

A reassignment asked while another one of the partition is under way replaces it; the
original replicas stay those from before the first, so a cancel still goes back to them.

The ongoing reassignments live in their own table of the state (``PartitionRecord`` is
postcard in old logs and snapshots and cannot grow a field): snapshots carry it as a
trailing section after the version-2 layout, written (version 3) only while the table is
not empty, so a snapshot without reassignments is byte-identical to one of older code.

Every change to a partition's replicas bumps its partition epoch (AlterPartition requests
naming the old one are refused with INVALID_UPDATE_VERSION, as in Kafka).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eddy.metadata.records import NO_LEADER, PartitionRecord
from eddy.metadata.result import Rejected
from eddy.postcard import I32
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.metadata.commands import AlterReassignment, CompleteReassignment
    from eddy.metadata.state import MetadataState

__all__ = [
    "ReassignmentRecord",
    "ReassignmentsSection",
    "alter",
    "complete",
    "merged_replicas",
    "plan_alter",
]

EPOCH_LIMIT = (1 << 31) - 1
#: the most replicas one target may name (Kafka has no limit; the log entry must stay small)
MAX_TARGET = 1024


@dataclass(frozen=True, slots=True)
class ReassignmentRecord:
    """A reassignment under way: ``original`` are the replicas before it, ``target`` what
    they will be."""

    topic: str
    partition: I32
    original: tuple[I32, ...]
    target: tuple[I32, ...]

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(n for n in self.target if n not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(n for n in self.original if n not in self.target)


@dataclass(frozen=True, slots=True)
class ReassignmentsSection:
    """The snapshot's trailing section (version 3): the ongoing reassignments, sorted by
    topic and partition."""

    reassignments: tuple[ReassignmentRecord, ...]


def merged_replicas(original: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """The replicas while moving: the target first (in its order), then the rest."""
    return target + tuple(n for n in original if n not in target)


def _bump(value: int, what: str) -> int:
    if value >= EPOCH_LIMIT:
        raise Rejected(ErrorCode.invalid_request, f"{what} cannot grow past {EPOCH_LIMIT}")
    return value + 1


def _check_target(state: MetadataState, where: str, target: tuple[int, ...]) -> None:
    """Kafka's manual assignment checks: INVALID_REPLICA_ASSIGNMENT for an empty list, a
    broker named twice, or one that is not registered or fenced."""
    if not target:
        raise Rejected(ErrorCode.invalid_replica_assignment,
                       f"{where}: the replica list is empty")
    if len(target) > MAX_TARGET:
        raise Rejected(ErrorCode.invalid_replica_assignment,
                       f"{where}: {len(target)} replicas, at most {MAX_TARGET}")
    if len(set(target)) != len(target):
        raise Rejected(ErrorCode.invalid_replica_assignment,
                       f"{where}: the replica list {list(target)} names a broker twice")
    for node in target:
        broker = state.broker(node)
        if broker is None:
            raise Rejected(ErrorCode.invalid_replica_assignment,
                           f"{where}: broker {node} is not registered")
        if broker.fenced:
            raise Rejected(ErrorCode.invalid_replica_assignment,
                           f"{where}: broker {node} is fenced")


def move_to(state: MetadataState, where: str, current: PartitionRecord,
            replicas: tuple[int, ...]) -> PartitionRecord:
    """``current`` with ``replicas``: the ISR keeps its members among them, a leader not
    among them hands over to the first live ISR member (replica order, leader epoch + 1).
    INVALID_REPLICA_ASSIGNMENT when no in-sync replica would be left."""
    isr = tuple(n for n in current.isr if n in replicas)
    if not isr:
        raise Rejected(ErrorCode.invalid_replica_assignment,
                       f"{where}: none of {list(replicas)} is in the ISR {list(current.isr)}")
    leader, leader_epoch = current.leader, current.leader_epoch
    if leader != NO_LEADER and leader not in replicas:
        live = [n for n in replicas if n in isr and state.is_live(n)]
        if not live:
            raise Rejected(ErrorCode.invalid_replica_assignment,
                           f"{where}: no live in-sync replica among {list(replicas)} can "
                           f"take over from leader {leader}")
        leader, leader_epoch = live[0], _bump(leader_epoch, "leader epoch")
    return dataclasses.replace(
        current, replicas=replicas, isr=isr, leader=leader, leader_epoch=leader_epoch,
        partition_epoch=_bump(current.partition_epoch, "partition epoch"))


def plan_alter(state: MetadataState, topic: str, partition: int,
               target: tuple[int, ...] | None
               ) -> tuple[PartitionRecord, ReassignmentRecord | None] | None:
    """What ``AlterReassignment`` does, without doing it: the partition's new record and
    its reassignment afterwards (None: none left), or None when nothing changes (the
    target is the current replica set, nothing under way). Raises ``Rejected``:
    UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS (cancelling none),
    INVALID_REPLICA_ASSIGNMENT."""
    current = state.require_partition(topic, partition)
    where = f"{topic}-{partition}"
    ongoing = state.reassignments.get((topic, partition))
    if target is None:
        if ongoing is None:
            raise Rejected(ErrorCode.no_reassignment_in_progress,
                           f"{where}: no reassignment is in progress")
        return move_to(state, where, current, ongoing.original), None
    _check_target(state, where, target)
    original = current.replicas if ongoing is None else ongoing.original
    if target == original:
        if ongoing is None:
            return None  # already there: Kafka answers success and does nothing
        return move_to(state, where, current, original), None
    replicas = merged_replicas(original, target)
    # the same replicas in the same order: only the target changes
    record = current if replicas == current.replicas else move_to(state, where, current,
                                                                   replicas)
    return record, ReassignmentRecord(topic, partition, original, target)


def alter(state: MetadataState, cmd: AlterReassignment) -> int:
    """1 if the partition or its reassignment changed, 0 if nothing had to."""
    plan = plan_alter(state, cmd.topic, cmd.partition, cmd.target)
    if plan is None:
        return 0
    record, reassignment = plan
    key = (cmd.topic, cmd.partition)
    state.set_partition(cmd.topic, cmd.partition, record)
    if reassignment is None:
        state.reassignments.pop(key, None)
    else:
        state.reassignments[key] = reassignment
    return 1


def ready(part: PartitionRecord, reassignment: ReassignmentRecord) -> bool:
    """Whether every target replica is in the ISR: the reassignment can complete."""
    return all(n in part.isr for n in reassignment.target)


def complete(state: MetadataState, cmd: CompleteReassignment) -> None:
    current = state.require_partition(cmd.topic, cmd.partition)
    where = f"{cmd.topic}-{cmd.partition}"
    ongoing = state.reassignments.get((cmd.topic, cmd.partition))
    if ongoing is None or ongoing.target != cmd.target:
        raise Rejected(ErrorCode.no_reassignment_in_progress,
                       f"{where}: no reassignment to {list(cmd.target)} is in progress")
    if not ready(current, ongoing):
        raise Rejected(ErrorCode.invalid_request,
                       f"{where}: not every target replica is in the ISR yet "
                       f"(ISR {list(current.isr)}, target {list(ongoing.target)})")
    state.set_partition(cmd.topic, cmd.partition,
                        move_to(state, where, current, ongoing.target))
    del state.reassignments[(cmd.topic, cmd.partition)]


def check_section(state: MetadataState, section: ReassignmentsSection) -> str | None:
    """Why ``section`` does not fit ``state`` (a restored snapshot), or None."""
    seen: set[tuple[str, int]] = set()
    for i, r in enumerate(section.reassignments):
        key = (r.topic, r.partition)
        part = state.partition(r.topic, r.partition)
        if key in seen:
            return f"reassignments[{i}]: {r.topic}-{r.partition} twice"
        if part is None:
            return f"reassignments[{i}]: {r.topic}-{r.partition} does not exist"
        if not r.target or part.replicas != merged_replicas(r.original, r.target):
            return f"reassignments[{i}]: not the replicas of {r.topic}-{r.partition}"
        seen.add(key)
    return None
