"""The classic-protocol group coordinator: a sans-IO state machine for every group.

Nothing here does I/O, reads a clock or blocks. Each call takes ``now_ms`` (injected time,
never decreasing) and returns a :class:`Step`:

- ``Step.request_id``: the id given to the request just submitted (``None`` for
  :meth:`GroupCoordinator.poll` and :meth:`GroupCoordinator.write_completed`);
- ``Step.responses``: ``(request_id, response)`` pairs completed by this call. They may
  answer the request just submitted or any earlier one that was waiting (a JoinGroup waiting
  for the other members, a follower's SyncGroup waiting for the leader, an OffsetCommit
  waiting for its records to be durable...). Every request id gets exactly one response.
- ``Step.writes``: :class:`Write` s whose records the adapter appends, each as one batch, to
  the ``__consumer_offsets`` partition of ``Write.group_id`` (:func:`records.partition_for`),
  then reports with :meth:`GroupCoordinator.write_completed` (``ErrorCode.none`` or the
  append's error). A response that depends on records (OffsetCommit, the SyncGroup answers
  of a generation, a static member's replacement, DeleteGroups, OffsetDelete) is only
  released by that report, so a client is acknowledged only once the records are durable.
  Offsets become visible only once durable (see :mod:`eddy.groups.offsets`); group
  membership changes apply at once, as in Kafka, and a failed write is handled as Kafka does
  (a failed assignment write sends the error to the members and rebalances, a failed static
  replacement is reverted, a failed deletion leaves the group Empty).
- ``Step.events``: :class:`GroupEvent` s for traces and metrics (a rebalance completed, a
  member was removed and why, a group was removed); nothing waits on them.

Timers: before handling a request and after it, every timer due at or before ``now_ms``
fires (in deadline order, each acting as if at its deadline). The adapter calls
:meth:`GroupCoordinator.poll` at :meth:`GroupCoordinator.next_deadline` (and may call it any
time). Read-only calls (describe, list, offset fetch) return their response directly and do
not run timers.

Public API (all in this module)::

    GroupCoordinator(config=GroupConfig(), uuid_factory=...)
      .join_group(now_ms, *, group_id, member_id, client_id, client_host, session_timeout_ms,
                  rebalance_timeout_ms, protocol_type, protocols, group_instance_id=None,
                  api_version=9) -> Step                       # JoinGroupResponse, maybe later
      .sync_group(now_ms, *, group_id, generation_id, member_id, assignments=(),
                  group_instance_id=None, protocol_type=None, protocol_name=None) -> Step
      .heartbeat(now_ms, *, group_id, generation_id, member_id, group_instance_id=None)
      .leave_group(now_ms, *, group_id, members=[(member_id, group_instance_id), ...])
      .commit_offsets(now_ms, *, group_id, offsets, generation_id=-1, member_id="",
                      group_instance_id=None, retention_time_ms=-1, api_version=9) -> Step
      .fetch_offsets(group_id, partitions=None) -> OffsetFetchResponse
      .delete_offsets(now_ms, *, group_id, partitions) -> Step   # OffsetDelete
      .describe_groups(group_ids) -> list[DescribedGroup]
      .list_groups(states_filter=(), types_filter=()) -> ListGroupsResponse
      .delete_groups(now_ms, group_ids) -> Step
      .write_completed(now_ms, write_id, error=ErrorCode.none) -> Step
      .poll(now_ms) -> Step;  .next_deadline() -> int | None
      .replay(key, value) -> bool      # rebuild from __consumer_offsets after a restart
      .snapshot(group_id) -> GroupSnapshot | None;  .committed_offsets(group_id)
      .group_ids();  .pending_request_ids();  .pending_write_ids()

Kafka's behaviour (the classic ``GroupCoordinator``/``GroupMetadata``) is the reference.
Member ids are ``f"{client_id}-{uuid}"`` (``f"{group_instance_id}-{uuid}"`` for static
members, as Kafka); ``uuid_factory`` makes them deterministic in tests. Deliberate
departures, each where Kafka is racy, leaks a request or depends on hash order:

- every request gets exactly one answer: requests still waiting for a member that is
  removed get UNKNOWN_MEMBER_ID (FENCED_INSTANCE_ID when a static member is replaced), and a
  member that repeats a JoinGroup/SyncGroup while waiting gets the answer on every copy;
- protocol votes that tie go to the first member's preference (Kafka: hash-map order);
- every JoinGroup answer of a generation names the same leader (Kafka can name an
  intermediate id after two replacements of a static leader in a row);
- DeleteGroups and OffsetDelete are answered once their tombstones are durable; meanwhile
  a deleted group is Dead (Kafka's transient Dead state), and if the write fails it is Empty
  again and the error is returned;
- a group created by a request that failed (bad protocol, too-large metadata...) is
  forgotten at once rather than at the next retention check;
- GROUP_MAX_SIZE_REACHED only refuses new members; a rebalance timeout of 0 cannot make a
  timer fire forever at one instant.
"""

from __future__ import annotations

import enum
import heapq
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from eddy.groups.offsets import OffsetStore, TopicPartition
from eddy.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetAndMetadata,
    OffsetCommitKey,
    Record,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    parse_subscription_topics,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "DeleteGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "GroupConfig",
    "GroupCoordinator",
    "GroupEvent",
    "GroupSnapshot",
    "GroupState",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupResponse",
    "LeaveGroupMemberResponse",
    "LeaveGroupResponse",
    "ListGroupsResponse",
    "ListedGroup",
    "MemberSnapshot",
    "OffsetCommitEntry",
    "OffsetCommitPartitionResponse",
    "OffsetCommitResponse",
    "OffsetDeletePartitionResponse",
    "OffsetDeleteResponse",
    "OffsetFetchPartition",
    "OffsetFetchResponse",
    "Response",
    "Step",
    "SyncGroupResponse",
    "Write",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
CLASSIC_GROUP_TYPE = "classic"
_NONE = ErrorCode.none


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
        if self.error_code != _NONE:
            return self.error_code
        return next((m.error_code for m in self.members if m.error_code != _NONE), _NONE)


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


# =============================================================================================
# internal model


