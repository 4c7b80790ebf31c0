"""Plumtree core: eager/lazy push, graft timers, prune, cache bounds, the topic-interest rule."""

from __future__ import annotations

from eddy.mesh.gossip.messages import (
    Delivered,
    Gossip,
    GossipMessage,
    Graft,
    IHave,
    IHaveEntry,
    Interest,
    Prune,
)
from eddy.mesh.gossip.plumtree import Plumtree, PlumtreeConfig

MID = b"m" * 32
ORIGIN = b"o" * 32


def nid(i: int) -> bytes:
    return bytes([i]) * 32


def make(i: int = 0, topics: frozenset[str] | None = None, peers: tuple[int, ...] = (),
         **cfg: int) -> Plumtree:
    tree = Plumtree(nid(i), PlumtreeConfig(**cfg), topics)
    for p in peers:
        tree.neighbor_up(nid(p), 0)
    tree.take_outbox()
    return tree


def sent(tree: Plumtree) -> list[tuple[int, GossipMessage]]:
    return [(p[0], m) for p, m in tree.take_outbox()]


def gossip(rnd: int = 0, topic: str = "") -> Gossip:
    return Gossip(MID, ORIGIN, rnd, topic, b"payload")


def test_broadcast_pushes_eagerly_and_announces_lazily_on_tick() -> None:
    tree = make(peers=(1, 2, 3))
    tree.receive(nid(3), Prune(), 0)
    mid = tree.broadcast(b"x", "t", 0)
    out = sent(tree)
    assert sorted(p for p, m in out if isinstance(m, Gossip)) == [1, 2]
    assert all(m.round == 0 and m.msg_id == mid for _, m in out if isinstance(m, Gossip))
    tree.broadcast(b"y", "t", 1)
    sent(tree)
    tree.tick(5)
    ihaves = [(p, m) for p, m in sent(tree) if isinstance(m, IHave)]
    assert len(ihaves) == 1 and ihaves[0][0] == 3 and len(ihaves[0][1].entries) == 2  # batched
    assert tree.take_events() == []  # the origin does not deliver to itself


def test_first_copy_is_delivered_once_and_forwarded_with_next_round() -> None:
    tree = make(peers=(1, 2, 3))
    tree.receive(nid(1), gossip(4), 0)
    (ev,) = tree.take_events()
    assert isinstance(ev, Delivered) and ev.round == 4 and ev.sender == nid(1)
    out = sent(tree)
    assert sorted(p for p, _ in out) == [2, 3]
    assert all(isinstance(m, Gossip) and m.round == 5 for _, m in out)


def test_duplicate_prunes_the_sender() -> None:
    tree = make(peers=(1, 2))
    tree.receive(nid(1), gossip(), 0)
    tree.take_events()
    sent(tree)
    tree.receive(nid(2), gossip(), 1)
    assert tree.take_events() == []
    assert sent(tree) == [(2, Prune())]
    assert nid(2) in tree.lazy and nid(2) not in tree.eager
    assert tree.stats.duplicates == 1


def test_prune_moves_to_lazy_and_graft_back_to_eager_with_payload() -> None:
    tree = make(peers=(1, 2))
    tree.receive(nid(1), Prune(), 0)
    assert nid(1) in tree.lazy
    mid = tree.broadcast(b"x", "", 0)
    sent(tree)
    tree.receive(nid(1), Graft((mid,)), 5)
    assert nid(1) in tree.eager
    out = sent(tree)
    assert len(out) == 1 and out[0][0] == 1 and isinstance(out[0][1], Gossip)
    assert out[0][1].round == 1


def test_ihave_timers_graft_first_announcer_then_the_next() -> None:
    tree = make(peers=(1, 2, 3), ihave_timeout_ms=100, graft_timeout_ms=40)
    tree.receive(nid(1), Prune(), 0)
    tree.receive(nid(2), Prune(), 0)
    tree.receive(nid(1), IHave((IHaveEntry(MID, 2, ""),)), 0)
    tree.receive(nid(2), IHave((IHaveEntry(MID, 3, ""),)), 10)
    tree.tick(99)
    assert sent(tree) == []
    tree.tick(100)
    assert sent(tree) == [(1, Graft((MID,)))]
    assert nid(1) in tree.eager
    tree.tick(139)
    assert sent(tree) == []
    tree.tick(140)
    assert sent(tree) == [(2, Graft((MID,)))]
    tree.receive(nid(2), gossip(4), 150)
    assert len(tree.take_events()) == 1
    tree.tick(300)
    assert not any(isinstance(m, Graft) for _, m in sent(tree))


def test_ihave_for_a_known_message_is_ignored() -> None:
    tree = make(peers=(1, 2), ihave_timeout_ms=10)
    tree.receive(nid(1), gossip(), 0)
    sent(tree)
    tree.receive(nid(2), IHave((IHaveEntry(MID, 0, ""),)), 1)
    tree.tick(50)
    assert sent(tree) == []


