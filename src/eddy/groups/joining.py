"""The group coordinator's JoinGroup: new, known and static members (replacement of a static
member with its write and its revert)."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from eddy.groups.messages import (
    NONE,
    GroupState,
    JoinGroupResponse,
    Step,
    SyncGroupResponse,
)
from eddy.groups.model import (
    Group,
    JoinArgs,
    Member,
    dedupe_protocols,
    map_group_write_error,
)
from eddy.groups.rebalance import Rebalancing


class Joining(Rebalancing):
    """JoinGroup."""

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
        protocols = dedupe_protocols(protocols)
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
            group = Group(group_id, GroupState.EMPTY, self._now)
            self._groups[group_id] = group
        args = JoinArgs(
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

    def _join_new_member(self, group: Group, a: JoinArgs) -> None:
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

    def _join_known_member(self, group: Group, a: JoinArgs) -> None:
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

    def _add_member_and_rebalance(self, group: Group, member_id: str, a: JoinArgs) -> None:
        member = Member(
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

    def _update_member_and_rebalance(self, group: Group, member: Member, a: JoinArgs) -> None:
        member.protocols = list(a.protocols)
        member.rebalance_timeout_ms = a.rebalance_timeout_ms
        member.session_timeout_ms = a.session_timeout_ms
        member.join_waiters.append(a.rid)
        self._maybe_prepare_rebalance(group)

    def _update_static_member(self, group: Group, old_id: str, new_id: str, a: JoinArgs) -> None:
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
                if error != NONE:
                    member.join_waiters.remove(a.rid)
                    self._respond(
                        a.rid,
                        JoinGroupResponse(
                            map_group_write_error(error),
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

    def _replace_static_member(self, group: Group, old_id: str, new_id: str) -> Member:
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
