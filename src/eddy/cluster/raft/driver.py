"""``RaftDriver``: the asyncio adapter around one group's sans-IO ``RaftNode``.

One task owns the core. It ticks it (every heartbeat/5), feeds it what arrived (messages,
proposals, reads, transfers, the transport's reports) and carries out each ``Ready`` in the
order ``Ready`` documents: messages out, then the writes (snapshot, entries, hard state,
membership) and ONE ``sync()`` in this group's own executor thread, then the messages that
depend on them, then the apply, then ``advance``. Nothing touches the core or the store
while a Ready is being persisted: inputs wait in queues and all go into the next Ready, so
many proposals arriving during one fsync share the next one (group commit), and the store,
which is not thread-safe, is only ever used by one thread at a time.

Like etcd, a Ready whose only durable change is the commit index writes the hard state
without an fsync of its own (the next fsync carries it): the commit index can be re-learned,
a term, a vote or an entry cannot.

A proposal resolves with the state machine's answer once its entry is applied with the term
it was proposed in; an entry replaced by another leader's fails it with ``ProposalDropped``;
``WriteTimeout`` after ``write_timeout_ms`` (seed 004: 30 s); a write slower than
``slow_write_ms`` (seed 004: 1 s) logs a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from eddy.clock import Clock
from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import (
    InstallSnapshot,
    RaftMessage,
    RaftMessageError,
    encode_message,
)
from eddy.cluster.raft.ready import (
    NotLeader,
    ProposalDropped,
    RaftConfig,
    Ready,
    Role,
    SoftState,
)
from eddy.cluster.raft.storage import RaftStorage, RaftStorageError
from eddy.cluster.raft.types import ENTRY_NORMAL, ConfState, HardState, Snapshot
from eddy.cluster.raft_transport import RaftTransport

log = logging.getLogger(__name__)

Store = RaftStorage | MemoryLogStore

#: bounds on what waits for the loop (beyond them: dropped messages, refused proposals)
MAX_INBOX = 8192
MAX_PENDING_PROPOSALS = 65536


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> Any:
        """Apply a committed command; the result goes to its proposer (if on this node)."""
        ...

    def snapshot(self) -> bytes:
        """The whole state, encoded (taken at the applied index)."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's."""
        ...


class WriteTimeout(TimeoutError):
    """A proposal was not applied within the write timeout (no quorum, or a slow disk)."""


class DriverStopped(ProposalDropped):
    """The driver stopped before the proposal's outcome was known."""


@dataclass
class DriverStats:
    readies: int = 0
    fsyncs: int = 0
    entries_persisted: int = 0
    applied: int = 0
    snapshots: int = 0
    dropped_messages: int = 0
    slow_writes: int = 0


@dataclass(frozen=True)
class RaftStatus:
    """What ``eddy cluster status`` shows for a group (lag: leader only)."""

    group: str
    node_id: int
    role: str
    leader: int
    term: int
    commit_index: int
    applied_index: int
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    lag: dict[int, int] = field(default_factory=dict)


def is_empty(store: Store) -> bool:
    hs, cs = store.initial_state()
    return (hs == HardState() and not cs.voters and not cs.learners
            and store.last_index() == 0 and store.snapshot_meta().index == 0)


def bootstrap(store: Store, voters: Sequence[int]) -> bool:
    """Give an empty store its initial membership (durably); False when not empty."""
    if not is_empty(store):
        return False
    if not voters or any(v <= 0 for v in voters):
        raise ValueError(f"bad initial voters {list(voters)}")
    store.set_conf_state(ConfState(tuple(sorted(set(voters)))))
    if isinstance(store, RaftStorage):
        store.sync()
    return True


def stored_snapshot(store: Store) -> Snapshot | None:
    return store.snapshot() if isinstance(store, RaftStorage) else store.snapshot


