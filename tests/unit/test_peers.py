"""Seed 002 peer table (ping liveness, peer exchange, identities) and the GossipNode facade."""

from __future__ import annotations

import random

import pytest

from eddy.mesh.gossip.messages import (
    Connect,
    Disconnect,
    ForwardJoin,
    GossipMessageError,
    IdentityMismatch,
    IHave,
    IHaveEntry,
    Interest,
    Join,
    NeighborReply,
    NeighborUp,
    PeerDead,
    PeerDiscovered,
    PeerRef,
    PeerRevived,
    Ping,
    Pong,
    SeedReached,
    Shuffle,
)
from eddy.mesh.gossip.node import GossipNode
from eddy.mesh.gossip.peers import PeerConfig, PeerTable


def nid(i: int) -> bytes:
    return bytes([i]) * 32


def ref(i: int) -> PeerRef:
    return PeerRef(nid(i), f"n{i}:1")


class View:
    def __init__(self) -> None:
        self.known: set[bytes] = set()
        self.room = True

    def is_active(self, node_id: bytes) -> bool:
        return False

    def knows(self, node_id: bytes) -> bool:
        return node_id in self.known

    def wants_peers(self) -> bool:
        return self.room

    def exchange_list(self, limit: int) -> list[PeerRef]:
        return [ref(i) for i in (40, 41)][:limit]


def table(seeds: list[str] | None = None, **cfg: int) -> PeerTable:
    return PeerTable(ref(0), seeds or [], PeerConfig(**cfg), View(), random.Random(1))


def pings(t: PeerTable) -> list[tuple[bytes, Ping]]:
    return [(p, m) for p, m in t.take_outbox() if isinstance(m, Ping)]


def test_pings_every_interval_and_any_message_resets_the_counter() -> None:
    t = table(ping_interval_ms=100)
    t.track(ref(1), 0)
    t.tick(0)
    assert [p for p, _ in pings(t)] == [nid(1)]
    t.tick(50)
    assert pings(t) == []
    t.tick(100)
    t.tick(200)
    assert t.states()[0].state == "suspect" and t.states()[0].missed_pings == 2
    t.heard_from(nid(1), 210)
    assert t.states()[0].state == "alive" and t.states()[0].last_seen_ms == 210


def test_peer_removed_after_max_unanswered_pings_and_reported_dead() -> None:
    t = table(ping_interval_ms=100)
    t.track(ref(1), 0)
    for now in (0, 100, 200):
        t.tick(now)
        assert t.take_events() == []
    t.tick(300)  # three pings went unanswered for a whole interval each
    assert t.take_events() == [PeerDead(nid(1))]
    assert nid(1) not in t.tracked
    assert [(s.node_id, s.state) for s in t.states()] == [(nid(1), "dead")]


def test_dead_peer_is_probed_and_reported_revived_when_it_answers() -> None:
    t = table(dead_probe_interval_ms=1000)
    t.mark_dead(nid(1), 0, "n1:1")
    t.tick(999)
    assert pings(t) == []
    t.tick(1000)
    (peer, ping), = pings(t)
    assert peer == nid(1)
    assert t.on_pong(nid(1), Pong(ping.nonce, "n1:1", False, ()), 1010)
    assert t.take_events() == [PeerRevived(ref(1))]
    assert not t.is_dead(nid(1))


def test_seed_probe_binds_identity_and_reports_seed() -> None:
    t = table(seeds=["seed:1", "n0:1"])  # our own address is never probed
    t.tick(0)
    dials = t.take_dials()
    assert [a for a, _ in dials] == ["seed:1"]
    ping = dials[0][1]
    assert isinstance(ping, Ping)
    assert t.on_pong(nid(5), Pong(ping.nonce, "seed:1", False, ()), 10)
    assert t.take_events() == [SeedReached(PeerRef(nid(5), "seed:1"))]
    assert t.identity_of("seed:1") == nid(5)


