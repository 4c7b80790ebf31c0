"""HyParView core: message handling rules, driven by hand (no network)."""

from __future__ import annotations

import random

from eddy.mesh.gossip.hyparview import HyParView, HyParViewConfig
from eddy.mesh.gossip.messages import (
    Disconnect,
    ForwardJoin,
    Join,
    Neighbor,
    NeighborDown,
    NeighborReply,
    NeighborUp,
    PeerRef,
    Shuffle,
    ShuffleReply,
)


def nid(i: int) -> bytes:
    return bytes([i]) * 32


def ref(i: int) -> PeerRef:
    return PeerRef(nid(i), f"n{i}:1")


def make(i: int = 0, **cfg: int) -> HyParView:
    return HyParView(ref(i), HyParViewConfig(**cfg), random.Random(i))


def with_active(hv: HyParView, peers: list[int]) -> HyParView:
    for p in peers:
        hv.receive(nid(p), Neighbor(f"n{p}:1", high_priority=True), 0)
    hv.take_outbox()
    hv.take_events()
    return hv


def test_contact_takes_newcomer_and_starts_walks() -> None:
    hv = with_active(make(), [1, 2, 3])
    hv.receive(nid(9), Join("n9:1"), 10)
    out = hv.take_outbox()
    assert (nid(9), NeighborReply(accepted=True)) in out
    walks = [(p, m) for p, m in out if isinstance(m, ForwardJoin)]
    assert sorted(p for p, _ in walks) == [nid(1), nid(2), nid(3)]
    assert all(m.new == ref(9) and m.ttl == 6 for _, m in walks)
    assert nid(9) in hv.active and NeighborUp(nid(9)) in hv.take_events()


def test_newcomer_adds_contact_only_when_accepted() -> None:
    hv = make()
    hv.join(ref(1), 0)
    assert hv.take_outbox() == [(nid(1), Join("n0:1"))]
    assert not hv.active and hv.is_joining()
    hv.receive(nid(1), NeighborReply(accepted=True), 5)
    assert list(hv.active) == [nid(1)]
    assert hv.take_events() == [NeighborUp(nid(1))]


def test_join_times_out_without_answer() -> None:
    hv = make(neighbor_timeout_ms=100)
    hv.join(ref(1), 0)
    hv.tick(99)
    assert hv.is_joining()
    hv.tick(100)
    assert not hv.is_joining() and not hv.active


def test_forward_join_end_of_walk_asks_new_node_with_high_priority() -> None:
    hv = with_active(make(), [1, 2])
    hv.receive(nid(1), ForwardJoin(ref(9), 0), 0)
    assert hv.take_outbox() == [(nid(9), Neighbor("n0:1", high_priority=True))]
    assert nid(9) not in hv.active  # only once it answers
    hv.receive(nid(9), NeighborReply(accepted=True), 5)
    assert nid(9) in hv.active


def test_forward_join_at_prwl_lands_in_passive_and_walks_on() -> None:
    hv = with_active(make(), [1, 2])
    hv.receive(nid(1), ForwardJoin(ref(9), 3), 0)
    assert nid(9) in hv.passive
    assert hv.take_outbox() == [(nid(2), ForwardJoin(ref(9), 2))]


def test_forward_join_with_single_neighbour_ends_the_walk() -> None:
    hv = with_active(make(), [1])
    hv.receive(nid(1), ForwardJoin(ref(9), 5), 0)
    assert hv.take_outbox() == [(nid(9), Neighbor("n0:1", high_priority=True))]


def test_forward_join_clamps_a_hostile_ttl() -> None:
    hv = with_active(make(), [1, 2])
    hv.receive(nid(1), ForwardJoin(ref(9), 32), 0)
    (_, msg), = hv.take_outbox()
    assert isinstance(msg, ForwardJoin) and msg.ttl == 5  # min(32, ARWL=6) - 1


def test_low_priority_neighbor_rejected_when_full_high_priority_evicts() -> None:
    hv = with_active(make(active_size=2), [1, 2])
    hv.receive(nid(3), Neighbor("n3:1", high_priority=False), 0)
    assert hv.take_outbox() == [(nid(3), NeighborReply(accepted=False))]
    assert nid(3) in hv.passive and nid(3) not in hv.active
    hv.receive(nid(4), Neighbor("n4:1", high_priority=True), 0)
    out = hv.take_outbox()
    assert (nid(4), NeighborReply(accepted=True)) in out
    victims = [p for p, m in out if m == Disconnect(alive=True)]
    assert len(victims) == 1 and victims[0] in (nid(1), nid(2))
    assert victims[0] in hv.passive and len(hv.active) == 2
    assert NeighborDown(victims[0]) in hv.take_events()


