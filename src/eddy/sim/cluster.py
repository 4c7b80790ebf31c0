"""A deterministic simulation of a whole cluster: 3 or 5 nodes, each a voter of the
``metadata`` Raft group (``RaftNode``) whose state machine is a ``MetadataState``, each
running the ``Controller`` while it leads (activated as ``ControllerService`` does: after a
read barrier, with the previous leader as a suspect; stopped when it loses leadership),
and each a broker that registers and heartbeats to whoever it believes is the controller.
Clients create topics and read and write key-value registers through the group. Every node
also runs the ``offsets`` Raft group with the group coordinator on its leader
(``sim_cluster_offsets``), and clients commit and fetch offsets through it.

It extends the Raft simulation (``eddy.cluster.raft.sim.network.Sim``): the same virtual clock,
network (drop, delay, duplication, reordering, symmetric and one-way partitions), disks
losing unsynced writes on a crash, clock jumps, pauses (a node, the leader or every node
stops running a while: its Raft groups, controller and broker alike), crashes and
whole-cluster power cuts; the
broker and client RPCs cross the same network with the same faults (clients' requests are
never duplicated: a duplicated write would be a second write). After every step the Raft
invariants (``SafetyChecker``) and the metadata ones (``MetaChecker``) are checked; after
the faults stop, the cluster must settle (one controller, every broker unfenced, every
partition led, every node the same state; one group coordinator, every node the same
offsets records) and the key-value and offsets histories must be linearizable.

A run is a function of (seed, config). ``ClusterSim(seed, ClusterConfig(nodes=N)).run()``;
a failure prints its replay: ``python -m bench.sim --nodes N --seed S --trace``.
"""

from __future__ import annotations

import hashlib
import random
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from eddy.cluster.controller import Controller
from eddy.cluster.placement import HashRing
from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.messages import RaftMessage
from eddy.cluster.raft.ready import ProposalDropped, Ready, Role
from eddy.cluster.raft.sim.check import SafetyViolation
from eddy.cluster.raft.sim.kv import check_history
from eddy.cluster.raft.sim.network import Sim as RaftSim
from eddy.cluster.raft.sim.network import SimNode
from eddy.cluster.raft.types import ENTRY_NORMAL, Entry
from eddy.metadata import (
    ApplyResult,
    MetadataCommand,
    MetadataState,
    decode_command,
    encode_command,
)
from eddy.postcard import PostcardError
from eddy.sim.check import MetaChecker
from eddy.sim.clients import BrokerAgent, Workload
from eddy.sim.config import ClusterConfig, ClusterResult, replay_command
from eddy.sim.node import (
    CLIENT_BASE,
    Batch,
    CommitRequest,
    FetchRequest,
    MetaNode,
    OffsetsReply,
    OutcomeCallback,
    Rpc,
)
from eddy.sim.offsets.clients import OffsetsWorkload
from eddy.sim.offsets.group import OFFSETS_GID, OffsetsGroup
from eddy.sim.service import (
    handle,
    propose_cluster_id,
    read_register,
    tick,
    try_barrier,
)

__all__ = ["ClusterConfig", "ClusterResult", "ClusterSim", "replay_command"]


