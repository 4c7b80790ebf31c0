"""The ``offsets`` Raft group of the whole-cluster simulation and the group coordinator on
its leader.

Every simulated node runs a second Raft group, ``offsets`` (the same voters; its own
``RaftNode``, disk, log and snapshots; the same network and disk faults), whose state
machine is the real ``OffsetsMachine``. On the node that leads it, the real sans-IO
``GroupCoordinator`` serves as ``RaftGroupStore`` runs it: on becoming leader, a read
barrier (read-index, then apply up to its index), then a fresh coordinator rebuilt from the
machine's records (``GroupService.reload``: requests waiting on the old one get no answer);
every coordinator ``Write`` is proposed as one entry and ``write_completed`` goes to the
node's current coordinator once the entry is applied (``ProposalDropped``, an entry
replaced by another leader's or covered by a snapshot: NOT_LEADER_OR_FOLLOWER, which the
coordinator answers as NOT_COORDINATOR); losing leadership stops serving (NOT_COORDINATOR
with the known leader as the hint). OffsetFetch is answered from the coordinator's memory
only after a read barrier confirms the node still leads (``sim_cluster_offsets_fetch``, as
the broker's handler does in a cluster). The group's Raft messages cross the simulated
network as objects (the metadata group's, the same types, cross the codec).

Checked here: the group's Raft invariants (its own ``SafetyChecker``), nodes at one applied
index hold one state, no entry a coordinator wrote is refused by the machine, a serving
coordinator's node leads the term it was activated in and at most one coordinator is
activated per term; after settling (``final``): one serving coordinator, on the leader,
every node the same records, and the coordinator's offsets equal what a fresh coordinator
rebuilds from those records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from eddy.cluster.multiraft import group_id
from eddy.cluster.offsets import OFFSETS_GROUP, OffsetsMachine, encode_entry
from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import InstallSnapshot, RaftMessage, RaftMessageError
from eddy.cluster.raft.ready import ProposalDropped, Ready, Role
from eddy.cluster.raft.sim.check import SafetyChecker, SafetyViolation
from eddy.cluster.raft.sim.disk import Disk, persist_ready
from eddy.cluster.raft.types import ENTRY_NORMAL, ConfState
from eddy.groups.records import RecordFormatError
from eddy.groups.state import GroupConfig, GroupCoordinator, OffsetCommitEntry, Step, Write
from eddy.protocol.errors import ErrorCode
from eddy.sim.node import (
    CommitRequest,
    FetchRequest,
    OffsetsReply,
    Rpc,
)
from eddy.sim.offsets import fetch as fetch_barrier

if TYPE_CHECKING:
    from eddy.sim.cluster import ClusterSim

__all__ = ["OFFSETS_GID", "OffsetsGroup", "Replica", "rebuilt_offsets"]

#: the id the offsets group's messages carry (as ``MultiRaft`` names it)
OFFSETS_GID = group_id(OFFSETS_GROUP)
NOT_COORDINATOR = int(ErrorCode.not_coordinator)
_DROPPED = ErrorCode.not_leader_or_follower  # RaftGroupStore: ProposalDropped


def _uuids(seed: int) -> Callable[[], str]:
    rng = random.Random(seed)
    return lambda: f"{rng.getrandbits(64):016x}"


def rebuilt_offsets(records: Sequence[tuple[bytes, bytes | None]]) -> GroupCoordinator:
    """A fresh coordinator rebuilt from ``records`` (what a new leader serves)."""
    coordinator = GroupCoordinator(GroupConfig(), uuid_factory=_uuids(0))
    for key, value in records:
        coordinator.replay(key, value)
    return coordinator


@dataclass(eq=False)
class Replica:
    """One incarnation of a node's member of the offsets group, with the coordinator
    service (``RaftGroupStore`` + ``GroupService``) that runs on it."""

    node_id: int
    raft: RaftNode
    machine: OffsetsMachine
    applied: int
    coordinator: GroupCoordinator | None = None
    reloads: int = 0  # coordinators built in this incarnation
    serving: bool = False
    serving_term: int = 0
    activating: bool = False
    barrier_ctx: bytes | None = None
    barrier_at: int = 0  # when (node clock) the read barrier was asked for
    barriers: int = 0  # asked for in this incarnation
    #: index -> (term proposed in, write id): a coordinator write waiting for its entry
    waiting: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: the current coordinator's request id -> the client request it answers
    requests: dict[int, Rpc] = field(default_factory=dict)
    request_writes: dict[int, int] = field(default_factory=dict)  # request id -> write id
    proposed: set[int] = field(default_factory=set)  # write ids that went into the log
    ready_reads: list[tuple[int, bytes]] = field(default_factory=list)
    #: OffsetFetch requests waiting for their read barrier, by read ctx (in arrival order)
    fetches: dict[bytes, fetch_barrier.PendingFetch] = field(default_factory=dict)
    fetch_seq: int = 0
    deferred: list[Callable[[], None]] = field(default_factory=list)


class OffsetsGroup:
    """The offsets group across the simulated cluster (owned by ``ClusterSim``)."""

    def __init__(self, sim: ClusterSim) -> None:
        self.sim = sim
        self.disks: dict[int, Disk] = {}
        self.live: dict[int, Replica] = {}
        self.checker = SafetyChecker()
        self.elections = 0
        self.activations = 0
        self.coordinators: dict[int, int] = {}  # term -> the node activated in it
        self.digests: dict[int, bytes] = {}  # applied index -> records digest
        self.writes_applied = 0
        #: proposals that took the index of an earlier write still waiting (the driver's
        #: ``_pending`` then forgets the earlier one: its caller waits for the write timeout)
        self.orphaned = 0

    # -- nodes -----------------------------------------------------------------------------
    def start(self, i: int) -> None:
        sim = self.sim
        if i not in self.disks:
            voters = tuple(range(1, sim.ccfg.nodes + 1))
            self.disks[i] = Disk(MemoryLogStore(ConfState(voters=voters)))
        store = self.disks[i].volatile
        machine = OffsetsMachine()
        if store.snapshot is not None:
            machine.restore(store.snapshot.data)
        config = dataclasses.replace(sim.cfg.raft, group=OFFSETS_GID)
        raft = RaftNode(i, config, random.Random(sim.rng.random()), store,
                        now_ms=sim.node_now(i))
        self.live[i] = Replica(i, raft, machine, store.snapshot_meta().index)

    def crash(self, i: int) -> None:
        if self.live.pop(i, None) is None:
            return
        self.disks[i].crash(self.sim.rng)
        self.checker.forget_node(i)

    def tick(self, i: int) -> None:
        rep = self.live.get(i)
        if rep is None:
            return
        now = self.sim.node_now(i)
        rep.raft.tick(now)
        if rep.barrier_ctx is not None and \
                now - rep.barrier_at >= self.sim.ccfg.offsets_write_timeout_ms:
            rep.barrier_ctx = None  # caught_up_as_leader: WriteTimeout, ask again
            self._try_barrier(rep)
        if rep.fetches:
            fetch_barrier.expire(self, rep, now, self.sim.ccfg.offsets_write_timeout_ms)
        self.process(i)

    # -- the network -----------------------------------------------------------------------
    def lost(self, m: RaftMessage) -> None:
        if isinstance(m, InstallSnapshot):
            src = self.live.get(m.src)
            if src is not None:  # the transport knows a stream failed
                src.raft.report_snapshot(m.dst, False)

    def deliver(self, m: RaftMessage) -> None:
        rep = self.live.get(m.dst)
        if rep is None or (m.src, m.dst) in self.sim.blocked:
            self.lost(m)
            return
        if self.sim.trace:
            self.sim.note(f"offsets {type(m).__name__} {m.src}->{m.dst} t{m.term}")
        try:
            rep.raft.step(m)
        except RaftMessageError as exc:
            raise SafetyViolation(f"offsets: node {m.dst} rejected a message from {m.src}: "
                                  f"{exc}") from exc
        if isinstance(m, InstallSnapshot):
            src = self.live.get(m.src)
            if src is not None:
                src.raft.report_snapshot(m.dst, True)
        self.process(m.dst)

    # -- the driver ------------------------------------------------------------------------
    def process(self, i: int) -> None:
        """Carry out every Ready of node i's offsets member (``Sim.process``'s order, the
        same crash-before-fsync and power-cut faults)."""
        sim = self.sim
        rep = self.live.get(i)
        while rep is not None and rep.raft.has_ready():
            raft = rep.raft
            rd = raft.ready()
            assert rd is not None
            self.checker.check_ready(raft, rd)
            self._observe(rep, rd)
            for m in rd.messages:
                sim.send(m)
            disk = self.disks[i]
            persist_ready(disk, rd)
            if rd.must_sync() and sim._power_cut:
                sim._power_cut = False
                sim.note(f"power cut while node {i} writes (offsets)")
                sim.crash_all()
                return
            if rd.must_sync() and sim.rng.random() < sim.cfg.crash_mid_ready \
                    and sim.cfg.faults and sim.now < sim.cfg.duration_ms:
                sim.crash(i, sim.rng.randrange(50, 800))  # written, not fsynced
                return
            disk.fsync()
            for m in rd.persisted_messages:
                sim.send(m)
            self._apply(rep, rd)
            raft.advance(rd)
            self._after_ready(rep, rd.request_snapshot)
            rep = self.live.get(i)
        if rep is not None:
            self._check_serving(rep)

    def _observe(self, rep: Replica, rd: Ready) -> None:
        """``RaftGroupStore._on_soft_state``."""
        soft = rd.soft_state
        if soft is None:
            return
        if soft.role == Role.LEADER:
            self.elections += 1
            self.sim.note(f"node {rep.node_id} leads offsets term {rep.raft.term}")
            if not rep.serving and not rep.activating:
                rep.activating = True
            return
        if rep.serving or rep.activating:
            self.sim.note(f"coordinator {rep.node_id} stops (offsets leader now "
                          f"{soft.leader})")
        rep.serving = rep.activating = False
        rep.barrier_ctx = None
        rep.ready_reads.clear()
        fetch_barrier.fail_all(self, rep)  # the driver: reads need the same leader (NotLeader)

    def _apply(self, rep: Replica, rd: Ready) -> None:
        i = rep.node_id
        if rd.snapshot is not None:
            index = rd.snapshot.meta.index
            rep.machine.restore(rd.snapshot.data)
            rep.applied = index
            for k in sorted(k for k in rep.waiting if k <= index):  # outcome unknown
                _, write_id = rep.waiting.pop(k)
                rep.deferred.append(partial(self._completed, rep, write_id, _DROPPED))
            self._on_state(i, index, rep.machine)
        for e in rd.committed_entries:
            if e.kind == ENTRY_NORMAL:
                ok = rep.machine.apply(e.index, e.data)
                if not ok and e.data:
                    raise SafetyViolation(f"offsets: node {i} refused entry {e.index}@{e.term}"
                                          " (a coordinator write)")
                self.writes_applied += ok
            rep.applied = e.index
            waiting = rep.waiting.pop(e.index, None)
            if waiting is not None:
                term, write_id = waiting
                error = ErrorCode.none if term == e.term else _DROPPED
                rep.deferred.append(partial(self._completed, rep, write_id, error))
        if rd.committed_entries:
            self._on_state(i, rep.applied, rep.machine)
        for rs in rd.read_states:
            if rs.ctx.startswith(fetch_barrier.FETCH_CTX):
                fetch_barrier.on_read_state(rep, rs.index, rs.ctx)
            else:
                rep.ready_reads.append((rs.index, rs.ctx))

    def _on_state(self, node: int, index: int, machine: OffsetsMachine) -> None:
        digest = hashlib.blake2b(machine.snapshot(), digest_size=16).digest()
        if self.digests.setdefault(index, digest) != digest:
            raise SafetyViolation(f"offsets prefix: node {node} holds other records than an "
                                  f"earlier node did at applied index {index}")

    def _after_ready(self, rep: Replica, asked: bool) -> None:
        """Compact, then what the driver and RaftGroupStore do once a Ready is done:
        complete writes, then the read barrier."""
        raft = rep.raft
        if rep.applied != raft.applied:
            raise SafetyViolation(f"offsets: node {rep.node_id}'s machine is at {rep.applied}, "
                                  f"Raft applied {raft.applied}")
        disk = self.disks[rep.node_id]
        store = disk.volatile
        due = asked or raft.applied - store.snapshot_meta().index >= self.sim.cfg.compact_every
        if due and raft.applied >= store.first_index() - 1:
            snap = raft.compact(raft.applied, rep.machine.snapshot())
            disk.write(lambda s: s.compact(snap))
            disk.fsync()
        actions, rep.deferred = rep.deferred, []
        for action in actions:
            action()
        if rep.barrier_ctx is not None and any(
                ctx == rep.barrier_ctx and index <= rep.applied
                for index, ctx in rep.ready_reads):
            rep.ready_reads.clear()
            rep.barrier_ctx = None
            self._activate(rep)
        self._try_barrier(rep)
        if rep.fetches:
            fetch_barrier.serve_due(self, rep)  # after the writes' outcomes, as the driver
            fetch_barrier.ask(self, rep)  # the ones the core refused before this Ready

    # -- the coordinator service -----------------------------------------------------------
    def _try_barrier(self, rep: Replica) -> None:
        raft = rep.raft
        if not rep.activating or rep.barrier_ctx is not None or raft.role != Role.LEADER:
            return
        ctx = f"groups:{rep.node_id}:{rep.barriers}".encode()
        try:
            raft.read_index(ctx)
        except ProposalDropped:
            return  # its first entry is not committed yet: after the next Ready
        rep.barrier_ctx, rep.barrier_at = ctx, self.sim.node_now(rep.node_id)
        rep.barriers += 1

    def _activate(self, rep: Replica) -> None:
        """``RaftGroupStore._load``: every record committed before this term is applied
        here; rebuild the coordinator from them and serve."""
        raft = rep.raft
        if not rep.activating or raft.role != Role.LEADER:
            return
        rep.activating = False
        coordinator = GroupCoordinator(GroupConfig(),
                                       uuid_factory=_uuids(self.sim.rng.getrandbits(32)))
        for key, value in rep.machine.ordered():
            try:
                coordinator.replay(key, value)
            except RecordFormatError as exc:
                raise SafetyViolation(f"offsets: node {rep.node_id} holds a malformed record: "
                                      f"{exc}") from exc
        rep.coordinator = coordinator
        rep.reloads += 1
        rep.requests.clear()  # GroupService.reload cancels what waited on the old one
        rep.request_writes.clear()
        rep.proposed.clear()
        rep.serving, rep.serving_term = True, raft.term
        other = self.coordinators.setdefault(raft.term, rep.node_id)
        if other != rep.node_id:
            raise SafetyViolation(f"coordinator safety: nodes {other} and {rep.node_id} both "
                                  f"became the group coordinator in offsets term {raft.term}")
        self.activations += 1
        self.sim.note(f"coordinator {rep.node_id} serves in offsets term {raft.term} "
                      f"({len(rep.machine.records)} records)")

    def _completed(self, rep: Replica, write_id: int, error: ErrorCode) -> None:
        """``RaftGroupStore._propose``'s end: the outcome goes to the node's coordinator
        of now (the one that wrote it, or one rebuilt since)."""
        if self.live.get(rep.node_id) is not rep or rep.coordinator is None:
            return
        coordinator = rep.coordinator
        self._apply_step(rep, coordinator.write_completed(self.sim.node_now(rep.node_id),
                                                          write_id, error))

    def _apply_step(self, rep: Replica, step: Step) -> None:
        """``GroupService.apply``: answers out, writes proposed."""
        for rid, response in step.responses:
            rpc = rep.requests.pop(rid, None)
            write_id = rep.request_writes.pop(rid, None)
            if rpc is None:
                continue
            errors = [p.error_code for p in getattr(response, "partitions", ())]
            code = next((int(c) for c in errors if c != ErrorCode.none), 0)
            self._reply(rep, rpc, OffsetsReply(code, hint=self._hint(rep)),
                        proposed=write_id in rep.proposed)
        for write in step.writes:
            self._persist_write(rep, write)

    def _persist_write(self, rep: Replica, write: Write) -> None:
        data = encode_entry([(r.key, r.value) for r in write.records])
        try:
            index = rep.raft.propose(data)
        except ProposalDropped:
            # the driver fails the proposal's future: the coordinator hears of it later
            rep.deferred.append(partial(self._completed, rep, write.write_id, _DROPPED))
            return
        if index in rep.waiting:
            self.orphaned += 1
            self.sim.note(f"offsets: node {rep.node_id}'s write {write.write_id} takes index "
                          f"{index} of a write still waiting ({rep.waiting[index]})")
        rep.waiting[index] = (rep.raft.term, write.write_id)  # as the driver's _pending
        rep.proposed.add(write.write_id)

    def _hint(self, rep: Replica) -> int:
        leader = rep.raft.leader
        return leader if leader != rep.node_id else 0

    def _reply(self, rep: Replica, rpc: Rpc, body: OffsetsReply, proposed: bool) -> None:
        self.sim.send_rpc(Rpc(rep.node_id, rpc.src, rpc.req_id, body, reply=True,
                              proposed=proposed))

    def handle(self, i: int, rpc: Rpc) -> None:
        """An OffsetCommit or OffsetFetch arrived at node i (up)."""
        rep = self.live.get(i)
        body = rpc.body
        if rep is None:
            return
        if not rep.serving or rep.coordinator is None:  # handlers.groups.moved
            self._reply(rep, rpc, OffsetsReply(NOT_COORDINATOR, hint=self._hint(rep)), False)
            return
        if isinstance(body, FetchRequest):
            if not self.sim.ccfg.offsets_fetch_barrier:  # the model before the barrier
                fetch_barrier.answer(self, rep, rpc, body)
                return
            fetch_barrier.start(self, rep, rpc, body)
        else:
            assert isinstance(body, CommitRequest)
            self._commit(rep, rep.coordinator, rpc, body)
        self.process(i)
        actions, rep.deferred = rep.deferred, []
        for action in actions:
            action()

    def _commit(self, rep: Replica, coordinator: GroupCoordinator, rpc: Rpc,
                body: CommitRequest) -> None:
        i = rep.node_id
        step = coordinator.commit_offsets(
            self.sim.node_now(i), group_id=body.group,
            offsets=[OffsetCommitEntry(body.topic, body.partition, body.offset)])
        assert step.request_id is not None
        rep.requests[step.request_id] = rpc
        if step.writes:
            rep.request_writes[step.request_id] = step.writes[0].write_id
        self._apply_step(rep, step)

    # -- checks ----------------------------------------------------------------------------
    def _check_serving(self, rep: Replica) -> None:
        """After each step of a node (roles change only there; ``check_ready`` checks
        election safety on every Ready)."""
        raft = rep.raft
        if rep.serving and (raft.role != Role.LEADER or raft.term != rep.serving_term):
            raise SafetyViolation(f"coordinator safety: node {rep.node_id}'s coordinator "
                                  f"of offsets term {rep.serving_term} serves while it "
                                  "does not lead")

    def leader(self) -> Replica | None:
        best: Replica | None = None
        for rep in self.live.values():
            r = rep.raft
            if r.role == Role.LEADER and (best is None or r.term > best.raft.term):
                best = rep
        return best

    def final(self) -> str | None:
        """The settled cluster's offsets group; the first failure found."""
        lead = self.leader()
        if lead is None:
            return "offsets liveness: no offsets leader after healing"
        if len(self.live) != len(self.sim.nodes) or lead.raft.commit != lead.raft.applied:
            return "offsets liveness: not every node is up and applied after healing"
        applied = {i: r.applied for i, r in self.live.items()}
        if len(set(applied.values())) != 1:
            return f"offsets liveness: nodes applied {applied}"
        if len({r.machine.snapshot() for r in self.live.values()}) != 1:
            return "offsets state-machine safety: the nodes' records differ at one index"
        serving = sorted(i for i, r in self.live.items() if r.serving)
        if serving != [lead.node_id] or lead.coordinator is None:
            return (f"offsets liveness: coordinators serving on {serving}, offsets leader "
                    f"{lead.node_id}")
        fresh = rebuilt_offsets(lead.machine.ordered())
        for gid in sorted(set(fresh.group_ids()) | set(lead.coordinator.group_ids())):
            mine, theirs = lead.coordinator.committed_offsets(gid), fresh.committed_offsets(gid)
            if mine != theirs:
                return (f"offsets coordinator: group {gid} serves {mine}, its records say "
                        f"{theirs}")
        return None

    def state_bytes(self) -> list[bytes]:
        return [self.live[i].machine.snapshot() for i in sorted(self.live)]
