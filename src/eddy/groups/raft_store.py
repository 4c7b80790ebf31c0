"""``RaftGroupStore``: where a clustered broker's group coordinator keeps its records, the
``offsets`` Raft group instead of the local ``__consumer_offsets``.

The coordinator serves only on the group's leader: when this node becomes the leader it
waits for a read barrier (every record committed before its term applied here), rebuilds
the coordinator from the group's records and starts serving; when it stops leading it stops
serving (requests get NOT_COORDINATOR and clients find the new leader). Each coordinator
write is one Raft entry, proposed in order; the coordinator hears of it (``write_completed``)
once it is committed and applied, and a write that fails (leadership lost, write timeout)
is answered as Kafka answers a failed append to the offsets topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from eddy.cluster.offsets import OffsetsMachine, encode_entry
from eddy.cluster.raft.driver import RaftDriver, WriteTimeout
from eddy.cluster.raft.ready import ProposalDropped, Role, SoftState
from eddy.groups.state import Write
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.groups.service import GroupService

log = logging.getLogger(__name__)


class RaftGroupStore:
    def __init__(self, service: GroupService, driver: RaftDriver,
                 machine: OffsetsMachine) -> None:
        self.service = service
        self.driver = driver
        self.machine = machine
        self.serving = False
        self._stale = False  # serving through a storage outage: rebuild when it ends
        self.activations = 0
        self._activating: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        #: told the group's records each time this node starts serving
        self.on_activate: Callable[[list[tuple[bytes, bytes | None]]], None] | None = None
        driver.on_soft_state = self._on_soft_state
        if driver.is_leader:
            self._activate()

    def _on_soft_state(self, soft: SoftState) -> None:
        if soft.role == Role.LEADER:
            self._activate()
            return
        if self.serving and self.driver.stopped_by_storage and self._lone():
            # a lone voter whose disk failed (full): nobody else can lead, so what the
            # coordinator holds stays the truth and reads go on; writes fail until the
            # group is back, and the coordinator is rebuilt then (a write may have failed
            # to tell its outcome)
            self._stale = True
            return
        if self.serving:
            log.info("no longer the group coordinator (offsets group led by %s)",
                     soft.leader or "unknown")
        self.serving = False
        if self._activating is not None:
            self._activating.cancel()
            self._activating = None

    def _lone(self) -> bool:
        node = self.driver.node
        return node is not None and node.voters == frozenset((node.id,))

    def _activate(self) -> None:
        if (self.serving and not self._stale) or self._activating is not None:
            return
        self._activating = asyncio.get_running_loop().create_task(self._load(),
                                                                  name="groups-activate")

    async def _load(self) -> None:
        try:
            if not await self.driver.caught_up_as_leader():
                return
            records = self.machine.ordered()
            self.service.reload(records)
            if self.on_activate is not None:  # the transaction coordinator, alongside
                self.on_activate(records)
            self.serving, self._stale = True, False
            self.activations += 1
            log.info("group coordinator serving from the offsets group (%d records)",
                     len(records))
        finally:
            self._activating = None

    async def confirm(self) -> bool:
        """Whether this node still leads the offsets group, confirmed by a quorum now (a
        read barrier): a coordinator cut off from the others keeps serving until its Raft
        check-quorum steps it down, and must not answer OffsetFetch from what it has then
        (a newer commit may have gone through the new leader)."""
        if not self.serving:
            return False
        if self._lone():
            return True  # a lone voter: no other node can have become the leader
        try:
            await self.driver.read_barrier()
        except (ProposalDropped, WriteTimeout):
            return False
        return self.serving

    def persist(self, write: Write) -> None:
        """Propose ``write``'s records; the coordinator is told the outcome later."""
        data = encode_entry([(r.key, r.value) for r in write.records])
        if self._stale:
            # the group is down (serving reads through it) or coming back: no write now, or
            # one could commit past the rebuild that follows; ask for the storage again
            self.driver.kick_recovery()
            data = b""
        task = asyncio.ensure_future(self._propose(write.write_id, data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _propose(self, write_id: int, data: bytes) -> None:
        error = ErrorCode.none
        try:
            if not data:
                raise ProposalDropped("the offsets group is recovering its storage")
            await self.driver.propose(data)
        except WriteTimeout:
            error = ErrorCode.request_timed_out  # -> COORDINATOR_NOT_AVAILABLE
        except ProposalDropped:  # not the leader any more, or stopped
            error = ErrorCode.not_leader_or_follower  # -> NOT_COORDINATOR
        svc = self.service
        try:
            svc.apply(svc.coordinator.write_completed(svc.now(), write_id, error))
        except Exception:
            log.exception("group coordinator failed on a completed write")

    async def stop(self) -> None:
        for task in [self._activating, *self._tasks]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