def test_disconnect_moves_to_passive_and_promotes_with_high_priority_when_empty() -> None:
    hv = with_active(make(), [1])
    hv.add_passive(ref(7))
    hv.receive(nid(1), Disconnect(alive=True), 0)
    assert not hv.active and nid(1) in hv.take_events()[0].node_id
    out = hv.take_outbox()
    assert all(isinstance(m, Neighbor) and m.high_priority for _, m in out)
    assert {p for p, _ in out} == {nid(1), nid(7)}


def test_failed_neighbour_is_dropped_not_kept_passive() -> None:
    hv = with_active(make(), [1, 2])
    hv.peer_failed(nid(1), 0)
    assert nid(1) not in hv.active and nid(1) not in hv.passive
    assert NeighborDown(nid(1)) in hv.take_events()


def test_promotion_uses_low_priority_while_active_not_empty() -> None:
    hv = with_active(make(), [1])
    hv.add_passive(ref(7))
    hv.tick(0)
    assert (nid(7), Neighbor("n0:1", high_priority=False)) in hv.take_outbox()
    hv.receive(nid(7), NeighborReply(accepted=False), 1)
    assert nid(7) in hv.passive and nid(7) not in hv.active
    hv.tick(500)  # retries wait for the promotion timer
    assert hv.take_outbox() == []
    hv.tick(1000)
    assert hv.take_outbox() == [(nid(7), Neighbor("n0:1", high_priority=False))]


def test_unanswered_neighbor_request_is_forgotten() -> None:
    hv = with_active(make(neighbor_timeout_ms=100), [1])
    hv.add_passive(ref(7))
    hv.tick(0)
    hv.take_outbox()
    hv.tick(100)
    assert nid(7) not in hv.passive and nid(7) not in hv.active


def test_shuffle_is_forwarded_then_answered_by_the_last_hop() -> None:
    hv = with_active(make(), [1, 2])
    offer = (ref(20), ref(21))
    hv.receive(nid(1), Shuffle(ref(9), 3, offer), 0)
    assert hv.take_outbox() == [(nid(2), Shuffle(ref(9), 2, offer))]
    for i in range(30, 34):
        hv.add_passive(ref(i))
    hv.receive(nid(1), Shuffle(ref(9), 1, offer), 0)
    (dest, reply), = hv.take_outbox()
    assert dest == nid(9) and isinstance(reply, ShuffleReply) and len(reply.peers) == 2
    assert {nid(20), nid(21), nid(9)} <= set(hv.passive)
    assert hv.address_of(nid(9)) == "n9:1"


def test_shuffle_reply_replaces_sent_entries_and_passive_stays_bounded() -> None:
    hv = with_active(make(passive_size=4, shuffle_interval_ms=10), [1])
    for i in range(10, 14):
        hv.add_passive(ref(i))
    hv.tick(0)
    for t in range(10, 200, 10):
        hv.tick(t)
    shuffles = [m for _, m in hv.take_outbox() if isinstance(m, Shuffle)]
    assert shuffles and shuffles[-1].origin == ref(0)
    hv.receive(nid(1), ShuffleReply(tuple(ref(i) for i in range(40, 60))), 300)
    assert len(hv.passive) == 4


def test_symmetry_repair() -> None:
    hv = with_active(make(active_size=2, symmetry_grace_ms=100), [1])
    hv.add_passive(ref(5))
    hv.check_symmetry(nid(5), True, 0)  # it counts us, we have room: take it
    assert nid(5) in hv.active
    hv.check_symmetry(nid(6), True, 0)  # full: tell it to drop us
    assert (nid(6), Disconnect(alive=True)) in hv.take_outbox()
    hv.check_symmetry(nid(1), False, 50)  # young link: not judged yet
    assert nid(1) in hv.active
    hv.take_events()
    hv.check_symmetry(nid(1), False, 150)
    assert nid(1) not in hv.active and NeighborDown(nid(1)) in hv.take_events()


def test_join_from_current_neighbour_resets_the_link() -> None:
    hv = with_active(make(), [1, 2])
    hv.receive(nid(1), Join("n1:1"), 0)
    assert hv.take_events() == [NeighborDown(nid(1)), NeighborUp(nid(1))]
    assert nid(1) in hv.active


def test_stale_acceptance_gets_a_disconnect_when_full() -> None:
    hv = with_active(make(active_size=1), [1])
    hv.receive(nid(8), NeighborReply(accepted=True), 0)
    assert hv.take_outbox() == [(nid(8), Disconnect(alive=True))]
    assert list(hv.active) == [nid(1)]