@dataclass(eq=False, slots=True)
class _Member:
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
class _Group:
    group_id: str
    state: GroupState
    state_timestamp: int | None
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    announced_leader: str | None = None  # the leader named in this generation's answers
    members: dict[str, _Member] = field(default_factory=dict)
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


_TimerKey = tuple[str, str, str]  # (kind, group id, member id)
_RETENTION_KEY: _TimerKey = ("retention", "", "")


def _map_group_write_error(error: ErrorCode) -> ErrorCode:
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


def _map_offset_write_error(error: ErrorCode) -> ErrorCode:
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


def _default_uuid() -> str:
    return str(uuid.uuid4())


# =============================================================================================
# the coordinator


class GroupCoordinator:
    """Every classic group of this coordinator, their timers and their committed offsets."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        uuid_factory: Callable[[], str] = _default_uuid,
    ) -> None:
        self.config = config or GroupConfig()
        self._uuid = uuid_factory
        self._groups: dict[str, _Group] = {}
        self._offsets = OffsetStore()
        self._now = -(2**62)
        self._next_request_id = 1
        self._next_write_id = 1
        self._outstanding: set[int] = set()
        self._responses: list[tuple[int, Response]] = []
        self._writes: list[Write] = []
        self._events: list[GroupEvent] = []
        self._write_callbacks: dict[int, Callable[[ErrorCode], None]] = {}
        self._timers: dict[_TimerKey, int] = {}
        self._heap: list[tuple[int, int, _TimerKey]] = []
        self._timer_seq = 0
        self._loaded_unscheduled: set[str] = set()

    # ------------------------------------------------------------------------------------------
    # plumbing: steps, responses, writes, timers

    def _begin(self, now_ms: int, new_request: bool = True) -> int | None:
        if self._responses or self._writes or self._events:  # pragma: no cover - defensive
            raise RuntimeError("re-entrant call into GroupCoordinator")
        self._advance(now_ms)
        if not new_request:
            return None
        rid = self._next_request_id
        self._next_request_id += 1
        self._outstanding.add(rid)
        return rid

    def _finish(self, rid: int | None) -> Step:
        self._advance(self._now)
        step = Step(rid, tuple(self._responses), tuple(self._writes), tuple(self._events))
        self._responses.clear()
        self._writes.clear()
        self._events.clear()
        return step

    def _respond(self, rid: int, response: Response) -> None:
        if rid in self._outstanding:
            self._outstanding.discard(rid)
            self._responses.append((rid, response))

    def _alloc_write_id(self) -> int:
        wid = self._next_write_id
        self._next_write_id += 1
        return wid

    def _emit_write(
        self,
        wid: int,
        group_id: str,
        records: Sequence[Record],
        callback: Callable[[ErrorCode], None],
    ) -> None:
        self._writes.append(Write(wid, group_id, tuple(records)))
        self._write_callbacks[wid] = callback

    def _set_timer(self, key: _TimerKey, deadline: int) -> None:
        self._timers[key] = deadline
        self._timer_seq += 1
        heapq.heappush(self._heap, (deadline, self._timer_seq, key))

    def _cancel_timer(self, key: _TimerKey) -> None:
        self._timers.pop(key, None)

    def _schedule_heartbeat(self, group: _Group, member: _Member, timeout_ms: int) -> None:
        self._set_timer(("hb", group.group_id, member.member_id), self._now + timeout_ms)

    def _cancel_group_timers(self, group: _Group) -> None:
        gid = group.group_id
        self._cancel_timer(("join", gid, ""))
        self._cancel_timer(("sync", gid, ""))
        for mid in group.members:
            self._cancel_timer(("hb", gid, mid))
        for mid in group.pending_members:
            self._cancel_timer(("pending", gid, mid))

    def _peek_deadline(self) -> int | None:
        while self._heap:
            deadline, _, key = self._heap[0]
            if self._timers.get(key) == deadline:
                return deadline
            heapq.heappop(self._heap)
        return None

    def _advance(self, now_ms: int) -> None:
        target = max(now_ms, self._now)
        if self._loaded_unscheduled:
            self._schedule_loaded(target)
        if _RETENTION_KEY not in self._timers:
            interval = self.config.offsets_retention_check_interval_ms
            self._set_timer(_RETENTION_KEY, target + interval)
        while True:
            deadline = self._peek_deadline()
            if deadline is None or deadline > target:
                break
            _, _, key = heapq.heappop(self._heap)
            del self._timers[key]
            self._now = max(self._now, deadline)
            self._fire(key)
        self._now = target

    def _fire(self, key: _TimerKey) -> None:
        kind, gid, mid = key
        if kind == "retention":
            self._expire_offsets()
            interval = self.config.offsets_retention_check_interval_ms
            self._set_timer(_RETENTION_KEY, self._now + interval)
            return
        group = self._groups.get(gid)
        if group is None or group.state is GroupState.DEAD:
            return
        if kind == "hb":
            self._on_heartbeat_expired(group, mid)
        elif kind == "pending":
            self._on_pending_member_expired(group, mid)
        elif kind == "join":
            self._on_join_timer(group)
        elif kind == "sync":
            self._on_sync_timer(group)

    def _transition(self, group: _Group, state: GroupState) -> None:
        group.state = state
        group.state_timestamp = self._now

    # ------------------------------------------------------------------------------------------
    # public: time and writes

    def poll(self, now_ms: int) -> Step:
        """Fire every timer due at or before ``now_ms``."""
        self._begin(now_ms, new_request=False)
        return self._finish(None)

    def next_deadline(self) -> int | None:
        """The earliest pending timer (ms), or None; call :meth:`poll` then."""
        return self._peek_deadline()

    def write_completed(
        self, now_ms: int, write_id: int, error: ErrorCode = ErrorCode.none
    ) -> Step:
        """The records of ``write_id`` are durable (``none``) or failed to append (``error``)."""
        self._begin(now_ms, new_request=False)
        callback = self._write_callbacks.pop(write_id, None)
        if callback is not None:
            callback(error)
        return self._finish(None)

    def pending_request_ids(self) -> set[int]:
        """Requests not answered yet."""
        return set(self._outstanding)

    def pending_write_ids(self) -> set[int]:
        return set(self._write_callbacks)

    # ------------------------------------------------------------------------------------------
    # JoinGroup

    def join_group(
        self,
        now_ms: int,
        *,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        group_instance_id: str | None = None,
        api_version: int = 9,
    ) -> Step:
        """JoinGroup. The response may come in a later step (when the rebalance completes).

        ``rebalance_timeout_ms`` < 0 (JoinGroup v0) means the session timeout. With
        ``api_version`` >= 4 a dynamic member with an empty member id first gets
        MEMBER_ID_REQUIRED and its new id. Departures from Kafka: a request that finds the
        group full is refused (GROUP_MAX_SIZE_REACHED) only if it is from a new member; a
        pending (MEMBER_ID_REQUIRED) member rejoining with a group instance id gets
        UNKNOWN_MEMBER_ID (Kafka: an internal error).
        """
        rid = self._begin(now_ms)
        assert rid is not None
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        protocols = _dedupe_protocols(protocols)
        if not group_id:
            self._respond(rid, JoinGroupResponse(ErrorCode.invalid_group_id, member_id=member_id))
            return self._finish(rid)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            self._respond(
                rid, JoinGroupResponse(ErrorCode.invalid_session_timeout, member_id=member_id)
            )
            return self._finish(rid)
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                self._respond(
                    rid, JoinGroupResponse(ErrorCode.unknown_member_id, member_id=member_id)
                )
                return self._finish(rid)
            group = _Group(group_id, GroupState.EMPTY, self._now)
            self._groups[group_id] = group
        args = _JoinArgs(
            rid, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, protocols, api_version,
        )
        is_new = not member_id or member_id in group.pending_members
        full = len(group.members) + len(group.pending_members) >= cfg.max_size
        if not member_id and full and group.state is not GroupState.DEAD:
            self._respond(rid, JoinGroupResponse(ErrorCode.group_max_size_reached))
        elif not member_id:
            self._join_new_member(group, args)
        else:
            self._join_known_member(group, args)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        if is_new:
            self._drop_if_unused(group)
        return self._finish(rid)

    def _join_new_member(self, group: _Group, a: _JoinArgs) -> None:
        if group.state is GroupState.DEAD:
            self._respond(a.rid, JoinGroupResponse(ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(a.protocol_type, (n for n, _ in a.protocols)):
            self._respond(a.rid, JoinGroupResponse(ErrorCode.inconsistent_group_protocol))
            return
        if a.group_instance_id is not None:
            new_id = f"{a.group_instance_id}-{self._uuid()}"
            old_id = group.static_members.get(a.group_instance_id)
            if old_id is not None:
                self._update_static_member(group, old_id, new_id, a)
            else:
                self._add_member_and_rebalance(group, new_id, a)
            return
        new_id = f"{a.client_id}-{self._uuid()}"
        if a.api_version >= 4:
            group.pending_members.add(new_id)
            self._set_timer(("pending", group.group_id, new_id), self._now + a.session_timeout_ms)
            self._respond(
                a.rid, JoinGroupResponse(ErrorCode.member_id_required, member_id=new_id)
            )
        else:
            self._add_member_and_rebalance(group, new_id, a)

    def _join_known_member(self, group: _Group, a: _JoinArgs) -> None:
        mid = a.member_id
        if group.state is GroupState.DEAD:
            self._respond(
                a.rid, JoinGroupResponse(ErrorCode.coordinator_not_available, member_id=mid)
            )
            return
        if not group.supports_protocols(a.protocol_type, (n for n, _ in a.protocols)):
            self._respond(
                a.rid, JoinGroupResponse(ErrorCode.inconsistent_group_protocol, member_id=mid)
            )
            return
        if mid in group.pending_members:
            if a.group_instance_id is not None:
                self._respond(
                    a.rid, JoinGroupResponse(ErrorCode.unknown_member_id, member_id=mid)
                )
            else:
                self._add_member_and_rebalance(group, mid, a)
            return
        error = self._validate_member(group, mid, a.group_instance_id)
        if error is not None:
            self._respond(a.rid, JoinGroupResponse(error, member_id=mid))
            return
        member = group.members[mid]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, a)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(a.protocols):
                # The member lost the JoinGroup response: answer again for this generation.
                self._respond(
                    a.rid, self._join_response(group, mid, with_members=group.leader_id == mid)
                )
            else:
                self._update_member_and_rebalance(group, member, a)
        elif state is GroupState.STABLE:
            if group.leader_id == mid or not member.matches(a.protocols):
                # The leader rejoining forces a rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, a)
            else:
                self._respond(a.rid, self._join_response(group, mid, with_members=False))
        else:
            self._respond(a.rid, JoinGroupResponse(ErrorCode.unknown_member_id, member_id=mid))

    def _join_response(
        self,
        group: _Group,
        member_id: str,
        *,
        with_members: bool,
        leader: str | None = None,
        skip_assignment: bool = False,
    ) -> JoinGroupResponse:
        members: tuple[JoinGroupMember, ...] = ()
        if with_members:
            members = tuple(
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            )
        return JoinGroupResponse(
            _NONE,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.announced_leader if leader is None else leader) or "",
            member_id=member_id,
            members=members,
            skip_assignment=skip_assignment,
        )

    def _add_member_and_rebalance(self, group: _Group, member_id: str, a: _JoinArgs) -> None:
        member = _Member(
            member_id, a.group_instance_id, a.client_id, a.client_host, a.rebalance_timeout_ms,
            a.session_timeout_ms, a.protocol_type, list(a.protocols), join_waiters=[a.rid],
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        if not group.members:
            group.protocol_type = a.protocol_type
        if group.leader_id is None:
            group.leader_id = member_id
        group.members[member_id] = member
        if a.group_instance_id is not None:
            group.static_members[a.group_instance_id] = member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel_timer(("pending", group.group_id, member_id))
        # A new member cannot heartbeat until it has joined: Kafka times out its JoinGroup.
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group: _Group, member: _Member, a: _JoinArgs) -> None:
        member.protocols = list(a.protocols)
        member.rebalance_timeout_ms = a.rebalance_timeout_ms
        member.session_timeout_ms = a.session_timeout_ms
        member.join_waiters.append(a.rid)
        self._maybe_prepare_rebalance(group)

    def _update_static_member(self, group: _Group, old_id: str, new_id: str, a: _JoinArgs) -> None:
        """A static member rejoined with an empty member id: it takes over its old entry.

        Before JoinGroup v9 the answer names the leader announced for the generation (Kafka:
        the leader id at the time of the replacement, which differs after two replacements
        of a static leader in a row).
        """
        current_leader = group.announced_leader
        member = self._replace_static_member(group, old_id, new_id)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = list(a.protocols)
        member.rebalance_timeout_ms = a.rebalance_timeout_ms
        member.session_timeout_ms = a.session_timeout_ms
        member.join_waiters.append(a.rid)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.state is GroupState.STABLE:
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(group)
                return
            # No rebalance: persist the new member id, then answer with the current generation.
            assignment = {mid: m.assignment for mid, m in group.members.items()}
            wid = self._alloc_write_id()
            generation = group.generation
            record = self._group_metadata_record(group, assignment)

            def done(error: ErrorCode) -> None:
                current = self._groups.get(group.group_id) is group and (
                    group.members.get(new_id) is member and group.generation == generation
                )
                if not current or a.rid not in member.join_waiters:
                    return
                if error != _NONE:
                    member.join_waiters.remove(a.rid)
                    self._respond(
                        a.rid,
                        JoinGroupResponse(
                            _map_group_write_error(error),
                            generation_id=group.generation,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=current_leader or "",
                        ),
                    )
                    reverted = self._replace_static_member(group, new_id, old_id)
                    reverted.protocols, reverted.rebalance_timeout_ms = old[0], old[1]
                    reverted.session_timeout_ms = old[2]
                    self._schedule_heartbeat(group, reverted, reverted.session_timeout_ms)
                elif group.state is GroupState.STABLE:
                    member.join_waiters.remove(a.rid)
                    if a.api_version >= 9:
                        # v9+: the leader learns it leads, but skips running the assignor.
                        is_leader = group.leader_id == new_id
                        resp = self._join_response(
                            group,
                            new_id,
                            with_members=is_leader,
                            leader=group.leader_id or "",
                            skip_assignment=is_leader,
                        )
                    else:
                        # Before v9 the old leader id is returned so that a restarted leader
                        # does not compute an assignment a stable group would ignore.
                        resp = self._join_response(
                            group, new_id, with_members=False, leader=current_leader or ""
                        )
                    self._respond(a.rid, resp)

            self._emit_write(wid, group.group_id, [record], done)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: rebalance again.
            self._prepare_rebalance(group)

    def _replace_static_member(self, group: _Group, old_id: str, new_id: str) -> _Member:
        member = group.members[old_id]
        for rid in member.join_waiters:
            self._respond(rid, JoinGroupResponse(ErrorCode.fenced_instance_id, member_id=old_id))
        for rid in member.sync_waiters:
            self._respond(rid, SyncGroupResponse(ErrorCode.fenced_instance_id))
        member.join_waiters.clear()
        member.sync_waiters.clear()
        self._cancel_timer(("hb", group.group_id, old_id))
        member.member_id = new_id
        group.members = {(new_id if k == old_id else k): v for k, v in group.members.items()}
        if group.leader_id == old_id:
            group.leader_id = new_id
        assert member.group_instance_id is not None
        group.static_members[member.group_instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        return member

    def _validate_member(
        self, group: _Group, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's ``validateCurrentMember``: instance id maps to member id, member exists."""
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
            return None
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        return None

    # ------------------------------------------------------------------------------------------
    # rebalance

    def _maybe_prepare_rebalance(self, group: _Group) -> None:
        if group.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        ):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: _Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel_timer(("sync", group.group_id, ""))
        group.assignment_write = None
        timeout = group.rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_join = (delay, max(timeout - delay, 0))
            group.new_member_added = False
        else:
            delay = timeout
            group.initial_join = None
        self._transition(group, GroupState.PREPARING_REBALANCE)
        self._set_timer(("join", group.group_id, ""), self._now + delay)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: _Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_join is None
            and group.all_joined()
        ):
            self._complete_join(group)

    def _on_join_timer(self, group: _Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.initial_join is not None:
            delay, remaining = group.initial_join
            if group.new_member_added and remaining != 0:
                # Members keep arriving: wait another delay, up to the rebalance timeout.
                group.new_member_added = False
                next_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                group.initial_join = (next_delay, max(remaining - delay, 0))
                self._set_timer(("join", group.group_id, ""), self._now + next_delay)
                return
            group.initial_join = None
        self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        self._cancel_timer(("join", group.group_id, ""))
        group.initial_join = None
        for member in list(group.members.values()):
            if not member.join_waiters and member.group_instance_id is None:
                self._remove_member_raw(group, member, "rebalance-timeout")
        if not self._elect_joined_leader(group) and group.members:
            # Only static members that did not rejoin are left: wait for them again (at least
            # 1 ms, so that a zero rebalance timeout cannot spin at one instant).
            wait = max(group.rebalance_timeout_ms(), 1)
            self._set_timer(("join", group.group_id, ""), self._now + wait)
            return
        group.generation += 1
        group.pending_sync.clear()
        group.announced_leader = group.leader_id
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = self._subscribed_topics(group)
            self._transition(group, GroupState.COMPLETING_REBALANCE)
            self._event("rebalance-complete", group, detail=group.leader_id or "")
        else:
            group.protocol_name = None
            group.subscribed_topics = self._subscribed_topics(group)
            self._transition(group, GroupState.EMPTY)
            # Persist the empty generation; a failure only warns in Kafka: nothing waits on it.
            record = self._group_metadata_record(group, {})
            self._emit_write(self._alloc_write_id(), group.group_id, [record], _ignore_error)
            return
        for member in group.members.values():
            response = self._join_response(
                group, member.member_id, with_members=group.leader_id == member.member_id
            )
            for rid in member.join_waiters:
                self._respond(rid, response)
            member.join_waiters.clear()
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_generation = group.generation
        self._set_timer(("sync", group.group_id, ""), self._now + group.rebalance_timeout_ms())

    def _elect_joined_leader(self, group: _Group) -> bool:
        """Keep the leader if it rejoined, else the first member that did (Kafka)."""
        if group.leader_id is None:
            return False
        leader = group.members.get(group.leader_id)
        if leader is not None and leader.join_waiters:
            return True
        for member in group.members.values():
            if member.join_waiters:
                group.leader_id = member.member_id
                return True
        return False

    def _subscribed_topics(self, group: _Group) -> frozenset[str] | None:
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not group.members:
            return frozenset()
        if group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            parsed = parse_subscription_topics(member.metadata(group.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return frozenset(topics)

    def _on_sync_timer(self, group: _Group) -> None:
        """Members that did not send SyncGroup within the rebalance timeout are removed."""
        if group.generation != group.sync_generation or not group.pending_sync:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for mid in list(group.pending_sync):
            member = group.members.get(mid)
            if member is not None:
                self._remove_member_raw(group, member, "sync-timeout")
        self._prepare_rebalance(group)

    def _reset_and_propagate_assignment_error(self, group: _Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: _Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if not member.sync_waiters:
                continue
            if error == _NONE:
                response = SyncGroupResponse(
                    _NONE, group.protocol_type, group.protocol_name, member.assignment
                )
            else:
                response = SyncGroupResponse(error)
            for rid in member.sync_waiters:
                self._respond(rid, response)
            member.sync_waiters.clear()
            # Its session may have expired while it waited: start a fresh one.
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    # ------------------------------------------------------------------------------------------
    # member removal and expiry

    def _event(self, kind: str, group: _Group, member_id: str = "", detail: str = "") -> None:
        self._events.append(GroupEvent(kind, group.group_id, group.generation, member_id, detail))

    def _remove_member_raw(self, group: _Group, member: _Member, reason: str) -> None:
        """Drop a member; any request it still has waiting gets UNKNOWN_MEMBER_ID."""
        mid = member.member_id
        self._event("member-removed", group, mid, reason)
        for rid in member.join_waiters:
            self._respond(rid, JoinGroupResponse(ErrorCode.unknown_member_id))
        for rid in member.sync_waiters:
            self._respond(rid, SyncGroupResponse(ErrorCode.unknown_member_id))
        member.join_waiters.clear()
        member.sync_waiters.clear()
        del group.members[mid]
        instance_id = member.group_instance_id
        if instance_id is not None and group.static_members.get(instance_id) == mid:
            del group.static_members[instance_id]
        if group.leader_id == mid:
            group.leader_id = next(iter(group.members), None)
        group.pending_sync.discard(mid)
        self._cancel_timer(("hb", group.group_id, mid))
        if not group.pending_sync:
            self._cancel_timer(("sync", group.group_id, ""))

    def _remove_member(self, group: _Group, member: _Member, reason: str) -> None:
        """Kafka's ``removeMemberAndUpdateGroup``: remove, then rebalance or finish the join."""
        self._remove_member_raw(group, member, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    def _on_heartbeat_expired(self, group: _Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.join_waiters or member.sync_waiters):
            # A member waiting in JoinGroup or SyncGroup needs no heartbeat (Kafka).
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return
        self._remove_member(group, member, "join-timeout" if member.is_new else "session-timeout")

    def _on_pending_member_expired(self, group: _Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)

    # ------------------------------------------------------------------------------------------
    # SyncGroup

    def sync_group(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Sequence[tuple[str, bytes]] = (),
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Step:
        """SyncGroup. Followers wait for the leader; everyone is answered once the leader's
        assignment is durable. Members missing from the assignment get empty bytes."""
        rid = self._begin(now_ms)
        assert rid is not None
        group = self._groups.get(group_id)
        error: ErrorCode | None = None
        if not group_id:
            error = ErrorCode.invalid_group_id
        elif group is None:
            error = ErrorCode.unknown_member_id
        elif group.state is GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        else:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is None:
                if generation_id != group.generation:
                    error = ErrorCode.illegal_generation
                elif _mismatch(protocol_type, group.protocol_type) or _mismatch(
                    protocol_name, group.protocol_name
                ):
                    error = ErrorCode.inconsistent_group_protocol
                elif group.state is GroupState.EMPTY:
                    error = ErrorCode.unknown_member_id
                elif group.state is GroupState.PREPARING_REBALANCE:
                    error = ErrorCode.rebalance_in_progress
        if error is not None or group is None:
            self._respond(rid, SyncGroupResponse(_or_unknown(error)))
            return self._finish(rid)
        member = group.members[member_id]
        self._synced(group, member_id)
        if group.state is GroupState.STABLE:
            self._respond(
                rid,
                SyncGroupResponse(
                    _NONE, group.protocol_type, group.protocol_name, member.assignment
                ),
            )
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return self._finish(rid)
        # CompletingRebalance
        member.sync_waiters.append(rid)
        if group.leader_id == member_id and group.assignment_write is None:
            given = dict(assignments)
            assignment = {mid: given.get(mid, b"") for mid in group.members}
            record = self._group_metadata_record(group, assignment)
            wid = self._alloc_write_id()
            group.assignment_write = wid
            generation = group.generation

            def done(error: ErrorCode) -> None:
                if (
                    self._groups.get(group.group_id) is not group
                    or group.assignment_write != wid
                    or group.state is not GroupState.COMPLETING_REBALANCE
                    or group.generation != generation
                ):
                    return
                group.assignment_write = None
                if error != _NONE:
                    self._reset_and_propagate_assignment_error(
                        group, _map_group_write_error(error)
                    )
                    self._maybe_prepare_rebalance(group)
                    return
                for mid, m in group.members.items():
                    m.assignment = assignment.get(mid, b"")
                self._propagate_assignment(group, _NONE)
                self._transition(group, GroupState.STABLE)

            self._emit_write(wid, group_id, [record], done)
        return self._finish(rid)

    def _synced(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_timer(("sync", group.group_id, ""))

    # ------------------------------------------------------------------------------------------
    # Heartbeat, LeaveGroup

    def heartbeat(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> Step:
        """Heartbeat: always answered in the same step."""
        rid = self._begin(now_ms)
        assert rid is not None
        error = self._heartbeat(group_id, generation_id, member_id, group_instance_id)
        self._respond(rid, HeartbeatResponse(error))
        return self._finish(rid)

    def _heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation:
            return ErrorCode.illegal_generation
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return _NONE

    def leave_group(
        self,
        now_ms: int,
        *,
        group_id: str,
        members: Sequence[tuple[str, str | None]],
    ) -> Step:
        """LeaveGroup for ``(member_id, group_instance_id)`` pairs (one pair for v0-v2).

        An empty member id with an instance id removes that static member (admin removal).
        """
        rid = self._begin(now_ms)
        assert rid is not None
        group = self._groups.get(group_id)
        if not group_id:
            self._respond(rid, LeaveGroupResponse(ErrorCode.invalid_group_id))
            return self._finish(rid)
        if group is None:
            self._respond(
                rid,
                LeaveGroupResponse(
                    _NONE,
                    tuple(
                        LeaveGroupMemberResponse(m, i, ErrorCode.unknown_member_id)
                        for m, i in members
                    ),
                ),
            )
            return self._finish(rid)
        if group.state is GroupState.DEAD:
            self._respond(rid, LeaveGroupResponse(ErrorCode.coordinator_not_available))
            return self._finish(rid)
        results = []
        for mid, instance_id in members:
            error: ErrorCode | None
            if not mid:
                current = group.static_members.get(instance_id) if instance_id else None
                if current is None:
                    error = ErrorCode.unknown_member_id
                else:
                    self._remove_member(group, group.members[current], "leave")
                    error = _NONE
            elif mid in group.pending_members:
                group.pending_members.discard(mid)
                self._cancel_timer(("pending", group.group_id, mid))
                self._maybe_complete_join(group)
                error = _NONE
            else:
                error = self._validate_member(group, mid, instance_id)
                if error is None:
                    self._remove_member(group, group.members[mid], "leave")
                    error = _NONE
            results.append(LeaveGroupMemberResponse(mid, instance_id, error))
        self._respond(rid, LeaveGroupResponse(_NONE, tuple(results)))
        return self._finish(rid)

    # ------------------------------------------------------------------------------------------
    # OffsetCommit, OffsetFetch, OffsetDelete

    def commit_offsets(
        self,
        now_ms: int,
        *,
        group_id: str,
        offsets: Sequence[OffsetCommitEntry],
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
        retention_time_ms: int = -1,
        api_version: int = 9,
    ) -> Step:
        """OffsetCommit; answered once the commit's records are durable.

        Group commits are checked like Kafka (member, instance id, generation; a
        CompletingRebalance group answers REBALANCE_IN_PROGRESS). A commit with generation -1,
        no member id and no instance id (a "simple" consumer or admin) is accepted only when
        the group is Empty or unknown (then a group with no protocol type is created). A
        commit with a generation for an unknown group gets ILLEGAL_GENERATION (v9+:
        GROUP_ID_NOT_FOUND). ``retention_time_ms`` is OffsetCommit v2-v4's retention.
        """
        rid = self._begin(now_ms)
        assert rid is not None
        group = self._groups.get(group_id)
        created = False
        error: ErrorCode | None = None
        if group is None:
            if generation_id < 0:
                group = _Group(group_id, GroupState.EMPTY, self._now)
                self._groups[group_id] = group
                created = True
            elif api_version >= 9:
                error = ErrorCode.group_id_not_found
            else:
                error = ErrorCode.illegal_generation
        if group is not None and error is None:
            error = self._validate_commit(group, generation_id, member_id, group_instance_id)
        if group is None or error is not None:
            self._respond(rid, _commit_response(offsets, _or_unknown(error)))
            return self._finish(rid)
        member = group.members.get(member_id)
        if member is not None and group.state in (
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
        ):
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        errors: dict[TopicPartition, ErrorCode] = {}
        changes: dict[TopicPartition, OffsetAndMetadata | None] = {}
        limit = self.config.offset_metadata_max_bytes
        expire = None if retention_time_ms < 0 else self._now + retention_time_ms
        for entry in offsets:
            tp = (entry.topic, entry.partition)
            metadata = entry.metadata or ""
            if len(metadata) > limit:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            commit_ts = self._now if entry.commit_timestamp < 0 else entry.commit_timestamp
            changes[tp] = OffsetAndMetadata(
                entry.offset, entry.leader_epoch, metadata, commit_ts, expire
            )
            errors.pop(tp, None)
        if not changes:
            self._respond(rid, _commit_response(offsets, _NONE, errors))
            if created:
                self._drop_if_unused(group)
            return self._finish(rid)
        wid = self._alloc_write_id()
        records = self._offsets.stage(wid, group_id, changes)

        def done(write_error: ErrorCode) -> None:
            if write_error == _NONE:
                self._offsets.complete(wid)
                ok = _NONE
            else:
                self._offsets.abort(wid)
                ok = _map_offset_write_error(write_error)
                if created:
                    self._drop_if_unused(group)
            self._respond(rid, _commit_response(offsets, ok, errors))

        self._emit_write(wid, group_id, records, done)
        return self._finish(rid)

    def _validate_commit(
        self, group: _Group, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation:
                return ErrorCode.illegal_generation
        elif group.state is not GroupState.EMPTY:
            # Only members may commit to a group that has members.
            return ErrorCode.unknown_member_id
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return None

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> OffsetFetchResponse:
        """OffsetFetch of ``partitions`` (None: every committed offset of the group).

        Absent offsets come back as offset -1, leader epoch -1, metadata "" and no error.
        Only durable offsets are returned.
        """
        group = self._groups.get(group_id)
        dead = group is None or group.state is GroupState.DEAD
        if partitions is None:
            if dead:
                return OffsetFetchResponse(_NONE, ())
            items = sorted(self._offsets.offsets(group_id).items())
            return OffsetFetchResponse(
                _NONE,
                tuple(
                    OffsetFetchPartition(t, p, v.offset, v.leader_epoch, v.metadata, _NONE)
                    for (t, p), v in items
                ),
            )
        out = []
        for topic, partition in partitions:
            value = None if dead else self._offsets.get(group_id, (topic, partition))
            if value is None:
                out.append(OffsetFetchPartition(topic, partition, -1, -1, "", _NONE))
            else:
                out.append(
                    OffsetFetchPartition(
                        topic, partition, value.offset, value.leader_epoch, value.metadata, _NONE
                    )
                )
        return OffsetFetchResponse(_NONE, tuple(out))

    def delete_offsets(
        self, now_ms: int, *, group_id: str, partitions: Sequence[TopicPartition]
    ) -> Step:
        """OffsetDelete: allowed for an Empty group, or for topics a consumer group's members
        do not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC otherwise; NON_EMPTY_GROUP for a
        non-consumer group with members). Answered once the tombstones are durable."""
        rid = self._begin(now_ms)
        assert rid is not None
        group = self._groups.get(group_id)
        if not group_id:
            self._respond(rid, OffsetDeleteResponse(ErrorCode.invalid_group_id))
            return self._finish(rid)
        if group is None or group.state is GroupState.DEAD:
            self._respond(rid, OffsetDeleteResponse(ErrorCode.group_id_not_found))
            return self._finish(rid)
        errors: dict[TopicPartition, ErrorCode] = {}
        eligible: list[TopicPartition] = []
        if group.state is GroupState.EMPTY:
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics
            for tp in partitions:
                if subscribed is None or tp[0] in subscribed:
                    errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            self._respond(rid, OffsetDeleteResponse(ErrorCode.non_empty_group))
            return self._finish(rid)

        def respond(write_error: ErrorCode) -> None:
            for tp in eligible:
                errors.setdefault(tp, write_error)
            self._respond(
                rid,
                OffsetDeleteResponse(
                    _NONE,
                    tuple(
                        OffsetDeletePartitionResponse(t, p, errors.get((t, p), _NONE))
                        for t, p in partitions
                    ),
                ),
            )

        present = self._offsets.pending_partitions(group_id) | set(self._offsets.offsets(group_id))
        to_delete = sorted(set(eligible) & present)
        if not to_delete:
            respond(_NONE)
        else:
            self._cleanup(group, to_delete, kill=False, on_done=respond)
        return self._finish(rid)

    # ------------------------------------------------------------------------------------------
    # DescribeGroups, ListGroups, DeleteGroups

    def describe_groups(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        """DescribeGroups; an unknown group is described as Dead with no error (v0-v5)."""
        return [self._describe(gid) for gid in group_ids]

    def _describe(self, group_id: str) -> DescribedGroup:
        group = self._groups.get(group_id)
        if group is None:
            return DescribedGroup(_NONE, group_id, GroupState.DEAD.value, "", "", ())
        stable = group.state is GroupState.STABLE
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            _NONE,
            group_id,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> ListGroupsResponse:
        """ListGroups; filters match case-insensitively (every group here is "classic")."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and CLASSIC_GROUP_TYPE not in types:
            return ListGroupsResponse(_NONE, ())
        out = tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if not states or g.state.value.lower() in states
        )
        return ListGroupsResponse(_NONE, out)

    def delete_groups(self, now_ms: int, group_ids: Sequence[str]) -> Step:
        """DeleteGroups: only Empty groups (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND for
        unknown ones). A deleted group is Dead until its tombstones are durable, then gone;
        if they fail it is Empty again and the error is reported."""
        rid = self._begin(now_ms)
        assert rid is not None
        results: dict[str, ErrorCode | None] = {}
        waiting: set[str] = set()
        collecting = [True]

        def maybe_respond() -> None:
            if not waiting and not collecting[0]:
                final = tuple((g, e if e is not None else _NONE) for g, e in results.items())
                self._respond(rid, DeleteGroupsResponse(final))

        for gid in group_ids:
            if gid in results:
                continue
            group = self._groups.get(gid)
            if group is None or group.state is GroupState.DEAD:
                results[gid] = ErrorCode.group_id_not_found
            elif group.state is not GroupState.EMPTY:
                results[gid] = ErrorCode.non_empty_group
            else:
                results[gid] = None
                waiting.add(gid)
                tps = sorted(
                    set(self._offsets.offsets(gid)) | self._offsets.pending_partitions(gid)
                )

                def done(error: ErrorCode, gid: str = gid) -> None:
                    results[gid] = error
                    waiting.discard(gid)
                    maybe_respond()

                self._cleanup(group, tps, kill=True, on_done=done, reason="deleted")
        collecting[0] = False
        maybe_respond()
        return self._finish(rid)

    def _cleanup(
        self,
        group: _Group,
        partitions: Sequence[TopicPartition],
        *,
        kill: bool,
        on_done: Callable[[ErrorCode], None],
        reason: str = "expired",
    ) -> None:
        """Tombstone ``partitions`` (and the group itself when ``kill``): Kafka's
        ``cleanupGroupMetadata``. The group is Dead until the write completes."""
        gid = group.group_id
        wid = self._alloc_write_id()
        records: list[Record] = []
        if partitions:
            records += self._offsets.stage(wid, gid, {tp: None for tp in partitions})
        previous_timestamp = group.state_timestamp
        if kill:
            self._cancel_group_timers(group)
            group.pending_members.clear()
            self._transition(group, GroupState.DEAD)
            group.removal_write = wid
            if group.generation > 0:
                # A group that never had a generation only stored offsets: no tombstone.
                records.append(Record(encode_group_metadata_key(gid), None))
        if not records:
            if kill:
                del self._groups[gid]
                self._event("group-removed", group, detail=reason)
            on_done(_NONE)
            return

        def done(error: ErrorCode) -> None:
            mapped = _NONE if error == _NONE else _map_group_write_error(error)
            if error == _NONE:
                self._offsets.complete(wid)
            else:
                self._offsets.abort(wid)
            if kill and self._groups.get(gid) is group and group.removal_write == wid:
                group.removal_write = None
                if error == _NONE:
                    del self._groups[gid]
                    self._event("group-removed", group, detail=reason)
                else:
                    group.state = GroupState.EMPTY
                    group.state_timestamp = previous_timestamp
            on_done(mapped)

        self._emit_write(wid, gid, records, done)

    def _expire_offsets(self) -> None:
        """Kafka's periodic ``cleanupGroupMetadata``: expire offsets, drop empty groups."""
        retention = self.config.offsets_retention_ms
        for group in list(self._groups.values()):
            if group.state is GroupState.DEAD:
                continue
            gid = group.group_id
            if group.protocol_type is not None and group.state is GroupState.EMPTY:
                base, keep = group.state_timestamp, frozenset[str]()
            elif (
                group.protocol_type == CONSUMER_PROTOCOL_TYPE
                and group.subscribed_topics is not None
                and group.state is GroupState.STABLE
            ):
                base, keep = None, group.subscribed_topics
            elif group.protocol_type is None:
                base, keep = None, frozenset()
            else:
                continue
            expired = self._offsets.expired(gid, self._now, retention, base, keep)
            kill = (
                group.state is GroupState.EMPTY
                and not group.pending_members
                and not self._offsets.has_pending(gid)
                and not set(self._offsets.offsets(gid)) - set(expired)
            )
            if expired or kill:
                self._cleanup(group, expired, kill=kill, on_done=_ignore_error)

    def _drop_if_unused(self, group: _Group) -> None:
        """Forget a group created by a request that failed: nothing was ever stored for it."""
        if (
            group.state is GroupState.EMPTY
            and group.generation == 0
            and not group.members
            and not group.pending_members
            and not self._offsets.has_offsets(group.group_id)
            and self._groups.get(group.group_id) is group
        ):
            self._cancel_group_timers(group)
            del self._groups[group.group_id]

    # ------------------------------------------------------------------------------------------
    # persistence

    def _group_metadata_record(self, group: _Group, assignment: Mapping[str, bytes]) -> Record:
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=(
                -1 if group.state_timestamp is None else group.state_timestamp
            ),
            members=tuple(
                MemberMetadataValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(group.protocol_name),
                    assignment.get(mid, b""),
                )
                for mid, m in group.members.items()
            ),
        )
        return Record(encode_group_metadata_key(group.group_id), encode_group_metadata_value(value))

    def replay(self, key: bytes, value: bytes | None) -> bool:
        """Apply one ``__consumer_offsets`` record, in log order, to rebuild state.

        Group records are meant for groups this coordinator is not serving yet (after a
        restart, or when it takes over a partition). Offset records may also be replayed into
        a live coordinator (committed transactional offsets): they apply at once, creating an
        Empty group with no protocol type if the group is unknown. A group with members
        comes back Stable with its generation,
        protocol, leader and assignments; without members, Empty. Loaded members must
        heartbeat within their session timeout, counted from the next call with a time.
        Returns False for a record type this coordinator does not know (skipped). Raises
        :class:`records.RecordFormatError` for a malformed record.
        """
        decoded = decode_key(key)
        if isinstance(decoded, OffsetCommitKey):
            gid = decoded.group
            offset = None if value is None else decode_offset_commit_value(value)
            self._offsets.replay(gid, (decoded.topic, decoded.partition), offset)
            group = self._groups.get(gid)
            if group is None and self._offsets.has_offsets(gid):
                self._groups[gid] = _Group(gid, GroupState.EMPTY, None)
            elif group is not None and not self._offsets.has_offsets(gid):
                self._drop_if_unused(group)
            return True
        if isinstance(decoded, GroupMetadataKey):
            gid = decoded.group
            old = self._groups.pop(gid, None)
            if old is not None:
                self._cancel_group_timers(old)
            self._loaded_unscheduled.discard(gid)
            if value is None:
                if self._offsets.has_offsets(gid):
                    self._groups[gid] = _Group(gid, GroupState.EMPTY, None)
                return True
            self._groups[gid] = self._load_group(gid, decode_group_metadata_value(value))
            self._loaded_unscheduled.add(gid)
            return True
        return False

    def _load_group(self, gid: str, v: GroupMetadataValue) -> _Group:
        group = _Group(
            gid,
            GroupState.STABLE if v.members else GroupState.EMPTY,
            None if v.current_state_timestamp < 0 else v.current_state_timestamp,
            generation=v.generation,
            protocol_type=v.protocol_type or None,
            protocol_name=v.protocol,
            leader_id=v.leader,
            announced_leader=v.leader,
        )
        for m in v.members:
            protocols = [(v.protocol, m.subscription)] if v.protocol is not None else []
            group.members[m.member_id] = _Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                v.protocol_type,
                protocols,
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.leader_id is not None and group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.subscribed_topics = self._subscribed_topics(group)
        return group

    def _schedule_loaded(self, now_ms: int) -> None:
        for gid in self._loaded_unscheduled:
            group = self._groups.get(gid)
            if group is None:
                continue
            for member in group.members.values():
                key = ("hb", gid, member.member_id)
                self._set_timer(key, now_ms + member.session_timeout_ms)
        self._loaded_unscheduled.clear()

    # ------------------------------------------------------------------------------------------
    # introspection

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def snapshot(self, group_id: str) -> GroupSnapshot | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        return GroupSnapshot(
            group.group_id,
            group.state,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader_id,
            tuple(
                MemberSnapshot(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    tuple(m.protocols),
                    m.assignment,
                    bool(m.join_waiters),
                    bool(m.sync_waiters),
                )
                for m in group.members.values()
            ),
            tuple(sorted(group.pending_members)),
            group.state_timestamp,
        )

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Durable offsets of ``group_id`` (a copy)."""
        return self._offsets.offsets(group_id)


# =============================================================================================
# helpers


@dataclass(frozen=True, slots=True)
class _JoinArgs:
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


def _dedupe_protocols(protocols: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    seen: set[str] = set()
    out = []
    for name, meta in protocols:
        if name not in seen:
            seen.add(name)
            out.append((name, bytes(meta)))
    return out


def _commit_response(
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


def _mismatch(given: str | None, current: str | None) -> bool:
    """SyncGroup v5+: a protocol type/name the request names that is not the group's."""
    return given is not None and given != current


def _or_unknown(error: ErrorCode | None) -> ErrorCode:
    return ErrorCode.unknown_server_error if error is None else error


def _ignore_error(error: ErrorCode) -> None:
    """Writes nobody waits for (Kafka only logs their failure)."""
