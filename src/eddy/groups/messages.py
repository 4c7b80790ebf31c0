"""The group coordinator's vocabulary: its config and states, the responses it gives, the
records it asks to write (``Write``), the events it reports and the ``Step`` of each call."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from eddy.groups.records import (
    Record,
)

CONSUMER_PROTOCOL_TYPE = "consumer"
CLASSIC_GROUP_TYPE = "classic"
NONE = ErrorCode.none


# =============================================================================================
# configuration and states


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Coordinator settings (Kafka's broker config names in the comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 0  # group.initial.rebalance.delay.ms (Kafka: 3000)
    max_size: int = 2**31 - 1  # group.max.size
    new_member_join_timeout_ms: int = 300_000  # Kafka's NewMemberJoinTimeoutMs
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# =============================================================================================
# responses (exactly the fields of the Kafka responses, minus throttle time)


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None  # v0-v6 write "" for None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()  # the leader's response only
    skip_assignment: bool = False  # v9+


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: ErrorCode
    members: tuple[LeaveGroupMemberResponse, ...] = ()

    @property
    def legacy_error_code(self) -> ErrorCode:
        """The top-level error for LeaveGroup v0-v2 (one member per request)."""
        if self.error_code != NONE:
            return self.error_code
        return next((m.error_code for m in self.members if m.error_code != NONE), NONE)


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_timestamp: int = -1  # OffsetCommit v1 only; -1 = now


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    partitions: tuple[OffsetCommitPartitionResponse, ...]

    def by_topic(self) -> dict[str, list[tuple[int, ErrorCode]]]:
        out: dict[str, list[tuple[int, ErrorCode]]] = {}
        for p in self.partitions:
            out.setdefault(p.topic, []).append((p.partition, p.error_code))
        return out


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    topic: str
    partition: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: ErrorCode
    partitions: tuple[OffsetFetchPartition, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: ErrorCode
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: ErrorCode
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[tuple[str, ErrorCode], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeletePartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error_code: ErrorCode
    partitions: tuple[OffsetDeletePartitionResponse, ...] = ()


Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
)


@dataclass(frozen=True, slots=True)
class Write:
    """Records to append, as one batch, to the ``__consumer_offsets`` partition of the group."""

    write_id: int
    group_id: str
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """Something worth a trace span or a metric; never needs an answer.

    ``kind`` is ``"rebalance-complete"`` (``detail``: the leader id; the seed's
    ``coordinator.rebalance-complete`` span), ``"member-removed"`` (``member_id``; ``detail``:
    ``leave``, ``session-timeout``, ``join-timeout`` (a new member waited too long),
    ``rebalance-timeout`` or ``sync-timeout``) or ``"group-removed"`` (``detail``:
    ``deleted`` or ``expired``).
    """

    kind: str
    group_id: str
    generation_id: int
    member_id: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Step:
    """What one call produced: completed responses, records to write, events."""

    request_id: int | None
    responses: tuple[tuple[int, Response], ...] = ()
    writes: tuple[Write, ...] = ()
    events: tuple[GroupEvent, ...] = ()

    def response_to(self, request_id: int | None = None) -> Response | None:
        """The response to ``request_id`` (default: this step's request) if it completed."""
        rid = self.request_id if request_id is None else request_id
        return next((r for i, r in self.responses if i == rid), None)


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes
    awaiting_join: bool
    awaiting_sync: bool


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A read-only view of one group (tests, metrics, the dashboard)."""

    group_id: str
    state: GroupState
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberSnapshot, ...]
    pending_member_ids: tuple[str, ...]
    state_timestamp: int | None
