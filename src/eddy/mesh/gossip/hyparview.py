"""HyParView membership (Leitão, Pereira, Rodrigues, DSN 2007) as a sans-IO state machine.

A small symmetric *active view* (the links broadcast runs over) and a larger *passive view*
(backups). Joins spread by a random walk (ForwardJoin, ARWL hops; the walk drops the newcomer
into a passive view at PRWL); a failed neighbour is replaced from the passive view (Neighbor
request, high priority when the active view is empty); a periodic Shuffle walk refreshes the
passive views.

Deviations from the paper, all for a lossy or reordering network:
- the active view changes only on an answer: Join and Neighbor are answered by NeighborReply,
  and the asker adds the peer when the accepting reply arrives (pending requests time out);
- ``check_symmetry`` repairs one-sided links reported by the ping ``active`` flag after a grace
  period (a lost Disconnect or NeighborReply otherwise leaves an asymmetric view forever);
- a Join from a peer already in the active view means it restarted: NeighborDown + NeighborUp.

Bounds: active <= active_size, passive <= passive_size, pending neighbour requests <=
active_size, joins in flight <= 4, remembered addresses <= 256 (LRU). The outbox and events
grow only by O(active_size + shuffle length) per input and are drained by the caller.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

from eddy.mesh.gossip.messages import (
    Disconnect,
    ForwardJoin,
    GossipEvent,
    GossipMessage,
    HyParViewMessage,
    Join,
    Neighbor,
    NeighborDown,
    NeighborReply,
    NeighborUp,
    PeerRef,
    Shuffle,
    ShuffleReply,
)

_MAX_JOINS = 4
_MAX_ADDRS = 256


@dataclass(frozen=True, slots=True)
class HyParViewConfig:
    active_size: int = 5
    passive_size: int = 30
    arwl: int = 6  # active random walk length
    prwl: int = 3  # passive random walk length
    shuffle_interval_ms: int = 10_000
    shuffle_active: int = 3
    shuffle_passive: int = 4
    shuffle_ttl: int = 6
    neighbor_timeout_ms: int = 2_000  # a Neighbor/Join without reply counts as failed
    symmetry_grace_ms: int = 3_000  # a link younger than this is not judged by ping flags
    promote_interval_ms: int = 1_000  # passive promotion retries on tick (immediate on loss)


@dataclass(slots=True)
class _Pending:
    addr: str
    sent_ms: int


class HyParView:
    def __init__(self, me: PeerRef, config: HyParViewConfig, rng: random.Random) -> None:
        if config.active_size < 1 or config.passive_size < 1:
            raise ValueError("active_size and passive_size must be >= 1")
        self.me = me
        self.config = config
        self._rng = rng
        self.active: dict[bytes, str] = {}
        self._since: dict[bytes, int] = {}
        self.passive: dict[bytes, str] = {}
        self._pending: dict[bytes, _Pending] = {}
        self._joining: dict[bytes, _Pending] = {}
        self._addrs: OrderedDict[bytes, str] = OrderedDict()
        self._shuffle_sent: set[bytes] = set()
        self._next_shuffle_ms: int | None = None
        self._next_promote_ms = 0
        self._now = 0
        self._outbox: list[tuple[bytes, GossipMessage]] = []
        self._events: list[GossipEvent] = []

    # -- outputs --------------------------------------------------------------------------------
    def take_outbox(self) -> list[tuple[bytes, GossipMessage]]:
        out, self._outbox = self._outbox, []
        return out

    def take_events(self) -> list[GossipEvent]:
        out, self._events = self._events, []
        return out

    # -- queries --------------------------------------------------------------------------------
    def address_of(self, node_id: bytes) -> str | None:
        for table in (self.active, self.passive):
            if node_id in table:
                return table[node_id]
        for pend in (self._pending, self._joining):
            if node_id in pend:
                return pend[node_id].addr
        return self._addrs.get(node_id)

    def is_active(self, node_id: bytes) -> bool:
        return node_id in self.active

    def knows(self, node_id: bytes) -> bool:
        return (node_id == self.me.node_id or node_id in self.active or node_id in self.passive
                or node_id in self._pending)

    def wants_peers(self) -> bool:
        """True while the passive view has room (peer exchange is worth doing)."""
        return len(self.passive) < self.config.passive_size

    def is_joining(self) -> bool:
        return bool(self._joining)

    def exchange_list(self, limit: int) -> list[PeerRef]:
        """Peers to hand out in peer exchange: the active view first, then passive samples."""
        refs = [PeerRef(i, a) for i, a in self.active.items()]
        spare = limit - len(refs)
        if spare > 0 and self.passive:
            ids = self._rng.sample(list(self.passive), min(spare, len(self.passive)))
            refs.extend(PeerRef(i, self.passive[i]) for i in ids)
        return refs[:limit]

    # -- inputs ---------------------------------------------------------------------------------
    def join(self, contact: PeerRef, now_ms: int) -> None:
        """Ask ``contact`` to take us in (its walk then brings more neighbours)."""
        self._now = now_ms
        if contact.node_id == self.me.node_id or contact.node_id in self._joining:
            return
        if len(self._joining) >= _MAX_JOINS:
            return
        self._joining[contact.node_id] = _Pending(contact.addr, now_ms)
        self._send(contact.node_id, Join(self.me.addr))

    def add_passive(self, ref: PeerRef) -> None:
        self._add_passive(ref.node_id, ref.addr, ())

    def peer_failed(self, node_id: bytes, now_ms: int) -> None:
        """The transport (or the ping table) says ``node_id`` is unreachable."""
        self._now = now_ms
        self.passive.pop(node_id, None)
        self._joining.pop(node_id, None)
        self._pending.pop(node_id, None)
        if node_id in self.active:
            self._remove_active(node_id)
        self._refill()

    def check_symmetry(self, peer: bytes, peer_has_us: bool, now_ms: int) -> None:
        """Repair a one-sided link using the ``active`` flag of the peer's Ping/Pong."""
        self._now = now_ms
        if peer == self.me.node_id:
            return
        if peer_has_us and peer not in self.active:
            if peer in self._pending or peer in self._joining:
                return  # our request is in flight; its reply decides
            addr = self.address_of(peer)
            if addr is not None and len(self.active) < self.config.active_size:
                self._add_active(peer, addr)
            else:
                self._send(peer, Disconnect(alive=True))
        elif (not peer_has_us and peer in self.active
              and now_ms - self._since.get(peer, now_ms) >= self.config.symmetry_grace_ms):
            addr = self.active[peer]
            self._remove_active(peer)
            self._add_passive(peer, addr, ())
            self._refill()

    def receive(self, sender: bytes, msg: HyParViewMessage, now_ms: int) -> None:
        self._now = now_ms
        if sender == self.me.node_id:
            return
        if isinstance(msg, Join):
            self._on_join(sender, msg)
        elif isinstance(msg, ForwardJoin):
            self._on_forward_join(sender, msg)
        elif isinstance(msg, Neighbor):
            self._on_neighbor(sender, msg)
        elif isinstance(msg, NeighborReply):
            self._on_neighbor_reply(sender, msg)
        elif isinstance(msg, Disconnect):
            self._on_disconnect(sender, msg)
        elif isinstance(msg, Shuffle):
            self._on_shuffle(sender, msg)
        else:
            self._integrate(msg.peers, self._shuffle_sent)
            self._shuffle_sent = set()

    def tick(self, now_ms: int) -> None:
        self._now = now_ms
        timeout = self.config.neighbor_timeout_ms
        for table in (self._pending, self._joining):
            for node_id in [i for i, p in table.items() if now_ms - p.sent_ms >= timeout]:
                del table[node_id]  # no answer: treat as failed (dropped from passive too)
        if not self.active or now_ms >= self._next_promote_ms:
            self._next_promote_ms = now_ms + self.config.promote_interval_ms
            self._refill()
        if self._next_shuffle_ms is None:
            jitter = self._rng.randrange(self.config.shuffle_interval_ms)
            self._next_shuffle_ms = now_ms + jitter
        elif now_ms >= self._next_shuffle_ms:
            self._next_shuffle_ms = now_ms + self.config.shuffle_interval_ms
            self._shuffle()

    # -- message handlers -----------------------------------------------------------------------
    def _on_join(self, sender: bytes, msg: Join) -> None:
        if sender in self.active:  # it restarted: reset the link's state above us
            self._events.append(NeighborDown(sender))
            self._events.append(NeighborUp(sender))
            self.active[sender] = msg.addr
            self._since[sender] = self._now
        else:
            self._add_active(sender, msg.addr)
        self._send(sender, NeighborReply(accepted=True))
        walk = ForwardJoin(PeerRef(sender, msg.addr), self.config.arwl)
        for peer in self.active:
            if peer != sender:
                self._send(peer, walk)

    def _on_forward_join(self, sender: bytes, msg: ForwardJoin) -> None:
        new = msg.new
        if new.node_id == self.me.node_id or new.node_id in self.active:
            return
        ttl = min(msg.ttl, self.config.arwl)
        if ttl == 0 or len(self.active) <= 1:
            self._request(new.node_id, new.addr, high=True)
            return
        if ttl == self.config.prwl:
            self._add_passive(new.node_id, new.addr, ())
        nexts = [p for p in self.active if p not in (sender, new.node_id)]
        if not nexts:
            self._request(new.node_id, new.addr, high=True)
            return
        self._send(self._rng.choice(nexts), ForwardJoin(new, ttl - 1))

    def _on_neighbor(self, sender: bytes, msg: Neighbor) -> None:
        if sender in self.active:
            self._send(sender, NeighborReply(accepted=True))
            return
        if msg.high_priority or len(self.active) < self.config.active_size:
            self._add_active(sender, msg.addr)
            self._send(sender, NeighborReply(accepted=True))
        else:
            self._add_passive(sender, msg.addr, ())
            self._send(sender, NeighborReply(accepted=False))

    def _on_neighbor_reply(self, sender: bytes, msg: NeighborReply) -> None:
        asked = self._pending.pop(sender, None) or self._joining.pop(sender, None)
        if asked is None:
            if msg.accepted and sender not in self.active:
                # a stale acceptance: the peer counts us as a neighbour but we gave up
                addr = self._addrs.get(sender)
                if addr is not None and len(self.active) < self.config.active_size:
                    self._add_active(sender, addr)
                else:
                    self._send(sender, Disconnect(alive=True))
            return
        if msg.accepted:
            self._add_active(sender, asked.addr)
        else:  # the next try waits for the promotion timer (no reject/retry loop at RTT pace)
            self._add_passive(sender, asked.addr, ())

    def _on_disconnect(self, sender: bytes, msg: Disconnect) -> None:
        self._pending.pop(sender, None)
        if sender in self.active:
            addr = self.active[sender]
            self._remove_active(sender)
            if msg.alive:
                self._add_passive(sender, addr, ())
            self._refill()

    def _on_shuffle(self, sender: bytes, msg: Shuffle) -> None:
        origin = msg.origin
        if origin.node_id == self.me.node_id:
            return
        ttl = min(msg.ttl, self.config.shuffle_ttl)
        nexts = [p for p in self.active if p not in (sender, origin.node_id)]
        if ttl > 1 and nexts:
            self._send(self._rng.choice(nexts), Shuffle(origin, ttl - 1, msg.peers))
            return
        offered = {ref.node_id for ref in msg.peers}
        mine = [i for i in self.passive if i not in offered and i != origin.node_id]
        reply_ids = self._rng.sample(mine, min(len(mine), len(msg.peers)))
        reply = tuple(PeerRef(i, self.passive[i]) for i in reply_ids)
        self._remember(origin.node_id, origin.addr)
        self._send(origin.node_id, ShuffleReply(reply))
        self._integrate((*msg.peers, origin), set(reply_ids))

    # -- view operations ------------------------------------------------------------------------
    def _shuffle(self) -> None:
        if not self.active:
            return
        act = [i for i in self.active]
        pas = list(self.passive)
        picked = self._rng.sample(act, min(self.config.shuffle_active, len(act)))
        picked += self._rng.sample(pas, min(self.config.shuffle_passive, len(pas)))
        refs = tuple(PeerRef(i, self.address_of(i) or "") for i in picked)
        self._shuffle_sent = set(picked)
        target = self._rng.choice(act)
        self._send(target, Shuffle(self.me, self.config.shuffle_ttl, refs))

    def _integrate(self, refs: tuple[PeerRef, ...], prefer_evict: set[bytes]) -> None:
        evictable = set(prefer_evict)
        for ref in refs[: self.config.passive_size]:
            self._add_passive(ref.node_id, ref.addr, evictable)
            evictable.discard(ref.node_id)

    def _add_passive(self, node_id: bytes, addr: str, prefer_evict: set[bytes] | tuple[()]) -> None:
        if node_id == self.me.node_id or node_id in self.active or not addr:
            return
        if node_id in self.passive:
            self.passive[node_id] = addr
            return
        if len(self.passive) >= self.config.passive_size:
            victims = sorted(i for i in prefer_evict if i in self.passive)
            victim = self._rng.choice(victims or list(self.passive))
            del self.passive[victim]
            if isinstance(prefer_evict, set):
                prefer_evict.discard(victim)
        self.passive[node_id] = addr

    def _add_active(self, node_id: bytes, addr: str) -> None:
        if node_id == self.me.node_id or node_id in self.active:
            return
        self.passive.pop(node_id, None)
        self._pending.pop(node_id, None)
        self._joining.pop(node_id, None)
        if len(self.active) >= self.config.active_size:
            victim = self._rng.choice(list(self.active))
            victim_addr = self.active[victim]
            self._send(victim, Disconnect(alive=True))
            self._remove_active(victim)
            self._add_passive(victim, victim_addr, ())
        self.active[node_id] = addr
        self._since[node_id] = self._now
        self._remember(node_id, addr)
        self._events.append(NeighborUp(node_id))

    def _remove_active(self, node_id: bytes) -> None:
        addr = self.active.pop(node_id)
        self._since.pop(node_id, None)
        self._remember(node_id, addr)
        self._events.append(NeighborDown(node_id))

    def _request(self, node_id: bytes, addr: str, high: bool) -> None:
        if node_id in self._pending or node_id == self.me.node_id:
            return
        if len(self._pending) >= self.config.active_size:
            return
        self._pending[node_id] = _Pending(addr, self._now)
        self._remember(node_id, addr)
        self._send(node_id, Neighbor(self.me.addr, high))

    def _refill(self) -> None:
        """Promote passive peers while the active view (counting requests in flight) is short."""
        need = self.config.active_size - len(self.active) - len(self._pending)
        if need <= 0 or not self.passive:
            return
        ids = self._rng.sample(list(self.passive), min(need, len(self.passive)))
        for node_id in ids:
            addr = self.passive.pop(node_id)
            self._request(node_id, addr, high=not self.active)

    def _remember(self, node_id: bytes, addr: str) -> None:
        self._addrs[node_id] = addr
        self._addrs.move_to_end(node_id)
        while len(self._addrs) > _MAX_ADDRS:
            self._addrs.popitem(last=False)

    def _send(self, node_id: bytes, msg: GossipMessage) -> None:
        self._outbox.append((node_id, msg))
