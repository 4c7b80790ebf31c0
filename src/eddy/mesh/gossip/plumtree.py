"""Plumtree (Leitão, Pereira, Rodrigues, "Epidemic Broadcast Trees", SRDS 2007), sans-IO.

Runs over the HyParView active view. New neighbours start in the eager set. A payload is pushed
to eager peers and announced (IHAVE, batched per tick) to the others; a duplicate payload
prunes its sender to lazy; an IHAVE for a message not received starts a timer
(``ihave_timeout_ms``), at whose end the node GRAFTs the first announcer (eager again + IWANT)
and arms a shorter timer (``graft_timeout_ms``) for the next announcer.

Topic-interest rule (seed 002's send-side filter, made safe for multi-hop trees):
- every node tells each new neighbour its topics (``Interest``; refreshed periodically);
- a payload goes eagerly only to eager neighbours interested in its topic (unknown interest
  counts as interested) or that asked for it with GRAFT; every other neighbour, interested or
  not, gets the IHAVE (id + topic, no payload);
- a node *not* interested in a topic never grafts it for itself, never delivers it to the
  application, and forwards each IHAVE once to its other neighbours (a metadata-only relay);
- when a neighbour GRAFTs a message such a relay lacks, the relay grafts it at once from its
  own announcer and forwards the payload on arrival ("relay on demand").
Why: a pure send-side filter partitions dissemination whenever uninterested nodes separate
interested ones (a cut of the active-view graph). With this rule every interested node is
still reached through any path of IHAVEs, uninterested nodes receive a payload only when an
interested node behind them pulled it, and the cost of crossing an uninterested hop is one
graft round trip. Control messages (Graft, Prune, IHave, Interest) are never filtered.

Bounds: received-message cache <= ``max_messages`` ids with payloads <= ``max_cache_bytes``
total (oldest payloads dropped first; an id without payload still deduplicates), entries expire
after ``message_ttl_ms`` (the exactly-once window); missing-message table <=
``max_missing`` with <= 8 announcers and <= 8 waiting grafters each; IHAVE queue <=
``max_ihave_batch`` entries per peer (a full queue is flushed at once).

Tree repair: a new neighbour starts eager and gets one IHAVE listing the messages received in
the last ``catchup_ms`` (a broadcast in flight while links changed reaches it by GRAFT); a lost
neighbour is dropped from both sets and from every announcer list.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from eddy.mesh.gossip.messages import (
    Delivered,
    GossipEvent,
    GossipMessage,
    Graft,
    IHave,
    IHaveEntry,
    Interest,
    PlumtreeMessage,
    Prune,
)
from eddy.mesh.gossip.messages import (
    Gossip as GossipMsg,
)

_MAX_ANNOUNCERS = 8
_MAX_WANTERS = 8
_MAX_ROUND = 0xFFFF
_MAX_EARLY = 16


@dataclass(frozen=True, slots=True)
class PlumtreeConfig:
    ihave_timeout_ms: int = 300
    graft_timeout_ms: int = 150
    max_graft_attempts: int = 8
    message_ttl_ms: int = 120_000
    max_messages: int = 65_536
    max_cache_bytes: int = 16 << 20
    max_missing: int = 4_096
    max_ihave_batch: int = 256
    interest_refresh_ms: int = 30_000
    catchup_ms: int = 5_000  # a new neighbour gets IHAVEs for messages received this recently


@dataclass(slots=True)
class _Cached:
    topic: str
    origin: bytes
    round: int
    payload: bytes | None
    expires_ms: int


@dataclass(slots=True)
class _Missing:
    topic: str
    expires_ms: int
    announcers: list[tuple[bytes, int]] = field(default_factory=list)
    deadline_ms: int | None = None
    attempts: int = 0
    wanted_by: set[bytes] = field(default_factory=set)
    relayed: bool = False  # an uninterested node forwarded the IHAVE already


@dataclass(slots=True)
class PlumtreeStats:
    delivered: int = 0
    duplicates: int = 0
    grafts_sent: int = 0
    prunes_sent: int = 0
    relay_payloads: int = 0  # payloads received for a topic this node does not want
    missing_dropped: int = 0


class Plumtree:
    def __init__(self, me: bytes, config: PlumtreeConfig,
                 topics: frozenset[str] | None = None) -> None:
        self.me = me
        self.config = config
        self.topics = topics  # None: every topic
        self.eager: set[bytes] = set()
        self.lazy: set[bytes] = set()
        self.interest: dict[bytes, frozenset[str] | None] = {}
        self.stats = PlumtreeStats()
        self._cache: OrderedDict[bytes, _Cached] = OrderedDict()
        self._cache_bytes = 0
        self._missing: OrderedDict[bytes, _Missing] = OrderedDict()
        self._ihave: dict[bytes, list[IHaveEntry]] = {}
        self._early_interest: OrderedDict[bytes, frozenset[str] | None] = OrderedDict()
        self._seq = 0
        self._next_refresh_ms: int | None = None
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
    def busy(self) -> bool:
        """Whether a tick is due soon: IHAVEs wait to be flushed, or a GRAFT timer runs."""
        return bool(self._ihave) or any(m.deadline_ms is not None
                                        for m in self._missing.values())

    def wants(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def peer_wants(self, peer: bytes, topic: str) -> bool:
        if peer not in self.interest:
            return True  # not told yet: err on the side of delivery
        topics = self.interest[peer]
        return topics is None or topic in topics

    def has(self, msg_id: bytes) -> bool:
        return msg_id in self._cache

    # -- inputs ---------------------------------------------------------------------------------
    def neighbor_up(self, peer: bytes, now_ms: int) -> None:
        """A new link starts eager; it is told our topics and the ids of recent messages
        (a message in flight while the tree changed would otherwise miss the new node)."""
        self.lazy.discard(peer)
        self.eager.add(peer)
        if peer in self._early_interest:
            self.interest[peer] = self._early_interest.pop(peer)
        self._send(peer, self._interest_msg())
        born = now_ms + self.config.message_ttl_ms - self.config.catchup_ms
        recent: list[IHaveEntry] = []
        for msg_id in reversed(self._cache):
            cached = self._cache[msg_id]
            if cached.expires_ms < born or len(recent) >= self.config.max_ihave_batch:
                break
            if cached.payload is not None:
                recent.append(IHaveEntry(msg_id, cached.round, cached.topic))
        if recent:
            self._send(peer, IHave(tuple(reversed(recent))))

    def neighbor_down(self, peer: bytes) -> None:
        self.eager.discard(peer)
        self.lazy.discard(peer)
        self.interest.pop(peer, None)
        self._ihave.pop(peer, None)
        for miss in self._missing.values():
            miss.announcers = [a for a in miss.announcers if a[0] != peer]
            miss.wanted_by.discard(peer)

    def set_topics(self, topics: frozenset[str] | None) -> None:
        self.topics = topics
        msg = self._interest_msg()
        for peer in sorted(self.eager | self.lazy):
            self._send(peer, msg)

    def broadcast(self, payload: bytes, topic: str, now_ms: int) -> bytes:
        """Start a broadcast; returns its msg_id. The origin does not deliver to itself."""
        self._seq += 1
        msg_id = hashlib.blake2b(
            self.me + struct.pack(">QQ", self._seq, now_ms & 0xFFFF_FFFF_FFFF_FFFF)
            + topic.encode() + b"\0" + payload, digest_size=32).digest()
        self._store(msg_id, topic, self.me, 0, payload, now_ms)
        self._disseminate(GossipMsg(msg_id, self.me, 0, topic, payload), None, set())
        return msg_id

    def receive(self, sender: bytes, msg: PlumtreeMessage, now_ms: int) -> None:
        if isinstance(msg, GossipMsg):
            self._on_gossip(sender, msg, now_ms)
        elif isinstance(msg, IHave):
            self._on_ihave(sender, msg, now_ms)
        elif isinstance(msg, Graft):
            self._on_graft(sender, msg, now_ms)
        elif isinstance(msg, Prune):
            if sender in self.eager:
                self.eager.discard(sender)
                self.lazy.add(sender)
        else:
            topics = None if msg.all_topics else frozenset(msg.topics)
            if sender in self.eager or sender in self.lazy:
                self.interest[sender] = topics
            else:  # may overtake the reply that makes it our neighbour
                self._early_interest[sender] = topics
                while len(self._early_interest) > _MAX_EARLY:
                    self._early_interest.popitem(last=False)

    def tick(self, now_ms: int) -> None:
        self._flush_ihave()
        self._run_timers(now_ms)
        self._expire(now_ms)
        if self._next_refresh_ms is None:
            self._next_refresh_ms = now_ms + self.config.interest_refresh_ms
        elif now_ms >= self._next_refresh_ms:
            self._next_refresh_ms = now_ms + self.config.interest_refresh_ms
            msg = self._interest_msg()
            for peer in sorted(self.eager | self.lazy):
                self._send(peer, msg)

    # -- handlers -------------------------------------------------------------------------------
    def _on_gossip(self, sender: bytes, msg: GossipMsg, now_ms: int) -> None:
        if msg.msg_id in self._cache:
            self.stats.duplicates += 1
            if sender in self.eager:
                self.eager.discard(sender)
                self.lazy.add(sender)
                self.stats.prunes_sent += 1
                self._send(sender, Prune())
            return
        miss = self._missing.pop(msg.msg_id, None)
        wanted_by = miss.wanted_by if miss is not None else set()
        self._store(msg.msg_id, msg.topic, msg.origin, msg.round, msg.payload, now_ms)
        if sender in self.lazy:  # a lazy link delivered first: it becomes a tree link
            self.lazy.discard(sender)
            self.eager.add(sender)
        if self.wants(msg.topic):
            self.stats.delivered += 1
            self._events.append(Delivered(msg.msg_id, msg.payload, msg.topic, msg.origin,
                                          sender, msg.round))
        else:
            self.stats.relay_payloads += 1
        nxt = GossipMsg(msg.msg_id, msg.origin, min(msg.round + 1, _MAX_ROUND), msg.topic,
                        msg.payload)
        already = miss is not None and miss.relayed
        self._disseminate(nxt, sender, wanted_by, ihave=not already)

    def _on_ihave(self, sender: bytes, msg: IHave, now_ms: int) -> None:
        for entry in msg.entries:
            if entry.msg_id in self._cache:
                continue
            miss = self._missing.get(entry.msg_id)
            if miss is None:
                if len(self._missing) >= self.config.max_missing:
                    self.stats.missing_dropped += 1
                    continue
                miss = _Missing(entry.topic, now_ms + self.config.message_ttl_ms)
                self._missing[entry.msg_id] = miss
                if self.wants(entry.topic):
                    miss.deadline_ms = now_ms + self.config.ihave_timeout_ms
            if len(miss.announcers) < _MAX_ANNOUNCERS and all(
                    a[0] != sender for a in miss.announcers):
                miss.announcers.append((sender, entry.round))
                if (miss.deadline_ms is None and self.wants(entry.topic)
                        and miss.attempts < self.config.max_graft_attempts):
                    miss.deadline_ms = now_ms + self.config.ihave_timeout_ms  # re-arm
            if not self.wants(entry.topic) and not miss.relayed:
                miss.relayed = True  # metadata-only relay for a topic we do not want
                fwd = IHaveEntry(entry.msg_id, min(entry.round + 1, _MAX_ROUND), entry.topic)
                for peer in sorted(self.eager | self.lazy):
                    if peer != sender:
                        self._queue_ihave(peer, fwd)

    def _on_graft(self, sender: bytes, msg: Graft, now_ms: int) -> None:
        if sender in self.lazy:  # only neighbours join the tree; anyone may fetch
            self.lazy.discard(sender)
            self.eager.add(sender)
        for msg_id in msg.msg_ids:
            cached = self._cache.get(msg_id)
            if cached is not None:
                if cached.payload is not None:
                    self._send(sender, GossipMsg(msg_id, cached.origin,
                                                 min(cached.round + 1, _MAX_ROUND),
                                                 cached.topic, cached.payload))
                continue
            miss = self._missing.get(msg_id)
            if miss is None:
                continue
            if len(miss.wanted_by) < _MAX_WANTERS:
                miss.wanted_by.add(sender)
            if miss.deadline_ms is None:  # a relay: pull it now on the grafter's behalf
                miss.deadline_ms = now_ms
        self._run_timers(now_ms)

    # -- internals ------------------------------------------------------------------------------
    def _disseminate(self, msg: GossipMsg, sender: bytes | None, wanted_by: set[bytes],
                     ihave: bool = True) -> None:
        entry = IHaveEntry(msg.msg_id, msg.round, msg.topic)
        for peer in sorted(self.eager | self.lazy | wanted_by):
            if peer == sender:
                continue
            if peer in wanted_by or (peer in self.eager and self.peer_wants(peer, msg.topic)):
                self._send(peer, msg)
            elif ihave:
                self._queue_ihave(peer, entry)

    def _run_timers(self, now_ms: int) -> None:
        for msg_id, miss in list(self._missing.items()):
            if miss.deadline_ms is None or now_ms < miss.deadline_ms:
                continue
            if not miss.announcers or miss.attempts >= self.config.max_graft_attempts:
                miss.deadline_ms = None
                continue
            # an interested announcer holds the payload; a relay would have to fetch it first
            pick = next((k for k, (p, _) in enumerate(miss.announcers)
                         if self.peer_wants(p, miss.topic)), 0)
            peer, rnd = miss.announcers.pop(pick)
            miss.announcers.append((peer, rnd))  # cycle: a lost graft is retried later
            miss.attempts += 1
            miss.deadline_ms = now_ms + self.config.graft_timeout_ms
            if peer in self.lazy:
                self.lazy.discard(peer)
                self.eager.add(peer)
            self.stats.grafts_sent += 1
            self._send(peer, Graft((msg_id,)))

    def _store(self, msg_id: bytes, topic: str, origin: bytes, rnd: int, payload: bytes,
               now_ms: int) -> None:
        self._cache[msg_id] = _Cached(topic, origin, rnd, payload,
                                      now_ms + self.config.message_ttl_ms)
        self._cache_bytes += len(payload)
        while len(self._cache) > self.config.max_messages:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= len(old.payload or b"")
        if self._cache_bytes > self.config.max_cache_bytes:
            for old in self._cache.values():
                if old.payload is not None:
                    self._cache_bytes -= len(old.payload)
                    old.payload = None
                    if self._cache_bytes <= self.config.max_cache_bytes:
                        break

    def _expire(self, now_ms: int) -> None:
        while self._cache:
            first = next(iter(self._cache.values()))
            if first.expires_ms > now_ms:
                break
            self._cache.popitem(last=False)
            self._cache_bytes -= len(first.payload or b"")
        while self._missing:
            msg_id, miss = next(iter(self._missing.items()))
            if miss.expires_ms > now_ms:
                break
            del self._missing[msg_id]

    def _queue_ihave(self, peer: bytes, entry: IHaveEntry) -> None:
        queue = self._ihave.setdefault(peer, [])
        queue.append(entry)
        if len(queue) >= self.config.max_ihave_batch:
            self._send(peer, IHave(tuple(queue)))
            del self._ihave[peer]

    def _flush_ihave(self) -> None:
        for peer, queue in self._ihave.items():
            if queue:
                self._send(peer, IHave(tuple(queue)))
        self._ihave = {}

    def _interest_msg(self) -> Interest:
        if self.topics is None:
            return Interest(all_topics=True, topics=())
        return Interest(all_topics=False, topics=tuple(sorted(self.topics)))

    def _send(self, peer: bytes, msg: GossipMessage) -> None:
        self._outbox.append((peer, msg))
