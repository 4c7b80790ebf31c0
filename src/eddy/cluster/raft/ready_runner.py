"""The half of ``RaftDriver`` that carries out one ``Ready``: messages out, the writes and
one ``sync()`` in the group's executor thread, the messages that depended on them, the
apply (answering proposals, membership changes and read barriers), then ``advance`` and a
snapshot when one is due. While the executor writes, a leader's heartbeats still go out
on time (``_off_loop``): a slow disk is not a dead leader. A mixin: the state it uses
lives on ``RaftDriver``."""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eddy.clock import Clock
from eddy.cluster.raft.bootstrap import Store
from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.driver_types import DriverStats, StateMachine
from eddy.cluster.raft.messages import (
    InstallSnapshot,
    RaftMessage,
    decode_conf_change,
    encode_message,
)
from eddy.cluster.raft.ready import (
    ConfChangeError,
    NotLeader,
    ProposalDropped,
    Ready,
    Role,
    SoftState,
)
from eddy.cluster.raft.storage.disk import RaftStorage
from eddy.cluster.raft.transport import RaftTransport
from eddy.cluster.raft.types import ENTRY_CONF_CHANGE, ENTRY_NORMAL, ConfState, Entry

log = logging.getLogger("eddy.cluster.raft.driver")


class ReadyHandling:
    # -- RaftDriver's state, used here -----------------------------------------------------
    group: str
    node_id: int
    store: Store
    transport: RaftTransport
    sm: StateMachine
    stats: DriverStats
    clock: Clock
    tick_s: float
    snapshot_every: int
    on_soft_state: Callable[[SoftState], None] | None
    _executor: ThreadPoolExecutor
    _pending: dict[int, tuple[int, asyncio.Future[Any]]]  # index -> term, future
    _read_waits: dict[bytes, asyncio.Future[int]]
    _read_ready: list[tuple[int, asyncio.Future[int]]]
    _synced_vote: tuple[int, int]
    _snap_index: int

    @abstractmethod
    def _report(self, kind: str, peer: int, ok: bool) -> None: ...

    async def _handle(self, node: RaftNode, rd: Ready) -> None:
        self.stats.readies += 1
        if rd.soft_state is not None:
            log.log(logging.INFO if rd.soft_state.role == Role.LEADER else logging.DEBUG,
                    "raft group %s: node %d %s, leader %d (term %d)", self.group,
                    self.node_id, rd.soft_state.role.name.lower(), rd.soft_state.leader,
                    node.term)
            if self.on_soft_state is not None:
                try:
                    self.on_soft_state(rd.soft_state)
                except Exception:
                    log.exception("raft group %s: on_soft_state failed", self.group)
            for ctx, rfut in list(self._read_waits.items()):  # reads need the same leader
                if rd.soft_state.role != Role.LEADER and not rfut.done():
                    rfut.set_exception(NotLeader(rd.soft_state.leader))
                    del self._read_waits[ctx]
        self._send_all(rd.messages)
        await self._persist(node, rd)
        self._send_all(rd.persisted_messages)
        self._apply(node, rd)
        was_leader = node.role == Role.LEADER
        node.advance(rd)  # applies membership changes: a removed leader steps down here
        if was_leader and node.role != Role.LEADER and self.node_id not in node.voters:
            log.info("raft group %s: node %d removed from the voters, no longer leads",
                     self.group, self.node_id)
        if rd.request_snapshot or node.applied - self._snap_index >= self.snapshot_every:
            await self._compact(node)

    def _send_all(self, msgs: Sequence[RaftMessage]) -> None:
        for m in msgs:
            peer = m.dst
            if isinstance(m, InstallSnapshot):
                def done(ok: bool, peer: int = peer) -> None:
                    self._report("snapshot", peer, ok)
            else:
                def done(ok: bool, peer: int = peer) -> None:
                    if not ok:
                        self._report("unreachable", peer, False)
            self.transport.send(peer, encode_message(m), done)

    async def _off_loop(self, node: RaftNode, fn: Callable[[], None]) -> None:
        """Run ``fn`` (writes and a sync) in the group's executor thread. Nothing else
        touches the core meanwhile but ``heartbeat_now``: a leader's heartbeats go out on
        time even when the disk takes seconds (its followers would elect another)."""
        fut = asyncio.get_running_loop().run_in_executor(self._executor, fn)
        while not (await asyncio.wait({fut}, timeout=self.tick_s))[0]:
            beats = node.heartbeat_now(self.clock.now_ms())
            if beats:
                self.stats.heartbeats_while_writing += 1
                self._send_all(beats)
        fut.result()

    async def _persist(self, node: RaftNode, rd: Ready) -> None:
        hs = rd.hard_state
        vote_changed = hs is not None and (hs.term, hs.vote) != self._synced_vote
        if not (rd.snapshot or rd.entries or rd.conf_state or vote_changed):
            if hs is not None:
                self.store.set_hard_state(hs)  # commit only: rides the next fsync
            return
        await self._off_loop(node, lambda: self._write(rd))
        self.stats.fsyncs += 1
        self.stats.entries_persisted += len(rd.entries)
        if hs is not None:
            self._synced_vote = (hs.term, hs.vote)

    def _write(self, rd: Ready) -> None:
        """In the executor thread: the Ready's writes in Ready's order, then one sync."""
        store = self.store
        if rd.snapshot is not None:
            store.install_snapshot(rd.snapshot)
        if rd.entries:
            store.append(rd.entries)
        if rd.hard_state is not None:
            store.set_hard_state(rd.hard_state)
        if rd.conf_state is not None:
            store.set_conf_state(rd.conf_state)
        if isinstance(store, RaftStorage):
            store.sync()

    def _apply(self, node: RaftNode, rd: Ready) -> None:
        if rd.snapshot is not None:
            index = rd.snapshot.meta.index
            self.sm.restore(rd.snapshot.data)
            self._snap_index = index
            for i in [i for i in self._pending if i <= index]:
                _, fut = self._pending.pop(i)
                if not fut.done():
                    fut.set_exception(ProposalDropped(
                        f"raft group {self.group}: entry {i} replaced by a snapshot from the "
                        f"leader: outcome unknown"))
        for e in rd.committed_entries:
            result: Any = None
            error: BaseException | None = None
            if e.kind == ENTRY_NORMAL:
                try:
                    result = self.sm.apply(e.index, e.data)
                except Exception as exc:  # the state machine refused it, on every node alike
                    error = exc
                self.stats.applied += 1
            elif e.kind == ENTRY_CONF_CHANGE:
                result, error = self._conf_applied(e)
            waiting = self._pending.pop(e.index, None)
            if waiting is None or waiting[1].done():
                continue
            term, fut = waiting
            if term != e.term:
                fut.set_exception(ProposalDropped(
                    f"raft group {self.group}: entry {e.index} was replaced by a new leader's"))
            elif error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)
        applied = rd.committed_entries[-1].index if rd.committed_entries else 0
        if rd.snapshot is not None:
            applied = max(applied, rd.snapshot.meta.index)
        self._serve_reads(rd, max(applied, node.applied))

    def _conf_applied(self, e: Entry) -> tuple[ConfState | None, BaseException | None]:
        """A membership change entry being applied: the membership it makes (the core
        takes it on in ``advance``), or why it is a no-op."""
        try:
            cc = decode_conf_change(e.data)
        except ValueError as exc:
            log.warning("raft group %s: undecodable membership change at %d applied as a "
                        "no-op: %s", self.group, e.index, exc)
            return None, ConfChangeError(f"entry {e.index}: undecodable membership change")
        self.stats.conf_changes += 1
        cs = ConfState(tuple(cc.voters), tuple(cc.learners))
        log.info("raft group %s: membership at %d: voters %s learners %s", self.group,
                 e.index, list(cs.voters), list(cs.learners))
        return cs, None

    def _serve_reads(self, rd: Ready, done_to: int) -> None:
        for rs in rd.read_states:
            rfut = self._read_waits.pop(rs.ctx, None)
            if rfut is not None:
                self._read_ready.append((rs.index, rfut))
        if self._read_ready:
            keep = []
            for index, rfut in self._read_ready:
                if rfut.done():
                    continue
                if index <= done_to:
                    rfut.set_result(index)
                else:
                    keep.append((index, rfut))
            self._read_ready = keep

    async def _compact(self, node: RaftNode) -> None:
        index = node.applied
        if index <= self._snap_index or index < self.store.first_index() - 1:
            return
        snap = node.compact(index, self.sm.snapshot())
        store = self.store

        def write() -> None:
            if isinstance(store, RaftStorage):
                store.compact(index, snap)
            else:
                store.compact(snap)

        await self._off_loop(node, write)
        self._snap_index = index
        self.stats.snapshots += 1
