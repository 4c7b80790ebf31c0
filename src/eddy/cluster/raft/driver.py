"""``RaftDriver``: the asyncio adapter around one group's sans-IO ``RaftNode``.

One task owns the core. It ticks it (every heartbeat/5, at most a quarter of the core's
``stall_ms``: a longer gap between ticks is this node's own stall, which the core does not
blame on its leader), feeds it what arrived (messages,
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

``change_membership`` goes the same way: one single-server change (add a voter, add a
learner, remove a node; adding a voter that is a learner promotes it) at a time, resolved
with the membership it made once its entry is applied here. The core takes a change on when
it applies it; a leader that removed itself steps down right then, and the remaining voters
elect one of theirs an election timeout later. The Ready handling lives in ``driver_ready``,
the public types in ``driver_types`` and the store helpers in ``bootstrap``: all are
importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from eddy.clock import Clock
from eddy.cluster.raft.bootstrap import Store, bootstrap, is_empty, stored_snapshot
from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.driver_types import (
    COMMIT_FLUSH_S,
    MAX_INBOX,
    MAX_PENDING_PROPOSALS,
    RECOVER_FIRST_S,
    RECOVER_MAX_S,
    DriverStats,
    DriverStopped,
    RaftStatus,
    StateMachine,
    WriteTimeout,
)
from eddy.cluster.raft.messages import (
    CONF_ADD_LEARNER,
    CONF_ADD_VOTER,
    CONF_REMOVE_NODE,
    ConfChange,
    RaftMessage,
    RaftMessageError,
)
from eddy.cluster.raft.ready import (
    ConfChangeError,
    NotLeader,
    ProposalDropped,
    RaftConfig,
    Role,
    SoftState,
)
from eddy.cluster.raft.ready_runner import ReadyHandling
from eddy.cluster.raft.storage.disk import RaftStorage, RaftStorageError
from eddy.cluster.raft.transport import RaftTransport
from eddy.cluster.raft.types import ConfState

__all__ = [
    "CONF_ADD_LEARNER", "CONF_ADD_VOTER", "CONF_KINDS", "CONF_REMOVE_NODE", "MAX_INBOX",
    "MAX_PENDING_PROPOSALS", "ConfChangeError", "DriverStats", "DriverStopped", "RaftDriver",
    "RaftStatus", "StateMachine", "Store", "WriteTimeout", "bootstrap", "is_empty",
    "stored_snapshot",
]

_T = TypeVar("_T")

#: ConfChange kinds by name (the CLI's words), and each kind's name for messages
CONF_KINDS = {"add-voter": CONF_ADD_VOTER, "add-learner": CONF_ADD_LEARNER,
              "remove": CONF_REMOVE_NODE}
_KIND_NAMES = {k: n for n, k in CONF_KINDS.items()}

log = logging.getLogger(__name__)


class RaftDriver(ReadyHandling):
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
        #: how often the loop ticks the core (also while a Ready's writes run: heartbeats)
        self.tick_s = max(min(config.heartbeat_ms // 5, config.stall_ms // 4), 1) / 1000
        self.node: RaftNode | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"raft-{group}")
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._inbox: deque[RaftMessage] = deque()
        self._proposals: deque[tuple[bytes, asyncio.Future[Any]]] = deque()
        self._reads: deque[tuple[bytes, asyncio.Future[int]]] = deque()
        self._reads_retry: list[tuple[bytes, asyncio.Future[int]]] = []
        self._actions: deque[tuple[str, int, bool]] = deque()  # reports and transfers
        self._confs: deque[tuple[ConfChange, asyncio.Future[Any]]] = deque()
        self._confs_retry: list[tuple[ConfChange, asyncio.Future[Any]]] = []
        self._conf_fut: asyncio.Future[Any] | None = None  # the change in flight from here
        self._conf_index = 0  # the entry of the last change proposed here
        self._pending: dict[int, tuple[int, asyncio.Future[Any]]] = {}  # index -> term, fut
        self._read_waits: dict[bytes, asyncio.Future[int]] = {}
        self._read_ready: list[tuple[int, asyncio.Future[int]]] = []  # until applied
        self._read_ids = itertools.count(1)
        self._synced_vote = (0, 0)
        self._snap_index = 0
        self._failed: BaseException | None = None
        self._stopping = False
        self._kick = asyncio.Event()  # try the failed storage again now
        self._recover_wait = RECOVER_FIRST_S  # the last wait before reopening the storage
        self._recovered_at = float("-inf")  # when it last came back (loop time)
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
        return self.node is not None and self.node.role == Role.LEADER and self._failed is None

    def kick_recovery(self) -> None:
        """Someone needs the group: try its failed storage again now, not at the next
        backoff step (space may be back)."""
        if self._failed is not None:
            self._kick.set()

    @property
    def stopped_by_storage(self) -> bool:
        """Down because its disk failed (it reopens its storage until it works)."""
        return isinstance(self._failed, RaftStorageError)

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

    def _wait_for(self, index: int, term: int, fut: asyncio.Future[Any]) -> None:
        """``fut`` waits for the entry proposed at ``index`` in ``term``. A proposal of an
        earlier term still waiting at that index (this node led, lost the lead before it
        committed, and leads again with a shorter log) was replaced: it fails now."""
        old = self._pending.get(index)
        if old is not None and not old[1].done():
            old[1].set_exception(ProposalDropped(
                f"raft group {self.group}: entry {index} of term {old[0]} was replaced"))
        self._pending[index] = (term, fut)

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
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._proposals.append((data, fut))
        self._wake.set()
        return await self._await_applied(fut, "write")

    async def change_membership(self, kind: int, node_id: int) -> ConfState:
        """Add a voter (``CONF_ADD_VOTER``; a learner is promoted), add a learner
        (``CONF_ADD_LEARNER``) or remove a node (``CONF_REMOVE_NODE``). Returns the
        membership once the change is applied here. ``NotLeader`` off the leader,
        ``ConfChangeError`` for a change that cannot be made (another one in flight, the
        last voter, an unknown kind...), ``WriteTimeout`` like ``propose``."""
        what = _KIND_NAMES.get(kind)
        if what is None:
            raise ConfChangeError(f"raft group {self.group}: unknown membership change kind "
                                  f"{kind} (known: {sorted(_KIND_NAMES)})")
        if node_id <= 0:
            raise ConfChangeError(f"raft group {self.group}: bad node id {node_id}")
        self._check_usable()
        if self._conf_fut is not None and not self._conf_fut.done():
            raise ConfChangeError(f"raft group {self.group}: another membership change is in "
                                  f"flight: wait for it before {what} {node_id}")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._conf_fut = fut
        self._confs.append((ConfChange(kind, node_id), fut))
        self._wake.set()
        cs: ConfState = await self._await_applied(fut, f"membership change ({what} {node_id})")
        return cs

    async def _await_applied(self, fut: asyncio.Future[_T], what: str) -> _T:
        """Wait for the loop to resolve ``fut`` (an entry applied), at most the write
        timeout; warn above the slow-write threshold."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self.write_timeout_ms / 1000):
                result = await fut  # a timeout cancels fut: the loop skips it from then on
        except TimeoutError:
            self.stats.slow_writes += 1
            raise WriteTimeout(
                f"raft group {self.group}: {what} not applied within {self.write_timeout_ms}"
                f" ms (write timeout; leader hint {self.leader or 'unknown'}; no quorum?)"
            ) from None
        elapsed_ms = (loop.time() - started) * 1000
        if elapsed_ms > self.slow_write_ms:
            self.stats.slow_writes += 1
            log.warning("raft group %s: slow %s, %.0f ms (warning above %d ms)", self.group,
                        what, elapsed_ms, self.slow_write_ms)
        return result

    async def caught_up_as_leader(self) -> bool:
        """For what runs on a group's leader (the controller, a coordinator): wait, while
        this node leads, until it applied everything committed before its term; False if
        it stopped leading first."""
        while self.is_leader:
            try:
                await self.read_barrier()
                return self.is_leader
            except WriteTimeout:
                continue
            except ProposalDropped:  # not the leader any more, or stopped
                return False
        return False

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

    def leader_silence(self) -> tuple[int, int] | None:
        """The core's ``leader_silence`` (None before the driver runs)."""
        return None if self.node is None else self.node.leader_silence()

    def leader_gone(self, leader: int) -> None:
        """Hint: ``leader``'s process is gone (see the core's ``leader_gone``)."""
        self._report("leader-gone", leader, True)

    def _report(self, kind: str, peer: int, ok: bool) -> None:
        self._actions.append((kind, peer, ok))
        self._wake.set()

    # -- the loop --------------------------------------------------------------------------
    async def _run(self) -> None:
        """The loop; after a storage failure (a full or failing disk) the group stops, then
        comes back once its files can be opened again (``_recover``)."""
        while True:
            try:
                await self._loop(self._node())
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed disk (RaftStorageError) or a bug: stop here
                self._failed = exc
                log.error("raft group %s on node %d stopped: %s", self.group, self.node_id,
                          exc, exc_info=not isinstance(exc, RaftStorageError))
                self._fail_all(DriverStopped(f"raft group {self.group}: driver failed: {exc}"))
                self._tell_soft_state(SoftState(0, Role.FOLLOWER))
                if not isinstance(exc, RaftStorageError) or not await self._recover():
                    return

    def _tell_soft_state(self, soft: SoftState) -> None:
        if self.on_soft_state is not None:
            try:
                self.on_soft_state(soft)
            except Exception:
                log.exception("raft group %s: on_soft_state failed", self.group)

    async def _recover(self) -> bool:
        """Reopen the storage (its recovery keeps what was synced) until it works, backing
        off from ``RECOVER_FIRST_S`` to ``RECOVER_MAX_S``; the core starts again from it
        with the state machine as it is (it applied only committed, synced entries)."""
        store = self.store
        if not isinstance(store, RaftStorage):
            return False
        loop = asyncio.get_running_loop()
        # a group that failed again soon after coming back (a disk still full) backs off
        # further instead of starting over: a failing disk is not retried (and logged)
        # twice a second for as long as it lasts
        again = loop.time() - self._recovered_at < RECOVER_MAX_S
        wait_s = min(self._recover_wait * 2, RECOVER_MAX_S) if again else RECOVER_FIRST_S
        while not self._stopping:
            self._recover_wait = wait_s
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._kick.wait()
                await asyncio.sleep(RECOVER_FIRST_S / 2)  # kicked: still not in a busy loop
            wait_s = min(wait_s * 2, RECOVER_MAX_S)
            try:
                fresh = await loop.run_in_executor(self._executor, store.reopened)
            except (RaftStorageError, OSError) as exc:
                log.warning("raft group %s: storage not back yet: %s", self.group, exc)
                continue
            applied = self._node().log.applied
            if applied > fresh.last_index() and applied > fresh.snapshot_meta().index:
                log.error("raft group %s: entries up to %d were applied but only %d "
                          "survived on disk: restart the node", self.group, applied,
                          fresh.last_index())
                return False
            self.store = fresh
            hs, _ = fresh.initial_state()
            self._synced_vote = (hs.term, hs.vote)
            node = RaftNode(self.node_id, self.config, self.rng, fresh,
                            now_ms=self.clock.now_ms(), applied=applied)
            node.log.committed = max(node.log.committed, applied)  # applied was committed
            self.node = node
            self._failed = None
            self._recovered_at = loop.time()
            self.stats.recoveries += 1
            log.info("raft group %s on node %d: storage reopened, back at applied index %d",
                     self.group, self.node_id, applied)
            return True
        return False

    async def _loop(self, node: RaftNode) -> None:
        tick_s = self.tick_s
        loop = asyncio.get_running_loop()
        commit_flushed = loop.time()
        while not self._stopping:
            if not self._has_input() and not node.has_ready():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(tick_s):
                        await self._wake.wait()
            self._wake.clear()
            stalls, skipped = node.stall_clock.stalls, node.stall_clock.skipped_ms
            node.tick(self.clock.now_ms())
            if node.stall_clock.stalls != stalls:
                self._stalled(node.stall_clock.skipped_ms - skipped)
            self._drain(node)
            rd = node.ready()
            if rd is not None:
                await self._handle(node, rd)
                self._reads.extend(self._reads_retry)
                self._reads_retry.clear()
                self._confs.extend(self._confs_retry)
                self._confs_retry.clear()
            if loop.time() - commit_flushed >= COMMIT_FLUSH_S:
                commit_flushed = loop.time()
                await self._flush_commit(node)
            await asyncio.sleep(0)  # never hog the loop, even with work queued

    def _stalled(self, skipped_ms: int) -> None:
        """The core found a gap between two ticks: this node did not run (or not this
        task). Counted and logged (a warning when it was as long as an election timeout:
        without stall-awareness it would have cost an election)."""
        ms = skipped_ms + self.config.stall_ms
        self.stats.stalls += 1
        self.stats.stalled_ms += skipped_ms
        self.stats.longest_stall_ms = max(self.stats.longest_stall_ms, ms)
        log.log(logging.WARNING if ms >= self.config.election_timeout_ms else logging.INFO,
                "raft group %s: node %d did not run for %d ms (its own stall: not counted "
                "against its leader)", self.group, self.node_id, ms)

    async def _flush_commit(self, node: RaftNode) -> None:
        """The commit index into the state file when it moved (syncs skip it alone): a
        node restarted later replays its state machine up to here at once."""
        store = self.store
        if isinstance(store, RaftStorage) and store.commit_unsynced:
            await self._off_loop(node, lambda: store.sync(with_commit=True))

    def _has_input(self) -> bool:
        return bool(self._inbox or self._proposals or self._reads or self._actions
                    or self._confs)

    def _drain(self, node: RaftNode) -> None:
        while self._actions:
            kind, peer, ok = self._actions.popleft()
            try:
                if kind == "unreachable":
                    node.report_unreachable(peer)
                elif kind == "snapshot":
                    node.report_snapshot(peer, ok)
                elif kind == "leader-gone":
                    node.leader_gone(peer)
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
            self._wait_for(index, node.term, fut)
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
        while self._confs:
            cc, cfut = self._confs.popleft()
            if not cfut.done():
                self._propose_conf(node, cc, cfut)

    def _propose_conf(self, node: RaftNode, cc: ConfChange, fut: asyncio.Future[Any]) -> None:
        what = f"{_KIND_NAMES.get(cc.kind, cc.kind)} {cc.node_id}"
        if node.role == Role.LEADER:
            if node.log.term(node.applied) != node.term:
                # a new leader takes changes once its first entry is applied (and with it
                # every change an earlier leader left in the log): try after the next Ready
                self._confs_retry.append((cc, fut))
                return
            if self._conf_index > node.applied:
                # ours, not applied yet (it may have timed out at its caller)
                fut.set_exception(ConfChangeError(
                    f"raft group {self.group}: the membership change at index "
                    f"{self._conf_index} is not applied yet: wait for it before {what}"))
                return
        try:
            index = node.propose_conf_change(cc)
        except ConfChangeError as exc:
            fut.set_exception(ConfChangeError(f"raft group {self.group}: {what}: {exc}"))
            return
        except ProposalDropped as exc:  # NotLeader, or a leadership transfer under way
            fut.set_exception(exc)
            return
        self._conf_index = index
        self._wait_for(index, node.term, fut)
        log.info("raft group %s: proposed membership change %s at index %d", self.group,
                 what, index)

    def _fail_all(self, exc: ProposalDropped) -> None:
        futs: list[asyncio.Future[Any]] = [f for _, f in self._proposals]
        futs += [f for _, f in self._pending.values()]
        futs += [f for _, f in (*self._reads, *self._reads_retry, *self._read_ready)]
        futs += [f for _, f in (*self._confs, *self._confs_retry)]
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
        self._confs.clear()
        self._confs_retry.clear()