class ClusterSim(RaftSim):
    def __init__(self, seed: int, config: ClusterConfig | None = None, trace: bool = False,
                 stop_at: int | None = None) -> None:
        self.ccfg = config or ClusterConfig()
        self.meta: dict[int, MetaNode] = {}
        self.agents: dict[int, BrokerAgent] = {}
        self.mcheck = MetaChecker(self.ccfg.fence_grace_ms)
        self.workload = Workload(self)
        self.offsets = self._offsets_group()
        self.oworkload = OffsetsWorkload(self)
        self.activations = 0
        self.failovers = 0
        self.controller_after_crash: list[int] = []
        self._last_controller = 0
        self._ctrl_crash: tuple[int, int] | None = None  # (at, term)
        self._req_ids = 0
        self.quiet = False  # the quiesce window: no new commands
        self._hash = hashlib.blake2b(digest_size=16)
        self._handlers: dict[str, Callable[[Any], None]] = {
            "rpc": self._on_rpc,
            "ctick": lambda p: self._ctick(*p),
            "agent_beat": lambda p: self._agent_beat(*p),
            "agent_timeout": lambda p: self._agent_timeout(*p),
            "admin_next": lambda p: self.workload.admin_next(),
            "admin_timeout": self.workload.admin_timeout,
            "kv_next": self.workload.kv_next,
            "kv_timeout": lambda p: self.workload.kv_timeout(*p),
            "quiesce": self._quiesce,
            "odeliver": self.offsets.deliver,
            "oc_next": self.oworkload.next,
            "oc_timeout": lambda p: self.oworkload.timeout(*p),
        }
        super().__init__(seed, self.ccfg.sim_config(), trace, stop_at)
        #: the controller's probes find crashed nodes (else every probe times out)
        self.probes = self.ccfg.probes if self.ccfg.probes is not None \
            else self.rng.random() < 0.5

    def _offsets_group(self) -> OffsetsGroup:
        """The offsets group (a hook: a test's subclass breaks it)."""
        return OffsetsGroup(self)

    # -- small helpers (also used by the service and the clients) --------------------------
    def node_now(self, i: int) -> int:
        return self.now + self.nodes[i].clock_offset

    def next_req_id(self) -> int:
        self._req_ids += 1
        return self._req_ids

    def read_register(self, i: int, key: str) -> str | None:
        return read_register(self, i, key)

    # -- nodes -----------------------------------------------------------------------------
    def _start(self, i: int) -> None:
        """Boot node i from its disk: the Raft node from the store, the metadata state
        from the stored snapshot (committed entries after it replay through Readies), a
        fresh controller, and its broker, which registers with a new epoch."""
        node = self.nodes[i]
        store = node.disk.volatile
        state = MetadataState()
        if store.snapshot is not None:
            state.restore(store.snapshot.data)
        node.raft = RaftNode(i, self.cfg.raft, random.Random(self.rng.random()), store,
                             now_ms=self.node_now(i))
        node.incarnation += 1
        node.pending = {}
        inc = node.incarnation
        controller = Controller(state, self.ccfg.controller, HashRing(),
                                id_source=lambda: self.rng.getrandbits(128).to_bytes(16, "big"))
        self.meta[i] = MetaNode(i, inc, state, controller, applied=store.snapshot_meta().index)
        self.agents[i] = BrokerAgent(i, inc)
        hb = self.ccfg.controller.heartbeat_interval_ms
        self.schedule(self.rng.randrange(self.cfg.tick_ms), "tick", (i, inc))
        self.schedule(self.rng.randrange(hb), "ctick", (i, inc, 0))
        self.schedule(self.rng.randrange(20, 150), "agent_beat", (i, inc, True))
        if self.ccfg.offsets:
            self.offsets.start(i)

    def crash(self, i: int, restart_after: int | None) -> None:
        node = self.nodes[i]
        if node.raft is None:
            return
        meta = self.meta[i]
        if meta.controller.active and self._ctrl_crash is None:
            self._ctrl_crash = (self.now, meta.active_term)
        meta.controller.stop()
        meta.alive = False
        self.offsets.crash(i)
        super().crash(i, restart_after)

    def _tick(self, i: int, incarnation: int) -> None:
        super()._tick(i, incarnation)
        if self.nodes[i].incarnation == incarnation:
            self.offsets.tick(i)

    def _observe(self, raft: RaftNode, rd: Ready) -> None:
        """``ControllerService._on_soft_state``."""
        super()._observe(raft, rd)
        soft = rd.soft_state
        if soft is None:
            return
        meta = self.meta[raft.id]
        previous, meta.last_leader = meta.last_leader, soft.leader or meta.last_leader
        if soft.role == Role.LEADER:
            if not meta.controller.active and not meta.activating:
                meta.activating, meta.suspect = True, previous
        else:
            if meta.controller.active or meta.activating:
                self.note(f"controller {raft.id} stops (leader now {soft.leader})")
            meta.controller.stop()
            meta.activating = False
            meta.fail_reads()

    def activated(self, i: int) -> None:
        """The read barrier of node i's term is applied: start its controller."""
        meta = self.meta[i]
        raft = self.nodes[i].raft
        if raft is None or not meta.activating or raft.role != Role.LEADER:
            return
        meta.activating = False
        suspects = [meta.suspect] if meta.suspect not in (0, i) else []
        meta.controller.start(self.node_now(i), suspects)
        meta.active_term = raft.term
        self.mcheck.controller_started(i, raft.term)
        self.activations += 1
        if self._last_controller not in (0, i):
            self.failovers += 1
        self._last_controller = i
        if self._ctrl_crash is not None and raft.term > self._ctrl_crash[1]:
            self.controller_after_crash.append(self.now - self._ctrl_crash[0])
            self._ctrl_crash = None
        self.note(f"controller {i} active in term {raft.term} (suspects {suspects})")
        propose_cluster_id(self, i)
        meta.tick_gen += 1
        self.schedule(0, "ctick", (i, meta.incarnation, meta.tick_gen))

    # -- the state machine -----------------------------------------------------------------
    def _apply_entry(self, meta: MetaNode, entry: Entry) -> ApplyResult:
        """One committed entry into node's state (a hook: a test's subclass breaks it)."""
        return meta.state.apply_bytes(entry.data)

    def _kind(self, e: Entry) -> str:
        if e.index in self.mcheck.kinds:
            return self.mcheck.kinds[e.index]
        try:
            return type(decode_command(e.data)).__name__
        except PostcardError:
            return "undecodable"

    def _apply(self, node: SimNode, rd: Ready) -> None:
        meta = self.meta[node.id]
        if rd.snapshot is not None:
            index = rd.snapshot.meta.index
            meta.state.restore(rd.snapshot.data)
            meta.applied = index
            meta.covered_by_snapshot(index)
            self.mcheck.on_state(node.id, index, meta.state)
        for e in rd.committed_entries:
            result: ApplyResult | None = None
            if e.kind == ENTRY_NORMAL:
                result = self._apply_entry(meta, e)
                self.mcheck.on_result(node.id, e.index, result, self._kind(e))
                self.commits += 1
            meta.applied = e.index
            meta.resolve(e.index, e.term, result)
        if rd.committed_entries:
            self.mcheck.on_state(node.id, meta.applied, meta.state)
        meta.ready_reads.extend((rs.index, rs.ctx) for rs in rd.read_states)

    def _maybe_compact(self, node: SimNode, asked: bool) -> None:
        """After each Ready (advanced): compact, then what the driver and the controller
        service do once a Ready is done (resolve proposals, serve reads, the barrier)."""
        raft = node.raft
        if raft is None:
            return
        meta = self.meta[node.id]
        if meta.applied != raft.applied:
            raise SafetyViolation(f"node {node.id}: the state is at {meta.applied}, Raft "
                                  f"applied {raft.applied}")
        store = node.disk.volatile
        due = asked or raft.applied - store.snapshot_meta().index >= self.cfg.compact_every
        if due and raft.applied >= store.first_index() - 1:
            snap = raft.compact(raft.applied, meta.state.snapshot())
            node.disk.write(lambda s: s.compact(snap))
            node.disk.fsync()
        for action in meta.take_deferred():
            action()
        for serve in meta.reads_due():
            serve()
        try_barrier(self, node.id)

    # -- proposals -------------------------------------------------------------------------
    def propose_cmd(self, i: int, command: MetadataCommand, cb: OutcomeCallback) -> bool:
        """Propose at node i; False (and ``cb`` is never called) when it was refused."""
        raft = self.nodes[i].raft
        if raft is None:
            return False
        try:
            index = raft.propose(encode_command(command))
        except ProposalDropped:
            return False
        self.meta[i].waiting[index] = (raft.term, cb)
        return True

    def propose_all(self, i: int, commands: Sequence[MetadataCommand],
                    done: Callable[[list[tuple[ApplyResult | None, bool]]], None]) -> None:
        """Propose in order; ``done`` once every one is resolved (a refused one at once)."""
        batch = Batch(len(commands), done)
        for k, command in enumerate(commands):
            cb = batch.part(k)
            if not self.propose_cmd(i, command, cb):
                cb(None, True)

    def target(self, kind: str, payload: Any) -> tuple[int, bool] | None:
        """Which node's events a pause holds: its controller's and broker's timers too,
        the RPCs and offsets messages addressed to it."""
        if kind in ("ctick", "agent_beat", "agent_timeout"):
            return payload[0], True
        if kind == "rpc":
            return (payload.dst, False) if payload.dst < CLIENT_BASE else None
        if kind == "odeliver":
            return payload.dst, False
        return super().target(kind, payload)

    # -- the networks ----------------------------------------------------------------------
    def send(self, m: RaftMessage) -> None:
        """Raft messages: the offsets group's go as "odeliver" events, as objects (the
        metadata group's cross the codec: the same message types)."""
        if m.group != OFFSETS_GID:
            super().send(m)
            return
        if self.rng.random() < self.drop:
            self.offsets.lost(m)
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            self.schedule(1 + self.rng.randrange(self.cfg.max_delay_ms), "odeliver", m)

    def _lost(self, m: RaftMessage) -> None:
        if m.group == OFFSETS_GID:
            self.offsets.lost(m)
        else:
            super()._lost(m)

    def send_rpc(self, msg: Rpc) -> None:
        if msg.src == msg.dst:  # the local controller: no network
            self.schedule(0, "rpc", msg)
            return
        if self.rng.random() < self.drop:
            return
        client = msg.src >= CLIENT_BASE or msg.dst >= CLIENT_BASE
        copies = 2 if not client and self.rng.random() < self.dup else 1
        for _ in range(copies):
            self.schedule(1 + self.rng.randrange(self.cfg.max_delay_ms), "rpc", msg)

    def _on_rpc(self, msg: Rpc) -> None:
        if (msg.src, msg.dst) in self.blocked:
            return
        if msg.dst >= CLIENT_BASE:
            if isinstance(msg.body, OffsetsReply):
                self.oworkload.on_reply(msg)
            else:
                self.workload.on_reply(msg)
            return
        if self.nodes[msg.dst].raft is None:
            return
        if msg.reply:
            self.agents[msg.dst].on_reply(self, msg)
            return
        if isinstance(msg.body, CommitRequest | FetchRequest):
            self.offsets.handle(msg.dst, msg)
            return
        handle(self, msg.dst, msg)
        self.process(msg.dst)

    # -- timers ----------------------------------------------------------------------------
    def _alive(self, i: int, inc: int) -> MetaNode | None:
        meta = self.meta.get(i)
        if meta is None or not meta.alive or meta.incarnation != inc:
            return None
        return meta

    def _ctick(self, i: int, inc: int, gen: int) -> None:
        meta = self._alive(i, inc)
        if meta is None or gen != meta.tick_gen:
            return
        tick(self, i)
        self.process(i)
        if meta.controller.active:
            self.mcheck.check_fencing(self.now, meta.active_term, meta.state)
        interval = self.ccfg.controller.heartbeat_interval_ms
        now = self.node_now(i)
        wake = meta.controller.next_wakeup(now) if meta.controller.active else None
        delay = interval if wake is None else max(1, min(interval, wake - now))
        self.schedule(delay, "ctick", (i, inc, gen))

    def _agent_beat(self, i: int, inc: int, periodic: bool) -> None:
        if self._alive(i, inc) is None:
            return
        self.agents[i].beat(self)
        if periodic:
            self.schedule(self.ccfg.controller.heartbeat_interval_ms, "agent_beat",
                          (i, inc, True))

    def _agent_timeout(self, i: int, inc: int, req_id: int) -> None:
        if self._alive(i, inc) is not None:
            self.agents[i].on_timeout(self, req_id)

    # -- the run ---------------------------------------------------------------------------
    def _dispatch(self, kind: str, payload: Any) -> None:
        self._hash.update(f"{self.now}:{kind};".encode())
        handler = self._handlers.get(kind)
        if handler is None:
            super()._dispatch(kind, payload)
        else:
            handler(payload)
            for n in self.nodes.values():
                if n.raft is not None:
                    self.checker.check_role(n.raft)
        self._check_controllers()

    def _check_controllers(self) -> None:
        for i, meta in self.meta.items():
            raft = self.nodes[i].raft
            if not meta.alive or not meta.controller.active:
                continue
            if raft is None or raft.role != Role.LEADER or raft.term != meta.active_term:
                raise SafetyViolation(f"controller safety: node {i}'s controller of term "
                                      f"{meta.active_term} is active while it does not lead")

    def _quiesce(self, _: object) -> None:
        self.note("quiesce: no new commands")
        self.quiet = True

    def run(self) -> ClusterResult:  # type: ignore[override]
        self.workload.start()
        if self.ccfg.offsets:
            self.oworkload.start()
        self.schedule(self.ccfg.duration_ms + self.ccfg.settle_ms, "quiesce", None)
        failure: str | None
        try:
            base = super().run()
            failure, at = base.failure, base.failed_at_event
        except Exception as exc:  # a crash of the code under test is a failure too
            tb = traceback.format_exc(limit=-4)
            failure, at = f"exception {type(exc).__name__}: {exc}\n{tb}", self.events
        for i in sorted(self.meta):
            if self.nodes[i].raft is not None:
                self._hash.update(self.meta[i].state.snapshot())
        for data in self.offsets.state_bytes():
            self._hash.update(data)
        cfg = self.ccfg
        return ClusterResult(
            self.seed, cfg.nodes, failure, at, self.events, self.elections,
            self.activations, self.failovers, self.controller_after_crash,
            self.mcheck.commands_ok, self.mcheck.applied_kinds(), self.workload.ok,
            self.oworkload.ok, self.oworkload.fetched, self.offsets.elections,
            self.offsets.activations,
            len(self.workload.acked_topics),
            self.crash_all_count, self.cfg.duration_ms + self.cfg.settle_ms,
            self._hash.hexdigest(),
            replay_command(cfg.nodes, self.seed, cfg))

    def _final_checks(self) -> str | None:
        up = {i: n.raft for i, n in self.nodes.items() if n.raft is not None}
        lead = self.leader()
        if lead is None:
            return f"liveness: no metadata leader {self.cfg.settle_ms} ms after healing"
        if len(up) != len(self.nodes) or lead.commit != lead.applied:
            return "liveness: not every node is up and applied after healing"
        active = sorted(i for i, m in self.meta.items() if m.alive and m.controller.active)
        failure = self.mcheck.final(
            {i: self.meta[i].state for i in up}, {i: self.meta[i].applied for i in up},
            active, lead.id, {i: a.epoch for i, a in self.agents.items()},
            self.workload.acked_topics)
        if failure is not None:
            return failure
        errors = check_history(self.workload.history)
        if errors:
            return "linearizability: " + "\n".join(errors)
        if not self.ccfg.offsets:
            return None
        failure = self.offsets.final()
        if failure is not None:
            return failure
        errors = check_history(self.oworkload.history)
        return "offsets linearizability: " + "\n".join(errors) if errors else None
