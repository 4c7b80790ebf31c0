"""Partition commands: a leader change (the controller's election) and an ISR change (the
leader's AlterPartition)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from eddy.metadata.records import NO_LEADER, PartitionRecord
from eddy.metadata.result import Rejected
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.metadata.commands import ChangeIsr, ChangePartitionLeader
    from eddy.metadata.state import MetadataState

EPOCH_LIMIT = (1 << 31) - 1


def _check_isr(state: MetadataState, where: str, current: PartitionRecord,
               isr: tuple[int, ...]) -> None:
    """Non-empty, distinct, replicas only; members joining it must be live brokers."""
    if not isr:
        raise Rejected(ErrorCode.invalid_request, f"{where}: the ISR may not be empty")
    if len(set(isr)) != len(isr):
        raise Rejected(ErrorCode.invalid_request, f"{where}: the ISR names a broker twice")
    for node in isr:
        if node not in current.replicas:
            raise Rejected(ErrorCode.invalid_request,
                           f"{where}: ISR member {node} is not a replica")
        if node not in current.isr and not state.is_live(node):
            raise Rejected(ErrorCode.ineligible_replica,
                           f"{where}: broker {node} is fenced or not registered")


def _bump(value: int, what: str) -> int:
    if value >= EPOCH_LIMIT:
        raise Rejected(ErrorCode.invalid_request, f"{what} cannot grow past {EPOCH_LIMIT}")
    return value + 1


def change_leader(state: MetadataState, cmd: ChangePartitionLeader) -> int:
    """1 if the partition changed, 0 if it already was so."""
    current = state.require_partition(cmd.topic, cmd.partition)
    where = f"{cmd.topic}-{cmd.partition}"
    _check_isr(state, where, current, cmd.isr)
    if cmd.leader != NO_LEADER:
        if cmd.leader not in cmd.isr:
            raise Rejected(ErrorCode.invalid_request,
                           f"{where}: leader {cmd.leader} is not in the ISR")
        if not state.is_live(cmd.leader):
            raise Rejected(ErrorCode.ineligible_replica,
                           f"{where}: leader {cmd.leader} is fenced or not registered")
    moved = cmd.leader != current.leader
    expected = _bump(current.leader_epoch, "leader epoch") if moved else current.leader_epoch
    if cmd.leader_epoch < expected:
        raise Rejected(ErrorCode.fenced_leader_epoch,
                       f"{where}: leader epoch {cmd.leader_epoch} is stale (expected {expected})")
    if cmd.leader_epoch > expected:
        raise Rejected(ErrorCode.unknown_leader_epoch,
                       f"{where}: leader epoch {cmd.leader_epoch} is ahead (expected {expected})")
    if not moved and cmd.isr == current.isr:
        return 0
    state.set_partition(cmd.topic, cmd.partition, dataclasses.replace(
        current, leader=cmd.leader, leader_epoch=expected, isr=cmd.isr,
        partition_epoch=_bump(current.partition_epoch, "partition epoch"),
    ))
    return 1


def change_isr(state: MetadataState, cmd: ChangeIsr) -> None:
    current = state.require_partition(cmd.topic, cmd.partition)
    where = f"{cmd.topic}-{cmd.partition}"
    if cmd.partition_epoch != current.partition_epoch:
        raise Rejected(
            ErrorCode.invalid_update_version,
            f"{where}: partition epoch {cmd.partition_epoch} is not the current "
            f"{current.partition_epoch}",
        )
    if current.leader == NO_LEADER:
        raise Rejected(ErrorCode.invalid_request, f"{where}: the partition has no leader")
    _check_isr(state, where, current, cmd.isr)
    if current.leader not in cmd.isr:
        raise Rejected(ErrorCode.invalid_request,
                       f"{where}: the ISR must keep the leader {current.leader}")
    state.set_partition(cmd.topic, cmd.partition, dataclasses.replace(
        current, isr=cmd.isr,
        partition_epoch=_bump(current.partition_epoch, "partition epoch"),
    ))
