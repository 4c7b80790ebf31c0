"""The group coordinator's reads and administration: offset fetch and delete, describe, list
and delete groups, offset expiry, and the replay of ``__consumer_offsets`` after a restart."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from eddy.groups.coordinator_core import CoordinatorCore
from eddy.groups.messages import (
    CLASSIC_GROUP_TYPE,
    CONSUMER_PROTOCOL_TYPE,
    NONE,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    GroupSnapshot,
    GroupState,
    ListedGroup,
    ListGroupsResponse,
    MemberSnapshot,
    OffsetDeletePartitionResponse,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchResponse,
    Step,
)
from eddy.groups.model import (
    Group,
    Member,
    ignore_error,
    map_group_write_error,
)
from eddy.groups.offsets import TopicPartition
from eddy.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetAndMetadata,
    OffsetCommitKey,
    Record,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
)


class GroupAdmin(CoordinatorCore):
    """Offset reads, group administration, expiry and replay."""

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
                return OffsetFetchResponse(NONE, ())
            items = sorted(self._offsets.offsets(group_id).items())
            return OffsetFetchResponse(
                NONE,
                tuple(
                    OffsetFetchPartition(t, p, v.offset, v.leader_epoch, v.metadata, NONE)
                    for (t, p), v in items
                ),
            )
        out = []
        for topic, partition in partitions:
            value = None if dead else self._offsets.get(group_id, (topic, partition))
            if value is None:
                out.append(OffsetFetchPartition(topic, partition, -1, -1, "", NONE))
            else:
                out.append(
                    OffsetFetchPartition(
                        topic, partition, value.offset, value.leader_epoch, value.metadata, NONE
                    )
                )
        return OffsetFetchResponse(NONE, tuple(out))

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
                    NONE,
                    tuple(
                        OffsetDeletePartitionResponse(t, p, errors.get((t, p), NONE))
                        for t, p in partitions
                    ),
                ),
            )

        present = self._offsets.pending_partitions(group_id) | set(self._offsets.offsets(group_id))
        to_delete = sorted(set(eligible) & present)
        if not to_delete:
            respond(NONE)
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
            return DescribedGroup(NONE, group_id, GroupState.DEAD.value, "", "", ())
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
            NONE,
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
            return ListGroupsResponse(NONE, ())
        out = tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if not states or g.state.value.lower() in states
        )
        return ListGroupsResponse(NONE, out)

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
                final = tuple((g, e if e is not None else NONE) for g, e in results.items())
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
        group: Group,
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
            on_done(NONE)
            return

        def done(error: ErrorCode) -> None:
            mapped = NONE if error == NONE else map_group_write_error(error)
            if error == NONE:
                self._offsets.complete(wid)
            else:
                self._offsets.abort(wid)
            if kill and self._groups.get(gid) is group and group.removal_write == wid:
                group.removal_write = None
                if error == NONE:
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
                self._cleanup(group, expired, kill=kill, on_done=ignore_error)

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
                self._groups[gid] = Group(gid, GroupState.EMPTY, None)
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
                    self._groups[gid] = Group(gid, GroupState.EMPTY, None)
                return True
            self._groups[gid] = self._load_group(gid, decode_group_metadata_value(value))
            self._loaded_unscheduled.add(gid)
            return True
        return False

    def _load_group(self, gid: str, v: GroupMetadataValue) -> Group:
        group = Group(
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
            group.members[m.member_id] = Member(
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
