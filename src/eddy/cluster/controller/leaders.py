"""Leader choice and ISR on fencing, as Kafka's controller does it, and the preferred
leader rebalance. Pure functions of the state and a set of live brokers.

For each partition, given the live brokers:
- its leader is live: it stays; fenced members leave the ISR (the leader stays in it);
- its leader is not live (fenced, gone, or -1): the first replica (assignment order, so the
  preferred leader when it can) that is a live ISR member leads, leader epoch + 1, and the
  ISR is its live members;
- no ISR member is live: with ``unclean.leader.election.enable`` the first live replica
  leads (ISR: just it; records past its log end are lost), else the partition is offline:
  leader -1 and the ISR left as it was (it may not be empty, and its members are the ones
  that can lead without losing data when they come back).

Brokers in ``stopping`` (a controlled shutdown) are live but never chosen: they leave every
ISR, and a partition they lead moves to another live ISR member; one with no other live
ISR member stays with its stopping leader (it serves until it exits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet

from eddy.metadata.commands import ChangePartitionLeader
from eddy.metadata.records import NO_LEADER, PartitionRecord
from eddy.metadata.state import MetadataState

__all__ = ["elect", "leader_change", "partitions", "preferred_leader_moves", "reconcile"]


def elect(part: PartitionRecord, live: AbstractSet[int], unclean: bool,
          stopping: AbstractSet[int] = frozenset()) -> tuple[int, tuple[int, ...]]:
    """The leader and ISR ``part`` should have with ``live`` brokers, of which those in
    ``stopping`` are shutting down."""
    live_isr = tuple(n for n in part.isr if n in live)
    eligible = tuple(n for n in live_isr if n not in stopping) if stopping else live_isr
    if part.leader != NO_LEADER and part.leader in eligible:
        return part.leader, eligible
    for node in part.replicas:
        if node in eligible:
            return node, eligible
    if part.leader != NO_LEADER and part.leader in live_isr:
        return part.leader, live_isr  # a stopping leader nobody can take over from
    if unclean:
        for node in part.replicas:
            if node in live and node not in stopping:
                return node, (node,)
    return NO_LEADER, part.isr


def leader_change(topic: str, index: int, part: PartitionRecord, leader: int,
                  isr: tuple[int, ...]) -> ChangePartitionLeader | None:
    """The command that takes ``part`` to ``leader``/``isr`` (None: it already is)."""
    if leader == part.leader and isr == part.isr:
        return None
    epoch = part.leader_epoch + (1 if leader != part.leader else 0)
    return ChangePartitionLeader(topic, index, leader, epoch, isr)


def partitions(state: MetadataState) -> Iterator[tuple[str, int, PartitionRecord]]:
    """Every partition, by topic name then index."""
    for name in state.topic_names():
        topic = state.topics[name]
        for index, part in enumerate(topic.partitions):
            yield name, index, part


def reconcile(state: MetadataState, live: AbstractSet[int],
              unclean: Callable[[str], bool],
              stopping: AbstractSet[int] = frozenset()) -> list[ChangePartitionLeader]:
    """The leader/ISR changes that bring every partition in line with ``live`` (and
    ``stopping``, see the module). ``unclean(topic)`` is asked only for partitions without
    a live ISR member."""
    out: list[ChangePartitionLeader] = []
    cache: dict[str, bool] = {}
    for name, index, part in partitions(state):
        leader_ok = part.leader in live
        if leader_ok and all(n in live and n not in stopping for n in part.isr):
            continue  # the common case, no work
        allow = False
        if not leader_ok and not any(n in live and n not in stopping for n in part.isr):
            if name not in cache:
                cache[name] = unclean(name)
            allow = cache[name]
        leader, isr = elect(part, live, allow, stopping)
        command = leader_change(name, index, part, leader, isr)
        if command is not None:
            out.append(command)
    return out


def preferred_leader_moves(state: MetadataState, live: AbstractSet[int],
                           imbalance_percentage: int) -> list[ChangePartitionLeader]:
    """Kafka's auto leader rebalance: for each broker whose share of the partitions it is
    the preferred leader of (first replica) but does not lead is above
    ``imbalance_percentage``, move leadership back to it wherever it is live and in the ISR
    (leader epoch + 1, ISR unchanged)."""
    preferred: dict[int, int] = {}
    not_leading: dict[int, list[tuple[str, int, PartitionRecord]]] = {}
    for name, index, part in partitions(state):
        if not part.replicas:
            continue
        first = part.replicas[0]
        preferred[first] = preferred.get(first, 0) + 1
        if part.leader != first:
            not_leading.setdefault(first, []).append((name, index, part))
    out: list[ChangePartitionLeader] = []
    for node in sorted(not_leading):
        if node not in live:
            continue
        moves = not_leading[node]
        if len(moves) * 100 <= imbalance_percentage * preferred[node]:
            continue
        for name, index, part in moves:
            if node in part.isr:
                command = leader_change(name, index, part, node, part.isr)
                if command is not None:
                    out.append(command)
    return out
