"""A lock-step harness for scenario tests (etcd-io/raft's ``network`` in spirit): every
Ready is persisted at once (durably), messages are delivered in order until the cluster is
quiet, and a test cuts links, drops message kinds, crashes and restarts nodes by hand."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import InstallSnapshot, RaftMessage
from eddy.cluster.raft.ready import RaftConfig, Role
from eddy.cluster.raft.types import ENTRY_NORMAL, ConfState, Entry

Filter = Callable[[RaftMessage], bool]  # True: deliver


@dataclass
class Member:
    store: MemoryLogStore
    raft: RaftNode | None
    applied: list[Entry] = field(default_factory=list)  # normal entries, in apply order
    state: bytes = b""  # the "state machine": the data of every applied entry, joined
    snapshots_installed: int = 0


class LockstepCluster:
    def __init__(self, n: int, config: RaftConfig | None = None, seed: int = 1,
                 compact_every: int = 0) -> None:
        self.config = config or RaftConfig()
        self.rng = random.Random(seed)
        self.now = 0
        self.compact_every = compact_every
        self.members: dict[int, Member] = {}
        self.cut: set[tuple[int, int]] = set()
        self.filter: Filter | None = None
        self.sent: list[RaftMessage] = []  # every message delivered, for assertions
        voters = tuple(range(1, n + 1))
        for i in voters:
            self.add_member(i, MemoryLogStore(ConfState(voters=voters)))

    def add_member(self, i: int, store: MemoryLogStore) -> None:
        self.members[i] = Member(store, None)
        self.restart(i)

    def node(self, i: int) -> RaftNode:
        raft = self.members[i].raft
        assert raft is not None, f"node {i} is down"
        return raft

    def leader(self) -> RaftNode | None:
        leads = [m.raft for m in self.members.values()
                 if m.raft is not None and m.raft.role == Role.LEADER]
        return max(leads, key=lambda r: r.term) if leads else None

    # -- faults ----------------------------------------------------------------------------
    def isolate(self, i: int) -> None:
        for j in self.members:
            if j != i:
                self.cut |= {(i, j), (j, i)}

    def heal(self) -> None:
        self.cut.clear()

    def crash(self, i: int) -> None:
        self.members[i].raft = None

    def restart(self, i: int) -> None:
        m = self.members[i]
        m.applied = []
        m.state = m.store.snapshot.data if m.store.snapshot else b""
        m.raft = RaftNode(i, self.config, random.Random(self.rng.random()), m.store,
                          now_ms=self.now)

    # -- driving ---------------------------------------------------------------------------
    def settle(self, limit: int = 100_000) -> None:
        """Process Readies and deliver messages until nothing moves."""
        outbox: list[RaftMessage] = []
        for _ in range(limit):
            for i in self.members:
                outbox.extend(self._process(i))
            if not outbox:
                return
            batch, outbox = outbox, []
            for msg in batch:
                self._deliver(msg)
        raise RuntimeError("the cluster did not settle")

    def _deliver(self, msg: RaftMessage) -> None:
        dst = self.members.get(msg.dst)
        if dst is None or dst.raft is None or (msg.src, msg.dst) in self.cut or (
                self.filter is not None and not self.filter(msg)):
            return
        self.sent.append(msg)
        dst.raft.step(msg)
        if isinstance(msg, InstallSnapshot):
            src = self.members[msg.src].raft
            if src is not None:
                src.report_snapshot(msg.dst, True)

    def _process(self, i: int) -> list[RaftMessage]:
        m = self.members[i]
        out: list[RaftMessage] = []
        while m.raft is not None and m.raft.has_ready():
            raft = m.raft
            rd = raft.ready()
            assert rd is not None
            s = m.store
            if rd.snapshot is not None:
                s.install_snapshot(rd.snapshot)
                m.state = rd.snapshot.data
                m.snapshots_installed += 1
            if rd.entries:
                s.append(rd.entries)
            if rd.hard_state is not None:
                s.set_hard_state(rd.hard_state)
            if rd.conf_state is not None:
                s.set_conf_state(rd.conf_state)
            out.extend(rd.messages)
            out.extend(rd.persisted_messages)
            for e in rd.committed_entries:
                if e.kind == ENTRY_NORMAL:
                    m.applied.append(e)
                    m.state += e.data + b";"
            raft.advance(rd)
            due = self.compact_every and raft.applied - s.snapshot_meta().index >= \
                self.compact_every
            if (rd.request_snapshot or due) and raft.applied >= s.first_index() - 1:
                s.compact(raft.compact(raft.applied, m.state))
        return out

    def tick(self, ms: int, step: int = 10, only: Iterable[int] | None = None) -> None:
        """Let ``ms`` pass in ``step`` increments, settling after each."""
        ids = list(only) if only is not None else list(self.members)
        for _ in range(ms // step):
            self.now += step
            for i in ids:
                raft = self.members[i].raft
                if raft is not None:
                    raft.tick(self.now)
            self.settle()

    def elect(self, i: int) -> RaftNode:
        """Make node i campaign now (as if its election timer fired) and settle."""
        raft = self.node(i)
        raft._hup(transfer=False)
        self.settle()
        assert raft.role == Role.LEADER, f"node {i} did not win: {raft.role.name}"
        return raft

    def propose(self, i: int, data: bytes) -> int:
        index = self.node(i).propose(data)
        self.settle()
        return index
