"""Replica placement on the hash ring: distinct replicas, rack spread, errors, determinism,
balance and minimal movement."""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.cluster.placement import (
    HashRing,
    InvalidPartitions,
    InvalidReplicationFactor,
)
from eddy.protocol.errors import ErrorCode

topic_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1,
                      max_size=30)


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 12) -> dict[int, str | None]:
    count = draw(st.integers(1, max_nodes))
    ids = draw(st.lists(st.integers(0, 10_000), min_size=count, max_size=count, unique=True))
    racks = draw(st.integers(0, 4))
    if racks == 0:
        return {n: None for n in ids}
    return {n: f"rack-{draw(st.integers(0, racks - 1))}" for n in ids}


def _no_racks(count: int) -> dict[int, str | None]:
    return {n: None for n in range(1, count + 1)}


@settings(max_examples=150, deadline=None)
@given(clusters(), topic_names, st.integers(1, 30), st.data(),
       st.sampled_from([0.0, 0.25, None]))
def test_replicas_are_distinct_live_nodes(nodes: dict[int, str | None], topic: str,
                                          partitions: int, data: st.DataObject,
                                          slack: float | None) -> None:
    rf = data.draw(st.integers(1, len(nodes)))
    plan = HashRing(load_slack=slack).place(topic, partitions, rf, nodes)
    assert len(plan) == partitions
    for replicas in plan:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(nodes)


@settings(max_examples=150, deadline=None)
@given(clusters(), topic_names, st.integers(1, 20), st.data(),
       st.sampled_from([0.0, None]))
def test_replicas_spread_over_racks(nodes: dict[int, str | None], topic: str,
                                    partitions: int, data: st.DataObject,
                                    slack: float | None) -> None:
    rf = data.draw(st.integers(1, len(nodes)))
    plan = HashRing(load_slack=slack).place(topic, partitions, rf, nodes)
    rack_of = {n: (r if r is not None else f"own-{n}") for n, r in nodes.items()}
    racks = set(rack_of.values())
    for replicas in plan:
        used = Counter(rack_of[n] for n in replicas)
        if rf <= len(racks):
            assert len(used) == rf, (replicas, nodes)
        # as even as the rack sizes allow: a rack holds 2+ more than another only when
        # the other has no node left to give
        for a in racks:
            for b in racks:
                if used[a] > used[b] + 1:
                    left_in_b = [n for n in nodes if rack_of[n] == b and n not in replicas]
                    assert not left_in_b, (replicas, nodes)


def test_three_racks_rf3_one_replica_per_rack() -> None:
    nodes: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for replicas in HashRing().place("orders", 200, 3, nodes):
        assert sorted(nodes[n] or "" for n in replicas) == ["a", "b", "c"]


@given(clusters(max_nodes=6), st.integers(1, 5))
def test_replication_factor_above_live_nodes_is_refused(nodes: dict[int, str | None],
                                                        extra: int) -> None:
    with pytest.raises(InvalidReplicationFactor) as err:
        HashRing().place("t", 3, len(nodes) + extra, nodes)
    assert err.value.code == ErrorCode.invalid_replication_factor
    assert "larger than available brokers" in err.value.message


def test_bad_counts_are_refused() -> None:
    ring = HashRing()
    with pytest.raises(InvalidReplicationFactor):
        ring.place("t", 3, 0, _no_racks(3))
    with pytest.raises(InvalidReplicationFactor):
        ring.place("t", 3, 1, {})
    with pytest.raises(InvalidPartitions) as err:
        ring.place("t", 0, 1, _no_racks(3))
    assert err.value.code == ErrorCode.invalid_partitions
    with pytest.raises(ValueError):
        HashRing(vnodes=0)


@settings(max_examples=60, deadline=None)
@given(clusters(), topic_names, st.integers(1, 20), st.data())
def test_placement_is_deterministic(nodes: dict[int, str | None], topic: str,
                                    partitions: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(nodes)))
    first = HashRing().place(topic, partitions, rf, nodes)
    shuffled = dict(reversed(list(nodes.items())))
    ring = HashRing()
    ring.place("warm-up", 2, 1, {999_999: None})  # a cached ring of other nodes
    assert ring.place(topic, partitions, rf, shuffled) == first