def test_pong_from_known_address_with_other_identity_is_refused() -> None:
    t = table(seeds=["seed:1"], ping_interval_ms=100)
    t.tick(0)
    (_, first), = t.take_dials()
    assert isinstance(first, Ping)
    t.on_pong(nid(5), Pong(first.nonce, "seed:1", False, (ref(9),)), 10)
    t.take_events()
    t.take_outbox()
    t.tick(100)  # still bootstrapping: probed again
    (_, second), = t.take_dials()
    assert isinstance(second, Ping)
    assert not t.on_pong(nid(6), Pong(second.nonce, "seed:1", False, (ref(8),)), 110)
    assert t.take_events() == [IdentityMismatch("seed:1", nid(5), nid(6))]
    assert t.identity_of("seed:1") == nid(5)
    assert pings(t) == []  # its peer list was not used


def test_peer_exchange_adds_only_after_the_liveness_ping_is_answered() -> None:
    t = table(seeds=["seed:1"])
    t.view.known.add(nid(7))  # type: ignore[attr-defined]
    t.tick(0)
    (_, probe), = t.take_dials()
    assert isinstance(probe, Ping)
    t.on_pong(nid(5), Pong(probe.nonce, "seed:1", False, (ref(7), ref(8), ref(0))), 10)
    t.take_events()
    (peer, ping), = pings(t)  # 7 is known already, 0 is us
    assert peer == nid(8)
    assert t.take_events() == []  # not added yet
    t.on_pong(nid(8), Pong(ping.nonce, "n8:1", False, (ref(30),)), 20)
    assert t.take_events() == [PeerDiscovered(ref(8))]
    assert pings(t) == []  # a candidate's own list does not chain


def test_unanswered_candidate_is_forgotten() -> None:
    t = table(seeds=["seed:1"], candidate_timeout_ms=500)
    t.tick(0)
    (_, probe), = t.take_dials()
    assert isinstance(probe, Ping)
    t.on_pong(nid(5), Pong(probe.nonce, "seed:1", False, (ref(8),)), 10)
    t.take_events()
    t.tick(600)
    assert t.address_of(nid(8)) is None
    assert t.take_events() == []


def test_ping_is_answered_with_peer_exchange() -> None:
    t = table()
    t.on_ping(nid(40), Ping(77, "n40:1", True))
    (peer, pong), = t.take_outbox()
    assert peer == nid(40) and isinstance(pong, Pong) and pong.nonce == 77
    assert pong.peers == (ref(41),)  # never the asker itself


# -- the facade ------------------------------------------------------------------------------------
def node(i: int = 0, seeds: list[str] | None = None) -> GossipNode:
    return GossipNode(ref(i), seeds or [], random.Random(i))


def test_node_joins_through_a_seed_and_asks_for_a_connection_first() -> None:
    n = node(0, ["seed:1"])
    n.tick(0)
    (addr, probe), = n.take_dials()
    assert addr == "seed:1" and isinstance(probe, Ping)
    n.receive(nid(5), Pong(probe.nonce, "seed:1", False, ()), 10)
    assert n.take_intents() == []  # the dial's connection carries the answer
    assert (nid(5), Join("n0:1")) in n.take_outbox()
    n.receive(nid(5), NeighborReply(accepted=True), 20)
    assert NeighborUp(nid(5)) in n.take_events()
    out = n.take_outbox()
    assert any(p == nid(5) and isinstance(m, Interest) for p, m in out)
    assert [(s.node_id, s.state, s.view) for s in n.status()] == [(nid(5), "alive", "active")]
    n.receive(nid(5), ForwardJoin(ref(9), 0), 30)  # end of a walk: connect to 9, then ask
    assert n.take_intents() == [Connect(nid(9), "n9:1")]


def test_ping_death_removes_the_neighbour_from_the_views() -> None:
    n = node()
    n.receive(nid(3), Join("n3:1"), 0)
    assert nid(3) in n.hv.active
    for now in range(0, 4001, 50):
        n.tick(now)
    assert PeerDead(nid(3)) in n.take_events()
    assert nid(3) not in n.hv.active and nid(3) not in n.tree.eager
    assert [(s.node_id, s.state) for s in n.status()] == [(nid(3), "dead")]