class RaftDriver:
    def __init__(self, group: str, node_id: int, store: Store, transport: RaftTransport,
                 config: RaftConfig, state_machine: StateMachine, clock: Clock, *,
                 write_timeout_ms: int = 30_000, slow_write_ms: int = 1_000,
                 snapshot_every: int = 10_000, rng: random.Random | None = None) -> None:
        self.group = group
        self.node_id = node_id
        self.store = store
        self.transport = transport
        self.config = config
        self.sm = state_machine
        self.clock = clock
        self.write_timeout_ms = write_timeout_ms
        self.slow_write_ms = slow_write_ms
        self.snapshot_every = snapshot_every
        self.rng = rng or random.Random()
        self.stats = DriverStats()
        self.node: RaftNode | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"raft-{group}")
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._inbox: deque[RaftMessage] = deque()
        self._proposals: deque[tuple[bytes, asyncio.Future[Any]]] = deque()
        self._reads: deque[tuple[bytes, asyncio.Future[int]]] = deque()
        self._reads_retry: list[tuple[bytes, asyncio.Future[int]]] = []
        self._actions: deque[tuple[str, int, bool]] = deque()  # reports and transfers
        self._pending: dict[int, tuple[int, asyncio.Future[Any]]] = {}  # index -> term, fut
        self._read_waits: dict[bytes, asyncio.Future[int]] = {}
        self._read_ready: list[tuple[int, asyncio.Future[int]]] = []  # until applied
        self._read_ids = itertools.count(1)
        self._synced_vote = (0, 0)
        self._snap_index = 0
        self._failed: BaseException | None = None
        self._stopping = False
        #: called with the new SoftState (leader, role) whenever it changes: where a
        #: controller or coordinator learns it should start or stop running here
        self.on_soft_state: Callable[[SoftState], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Rebuild the core from the store: the state machine restored from the stored
        snapshot; committed entries after it are replayed through the first Readys."""
        loop = asyncio.get_running_loop()
        snap = await loop.run_in_executor(self._executor, stored_snapshot, self.store)
        if snap is not None:
            self.sm.restore(snap.data)
            self._snap_index = snap.meta.index
        hs, cs = self.store.initial_state()
        self._synced_vote = (hs.term, hs.vote)
        now = self.clock.now_ms()
        alone = tuple(cs.voters) == (self.node_id,)
        # a lone voter need not wait an election timeout: start its clock in the past
        start = now - 2 * self.config.election_timeout_ms if alone else now
        self.node = RaftNode(self.node_id, self.config, self.rng, self.store, now_ms=start)
        if alone:
            self.node.tick(now)
        self._task = loop.create_task(self._run(), name=f"raft-{self.group}-{self.node_id}")

    async def stop(self) -> None:
        """Finish the Ready in hand, then close the store and fail what is pending."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if isinstance(self.store, RaftStorage):
            with contextlib.suppress(RaftStorageError):
                await asyncio.get_running_loop().run_in_executor(self._executor,
                                                                 self.store.close)
        self._fail_all(DriverStopped(f"raft group {self.group}: driver stopped"))
        self._executor.shutdown(wait=True)

    async def abort(self) -> None:
        """A crash: stop at once; what was written and not synced is as good as lost."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_all(DriverStopped(f"raft group {self.group}: driver aborted"))
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)

    # -- queries ---------------------------------------------------------------------------
    @property
    def leader(self) -> int:
        return self.node.leader if self.node is not None else 0

    @property
    def is_leader(self) -> bool:
        return self.node is not None and self.node.role == Role.LEADER

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def status(self) -> RaftStatus:
        n = self._node()
        lag: dict[int, int] = {}
        if n.role == Role.LEADER:
            last = n.log.last_index()
            for peer in sorted(n.voters | n.learners):
                pr = n.progress(peer)
                if pr is not None and peer != self.node_id:
                    lag[peer] = last - pr.match
        return RaftStatus(self.group, self.node_id, n.role.name.lower(), n.leader, n.term,
                          n.commit, n.applied, tuple(sorted(n.voters)),
                          tuple(sorted(n.learners)), lag)

    def _node(self) -> RaftNode:
        if self.node is None:
            raise RuntimeError(f"raft group {self.group}: driver not started")
        return self.node

    def _check_usable(self) -> RaftNode:
        n = self._node()
        if self._failed is not None or self._stopping:
            raise DriverStopped(f"raft group {self.group}: driver stopped "
                                f"({self._failed or 'stopping'})")
        if n.role != Role.LEADER:
            raise NotLeader(n.leader)
        return n

    # -- inputs ----------------------------------------------------------------------------
    def deliver(self, msg: RaftMessage) -> None:
        """A decoded, sender-checked message for this group (from the dispatcher)."""
        if len(self._inbox) >= MAX_INBOX or self._stopping:
            self.stats.dropped_messages += 1
            return
        self._inbox.append(msg)
        self._wake.set()

    async def propose(self, data: bytes) -> Any:
        """Replicate ``data``; returns the state machine's answer once applied here."""
        self._check_usable()
        if len(self._proposals) + len(self._pending) >= MAX_PENDING_PROPOSALS:
            raise ProposalDropped(f"raft group {self.group}: too many proposals pending")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._proposals.append((data, fut))
        self._wake.set()
        started = loop.time()
        try:
            async with asyncio.timeout(self.write_timeout_ms / 1000):
                result = await fut  # a timeout cancels fut: the loop skips it from then on
        except TimeoutError:
            self.stats.slow_writes += 1
            raise WriteTimeout(
                f"raft group {self.group}: write not applied within {self.write_timeout_ms}"
                f" ms (write timeout; leader hint {self.leader or 'unknown'}; no quorum?)"
            ) from None
        elapsed_ms = (loop.time() - started) * 1000
        if elapsed_ms > self.slow_write_ms:
            self.stats.slow_writes += 1
            log.warning("raft group %s: slow write, %.0f ms (warning above %d ms)", self.group,
                        elapsed_ms, self.slow_write_ms)
        return result

    async def read_barrier(self) -> int:
        """Linearizable read point: returns once this node applied everything committed
        before the call (confirmed by a quorum through read-index)."""
        self._check_usable()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        ctx = next(self._read_ids).to_bytes(8, "big")
        self._reads.append((ctx, fut))
        self._wake.set()
        try:
            async with asyncio.timeout(self.write_timeout_ms / 1000):
                return await fut
        except TimeoutError:
            self._read_waits.pop(ctx, None)
            raise WriteTimeout(f"raft group {self.group}: read barrier not confirmed within "
                               f"{self.write_timeout_ms} ms") from None

    def transfer_leadership(self, to_node: int) -> None:
        """Ask the core to hand leadership to ``to_node`` (NotLeader if not leading)."""
        self._check_usable()
        self._actions.append(("transfer", to_node, True))
        self._wake.set()

    def _report(self, kind: str, peer: int, ok: bool) -> None:
        self._actions.append((kind, peer, ok))
        self._wake.set()

    # -- the loop --------------------------------------------------------------------------
    async def _run(self) -> None:
        node = self._node()
        tick_s = max(self.config.heartbeat_ms // 5, 1) / 1000
        try:
            while not self._stopping:
                if not self._has_input() and not node.has_ready():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(tick_s):
                            await self._wake.wait()
                self._wake.clear()
                node.tick(self.clock.now_ms())
                self._drain(node)
                rd = node.ready()
                if rd is not None:
                    await self._handle(node, rd)
                    self._reads.extend(self._reads_retry)
                    self._reads_retry.clear()
                await asyncio.sleep(0)  # never hog the loop, even with work queued
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed disk (RaftStorageError) or a bug: stop here
            self._failed = exc
            log.error("raft group %s on node %d stopped: %s", self.group, self.node_id, exc,
                      exc_info=not isinstance(exc, RaftStorageError))
            self._fail_all(DriverStopped(f"raft group {self.group}: driver failed: {exc}"))

    def _has_input(self) -> bool:
        return bool(self._inbox or self._proposals or self._reads or self._actions)

    def _drain(self, node: RaftNode) -> None:
        while self._actions:
            kind, peer, ok = self._actions.popleft()
            try:
                if kind == "unreachable":
                    node.report_unreachable(peer)
                elif kind == "snapshot":
                    node.report_snapshot(peer, ok)
                else:
                    node.transfer_leadership(peer)
            except (ProposalDropped, ValueError) as exc:
                log.info("raft group %s: %s to %d not done: %s", self.group, kind, peer, exc)
        while self._inbox:
            msg = self._inbox.popleft()
            try:
                node.step(msg)
            except RaftMessageError as exc:
                self.stats.dropped_messages += 1
                log.info("raft group %s: dropped a %s from node %d: %s", self.group,
                         type(msg).__name__, msg.src, exc)
        while self._proposals:
            data, fut = self._proposals.popleft()
            if fut.done():
                continue
            try:
                index = node.propose(data)
            except ProposalDropped as exc:
                fut.set_exception(exc)
                continue
            self._pending[index] = (node.term, fut)
        while self._reads:
            ctx, rfut = self._reads.popleft()
            if rfut.done():
                continue
            try:
                node.read_index(ctx)
            except NotLeader as exc:
                rfut.set_exception(exc)
                continue
            except ProposalDropped:
                # a new leader's first entry is not committed yet: after the next Ready
                self._reads_retry.append((ctx, rfut))
                continue
            self._read_waits[ctx] = rfut

    async def _handle(self, node: RaftNode, rd: Ready) -> None:
        self.stats.readies += 1
        if rd.soft_state is not None:
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
        await self._persist(rd)
        self._send_all(rd.persisted_messages)
        self._apply(rd)
        node.advance(rd)
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

    async def _persist(self, rd: Ready) -> None:
        hs = rd.hard_state
        vote_changed = hs is not None and (hs.term, hs.vote) != self._synced_vote
        if not (rd.snapshot or rd.entries or rd.conf_state or vote_changed):
            if hs is not None:
                self.store.set_hard_state(hs)  # commit only: rides the next fsync
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._write, rd)
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

    def _apply(self, rd: Ready) -> None:
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
        for rs in rd.read_states:
            rfut = self._read_waits.pop(rs.ctx, None)
            if rfut is not None:
                self._read_ready.append((rs.index, rfut))
        if self._read_ready:
            done_to = max(applied, self._node().applied)
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

        await asyncio.get_running_loop().run_in_executor(self._executor, write)
        self._snap_index = index
        self.stats.snapshots += 1

    def _fail_all(self, exc: ProposalDropped) -> None:
        futs: list[asyncio.Future[Any]] = [f for _, f in self._proposals]
        futs += [f for _, f in self._pending.values()]
        futs += [f for _, f in (*self._reads, *self._reads_retry, *self._read_ready)]
        futs += list(self._read_waits.values())
        for fut in futs:
            if not fut.done():
                fut.set_exception(exc)
        self._proposals.clear()
        self._pending.clear()
        self._reads.clear()
        self._reads_retry.clear()
        self._read_waits.clear()
        self._read_ready.clear()
