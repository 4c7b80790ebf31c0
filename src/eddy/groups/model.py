"""The group coordinator's internal model (members, groups, timer keys) and the small
functions its layers share (Kafka's mapping of write errors, response builders)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from eddy.groups.messages import (
    GroupState,
    OffsetCommitEntry,
    OffsetCommitPartitionResponse,
    OffsetCommitResponse,
)
from eddy.groups.offsets import TopicPartition

# =============================================================================================
# internal model


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiters: list[int] = field(default_factory=list)
    sync_waiters: list[int] = field(default_factory=list)
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def vote(self, candidates: set[str]) -> str | None:
        return next((name for name, _ in self.protocols if name in candidates), None)

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return list(protocols) == self.protocols


@dataclass(eq=False, slots=True)
class Group:
    group_id: str
    state: GroupState
    state_timestamp: int | None
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    announced_leader: str | None = None  # the leader named in this generation's answers
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    initial_join: tuple[int, int] | None = None  # (delay, remaining) of the initial delayed join
    sync_generation: int = -1
    subscribed_topics: frozenset[str] | None = None
    assignment_write: int | None = None
    removal_write: int | None = None

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_waiters for m in self.members.values())

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        n = len(self.members)
        return any(
            sum(name in m.protocol_names() for m in self.members.values()) == n for name in names
        )

    def select_protocol(self) -> str | None:
        """Kafka's vote: each member votes its most preferred protocol all members support.

        Ties (Kafka: hash order) go to the protocol the first member prefers most.
        """
        members = list(self.members.values())
        if not members:
            return None
        candidates = set(members[0].protocol_names())
        for m in members[1:]:
            candidates &= set(m.protocol_names())
        if not candidates:
            return members[0].protocols[0][0] if members[0].protocols else None
        votes: dict[str, int] = {}
        for m in members:
            choice = m.vote(candidates)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        tied = {name for name, n in votes.items() if n == best}
        return next(name for name in members[0].protocol_names() if name in tied)


TimerKey = tuple[str, str, str]  # (kind, group id, member id)
RETENTION_KEY: TimerKey = ("retention", "", "")


def map_group_write_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed group-metadata append to the client's error."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (
        ErrorCode.record_list_too_large,
        ErrorCode.message_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return ErrorCode.unknown_server_error
    return error


def map_offset_write_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed offset-commit append to the client's error."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return ErrorCode.invalid_commit_offset_size
    return error


def default_uuid() -> str:
    return str(uuid.uuid4())


# =============================================================================================
# the coordinator


# =============================================================================================
# helpers


@dataclass(frozen=True, slots=True)
class JoinArgs:
    rid: int
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    api_version: int


def dedupe_protocols(protocols: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    seen: set[str] = set()
    out = []
    for name, meta in protocols:
        if name not in seen:
            seen.add(name)
            out.append((name, bytes(meta)))
    return out


def commit_response(
    offsets: Sequence[OffsetCommitEntry],
    error: ErrorCode,
    overrides: Mapping[TopicPartition, ErrorCode] | None = None,
) -> OffsetCommitResponse:
    overrides = overrides or {}
    return OffsetCommitResponse(
        tuple(
            OffsetCommitPartitionResponse(
                e.topic, e.partition, overrides.get((e.topic, e.partition), error)
            )
            for e in offsets
        )
    )


def mismatch(given: str | None, current: str | None) -> bool:
    """SyncGroup v5+: a protocol type/name the request names that is not the group's."""
    return given is not None and given != current


def or_unknown(error: ErrorCode | None) -> ErrorCode:
    return ErrorCode.unknown_server_error if error is None else error


def ignore_error(error: ErrorCode) -> None:
    """Writes nobody waits for (Kafka only logs their failure)."""
