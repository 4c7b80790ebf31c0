"""A deterministic simulated network that drives N GossipNodes (tests and bench).

Virtual clock, one event heap. A message is delivered after a latency drawn from
``latency_ms``, or lost with probability ``loss``. ``partition(groups)`` cuts every link between
groups; ``crash(i)`` stops a node (messages to it are lost). The transport's failure detection is
modelled: a send to an unreachable peer, and every open link (``Connect`` intent, or active
view) of a crashed or cut-off peer, reports ``peer_failed`` to the other end after
``detection_ms``. ``restart(i)`` brings a node back with the same id and empty state; it
rejoins through the seed (node 0's address). Everything is seeded by one integer.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from eddy.mesh.gossip.messages import Connect, Delivered, Drop, GossipMessage, PeerRef
from eddy.mesh.gossip.node import GossipConfig, GossipNode

_MSG, _DIAL, _FAIL = 0, 1, 2


@dataclass(frozen=True, slots=True)
class SimConfig:
    latency_ms: tuple[int, int] = (5, 30)
    loss: float = 0.0
    detection_ms: int = 1_000
    tick_ms: int = 50
    wire: Callable[[GossipMessage], GossipMessage] | None = None  # e.g. postcard round trip


@dataclass(slots=True)
class Delivery:
    node: int
    at_ms: int
    round: int


@dataclass(slots=True)
class BroadcastRecord:
    origin: int
    topic: str
    sent_ms: int
    deliveries: list[Delivery] = field(default_factory=list)


class GossipSim:
    def __init__(self, n: int, seed: int, sim: SimConfig | None = None,
                 config: GossipConfig | None = None,
                 topics_of: Callable[[int], frozenset[str] | None] | None = None) -> None:
        self.n = n
        self.sim = sim or SimConfig()
        self.config = config or GossipConfig()
        self.topics_of = topics_of or (lambda _i: None)
        self.rng = random.Random(seed)
        self.now = 0
        self.ids: list[bytes] = []
        seen: set[bytes] = set()
        while len(self.ids) < n:
            node_id = self.rng.randbytes(32)
            if node_id not in seen:
                seen.add(node_id)
                self.ids.append(node_id)
        self.addrs = [f"node{i}.sim:7946" for i in range(n)]
        self.index = {node_id: i for i, node_id in enumerate(self.ids)}
        self.by_addr = {a: i for i, a in enumerate(self.addrs)}
        self.nodes: list[GossipNode | None] = [None] * n
        self.incarnation = [0] * n
        self.links: list[set[bytes]] = [set() for _ in range(n)]
        self.group: list[int] = [0] * n
        self.sent: Counter[str] = Counter()
        self.lost = 0
        self.broadcasts: dict[bytes, BroadcastRecord] = {}
        self.delivered_twice: list[tuple[int, bytes]] = []
        self.events_of: list[list[object]] = [[] for _ in range(n)]
        self._heap: list[tuple[int, int, int, int, object, object]] = []
        self._seq = 0
        self._fail_pending: set[tuple[int, bytes]] = set()
        self._next_tick = 0

    # -- node lifecycle ---------------------------------------------------------------------------
    def start(self, i: int) -> GossipNode:
        seeds = [self.addrs[0]] if i != 0 else []
        node = GossipNode(PeerRef(self.ids[i], self.addrs[i]), seeds,
                          random.Random(self.rng.getrandbits(64)), self.config,
                          self.topics_of(i))
        self.nodes[i] = node
        self.incarnation[i] += 1
        self.links[i] = set()
        node.tick(self.now)
        self._drain(i)
        return node

    def start_all(self, stagger_ms: int = 20) -> None:
        """Start node 0 (the seed), then the others ``stagger_ms`` apart."""
        self.start(0)
        for i in range(1, self.n):
            self.run_for(stagger_ms)
            self.start(i)

    def crash(self, i: int) -> None:
        self.nodes[i] = None
        self.incarnation[i] += 1
        self._cut([i])

    def restart(self, i: int) -> GossipNode:
        assert self.nodes[i] is None
        return self.start(i)

    def alive(self) -> list[int]:
        return [i for i in range(self.n) if self.nodes[i] is not None]

    def partition(self, groups: list[list[int]]) -> None:
        for g, members in enumerate(groups):
            for i in members:
                self.group[i] = g
        self._cut(range(self.n))

    def heal(self) -> None:
        self.group = [0] * self.n

    def reachable(self, a: int, b: int) -> bool:
        return self.nodes[b] is not None and self.group[a] == self.group[b]

    # -- driving ----------------------------------------------------------------------------------
    def broadcast(self, i: int, payload: bytes, topic: str = "") -> bytes:
        node = self.nodes[i]
        assert node is not None
        msg_id = node.broadcast(payload, topic, self.now)
        self.broadcasts[msg_id] = BroadcastRecord(i, topic, self.now)
        self._drain(i)
        return msg_id

    def run_for(self, ms: int) -> None:
        self.run_until(self.now + ms)

    def run_until(self, t_ms: int) -> None:
        while True:
            next_evt = self._heap[0][0] if self._heap else None
            if self._next_tick <= t_ms and (next_evt is None or self._next_tick <= next_evt):
                self.now = self._next_tick
                self._next_tick += self.sim.tick_ms
                for i in range(self.n):
                    node = self.nodes[i]
                    if node is not None:
                        node.tick(self.now)
                        self._drain(i)
                continue
            if next_evt is None or next_evt > t_ms:
                break
            at, _, kind, dst, a, b = heapq.heappop(self._heap)
            self.now = at
            self._dispatch(kind, dst, a, b)
        self.now = t_ms

    def run_while(self, cond: Callable[[], bool], limit_ms: int, step_ms: int = 50) -> int:
        """Run until ``cond()`` is false or ``limit_ms`` passed; returns the elapsed ms."""
        start = self.now
        while cond() and self.now - start < limit_ms:
            self.run_for(step_ms)
        return self.now - start

    # -- observations -----------------------------------------------------------------------------
    def active_view(self, i: int) -> set[int]:
        node = self.nodes[i]
        return set() if node is None else {self.index[p] for p in node.hv.active}

    def connected(self) -> bool:
        """The graph of active views over the live nodes is connected."""
        live = self.alive()
        if not live:
            return True
        seen = {live[0]}
        todo = [live[0]]
        while todo:
            i = todo.pop()
            for j in self.active_view(i):
                if self.nodes[j] is not None and j not in seen:
                    seen.add(j)
                    todo.append(j)
        return len(seen) == len(live)

    def in_any_active_view(self, i: int) -> bool:
        node_id = self.ids[i]
        return any(node is not None and node_id in node.hv.active for node in self.nodes)

    def missing(self, msg_id: bytes, wants: Callable[[int], bool] | None = None) -> list[int]:
        """Live nodes (that want the topic) that have not delivered ``msg_id``."""
        rec = self.broadcasts[msg_id]
        got = {d.node for d in rec.deliveries} | {rec.origin}
        return [i for i in self.alive()
                if i not in got and (wants is None or wants(i))]

    # -- internals --------------------------------------------------------------------------------
    def _cut(self, nodes: Iterable[int]) -> None:
        for i in nodes:
            for j in range(self.n):
                node = self.nodes[j]
                if node is None or j == i:
                    continue
                peer = self.ids[i]
                if (peer in self.links[j] or peer in node.hv.active) and not self.reachable(j, i):
                    self._schedule_fail(j, peer)

    def _schedule_fail(self, i: int, peer: bytes) -> None:
        key = (i, peer)
        if key in self._fail_pending:
            return
        self._fail_pending.add(key)
        self._push(self.now + self.sim.detection_ms, _FAIL, i, peer, self.incarnation[i])

    def _push(self, at: int, kind: int, dst: int, a: object, b: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, dst, a, b))

    def _dispatch(self, kind: int, dst: int, a: object, b: object) -> None:
        node = self.nodes[dst]
        if kind == _FAIL:
            assert isinstance(a, bytes)
            self._fail_pending.discard((dst, a))
            if node is None or b != self.incarnation[dst]:
                return
            j = self.index[a]
            if self.reachable(dst, j):
                return  # healed or restarted meanwhile: the connection would have held
            self.links[dst].discard(a)
            node.peer_failed(a, self.now)
            self._drain(dst)
            return
        assert isinstance(b, tuple)
        src, inc = a, b[0]
        assert isinstance(src, int)
        if node is None or inc != self.incarnation[dst] or not self.reachable(src, dst):
            self.lost += 1
            return
        msg = b[1]
        if kind == _MSG:
            self.links[dst].add(self.ids[src])
        node.receive(self.ids[src], msg, self.now)
        self._drain(dst)

    def _drain(self, i: int) -> None:
        node = self.nodes[i]
        if node is None:
            return
        for intent in node.take_intents():
            if isinstance(intent, Connect):
                self.links[i].add(intent.node_id)
            elif isinstance(intent, Drop):
                self.links[i].discard(intent.node_id)
        for ev in node.take_events():
            if isinstance(ev, Delivered):
                rec = self.broadcasts.get(ev.msg_id)
                if rec is not None:
                    if any(d.node == i for d in rec.deliveries):
                        self.delivered_twice.append((i, ev.msg_id))
                    rec.deliveries.append(Delivery(i, self.now, ev.round))
            self.events_of[i].append(ev)
            if len(self.events_of[i]) > 256:
                del self.events_of[i][:128]
        for peer, msg in node.take_outbox():
            self._transmit(i, self.index.get(peer), msg, _MSG, peer)
        for addr, msg in node.take_dials():
            self._transmit(i, self.by_addr.get(addr), msg, _DIAL, None)

    def _transmit(self, src: int, dst: int | None, msg: GossipMessage, kind: int,
                  peer: bytes | None) -> None:
        self.sent[type(msg).__name__] += 1
        if dst is None:
            return
        if not self.reachable(src, dst):
            if peer is not None:
                self._schedule_fail(src, peer)
            return
        if self.sim.loss and self.rng.random() < self.sim.loss:
            self.lost += 1
            return
        if self.sim.wire is not None:
            msg = self.sim.wire(msg)
        lo, hi = self.sim.latency_ms
        self._push(self.now + self.rng.randint(lo, hi), kind, dst, src,
                   (self.incarnation[dst], msg))