def test_placement_does_not_depend_on_the_python_hash_seed() -> None:
    code = ("from eddy.cluster.placement import HashRing;"
            "print(HashRing().place('orders', 20, 2, {1: 'a', 2: 'b', 3: None, 4: 'a'}))")
    outs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                capture_output=True, text=True).stdout)
    assert len(outs) == 1
    assert HashRing().place("orders", 20, 2, {1: "a", 2: "b", 3: None, 4: "a"}) == ast.literal_eval(
        outs.pop())


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10), topic_names, st.data())
def test_bare_ring_adding_a_node_moves_at_most_one_replica_to_it(
    count: int, topic: str, data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, count))
    ring = HashRing(load_slack=None)
    before = ring.place(topic, 50, rf, _no_racks(count))
    after = ring.place(topic, 50, rf, _no_racks(count + 1))
    new = count + 1
    for old, cur in zip(before, after, strict=True):
        assert set(cur) - set(old) <= {new}
        if new not in cur:
            assert cur == old  # untouched partitions keep their order (and leader)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), topic_names, st.data())
def test_bounded_ring_adding_a_node_moves_about_one_nth(count: int, topic: str,
                                                        data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, min(count, 3)))
    partitions = 200
    ring = HashRing()
    before = ring.place(topic, partitions, rf, _no_racks(count))
    after = ring.place(topic, partitions, rf, _no_racks(count + 1))
    moved = sum(len(set(a) - set(b)) for a, b in zip(after, before, strict=True))
    # ideal: 1/(N+1) of the replicas; a naive modulo placement moves nearly all of them
    assert moved / (partitions * rf) <= 2.5 / (count + 1)


@pytest.mark.parametrize("count", [3, 5, 9])
def test_bounded_ring_balances_leaders_and_replicas(count: int) -> None:
    nodes = _no_racks(count)
    plan = HashRing().place("orders", 1000, 1, nodes)
    per_node = Counter(p[0] for p in plan)
    assert set(per_node) == set(nodes)
    assert max(per_node.values()) <= math.ceil(1000 / count)
    plan3 = HashRing().place("orders", 1000, 3, nodes)
    leaders = Counter(p[0] for p in plan3)
    assert max(leaders.values()) <= math.ceil(1000 / count)
    replicas = Counter(n for p in plan3 for n in p)
    assert max(replicas.values()) / min(replicas.values()) < 1.25


def test_bare_ring_is_what_the_bounded_ring_improves_on() -> None:
    nodes = _no_racks(9)
    bare = Counter(p[0] for p in HashRing(load_slack=None).place("orders", 1000, 1, nodes))
    bounded = Counter(p[0] for p in HashRing().place("orders", 1000, 1, nodes))
    assert _spread(bounded) < _spread(bare)


def _spread(counts: Counter[int]) -> int:
    return max(counts.values()) - min(counts.values())


@settings(max_examples=60, deadline=None)
@given(clusters(), topic_names, st.integers(1, 10), st.integers(1, 10), st.data())
def test_new_partitions_leave_old_ones_alone(nodes: dict[int, str | None], topic: str,
                                             current: int, more: int,
                                             data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(nodes)))
    ring = HashRing()
    existing = ring.place(topic, current, rf, nodes)
    snapshot = [list(p) for p in existing]
    added = ring.reassign_for_new_partitions(existing, topic, current + more, nodes)
    assert existing == snapshot
    assert len(added) == more
    for replicas in added:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(nodes)
    # on the bare ring the new partitions are exactly where a fresh placement puts them
    bare = HashRing(load_slack=None)
    grown = bare.reassign_for_new_partitions(
        bare.place(topic, current, rf, nodes), topic, current + more, nodes)
    assert grown == bare.place(topic, current + more, rf, nodes)[current:]


def test_new_partitions_errors() -> None:
    ring = HashRing()
    nodes = _no_racks(3)
    existing = ring.place("t", 4, 2, nodes)
    with pytest.raises(InvalidPartitions):
        ring.reassign_for_new_partitions(existing, "t", 4, nodes)
    with pytest.raises(InvalidReplicationFactor):
        ring.reassign_for_new_partitions(existing, "t", 6, _no_racks(1))
    assert all(len(p) == 3 for p in
               ring.reassign_for_new_partitions(existing, "t", 6, nodes, replication_factor=3))
