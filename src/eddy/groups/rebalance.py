"""The group coordinator's rebalances: preparing one, completing the join phase (electing
the leader, writing the generation), propagating assignments, removing members."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from eddy.groups.group_admin import GroupAdmin
from eddy.groups.messages import (
    NONE,
    GroupState,
    JoinGroupResponse,
    SyncGroupResponse,
)
from eddy.groups.model import (
    Group,
    Member,
    ignore_error,
)


class Rebalancing(GroupAdmin):
    """Rebalances and member removal."""

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        ):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
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

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_join is None
            and group.all_joined()
        ):
            self._complete_join(group)

    def _on_join_timer(self, group: Group) -> None:
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

    def _complete_join(self, group: Group) -> None:
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
            self._emit_write(self._alloc_write_id(), group.group_id, [record], ignore_error)
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

    def _elect_joined_leader(self, group: Group) -> bool:
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

    def _on_sync_timer(self, group: Group) -> None:
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

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if not member.sync_waiters:
                continue
            if error == NONE:
                response = SyncGroupResponse(
                    NONE, group.protocol_type, group.protocol_name, member.assignment
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

    def _remove_member_raw(self, group: Group, member: Member, reason: str) -> None:
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

    def _remove_member(self, group: Group, member: Member, reason: str) -> None:
        """Kafka's ``removeMemberAndUpdateGroup``: remove, then rebalance or finish the join."""
        self._remove_member_raw(group, member, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    def _on_heartbeat_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.join_waiters or member.sync_waiters):
            # A member waiting in JoinGroup or SyncGroup needs no heartbeat (Kafka).
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return
        self._remove_member(group, member, "join-timeout" if member.is_new else "session-timeout")

    def _on_pending_member_expired(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)
