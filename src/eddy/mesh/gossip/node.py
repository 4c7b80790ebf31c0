"""GossipNode: PeerTable + HyParView + Plumtree behind one sans-IO object for the adapter.

The adapter (QUIC) calls ``receive(sender, msg, now_ms)`` for every decoded gossip message
(``sender`` = the peer's authenticated node id), ``tick(now_ms)`` every few tens of ms while
``busy()`` (a few times a second otherwise), ``peer_failed(node_id, now_ms)`` when a
connection fails, and ``broadcast``. After each call it
drains ``take_outbox()`` (send to node id), ``take_dials()`` (send to an address whose id is
learned on connect: seed probes), ``take_intents()`` (``Connect`` before the first message to a
peer, ``Drop`` when gossip no longer needs the link) and ``take_events()``.

Wiring: NeighborUp/Down from HyParView drive Plumtree's tree and the ping table's tracked set;
``PeerDead`` from the ping table and transport failures feed ``HyParView.peer_failed``; a
liveness-checked peer from peer exchange enters the passive view; a reached seed is the join
contact while the active view is empty; a revived peer (partition healed, restart) is joined
through, at most once per ``rejoin_cooldown_ms``, which merges views split by a partition.

Bounds: open links <= ``max_links`` (the least recently used non-neighbour is dropped first),
links idle for ``link_idle_ms`` that are not neighbours are dropped on tick.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from eddy.mesh.gossip.hyparview import HyParView, HyParViewConfig
from eddy.mesh.gossip.messages import (
    Connect,
    Drop,
    GossipEvent,
    GossipMessage,
    Graft,
    IdentityMismatch,
    IHave,
    Intent,
    Interest,
    NeighborDown,
    NeighborUp,
    PeerDead,
    PeerDiscovered,
    PeerRef,
    PeerRevived,
    Ping,
    Pong,
    Prune,
    SeedReached,
    validate,
)
from eddy.mesh.gossip.messages import (
    Gossip as GossipMsg,
)
from eddy.mesh.gossip.peers import PeerConfig, PeerTable
from eddy.mesh.gossip.plumtree import Plumtree, PlumtreeConfig


@dataclass(frozen=True, slots=True)
class GossipConfig:
    hyparview: HyParViewConfig = field(default_factory=HyParViewConfig)
    plumtree: PlumtreeConfig = field(default_factory=PlumtreeConfig)
    peers: PeerConfig = field(default_factory=PeerConfig)
    rejoin_cooldown_ms: int = 10_000
    link_idle_ms: int = 30_000
    max_links: int = 128


@dataclass(frozen=True, slots=True)
class PeerStatus:
    node_id: bytes
    addr: str
    state: Literal["alive", "suspect", "dead", "unchecked"]
    last_seen_ms: int | None
    view: Literal["active", "passive", "none"]


class GossipNode:
    def __init__(self, me: PeerRef, seeds: list[str], rng: random.Random,
                 config: GossipConfig | None = None,
                 topics: frozenset[str] | None = None) -> None:
        self.me = me
        self.config = config or GossipConfig()
        self.hv = HyParView(me, self.config.hyparview, rng)
        self.tree = Plumtree(me.node_id, self.config.plumtree, topics)
        self.peers = PeerTable(me, seeds, self.config.peers, self.hv, rng)
        self._links: OrderedDict[bytes, int] = OrderedDict()
        self._last_rejoin_ms: int | None = None
        self._outbox: list[tuple[bytes, GossipMessage]] = []
        self._dials: list[tuple[str, GossipMessage]] = []
        self._intents: list[Intent] = []
        self._events: list[GossipEvent] = []

    # -- outputs --------------------------------------------------------------------------------
    def take_outbox(self) -> list[tuple[bytes, GossipMessage]]:
        out, self._outbox = self._outbox, []
        return out

    def take_dials(self) -> list[tuple[str, GossipMessage]]:
        out, self._dials = self._dials, []
        return out

    def take_intents(self) -> list[Intent]:
        out, self._intents = self._intents, []
        return out

    def take_events(self) -> list[GossipEvent]:
        out, self._events = self._events, []
        return out

    # -- inputs ---------------------------------------------------------------------------------
    def receive(self, sender: bytes, msg: GossipMessage, now_ms: int) -> None:
        """Handle one message; raises GossipMessageError (naming the field) on a bad one."""
        validate(msg)
        if sender == self.me.node_id:
            return
        self._touch(sender, now_ms)
        self.peers.heard_from(sender, now_ms)
        if isinstance(msg, Ping):
            self.peers.on_ping(sender, msg)
            self.hv.check_symmetry(sender, msg.active, now_ms)
        elif isinstance(msg, Pong):
            if self.peers.on_pong(sender, msg, now_ms):
                self.hv.check_symmetry(sender, msg.active, now_ms)
        elif isinstance(msg, GossipMsg | IHave | Graft | Prune | Interest):
            self.tree.receive(sender, msg, now_ms)
        else:
            self.hv.receive(sender, msg, now_ms)
        self._pump(now_ms)

    def tick(self, now_ms: int) -> None:
        self.peers.bootstrapping = not self.hv.active
        self.hv.tick(now_ms)
        self.tree.tick(now_ms)
        self.peers.tick(now_ms)
        idle = self.config.link_idle_ms
        for node_id, used in list(self._links.items()):
            if now_ms - used >= idle and not self.hv.is_active(node_id):
                del self._links[node_id]
                self._intents.append(Drop(node_id))
        self._pump(now_ms)

    def busy(self) -> bool:
        """Whether the adapter should tick soon (every few tens of ms): a broadcast is in
        flight (IHAVEs to flush, GRAFT timers). Everything else on a tick has timers of
        half a second or more (PING rounds, seed probes, join and neighbour timeouts,
        promotions, shuffles) and answers to messages are sent at once: a few ticks a
        second do."""
        return self.tree.busy()

    def heard_from(self, node_id: bytes, now_ms: int) -> None:
        """A message from ``node_id`` outside gossip (Raft, an RPC) arrived: it is alive,
        which spares it this round's PING."""
        self.peers.heard_from(node_id, now_ms)

    def broadcast(self, payload: bytes, topic: str, now_ms: int) -> bytes:
        msg_id = self.tree.broadcast(payload, topic, now_ms)
        self._pump(now_ms)
        return msg_id

    def peer_failed(self, node_id: bytes, now_ms: int) -> None:
        """The transport could not reach ``node_id`` (connect failed or connection lost)."""
        addr = self.hv.address_of(node_id) or self.peers.address_of(node_id)
        was_linked = self._links.pop(node_id, None) is not None
        self.hv.peer_failed(node_id, now_ms)
        self.peers.mark_dead(node_id, now_ms, addr)
        if was_linked:
            self._intents.append(Drop(node_id))
        self._pump(now_ms)

    def discovered(self, ref: PeerRef, now_ms: int) -> None:
        """A peer found outside gossip (mDNS): joined through while we have no neighbour,
        else kept in the passive view for when one is needed."""
        if ref.node_id == self.me.node_id:
            return
        if not self.hv.active:
            self.hv.join(ref, now_ms)
        else:
            self.hv.add_passive(ref)
        self._pump(now_ms)

    def set_topics(self, topics: frozenset[str] | None, now_ms: int) -> None:
        self.tree.set_topics(topics)
        self._pump(now_ms)

    # -- status ---------------------------------------------------------------------------------
    def status(self) -> list[PeerStatus]:
        out: dict[bytes, PeerStatus] = {}
        for st in self.peers.states():
            view: Literal["active", "passive", "none"] = (
                "active" if st.node_id in self.hv.active
                else "passive" if st.node_id in self.hv.passive else "none")
            out[st.node_id] = PeerStatus(st.node_id, st.addr, st.state, st.last_seen_ms, view)
        for node_id, addr in self.hv.active.items():
            out.setdefault(node_id, PeerStatus(node_id, addr, "alive", None, "active"))
        for node_id, addr in self.hv.passive.items():
            out.setdefault(node_id, PeerStatus(node_id, addr, "unchecked", None, "passive"))
        return list(out.values())

    # -- wiring ---------------------------------------------------------------------------------
    def _pump(self, now_ms: int) -> None:
        for _ in range(16):  # each round may create events for the others; converges fast
            hv_events = self.hv.take_events()
            peer_events = self.peers.take_events()
            if not hv_events and not peer_events:
                break
            for ev in hv_events:
                self._on_hv_event(ev, now_ms)
            for ev in peer_events:
                self._on_peer_event(ev, now_ms)
        self._events.extend(self.tree.take_events())
        for src in (self.hv, self.tree, self.peers):
            for node_id, msg in src.take_outbox():
                self._send(node_id, msg, now_ms)
        self._dials.extend(self.peers.take_dials())

    def _on_hv_event(self, ev: GossipEvent, now_ms: int) -> None:
        if isinstance(ev, NeighborUp):
            addr = self.hv.address_of(ev.node_id) or ""
            self.tree.neighbor_up(ev.node_id, now_ms)
            self.peers.track(PeerRef(ev.node_id, addr), now_ms)
        elif isinstance(ev, NeighborDown):
            self.tree.neighbor_down(ev.node_id)
            self.peers.untrack(ev.node_id)
        self._events.append(ev)

    def _on_peer_event(self, ev: GossipEvent, now_ms: int) -> None:
        if isinstance(ev, PeerDead):
            self.hv.peer_failed(ev.node_id, now_ms)
            self._events.append(ev)
        elif isinstance(ev, PeerDiscovered):
            self.hv.add_passive(ev.peer)
        elif isinstance(ev, SeedReached):
            if not self.hv.active and not self.hv.is_joining():
                self.hv.join(ev.peer, now_ms)
            else:
                self.hv.add_passive(ev.peer)
        elif isinstance(ev, PeerRevived):
            last = self._last_rejoin_ms
            if (not self.hv.is_active(ev.peer.node_id)
                    and (last is None or now_ms - last >= self.config.rejoin_cooldown_ms)):
                self._last_rejoin_ms = now_ms
                self.hv.join(ev.peer, now_ms)
            else:
                self.hv.add_passive(ev.peer)
            self._events.append(ev)
        elif isinstance(ev, IdentityMismatch):
            self._events.append(ev)

    def _send(self, node_id: bytes, msg: GossipMessage, now_ms: int) -> None:
        if node_id not in self._links:
            addr = self.hv.address_of(node_id) or self.peers.address_of(node_id)
            if addr is not None:
                self._intents.append(Connect(node_id, addr))
            self._make_room()
        self._touch(node_id, now_ms)
        self._outbox.append((node_id, msg))

    def _touch(self, node_id: bytes, now_ms: int) -> None:
        self._links[node_id] = now_ms
        self._links.move_to_end(node_id)

    def _make_room(self) -> None:
        while len(self._links) >= self.config.max_links:
            victim = next((i for i in self._links if not self.hv.is_active(i)), None)
            if victim is None:
                return
            del self._links[victim]
            self._intents.append(Drop(victim))


def is_payload(msg: GossipMessage) -> bool:
    """True for messages that carry a broadcast payload (the rest is control)."""
    return isinstance(msg, GossipMsg)
