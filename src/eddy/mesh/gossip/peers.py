"""Seed 002's bootstrap and liveness as a sans-IO peer table.

- Seeds are addresses; they are PINGed (by address: ``take_dials``) every ``ping_interval_ms``
  while the node has no neighbour (``bootstrapping``), else every ``seed_probe_interval_ms``.
  A seed's answer binds its address to its identity and reports ``SeedReached``.
- Tracked peers (the facade tracks the HyParView active view) are PINGed every
  ``ping_interval_ms``, except one heard from since the last round (up to
  ``max_skipped_pings`` rounds in a row); any message from a peer resets its counter; a peer with
  ``max_ping_unacked`` PINGs unanswered for a whole interval is removed and reported
  (``PeerDead``), then remembered as dead for ``dead_ttl_ms`` and probed every
  ``dead_probe_interval_ms``: an answer reports ``PeerRevived`` (a healed partition or a restart).
- A PONG carries the peers its sender talks to (peer exchange). While the view has room, a new
  peer from a PONG is PINGed and reported (``PeerDiscovered``) only once it answers
  (liveness-checked add). A candidate's own PONG is not mined for more candidates (no chains).
- An address's identity is fixed once a PONG answered a PING sent to that address: a PONG
  for that address from another id is refused and reported (``IdentityMismatch``).

Bounds: tracked <= ``max_tracked``, candidates <= ``max_candidates``, dead memory <=
``max_dead`` (oldest forgotten), nonces in flight <= 1024, address bindings <= ``max_bindings``
(LRU), peer exchange reads at most ``max_pex`` refs per PONG.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal, Protocol

from eddy.mesh.gossip.messages import (
    GossipEvent,
    GossipMessage,
    IdentityMismatch,
    PeerDead,
    PeerDiscovered,
    PeerRef,
    PeerRevived,
    Ping,
    Pong,
    SeedReached,
)

_MAX_NONCES = 1024
MAX_PING_UNACKED = 3


class PeerView(Protocol):
    """What the peer table asks of the membership layer."""

    def is_active(self, node_id: bytes) -> bool: ...
    def knows(self, node_id: bytes) -> bool: ...
    def wants_peers(self) -> bool: ...
    def exchange_list(self, limit: int) -> list[PeerRef]: ...


@dataclass(frozen=True, slots=True)
class PeerConfig:
    ping_interval_ms: int = 1_000
    max_ping_unacked: int = MAX_PING_UNACKED
    seed_probe_interval_ms: int = 10_000
    dead_probe_interval_ms: int = 5_000
    dead_ttl_ms: int = 300_000
    candidate_timeout_ms: int = 3_000
    max_tracked: int = 64
    max_candidates: int = 16
    max_dead: int = 64
    max_pex: int = 16
    max_bindings: int = 4_096
    #: a peer heard from within the last interval (any message: Raft, RPCs, gossip) needs no
    #: PING to be known alive: up to this many rounds in a row it gets none (a PING still
    #: goes out every few rounds: PONGs carry peer exchange and the view's symmetry check)
    max_skipped_pings: int = 3


@dataclass(slots=True)
class _Tracked:
    addr: str
    unacked: int = 0  # pings sent since the peer was last heard from
    missed: int = 0  # of those, pings that had a whole interval to be answered
    last_seen_ms: int | None = None
    heard_ms: int | None = None  # when a message from the peer last arrived
    skipped: int = 0  # ping rounds in a row it was heard from instead


@dataclass(slots=True)
class _Seed:
    node_id: bytes | None = None
    unacked: int = 0
    next_probe_ms: int = 0


@dataclass(slots=True)
class _Dead:
    addr: str
    since_ms: int
    next_probe_ms: int


@dataclass(frozen=True, slots=True)
class _Probe:
    addr: str
    kind: Literal["peer", "seed", "candidate", "dead"]


@dataclass(frozen=True, slots=True)
class PeerState:
    node_id: bytes
    addr: str
    state: Literal["alive", "suspect", "dead"]
    missed_pings: int
    last_seen_ms: int | None


class PeerTable:
    def __init__(self, me: PeerRef, seeds: list[str], config: PeerConfig, view: PeerView,
                 rng: random.Random) -> None:
        self.me = me
        self.config = config
        self.view = view
        self.bootstrapping = True
        self._rng = rng
        self.tracked: dict[bytes, _Tracked] = {}
        self._seeds: dict[str, _Seed] = {a: _Seed() for a in seeds if a != me.addr}
        self._candidates: dict[bytes, tuple[str, int]] = {}
        self._dead: OrderedDict[bytes, _Dead] = OrderedDict()
        self._nonces: OrderedDict[int, _Probe] = OrderedDict()
        self._by_addr: OrderedDict[str, bytes] = OrderedDict()
        self._next_ping_ms: int | None = None
        self._outbox: list[tuple[bytes, GossipMessage]] = []
        self._dials: list[tuple[str, GossipMessage]] = []
        self._events: list[GossipEvent] = []

    # -- outputs --------------------------------------------------------------------------------
    def take_outbox(self) -> list[tuple[bytes, GossipMessage]]:
        out, self._outbox = self._outbox, []
        return out

    def take_dials(self) -> list[tuple[str, GossipMessage]]:
        """Messages for an address whose identity is not known yet (seed probes)."""
        out, self._dials = self._dials, []
        return out

    def take_events(self) -> list[GossipEvent]:
        out, self._events = self._events, []
        return out

    # -- queries --------------------------------------------------------------------------------
    def address_of(self, node_id: bytes) -> str | None:
        if node_id in self.tracked:
            return self.tracked[node_id].addr
        if node_id in self._candidates:
            return self._candidates[node_id][0]
        if node_id in self._dead:
            return self._dead[node_id].addr
        for addr, seed in self._seeds.items():
            if seed.node_id == node_id:
                return addr
        return None

    def identity_of(self, addr: str) -> bytes | None:
        return self._by_addr.get(addr)

    def states(self) -> list[PeerState]:
        out = [PeerState(i, t.addr, "suspect" if t.missed else "alive", t.missed,
                         t.last_seen_ms) for i, t in self.tracked.items()]
        out += [PeerState(i, d.addr, "dead", self.config.max_ping_unacked, d.since_ms)
                for i, d in self._dead.items()]
        return out

    def is_dead(self, node_id: bytes) -> bool:
        return node_id in self._dead

    # -- inputs ---------------------------------------------------------------------------------
    def track(self, ref: PeerRef, now_ms: int) -> None:
        """Ping this peer every interval from now on (the facade tracks active neighbours)."""
        if ref.node_id == self.me.node_id:
            return
        self._dead.pop(ref.node_id, None)
        if ref.node_id in self.tracked:
            self.tracked[ref.node_id].addr = ref.addr
        elif len(self.tracked) < self.config.max_tracked:
            self.tracked[ref.node_id] = _Tracked(ref.addr, last_seen_ms=now_ms)

    def untrack(self, node_id: bytes) -> None:
        self.tracked.pop(node_id, None)

    def mark_dead(self, node_id: bytes, now_ms: int, addr: str | None = None) -> None:
        """Remember a peer the transport failed to reach (probed later for revival)."""
        entry = self.tracked.pop(node_id, None)
        addr = entry.addr if entry is not None else (addr or self.address_of(node_id))
        self._candidates.pop(node_id, None)
        if addr is not None and node_id != self.me.node_id:
            self._remember_dead(node_id, addr, now_ms)

    def heard_from(self, sender: bytes, now_ms: int) -> None:
        """Any message from ``sender`` proves it alive."""
        entry = self.tracked.get(sender)
        if entry is not None:
            entry.unacked = entry.missed = 0
            entry.last_seen_ms = entry.heard_ms = now_ms

    def on_ping(self, sender: bytes, msg: Ping) -> None:
        peers = tuple(r for r in self.view.exchange_list(self.config.max_pex)
                      if r.node_id != sender)
        self._outbox.append((sender, Pong(msg.nonce, self.me.addr,
                                          self.view.is_active(sender), peers)))

    def on_pong(self, sender: bytes, msg: Pong, now_ms: int) -> bool:
        """Handle a PONG; False if it was refused (identity mismatch)."""
        probe = self._nonces.pop(msg.nonce, None)
        if probe is None:
            return True  # late or unsolicited: liveness was already counted by heard_from
        bound = self._by_addr.get(probe.addr)
        if bound is not None and bound != sender:
            self._events.append(IdentityMismatch(probe.addr, bound, sender))
            return False
        self._bind(probe.addr, sender)
        ref = PeerRef(sender, probe.addr)
        if probe.kind == "seed":
            seed = self._seeds.get(probe.addr)
            if seed is not None:
                lost = seed.unacked > self.config.max_ping_unacked
                seed.node_id, seed.unacked = sender, 0
                self._events.append(PeerRevived(ref) if lost else SeedReached(ref))
        elif probe.kind == "candidate":
            if self._candidates.pop(sender, None) is not None:
                self._events.append(PeerDiscovered(ref))
        elif probe.kind == "dead" and self._dead.pop(sender, None) is not None:
            self._events.append(PeerRevived(ref))
        if probe.kind != "candidate" and self.view.wants_peers():
            self._exchange(msg.peers, now_ms)
        return True

    def tick(self, now_ms: int) -> None:
        cfg = self.config
        if self._next_ping_ms is None or now_ms >= self._next_ping_ms:
            self._next_ping_ms = now_ms + cfg.ping_interval_ms
            for node_id in list(self.tracked):
                entry = self.tracked[node_id]
                entry.missed = entry.unacked
                if entry.missed >= cfg.max_ping_unacked:
                    del self.tracked[node_id]
                    self._remember_dead(node_id, entry.addr, now_ms)
                    self._events.append(PeerDead(node_id))
                    continue
                if entry.heard_ms is not None and entry.unacked == 0 \
                        and now_ms - entry.heard_ms < cfg.ping_interval_ms \
                        and entry.skipped < cfg.max_skipped_pings:
                    entry.skipped += 1  # alive: heard from since the last round
                    continue
                entry.skipped = 0
                entry.unacked += 1
                self._ping(node_id, entry.addr, "peer")
        for addr, seed in self._seeds.items():
            if now_ms >= seed.next_probe_ms:
                seed.unacked += 1
                wait = cfg.ping_interval_ms if self.bootstrapping else cfg.seed_probe_interval_ms
                seed.next_probe_ms = now_ms + wait
                nonce = self._new_nonce(addr, "seed")
                self._dials.append((addr, Ping(nonce, self.me.addr, False)))
        for node_id, dead in list(self._dead.items()):
            if now_ms - dead.since_ms >= cfg.dead_ttl_ms:
                del self._dead[node_id]
            elif now_ms >= dead.next_probe_ms:
                dead.next_probe_ms = now_ms + cfg.dead_probe_interval_ms
                self._ping(node_id, dead.addr, "dead")
        for node_id, (_, sent) in list(self._candidates.items()):
            if now_ms - sent >= cfg.candidate_timeout_ms:
                del self._candidates[node_id]

    # -- internals ------------------------------------------------------------------------------
    def _exchange(self, refs: tuple[PeerRef, ...], now_ms: int) -> None:
        for ref in refs[: self.config.max_pex]:
            if len(self._candidates) >= self.config.max_candidates:
                return
            node_id = ref.node_id
            if (node_id == self.me.node_id or self.view.knows(node_id) or node_id in self.tracked
                    or node_id in self._candidates or node_id in self._dead):
                continue
            bound = self._by_addr.get(ref.addr)
            if bound is not None and bound != node_id:
                continue  # that address belongs to someone else
            self._candidates[node_id] = (ref.addr, now_ms)
            self._ping(node_id, ref.addr, "candidate")

    def _ping(self, node_id: bytes, addr: str,
              kind: Literal["peer", "seed", "candidate", "dead"]) -> None:
        nonce = self._new_nonce(addr, kind)
        self._outbox.append((node_id, Ping(nonce, self.me.addr, self.view.is_active(node_id))))

    def _new_nonce(self, addr: str, kind: Literal["peer", "seed", "candidate", "dead"]) -> int:
        nonce = self._rng.getrandbits(64)
        self._nonces[nonce] = _Probe(addr, kind)
        while len(self._nonces) > _MAX_NONCES:
            self._nonces.popitem(last=False)
        return nonce

    def _bind(self, addr: str, node_id: bytes) -> None:
        self._by_addr[addr] = node_id
        self._by_addr.move_to_end(addr)
        while len(self._by_addr) > self.config.max_bindings:
            self._by_addr.popitem(last=False)

    def _remember_dead(self, node_id: bytes, addr: str, now_ms: int) -> None:
        self._dead[node_id] = _Dead(addr, now_ms, now_ms + self.config.dead_probe_interval_ms)
        self._dead.move_to_end(node_id)
        while len(self._dead) > self.config.max_dead:
            self._dead.popitem(last=False)
