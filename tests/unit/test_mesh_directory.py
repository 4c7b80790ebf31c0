"""The member directory a gateway routes by."""

from __future__ import annotations

from eddy.mesh.directory import ALIVE, DEAD, Directory, NodeInfo, Route, rendezvous


def info(n: int, roles: tuple[str, ...] = ("broker",)) -> NodeInfo:
    return NodeInfo(key=bytes([n]) * 32, kafka_node_id=n, roles=roles,
                    mesh_addr=f"127.0.0.1:{9000 + n}", kafka_addr=f"127.0.0.1:{9100 + n}",
                    rack=None, version="test")


def test_rendezvous_is_stable_and_moves_only_a_leaving_nodes_names() -> None:
    names = [f"t{i}" for i in range(300)]
    before = {n: rendezvous(n, [1, 2, 3]) for n in names}
    assert set(before.values()) == {1, 2, 3}
    after = {n: rendezvous(n, [1, 3]) for n in names}
    for n in names:
        if before[n] != 2:
            assert after[n] == before[n]
        else:
            assert after[n] in (1, 3)
    assert rendezvous("x", []) is None


def test_routes_newest_version_wins_and_a_dead_nodes_topics_stay_unavailable() -> None:
    d = Directory(info(0, ("gateway",)))
    assert d.hello(info(1), 0) and d.hello(info(2), 0)
    assert d.routes_update(info(1).key, 5, {"a": 3}, frozenset({"g"}))
    assert not d.routes_update(info(1).key, 4, {"old": 1}, frozenset())
    assert d.topic("a") == Route(1, 3) and d.topic("old") is None
    assert d.group_owner("g") == 1
    d.set_state(info(1).key, DEAD)
    # still node 1's (never re-created elsewhere under the same name), without a leader
    assert d.topic("a") == Route(1, 3, available=False)
    assert d.broker_nodes() == [2]
    assert d.group_owner("g") == 1  # its offsets are there: it waits for node 1
    assert d.group_owner("new-group") == 2  # a new one goes to a live broker
    d.set_state(info(1).key, ALIVE)
    assert d.broker_nodes() == [1, 2]
    assert d.topic("a") == Route(1, 3)


def test_a_topic_on_two_nodes_routes_to_the_lower_id() -> None:
    d = Directory(info(0, ("gateway",)))
    d.hello(info(2), 0)
    d.hello(info(1), 0)
    d.routes_update(info(2).key, 1, {"t": 4}, frozenset())
    d.routes_update(info(1).key, 1, {"t": 2}, frozenset())
    assert d.topic("t") == Route(1, 2)


def test_noted_topic_routes_until_the_owner_announces_it() -> None:
    d = Directory(info(0, ("gateway",)))
    d.hello(info(1), 0)
    d.note_topic("new", Route(1, 6))
    assert d.topic("new") == Route(1, 6)
    d.routes_update(info(1).key, 1, {"new": 6}, frozenset())
    assert d.topic("new") == Route(1, 6)
    d.routes_update(info(1).key, 2, {}, frozenset())  # deleted on its node
    assert d.topic("new") is None  # no stale note kept once the owner spoke


def test_a_second_key_claiming_a_live_node_id_is_refused() -> None:
    d = Directory(info(0, ("gateway",)))
    d.hello(info(1), 0)
    impostor = NodeInfo(key=b"\x77" * 32, kafka_node_id=1, roles=("broker",),
                        mesh_addr="127.0.0.1:1", kafka_addr="127.0.0.1:2", rack=None,
                        version="x")
    assert not d.hello(impostor, 0)
    assert d.key_of(1) == info(1).key
    d.set_state(info(1).key, DEAD)
    assert d.hello(impostor, 0)  # the old one is dead: the id moved to a new key
    assert d.key_of(1) == impostor.key


def test_the_directory_is_bounded_and_makes_room_from_dead_nodes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import eddy.mesh.directory as directory

    monkeypatch.setattr(directory, "MAX_MEMBERS", 3)
    d = Directory(info(0, ("gateway",)))
    assert d.hello(info(1), 0) and d.hello(info(2), 0)
    assert not d.hello(info(3), 0)  # full, nobody dead
    d.set_state(info(1).key, DEAD)
    assert d.hello(info(3), 0)
    assert info(1).key not in d.members and len(d.members) == 3