def test_transport_failure_drops_link_and_neighbour() -> None:
    n = node()
    n.receive(nid(3), Join("n3:1"), 0)
    n.take_intents()
    n.peer_failed(nid(3), 10)
    assert nid(3) not in n.hv.active
    assert n.peers.is_dead(nid(3))


def test_ping_flag_repairs_a_one_sided_link() -> None:
    n = node()
    for i in range(1, 6):
        n.receive(nid(i), Join(f"n{i}:1"), 0)
    n.take_outbox()
    n.receive(nid(9), Ping(1, "n9:1", True), 10)  # 9 thinks we are neighbours; we are full
    assert (nid(9), Disconnect(alive=True)) in n.take_outbox()


@pytest.mark.parametrize("msg, field", [
    (Shuffle(ref(1), 3, tuple(ref(i) for i in range(65))), "Shuffle.peers"),
    (ForwardJoin(ref(1), 200), "ForwardJoin.ttl"),
    (Join(""), "Join.addr"),
    (Join("bad\naddr"), "Join.addr"),
    (IHave(tuple(IHaveEntry(b"x" * 32, 0, "") for _ in range(513))), "IHave.entries"),
    (IHave((IHaveEntry(b"short", 0, ""),)), "IHave.entries[0].msg_id"),
    (Interest(False, ("t" * 256,)), "Interest.topics[0]"),
    (Pong(1, "a:1", False, (PeerRef(b"x", "a:2"),)), "Pong.peers[0].node_id"),
])
def test_hostile_messages_raise_a_named_error(msg: object, field: str) -> None:
    n = node()
    with pytest.raises(GossipMessageError) as err:
        n.receive(nid(1), msg, 0)  # type: ignore[arg-type]
    assert err.value.field == field
    assert n.take_outbox() == [] and not n.hv.active


def test_a_peer_heard_from_since_the_last_round_is_not_pinged_until_it_falls_silent() -> None:
    """Raft heartbeats and controller RPCs already prove a peer alive several times a second:
    a peer heard from within the interval gets no PING that round (one still goes out every
    fourth round, for peer exchange and view symmetry); once it falls silent the PINGs and
    the count of unanswered ones start at the next round, and it is found dead as before."""
    t = table(ping_interval_ms=100)
    t.track(ref(1), 0)
    sent = []
    for now in range(0, 1000, 100):
        t.heard_from(nid(1), now + 50)  # something from it between every two rounds
        t.tick(now + 100)
        sent.append(len(pings(t)))
    assert sent == [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]
    assert t.take_events() == []
    rounds = 0
    now = 1100
    while not t.take_events():  # silent from 950 on
        t.tick(now)
        sent.append(len(pings(t)))
        now += 100
        rounds += 1
    assert rounds == 4  # 3 PINGs unanswered for a whole interval each, then dead
    assert nid(1) not in t.tracked


def test_the_node_asks_for_fast_ticks_only_while_something_is_in_flight() -> None:
    """The mesh ticked gossip every 50 ms, idle or not (issue 28: an idle node busy with
    timers); it ticks fast only while ``busy()``: a broadcast in flight (a GRAFT timer,
    IHAVEs to flush). Alone, bootstrapping or with neighbours, the timers left are half a
    second or more."""
    n = node(0, ["seed:1"])
    n.tick(0)
    assert not n.busy()  # alone: seed probes every PING interval
    n.receive(nid(3), Join("n3:1"), 10)  # a neighbour: joined
    n.take_outbox()
    n.tick(20)
    n.take_outbox()
    assert not n.busy()  # nothing in flight: PING rounds only
    n.receive(nid(3), IHave((IHaveEntry(b"m" * 32, 0, "announce"),)), 30)
    assert n.busy()  # a message announced, not received: its GRAFT timer runs
    n.receive(nid(4), Join("n4:1"), 40)
    n.broadcast(b"news", "announce", 50)  # eager to one neighbour, IHAVE to the other
    assert n.busy()
