"""The group coordinator's plumbing: steps, responses, writes, timers, and the helpers
every layer above uses (see :mod:`eddy.groups.state` for the whole state machine)."""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from eddy.groups.messages import (
    CONSUMER_PROTOCOL_TYPE,
    NONE,
    GroupConfig,
    GroupEvent,
    GroupState,
    JoinGroupMember,
    JoinGroupResponse,
    Response,
    Step,
    Write,
)
from eddy.groups.model import (
    RETENTION_KEY,
    Group,
    Member,
    TimerKey,
    default_uuid,
)
from eddy.groups.offsets import OffsetStore
from eddy.groups.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    Record,
    encode_group_metadata_key,
    encode_group_metadata_value,
    parse_subscription_topics,
)


class CoordinatorCore(ABC):
    """Every group of this coordinator, their timers and offsets; the layers above add the
    requests."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        uuid_factory: Callable[[], str] = default_uuid,
    ) -> None:
        self.config = config or GroupConfig()
        self._uuid = uuid_factory
        self._groups: dict[str, Group] = {}
        self._offsets = OffsetStore()
        self._now = -(2**62)
        self._next_request_id = 1
        self._next_write_id = 1
        self._outstanding: set[int] = set()
        self._responses: list[tuple[int, Response]] = []
        self._writes: list[Write] = []
        self._events: list[GroupEvent] = []
        self._write_callbacks: dict[int, Callable[[ErrorCode], None]] = {}
        self._timers: dict[TimerKey, int] = {}
        self._heap: list[tuple[int, int, TimerKey]] = []
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

    def _set_timer(self, key: TimerKey, deadline: int) -> None:
        self._timers[key] = deadline
        self._timer_seq += 1
        heapq.heappush(self._heap, (deadline, self._timer_seq, key))

    def _cancel_timer(self, key: TimerKey) -> None:
        self._timers.pop(key, None)

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        self._set_timer(("hb", group.group_id, member.member_id), self._now + timeout_ms)

    def _cancel_group_timers(self, group: Group) -> None:
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
        if RETENTION_KEY not in self._timers:
            interval = self.config.offsets_retention_check_interval_ms
            self._set_timer(RETENTION_KEY, target + interval)
        while True:
            deadline = self._peek_deadline()
            if deadline is None or deadline > target:
                break
            _, _, key = heapq.heappop(self._heap)
            del self._timers[key]
            self._now = max(self._now, deadline)
            self._fire(key)
        self._now = target

    def _fire(self, key: TimerKey) -> None:
        kind, gid, mid = key
        if kind == "retention":
            self._expire_offsets()
            interval = self.config.offsets_retention_check_interval_ms
            self._set_timer(RETENTION_KEY, self._now + interval)
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

    def _transition(self, group: Group, state: GroupState) -> None:
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
    # helpers the layers share

    def _event(self, kind: str, group: Group, member_id: str = "", detail: str = "") -> None:
        self._events.append(GroupEvent(kind, group.group_id, group.generation, member_id, detail))

    def _drop_if_unused(self, group: Group) -> None:
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


    def _validate_member(
        self, group: Group, member_id: str, group_instance_id: str | None
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


    def _subscribed_topics(self, group: Group) -> frozenset[str] | None:
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

    def _group_metadata_record(self, group: Group, assignment: Mapping[str, bytes]) -> Record:
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

    def _join_response(
        self,
        group: Group,
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
            NONE,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.announced_leader if leader is None else leader) or "",
            member_id=member_id,
            members=members,
            skip_assignment=skip_assignment,
        )

    # ------------------------------------------------------------------------------------------
    # what the timers fire: the layers above define them

    @abstractmethod
    def _expire_offsets(self) -> None: ...

    @abstractmethod
    def _on_heartbeat_expired(self, group: Group, member_id: str) -> None: ...

    @abstractmethod
    def _on_pending_member_expired(self, group: Group, member_id: str) -> None: ...

    @abstractmethod
    def _on_join_timer(self, group: Group) -> None: ...

    @abstractmethod
    def _on_sync_timer(self, group: Group) -> None: ...

    @abstractmethod
    def _schedule_loaded(self, now_ms: int) -> None: ...
