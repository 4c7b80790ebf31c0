"""A deterministic simulation of a Raft group: virtual clock, a network that drops,
delays, duplicates and reorders messages and can be partitioned (both ways or one way),
a disk per node whose writes survive a crash only once fsynced, clock jumps, pauses,
crashes and restarts (one at a time or every node at once), and key-value clients.

A pause is a node that does not run for a while (SIGSTOP, a GC pause, a starved CPU, a
long step on its loop), one node, the leader or every node at once (a stalled machine):
what is addressed to it waits (messages, client requests), and when it resumes its own
timers come first (the worst order), then what waited, in arrival order. Its clock ran
on meanwhile: it sees the gap. A clock jump is the clock alone moving forward.

Every run is a function of its seed. ``Sim.run()`` returns a ``SimResult``; a failure
names the seed and the event at which it happened (``--seed N --trace --stop-at K``
replays it with each event printed)."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import (
    InstallSnapshot,
    RaftMessage,
    RaftMessageError,
    decode_message,
    encode_message,
)
from eddy.cluster.raft.ready import ProposalDropped, RaftConfig, Ready, Role
from eddy.cluster.raft.sim.check import SafetyChecker, SafetyViolation
from eddy.cluster.raft.sim.clients import ClientPool
from eddy.cluster.raft.sim.disk import Disk, persist_ready
from eddy.cluster.raft.sim.kv import KvStateMachine, check_history
from eddy.cluster.raft.types import ConfState


@dataclass(frozen=True, slots=True)
class SimConfig:
    nodes: int = 3
    duration_ms: int = 4_000  # faults and clients run this long, then the cluster heals
    settle_ms: int = 2_500  # healed, faults off: every node must converge in this time
    tick_ms: int = 20
    max_delay_ms: int = 12
    drop: float | None = None  # None: drawn per seed
    duplicate: float | None = None
    faults: bool = True
    fault_gap_ms: int = 450  # mean time between faults
    pauses: bool = True  # pauses among the faults (a node, the leader, every node)
    crash_mid_ready: float = 0.02  # a crash between writing a Ready and its fsync
    clients: int = 3
    keys: int = 2
    max_ops_per_client: int = 120
    client_timeout_ms: int = 1_500
    compact_every: int = 40  # entries applied between snapshots
    crash_all_at_ms: tuple[int, ...] = ()  # every node crashes at once (mid-write) then
    codec: bool = True  # messages cross the network as postcard bytes
    raft: RaftConfig = field(default_factory=RaftConfig)


@dataclass
class SimResult:
    seed: int
    failure: str | None
    failed_at_event: int | None
    events: int
    elections: int
    elect_after_leader_crash_ms: list[int]
    ops_ok: int
    commits: int  # distinct log indexes committed
    virtual_ms: int


class SimNode:
    def __init__(self, node_id: int, store: MemoryLogStore) -> None:
        self.id = node_id
        self.disk = Disk(store)
        self.raft: RaftNode | None = None
        self.sm = KvStateMachine()
        self.clock_offset = 0
        self.incarnation = 0
        self.paused_until = 0  # sim time: nothing of this node runs before it
        self.pending: dict[int, tuple[int, int, int]] = {}  # index -> (client, op_id, term)


class Sim:
    def __init__(self, seed: int, config: SimConfig | None = None, trace: bool = False,
                 stop_at: int | None = None) -> None:
        self.seed = seed
        self.cfg = cfg = config or SimConfig()
        self.rng = random.Random(seed)
        self.trace = trace
        self.stop_at = stop_at
        self.now = 0
        self.events = 0
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = 0
        self.drop = cfg.drop if cfg.drop is not None else self.rng.choice([0.0, 0.01, 0.05,
                                                                            0.1])
        self.dup = cfg.duplicate if cfg.duplicate is not None else self.rng.choice([0.0, 0.02])
        self.blocked: set[tuple[int, int]] = set()  # (src, dst) pairs cut off
        voters = tuple(range(1, cfg.nodes + 1))
        self.nodes = {i: SimNode(i, MemoryLogStore(ConfState(voters=voters))) for i in voters}
        self.checker = SafetyChecker()
        self.clients = ClientPool(self, cfg)
        self.elections = 0
        self.pauses = 0
        self.isolated: list[tuple[int, int]] = []  # (when, node) of scripted isolations
        self._leader_crash_at: int | None = None
        self._leader_crash_term = 0
        self.elect_after_leader_crash: list[int] = []
        self.commits = 0
        self.log_lines: list[str] = []
        self.crash_all_count = 0
        self._power_cut = False
        self.commits_before_crash_all: dict[int, tuple[int, bytes]] = {}
        for at in cfg.crash_all_at_ms:
            self.schedule(at, "crash_all", None)
        for i in voters:
            self._start(i)

    # -- plumbing --------------------------------------------------------------------------
    def schedule(self, delay: int, kind: str, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + max(0, delay), self._seq, kind, payload))

    def target(self, kind: str, payload: Any) -> tuple[int, bool] | None:
        """The node an event runs on, and whether it is one of that node's timers (None:
        it runs on no node, as a client's event). Subclasses add their kinds."""
        if kind == "tick":
            return payload[0], True
        if kind == "deliver":
            return payload[0], False
        if kind == "client_arrive":
            return payload[2], False
        return None

    def pause(self, ids: list[int], ms: int) -> None:
        """Stop nodes ``ids`` running for ``ms`` (those already paused: until the later
        end). A crash ends a pause."""
        for i in ids:
            node = self.nodes[i]
            if node.raft is not None:
                node.paused_until = max(node.paused_until, self.now + ms)
        self.pauses += 1
        self.note(f"pause {ids} for {ms} ms")

    def _held(self, kind: str, payload: Any) -> bool:
        """Hold an event for a paused node until it resumes: its timers first, then the
        rest in arrival order."""
        where = self.target(kind, payload)
        if where is None:
            return False
        node = self.nodes.get(where[0])
        if node is None or node.paused_until <= self.now:
            return False
        self._seq += 1
        seq = -self._seq if where[1] else self._seq
        heapq.heappush(self._queue, (node.paused_until, seq, kind, payload))
        return True

    def note(self, text: str) -> None:
        if self.trace:
            line = f"[{self.events:6d} {self.now:6d}ms] {text}"
            self.log_lines.append(line)
            print(line)

    def up(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.raft is not None]

    def leader(self) -> RaftNode | None:
        best: RaftNode | None = None
        for n in self.nodes.values():
            r = n.raft
            if r is not None and r.role == Role.LEADER and (best is None or r.term > best.term):
                best = r
        return best

    # -- nodes -----------------------------------------------------------------------------
    def _start(self, i: int) -> None:
        node = self.nodes[i]
        store = node.disk.volatile
        node.sm = (KvStateMachine.decode(store.snapshot.data) if store.snapshot
                   else KvStateMachine())
        node.raft = RaftNode(i, self.cfg.raft, random.Random(self.rng.random()), store,
                             now_ms=self.now + node.clock_offset)
        node.incarnation += 1
        node.pending = {}
        self.schedule(self.rng.randrange(self.cfg.tick_ms), "tick", (i, node.incarnation))

    def crash(self, i: int, restart_after: int | None) -> None:
        node = self.nodes[i]
        if node.raft is None:
            return
        if node.raft.role == Role.LEADER and self._leader_crash_at is None:
            self._leader_crash_at, self._leader_crash_term = self.now, node.raft.term
        self.note(f"crash {i}")
        node.raft = None
        node.paused_until = 0
        node.disk.crash(self.rng)
        node.pending = {}
        self.checker.forget_node(i)
        if restart_after is not None:
            self.schedule(restart_after, "restart", i)

    def crash_all(self) -> None:
        """Every node at once (a power cut): unsynced writes are lost, then all restart."""
        self.crash_all_count += 1
        self.commits_before_crash_all.update(self.checker.committed)
        for i in self.nodes:
            self.crash(i, None)
        for i in self.nodes:
            self.schedule(self.rng.randrange(50, 300), "restart", i)

    def _tick(self, i: int, incarnation: int) -> None:
        node = self.nodes[i]
        if node.raft is None or node.incarnation != incarnation:
            return
        node.raft.tick(self.now + node.clock_offset)
        self.process(i)
        self.schedule(self.cfg.tick_ms, "tick", (i, incarnation))

    def process(self, i: int) -> None:
        """The driver: carry out every Ready the node has."""
        node = self.nodes[i]
        while node.raft is not None and node.raft.has_ready():
            raft = node.raft
            rd = raft.ready()
            assert rd is not None
            self.checker.check_ready(raft, rd)
            self._observe(raft, rd)
            for m in rd.messages:
                self.send(m)
            self._persist(node, rd)
            if rd.must_sync() and self._power_cut:
                self._power_cut = False
                self.note(f"power cut while node {i} writes")
                self.crash_all()
                return
            if rd.must_sync() and self.rng.random() < self.cfg.crash_mid_ready \
                    and self.cfg.faults and self.now < self.cfg.duration_ms:
                self.crash(i, self.rng.randrange(50, 800))  # written, not fsynced
                return
            node.disk.fsync()
            for m in rd.persisted_messages:
                self.send(m)
            self._apply(node, rd)
            raft.advance(rd)
            self._maybe_compact(node, rd.request_snapshot)

    def _persist(self, node: SimNode, rd: Ready) -> None:
        persist_ready(node.disk, rd)

    def _apply(self, node: SimNode, rd: Ready) -> None:
        if rd.snapshot is not None:
            node.sm = KvStateMachine.decode(rd.snapshot.data)
            node.pending = {k: v for k, v in node.pending.items()
                            if k > rd.snapshot.meta.index}
        for e in rd.committed_entries:
            result = node.sm.apply(e)
            self.commits += 1
            waiting = node.pending.pop(e.index, None)
            if waiting is not None:
                client, op_id, term = waiting
                self.clients.reply(client, op_id, e.term == term, result)

    def _maybe_compact(self, node: SimNode, asked: bool) -> None:
        raft = node.raft
        if raft is None:
            return
        store = node.disk.volatile
        if asked or raft.applied - store.snapshot_meta().index >= self.cfg.compact_every:
            if raft.applied < store.first_index() - 1:
                return
            snap = raft.compact(raft.applied, node.sm.encode())
            node.disk.write(lambda s: s.compact(snap))
            node.disk.fsync()

    def _observe(self, raft: RaftNode, rd: Ready) -> None:
        if rd.soft_state is None or rd.soft_state.role != Role.LEADER:
            return
        self.elections += 1
        self.note(f"node {raft.id} leads term {raft.term}")
        if self._leader_crash_at is not None and raft.term > self._leader_crash_term:
            self.elect_after_leader_crash.append(self.now - self._leader_crash_at)
            self._leader_crash_at = None

    # -- network ---------------------------------------------------------------------------
    def send(self, m: RaftMessage) -> None:
        if self.rng.random() < self.drop:
            self._lost(m)
            return
        copies = 2 if self.rng.random() < self.dup else 1
        payload: Any = encode_message(m) if self.cfg.codec else m
        for _ in range(copies):
            self.schedule(1 + self.rng.randrange(self.cfg.max_delay_ms), "deliver",
                          (m.dst, payload))

    def _lost(self, m: RaftMessage) -> None:
        if isinstance(m, InstallSnapshot):
            src = self.nodes[m.src].raft
            if src is not None:  # the transport knows a stream failed
                src.report_snapshot(m.dst, False)

    def _deliver(self, item: tuple[int, Any]) -> None:
        payload = item[1]
        m: RaftMessage = decode_message(payload) if self.cfg.codec else payload
        dst = self.nodes[m.dst]
        if dst.raft is None or (m.src, m.dst) in self.blocked:
            self._lost(m)
            return
        self.note(f"{type(m).__name__} {m.src}->{m.dst} t{m.term}")
        try:
            dst.raft.step(m)
        except RaftMessageError as exc:
            raise SafetyViolation(f"node {m.dst} rejected a message from {m.src}: {exc}") \
                from exc
        if isinstance(m, InstallSnapshot):
            src = self.nodes[m.src].raft
            if src is not None:
                src.report_snapshot(m.dst, True)
        self.process(m.dst)

    # -- client requests (called by ClientPool) --------------------------------------------
    def propose(self, i: int, client: int, op_id: int, data: bytes) -> int | None:
        """Propose at node i; returns the leader hint on refusal (0 unknown), None when
        proposed."""
        node = self.nodes[i]
        if node.raft is None:
            return 0
        try:
            index = node.raft.propose(data)
        except ProposalDropped as exc:
            return getattr(exc, "leader_hint", 0)
        node.pending[index] = (client, op_id, node.raft.term)
        self.process(i)
        return None

    # -- faults ----------------------------------------------------------------------------
    def _fault(self) -> None:
        if self.now >= self.cfg.duration_ms:
            return
        r = self.rng
        ids = list(self.nodes)
        kinds = ["crash", "crash_leader", "partition", "one_way", "clock", "heal"]
        if self.cfg.pauses:
            kinds += ["pause", "pause_leader", "pause_all"]
        kind = r.choice([*kinds, "crash_all"] if r.random() < 0.05 else kinds)
        if kind == "crash":
            self.crash(r.choice(ids), r.randrange(100, 1500))
        elif kind == "crash_leader":
            lead = self.leader()
            if lead is not None:
                self.crash(lead.id, r.randrange(100, 1500))
        elif kind == "crash_all":
            self.crash_all()
        elif kind in ("partition", "one_way"):
            side = set(r.sample(ids, r.randrange(1, len(ids))))
            for a in side:
                for b in set(ids) - side:
                    self.blocked.add((a, b))
                    if kind == "partition":
                        self.blocked.add((b, a))
            self.note(f"{kind} {sorted(side)} | {sorted(set(ids) - side)}")
            self.schedule(r.randrange(200, 2000), "heal", None)
        elif kind in ("pause", "pause_leader", "pause_all"):
            # over by the time the faults stop: the cluster then settles with every node
            ms = min(r.randrange(100, 2000), self.cfg.duration_ms - self.now)
            lead = self.leader()
            who = [r.choice(ids)] if kind == "pause" else ids if kind == "pause_all" else \
                [lead.id] if lead is not None else []
            if who:
                self.pause(who, ms)
        elif kind == "clock":
            i = r.choice(ids)
            self.nodes[i].clock_offset += r.randrange(100, 2000)
            self.note(f"clock jump on {i}")
        else:
            self.blocked.clear()
        self.schedule(int(r.expovariate(1 / self.cfg.fault_gap_ms)) + 1, "fault", None)

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg = self.cfg
        self.clients.start()
        if cfg.faults:
            self.schedule(self.rng.randrange(200, 800), "fault", None)
        self.schedule(cfg.duration_ms, "settle", None)
        end = cfg.duration_ms + cfg.settle_ms
        failure: str | None = None
        try:
            while self._queue and self._queue[0][0] <= end:
                self.now, _, kind, payload = heapq.heappop(self._queue)
                if self._held(kind, payload):
                    continue
                self.events += 1
                if self.stop_at is not None and self.events > self.stop_at:
                    break
                self._dispatch(kind, payload)
            if self.stop_at is None:
                failure = self._final_checks()
        except SafetyViolation as exc:
            failure = str(exc)
        return SimResult(self.seed, failure, self.events if failure else None, self.events,
                         self.elections, self.elect_after_leader_crash,
                         self.clients.ok, len(self.checker.committed),
                         cfg.duration_ms + cfg.settle_ms)

    def _dispatch(self, kind: str, payload: Any) -> None:
        if kind == "tick":
            self._tick(*payload)
        elif kind == "deliver":
            self._deliver(payload)
        elif kind == "restart":
            if self.nodes[payload].raft is None:
                self.note(f"restart {payload}")
                self._start(payload)
        elif kind == "heal":
            self.blocked.clear()
        elif kind == "fault":
            self._fault()
        elif kind == "isolate":  # scheduled by a test: a node id or "leader"
            lead = self.leader()
            i = lead.id if payload == "leader" and lead is not None else payload
            if isinstance(i, int):
                others = [j for j in self.nodes if j != i]
                self.blocked |= {(i, j) for j in others} | {(j, i) for j in others}
                self.isolated.append((self.now, i))
                self.note(f"isolate {i}")
        elif kind == "pause":  # scheduled by a test: (node ids, "leader" or "follower", ms)
            who, ms = payload
            lead = self.leader()
            if who == "leader":
                ids = [lead.id] if lead is not None else []
            elif who == "follower":
                ids = [i for i in self.up() if lead is None or i != lead.id][:1]
            else:
                ids = list(who)
            if ids:
                self.pause(ids, ms)
        elif kind == "crash_all":
            self._power_cut = True  # at the next Ready that writes, before its fsync
        elif kind == "settle":
            self.note("settle: heal, restart, no more faults")
            self.blocked.clear()
            self.drop = self.dup = 0.0
            for i, n in self.nodes.items():
                if n.raft is None:
                    self._start(i)
        else:
            self.clients.event(kind, payload)
        for n in self.nodes.values():
            if n.raft is not None:
                self.checker.check_role(n.raft)

    def _final_checks(self) -> str | None:
        rafts = [n.raft for n in self.nodes.values() if n.raft is not None]
        applied = {r.id: r.applied for r in rafts}
        lead = self.leader()
        if lead is None:
            return f"liveness: no leader {self.cfg.settle_ms} ms after healing"
        if len(set(applied.values())) != 1 or lead.commit != lead.applied:
            return f"liveness: nodes did not converge after healing (applied {applied})"
        datas = {n.sm.encode() for n in self.nodes.values()}
        if len(datas) != 1:
            return "state-machine safety: replicas hold different data at the same index"
        errors = check_history(self.clients.history)
        return "linearizability: " + "\n".join(errors) if errors else None
