"""A simulated adapter around the sans-IO group coordinator (no tests here).

``Sim`` owns a virtual clock, collects every response by request id (failing on a second
answer to one id), keeps the ``__consumer_offsets`` log of durable records and acknowledges
writes in order, automatically unless ``auto_ack=False``.
"""

from __future__ import annotations

import itertools
import struct
from collections import deque
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from eddy.groups.records import Record
from eddy.groups.state import (
    GroupConfig,
    GroupCoordinator,
    GroupSnapshot,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitEntry,
    Response,
    Step,
    SyncGroupResponse,
    Write,
)

NONE = ErrorCode.none
T0 = 1_000_000


def subscription(*topics: str, version: int = 0, user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolSubscription (v0 layout, plus the v1+ fields as empty)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data))
    out += user_data or b""
    if version >= 1:
        out += struct.pack(">i", 0)  # owned partitions
    if version >= 2:
        out += struct.pack(">i", -1)  # generation id
    if version >= 3:
        out += struct.pack(">h", -1)  # rack id
    return out


RANGE = [("range", subscription("t"))]


class Sim:
    def __init__(self, *, auto_ack: bool = True, **config: Any) -> None:
        self.now = T0
        self._ids = itertools.count(1)
        self.c = GroupCoordinator(
            GroupConfig(**config), uuid_factory=lambda: f"u{next(self._ids)}"
        )
        self.responses: dict[int, Response] = {}
        self.pending_writes: deque[Write] = deque()
        self.log: list[Record] = []
        self.all_writes: list[Write] = []
        self.auto_ack = auto_ack

    # -- plumbing -----------------------------------------------------------------------------

    def take(self, step: Step) -> int | None:
        for rid, response in step.responses:
            assert rid not in self.responses, f"request {rid} answered twice"
            self.responses[rid] = response
        self.pending_writes.extend(step.writes)
        self.all_writes.extend(step.writes)
        if self.auto_ack:
            self.ack_all()
        return step.request_id

    def ack(self, error: ErrorCode = NONE) -> Write:
        write = self.pending_writes.popleft()
        if error == NONE:
            self.log.extend(write.records)
        self.take(self.c.write_completed(self.now, write.write_id, error))
        return write

    def ack_all(self) -> None:
        while self.pending_writes:
            self.ack()

    def advance(self, ms: int) -> None:
        self.now += ms
        self.take(self.c.poll(self.now))

    def answered(self, rid: int | None) -> bool:
        return rid in self.responses

    def resp(self, rid: int | None) -> Any:
        assert rid is not None and rid in self.responses, f"request {rid} not answered"
        return self.responses[rid]

    def snap(self, group: str) -> GroupSnapshot:
        s = self.c.snapshot(group)
        assert s is not None
        return s

    # -- requests -----------------------------------------------------------------------------

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        client: str = "c",
        session: int = 10_000,
        rebalance: int = 30_000,
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        instance: str | None = None,
        version: int = 9,
        protocol_type: str = "consumer",
    ) -> int:
        rid = self.take(
            self.c.join_group(
                self.now,
                group_id=group,
                member_id=member_id,
                client_id=client,
                client_host=f"/10.0.0.{client}",
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                protocol_type=protocol_type,
                protocols=protocols,
                group_instance_id=instance,
                api_version=version,
            )
        )
        assert rid is not None
        return rid

    def join_new(self, group: str = "g", client: str = "c", **kw: Any) -> tuple[int, str]:
        """The v4+ two-step join of a new dynamic member: (request id, member id)."""
        first = self.resp(self.join(group, client=client, **kw))
        assert first.error_code == ErrorCode.member_id_required, first
        return self.join(group, first.member_id, client=client, **kw), first.member_id

    def sync(
        self,
        group: str,
        generation: int,
        member: str,
        assignments: Sequence[tuple[str, bytes]] = (),
        instance: str | None = None,
        **kw: Any,
    ) -> int:
        rid = self.take(
            self.c.sync_group(
                self.now,
                group_id=group,
                generation_id=generation,
                member_id=member,
                assignments=assignments,
                group_instance_id=instance,
                **kw,
            )
        )
        assert rid is not None
        return rid

    def hb(self, group: str, generation: int, member: str, instance: str | None = None) -> Any:
        rid = self.take(
            self.c.heartbeat(
                self.now,
                group_id=group,
                generation_id=generation,
                member_id=member,
                group_instance_id=instance,
            )
        )
        response = self.resp(rid)
        assert isinstance(response, HeartbeatResponse)
        return response.error_code

    def leave(self, group: str, members: Sequence[tuple[str, str | None]]) -> LeaveGroupResponse:
        rid = self.take(self.c.leave_group(self.now, group_id=group, members=members))
        response = self.resp(rid)
        assert isinstance(response, LeaveGroupResponse)
        return response

    def commit(
        self,
        group: str,
        offsets: Sequence[tuple[str, int, int]] | Sequence[OffsetCommitEntry],
        **kw: Any,
    ) -> int:
        entries = [
            e if isinstance(e, OffsetCommitEntry) else OffsetCommitEntry(e[0], e[1], e[2])
            for e in offsets
        ]
        rid = self.take(self.c.commit_offsets(self.now, group_id=group, offsets=entries, **kw))
        assert rid is not None
        return rid

    # -- composite ----------------------------------------------------------------------------

    def stable_group(
        self, group: str, clients: Sequence[str], **kw: Any
    ) -> tuple[int, list[str]]:
        """Members join (two-step) and sync; the leader assigns ``b"<member>"`` to each."""
        rids: list[int] = []
        ids: list[str] = []
        for i, client in enumerate(clients):
            rid, mid = self.join_new(group, client, **kw)
            rids.append(rid)
            ids.append(mid)
            # earlier members rejoin for the rebalance the newcomer started
            for j in range(i):
                if self.answered(rids[j]):
                    rids[j] = self.join(group, ids[j], client=clients[j], **kw)
        responses = [self.resp(r) for r in rids]
        gen = responses[0].generation_id
        assert all(isinstance(r, JoinGroupResponse) and r.error_code == NONE for r in responses)
        leader = responses[0].leader
        sync_rids = [self.sync(group, gen, m) for m in ids if m != leader]
        lead = self.sync(group, gen, leader, [(m, m.encode()) for m in ids])
        for r in [*sync_rids, lead]:
            response = self.resp(r)
            assert isinstance(response, SyncGroupResponse) and response.error_code == NONE
        return gen, ids
