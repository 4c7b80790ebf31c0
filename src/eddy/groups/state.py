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

from eddy.groups.member_requests import MemberRequests
from eddy.groups.messages import (
    CONSUMER_PROTOCOL_TYPE,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    GroupConfig,
    GroupEvent,
    GroupSnapshot,
    GroupState,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    MemberSnapshot,
    OffsetCommitEntry,
    OffsetCommitPartitionResponse,
    OffsetCommitResponse,
    OffsetDeletePartitionResponse,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchResponse,
    Response,
    Step,
    SyncGroupResponse,
    Write,
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


class GroupCoordinator(MemberRequests):
    """Every classic group of this coordinator, their timers and their committed offsets.

    The state machine is built in layers, each a module: ``coordinator_core`` (steps,
    writes, timers), ``group_admin`` (reads, deletes, expiry, replay), ``rebalance``,
    ``joining`` (JoinGroup) and ``member_requests`` (SyncGroup, Heartbeat, LeaveGroup,
    OffsetCommit)."""
