"""Elections asked for by someone: Kafka's ElectLeaders (KIP-183 preferred, KIP-460
unclean) and a broker's controlled shutdown. Pure functions of the state and the live
brokers, returning the ``ChangePartitionLeader`` commands to propose and, for ElectLeaders,
each partition's answer as Apache Kafka's KRaft controller gives it:

- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION ("No such topic as T",
  "No such partition as T-P");
- PREFERRED: the first replica of the assignment already leads: ELECTION_NOT_NEEDED; it is
  live and in the ISR: it leads (leader epoch + 1, ISR unchanged); else
  PREFERRED_LEADER_NOT_AVAILABLE;
- UNCLEAN: the partition has a leader: ELECTION_NOT_NEEDED; else the first live ISR member
  leads, else the first live replica (ISR: just it); none: ELIGIBLE_LEADERS_NOT_AVAILABLE;
- no partitions named (null): every partition is tried and those answered
  ELECTION_NOT_NEEDED are left out (every topic is still listed).

A controlled shutdown takes the stopping broker out of every ISR and hands each partition
it leads to another live ISR member; one it is the only live ISR member of stays with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from eddy.cluster.controller.leaders import elect, leader_change
from eddy.metadata.commands import ChangePartitionLeader
from eddy.metadata.records import NO_LEADER
from eddy.metadata.state import MetadataState
from eddy.protocol.errors import ErrorCode

__all__ = [
    "PREFERRED",
    "UNCLEAN",
    "ElectionOutcome",
    "plan_elections",
    "plan_shutdown",
    "still_led",
]

PREFERRED = 0
UNCLEAN = 1

#: Kafka's default messages (``Errors.X.message()``), which its controller answers with
NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
PREFERRED_MESSAGE = "The preferred leader was not available."
ELIGIBLE_MESSAGE = "Eligible topic partition leaders are not available."


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """One partition's answer; ``command`` is what to propose for it (None: nothing)."""

    partition: int
    code: ErrorCode
    message: str | None
    command: ChangePartitionLeader | None = None


def _elect_one(state: MetadataState, live: AbstractSet[int], election_type: int,
               topic: str, index: int) -> ElectionOutcome:
    record = state.topics.get(topic)
    if record is None:
        return ElectionOutcome(index, ErrorCode.unknown_topic_or_partition,
                               f"No such topic as {topic}")
    if not 0 <= index < len(record.partitions):
        return ElectionOutcome(index, ErrorCode.unknown_topic_or_partition,
                               f"No such partition as {topic}-{index}")
    part = record.partitions[index]
    if election_type == PREFERRED:
        preferred = part.replicas[0] if part.replicas else NO_LEADER
        if part.leader == preferred and preferred != NO_LEADER:
            return ElectionOutcome(index, ErrorCode.election_not_needed, NOT_NEEDED_MESSAGE)
        if preferred == NO_LEADER or preferred not in live or preferred not in part.isr:
            return ElectionOutcome(index, ErrorCode.preferred_leader_not_available,
                                   PREFERRED_MESSAGE)
        command = leader_change(topic, index, part, preferred, part.isr)
    else:
        if part.leader != NO_LEADER:
            return ElectionOutcome(index, ErrorCode.election_not_needed, NOT_NEEDED_MESSAGE)
        leader, isr = elect(part, live, True)
        if leader == NO_LEADER:
            return ElectionOutcome(index, ErrorCode.eligible_leaders_not_available,
                                   ELIGIBLE_MESSAGE)
        command = leader_change(topic, index, part, leader, isr)
    return ElectionOutcome(index, ErrorCode.none, None, command)


def plan_elections(state: MetadataState, live: AbstractSet[int], election_type: int,
                   targets: Sequence[tuple[str, Sequence[int]]] | None
                   ) -> list[tuple[str, list[ElectionOutcome]]]:
    """Per topic (in the order asked, or by name for ``targets`` None), each partition's
    outcome. ``live``: the brokers that may lead (unfenced, session alive, not shutting
    down). A partition named twice (or in a topic named twice) gets one outcome."""
    out: list[tuple[str, list[ElectionOutcome]]] = []
    if targets is None:
        for name in state.topic_names():
            count = len(state.topics[name].partitions)
            outcomes = [o for o in (_elect_one(state, live, election_type, name, i)
                                    for i in range(count))
                        if o.code != ErrorCode.election_not_needed]
            out.append((name, outcomes))
        return out
    # one outcome per partition: a topic named twice is one entry (where it is first
    # named), a partition named twice one row (Kafka's broker reads them as a set)
    by_name: dict[str, list[ElectionOutcome]] = {}
    seen: set[tuple[str, int]] = set()
    for name, indexes in targets:
        if name not in by_name:
            by_name[name] = []
            out.append((name, by_name[name]))
        for index in indexes:
            if (name, index) not in seen:
                seen.add((name, index))
                by_name[name].append(_elect_one(state, live, election_type, name, index))
    return out


def plan_shutdown(state: MetadataState, node_id: int, live: AbstractSet[int],
                  stopping: AbstractSet[int], unclean: Callable[[str], bool]
                  ) -> list[ChangePartitionLeader]:
    """The changes that take ``node_id`` (in ``stopping``) out of every ISR and give what
    it leads to another live ISR member. ``live``: the brokers whose session is alive
    (``node_id`` and other stopping brokers included: they still serve until they exit)."""
    out: list[ChangePartitionLeader] = []
    for name, index, part in state.partitions_of(node_id):
        if node_id not in part.isr and part.leader != node_id:
            continue
        allow = not any(n in live and n not in stopping for n in part.isr) and unclean(name)
        leader, isr = elect(part, live, allow, stopping)
        command = leader_change(name, index, part, leader, isr)
        if command is not None:
            out.append(command)
    return out


def still_led(state: MetadataState, node_id: int) -> list[tuple[str, int]]:
    """The partitions ``node_id`` leads (what a controlled shutdown could not move)."""
    return [(name, index) for name, index, part in state.partitions_of(node_id)
            if part.leader == node_id]
