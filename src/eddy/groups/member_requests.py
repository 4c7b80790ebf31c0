"""The group coordinator's requests of joined members: SyncGroup, Heartbeat, LeaveGroup and
OffsetCommit."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from eddy.groups.joining import Joining
from eddy.groups.messages import (
    NONE,
    GroupState,
    HeartbeatResponse,
    LeaveGroupMemberResponse,
    LeaveGroupResponse,
    OffsetCommitEntry,
    Step,
    SyncGroupResponse,
)
from eddy.groups.model import (
    Group,
    commit_response,
    map_group_write_error,
    map_offset_write_error,
    mismatch,
    or_unknown,
)
from eddy.groups.offsets import TopicPartition
from eddy.groups.records import (
    OffsetAndMetadata,
)


class MemberRequests(Joining):
    """SyncGroup, Heartbeat, LeaveGroup, OffsetCommit."""

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
                elif mismatch(protocol_type, group.protocol_type) or mismatch(
                    protocol_name, group.protocol_name
                ):
                    error = ErrorCode.inconsistent_group_protocol
                elif group.state is GroupState.EMPTY:
                    error = ErrorCode.unknown_member_id
                elif group.state is GroupState.PREPARING_REBALANCE:
                    error = ErrorCode.rebalance_in_progress
        if error is not None or group is None:
            self._respond(rid, SyncGroupResponse(or_unknown(error)))
            return self._finish(rid)
        member = group.members[member_id]
        self._synced(group, member_id)
        if group.state is GroupState.STABLE:
            self._respond(
                rid,
                SyncGroupResponse(
                    NONE, group.protocol_type, group.protocol_name, member.assignment
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
                if error != NONE:
                    self._reset_and_propagate_assignment_error(
                        group, map_group_write_error(error)
                    )
                    self._maybe_prepare_rebalance(group)
                    return
                for mid, m in group.members.items():
                    m.assignment = assignment.get(mid, b"")
                self._propagate_assignment(group, NONE)
                self._transition(group, GroupState.STABLE)

            self._emit_write(wid, group_id, [record], done)
        return self._finish(rid)

    def _synced(self, group: Group, member_id: str) -> None:
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
        return NONE

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
                    NONE,
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
                    error = NONE
            elif mid in group.pending_members:
                group.pending_members.discard(mid)
                self._cancel_timer(("pending", group.group_id, mid))
                self._maybe_complete_join(group)
                error = NONE
            else:
                error = self._validate_member(group, mid, instance_id)
                if error is None:
                    self._remove_member(group, group.members[mid], "leave")
                    error = NONE
            results.append(LeaveGroupMemberResponse(mid, instance_id, error))
        self._respond(rid, LeaveGroupResponse(NONE, tuple(results)))
        return self._finish(rid)

    # ------------------------------------------------------------------------------------------
    # OffsetCommit

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
                group = Group(group_id, GroupState.EMPTY, self._now)
                self._groups[group_id] = group
                created = True
            elif api_version >= 9:
                error = ErrorCode.group_id_not_found
            else:
                error = ErrorCode.illegal_generation
        if group is not None and error is None:
            error = self._validate_commit(group, generation_id, member_id, group_instance_id)
        if group is None or error is not None:
            self._respond(rid, commit_response(offsets, or_unknown(error)))
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
            self._respond(rid, commit_response(offsets, NONE, errors))
            if created:
                self._drop_if_unused(group)
            return self._finish(rid)
        wid = self._alloc_write_id()
        records = self._offsets.stage(wid, group_id, changes)

        def done(write_error: ErrorCode) -> None:
            if write_error == NONE:
                self._offsets.complete(wid)
                ok = NONE
            else:
                self._offsets.abort(wid)
                ok = map_offset_write_error(write_error)
                if created:
                    self._drop_if_unused(group)
            self._respond(rid, commit_response(offsets, ok, errors))

        self._emit_write(wid, group_id, records, done)
        return self._finish(rid)

    def _validate_commit(
        self, group: Group, generation_id: int, member_id: str, group_instance_id: str | None
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