def test_lost_announcer_is_not_grafted() -> None:
    tree = make(peers=(1, 2), ihave_timeout_ms=10)
    tree.receive(nid(1), IHave((IHaveEntry(MID, 0, ""),)), 0)
    tree.neighbor_down(nid(1))
    tree.tick(20)
    assert sent(tree) == []
    tree.receive(nid(2), IHave((IHaveEntry(MID, 0, ""),)), 30)  # a new announcer re-arms
    tree.tick(40)
    assert sent(tree) == [(2, Graft((MID,)))]


def test_new_neighbour_gets_recent_ids() -> None:
    tree = make(peers=(1,), catchup_ms=1000)
    old = tree.broadcast(b"old", "", 0)
    new = tree.broadcast(b"new", "", 5000)
    sent(tree)
    tree.neighbor_up(nid(7), 5500)
    out = sent(tree)
    ihave = [m for _, m in out if isinstance(m, IHave)]
    assert [e.msg_id for e in ihave[0].entries] == [new] and old != new


def test_cache_expires_and_is_bounded() -> None:
    tree = make(peers=(1,), message_ttl_ms=1000, max_messages=3)
    tree.receive(nid(1), gossip(), 0)
    tree.tick(1000)
    assert not tree.has(MID)
    tree.receive(nid(1), gossip(), 1001)  # outside the window it counts as new
    assert len(tree.take_events()) == 2
    for i in range(10):
        tree.broadcast(bytes([i]), "", 2000 + i)
    assert len(tree._cache) == 3


def test_cache_bytes_bound_drops_payloads_but_keeps_ids() -> None:
    tree = make(peers=(1,), max_cache_bytes=10)
    first = tree.broadcast(b"0123456789", "", 0)
    tree.broadcast(b"abcdefghij", "", 1)
    assert tree.has(first) and tree._cache[first].payload is None
    sent(tree)
    tree.receive(nid(1), Graft((first,)), 2)
    assert sent(tree) == []  # nothing to serve, still deduplicated


# -- the topic-interest rule ---------------------------------------------------------------------
def test_payload_goes_only_to_interested_or_unknown_neighbours() -> None:
    tree = make(peers=(1, 2, 3))
    tree.receive(nid(1), Interest(all_topics=False, topics=("a",)), 0)
    tree.receive(nid(2), Interest(all_topics=False, topics=("b",)), 0)
    tree.broadcast(b"x", "a", 0)
    tree.tick(1)
    out = sent(tree)
    assert {p for p, m in out if isinstance(m, Gossip)} == {1, 3}  # 3 has not told us yet
    assert {p for p, m in out if isinstance(m, IHave)} == {2}


def test_uninterested_node_relays_ids_once_and_never_grafts_for_itself() -> None:
    tree = make(topics=frozenset({"b"}), peers=(1, 2, 3), ihave_timeout_ms=10)
    entry = IHaveEntry(MID, 1, "a")
    tree.receive(nid(1), IHave((entry,)), 0)
    tree.receive(nid(2), IHave((entry,)), 0)
    tree.tick(100)
    out = sent(tree)
    assert not any(isinstance(m, Graft) for _, m in out)
    relayed = [(p, m) for p, m in out if isinstance(m, IHave)]
    assert sorted(p for p, _ in relayed) == [2, 3]
    assert relayed[0][1].entries == (IHaveEntry(MID, 2, "a"),)


def test_uninterested_relay_pulls_on_demand_and_does_not_deliver() -> None:
    tree = make(topics=frozenset({"b"}), peers=(1, 2, 3))
    tree.receive(nid(2), Interest(all_topics=False, topics=("b",)), 0)
    tree.receive(nid(1), IHave((IHaveEntry(MID, 1, "a"),)), 0)
    tree.tick(1)
    assert sorted(p for p, m in sent(tree) if isinstance(m, IHave)) == [2, 3]
    tree.receive(nid(3), Graft((MID,)), 5)  # a downstream node wants it
    assert sent(tree) == [(1, Graft((MID,)))]
    tree.receive(nid(1), gossip(1, "a"), 20)
    assert tree.take_events() == []
    tree.tick(21)
    out = sent(tree)
    assert [(p, m.round) for p, m in out if isinstance(m, Gossip)] == [(3, 2)]
    assert not any(isinstance(m, IHave) for _, m in out)  # its ids were relayed already
    assert tree.stats.relay_payloads == 1


def test_chain_through_two_uninterested_nodes_reaches_the_interested_end() -> None:
    a = make(1, frozenset({"a"}), peers=(2,))
    b = make(2, frozenset({"x"}), peers=(1, 3))
    c = make(3, frozenset({"x"}), peers=(2, 4))
    d = make(4, frozenset({"a"}), peers=(3,))
    trees = {1: a, 2: b, 3: c, 4: d}
    for tree in trees.values():  # interests exchanged
        for peer in tree.eager:
            trees[peer[0]].receive(tree.me, tree._interest_msg(), 0)
    a.broadcast(b"hello", "a", 0)
    for now in range(0, 3000, 20):
        for tree in trees.values():
            tree.tick(now)
        for _ in range(4):
            for i, tree in trees.items():
                for peer, msg in tree.take_outbox():
                    trees[peer[0]].receive(nid(i), msg, now)
    got = d.take_events()
    assert len(got) == 1 and isinstance(got[0], Delivered) and got[0].payload == b"hello"
    assert b.take_events() == [] and c.take_events() == []
