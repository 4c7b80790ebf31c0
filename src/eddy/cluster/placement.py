"""Replica placement on a consistent hash ring (seed 001): 150 virtual nodes per node,
replicas spread across ``broker.rack`` values. Pure: the same inputs always give the same
assignment, on every node and every Python run (blake2b, never ``hash()``).

For partition ``p`` of ``topic`` the ring is walked clockwise from ``hash(topic/p)``; the
order in which distinct nodes are first met is that partition's preference list. Replicas
are taken from it one at a time, each time the first node whose rack holds the fewest of
this partition's replicas so far (a node without a rack counts as a rack of its own). So
with R racks and ``rf <= R`` every replica lands on a different rack, with ``rf > R`` the
racks differ by at most one replica, and without racks the preference list is used as is.
The first replica is the preferred leader.

Adding a node only inserts its points into the ring: on the bare ring a partition changes
only where the new node lands among its first ``rf`` preferences, and then exactly one
replica moves, so about ``1/N`` of all replicas move. Bounded loads (the default, see
``HashRing``) trade a little of that for even counts (``bench/placement.py`` measures both).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Mapping, Sequence

from eddy.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_VNODES",
    "HashRing",
    "InvalidPartitions",
    "InvalidReplicationFactor",
    "PlacementError",
    "stable_hash",
]

DEFAULT_VNODES = 150
#: the most partitions one call places (Kafka has no hard limit; this keeps work bounded)
MAX_PARTITIONS = 1_000_000


class PlacementError(ValueError):
    """A placement Kafka would refuse; ``code`` is the Kafka error code to answer with."""

    code: ErrorCode = ErrorCode.invalid_request

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidReplicationFactor(PlacementError):
    """INVALID_REPLICATION_FACTOR (38): below 1, or more than the live nodes."""

    code = ErrorCode.invalid_replication_factor


class InvalidPartitions(PlacementError):
    """INVALID_PARTITIONS (37): a partition count below 1, or not above the current one."""

    code = ErrorCode.invalid_partitions


def stable_hash(data: bytes) -> int:
    """A 64-bit hash that is the same on every node and in every run."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _partition_key(topic: str, partition: int) -> bytes:
    return f"{topic}/{partition}".encode()


class HashRing:
    """The ring for a set of nodes is built on first use and cached (the last one).

    ``load_slack`` bounds the load within one ``place`` call (consistent hashing with
    bounded loads): a node already holding ``ceil((1 + slack) * average)`` replicas, or
    as many preferred leaderships, is passed over for the next node on the walk unless
    the rack rule needs it. ``0.0`` (the default) evens the counts out; ``None`` is the
    bare ring, whose per-node counts follow its arcs (about 8 % spread at 150 vnodes)."""

    def __init__(self, vnodes: int = DEFAULT_VNODES, load_slack: float | None = 0.0) -> None:
        if vnodes < 1:
            raise ValueError(f"vnodes must be at least 1, got {vnodes}")
        if load_slack is not None and load_slack < 0:
            raise ValueError(f"load_slack must be at least 0, got {load_slack}")
        self.vnodes = vnodes
        self.load_slack = load_slack
        self._ring_nodes: tuple[int, ...] = ()
        self._hashes: list[int] = []
        self._owners: list[int] = []

    # -- the ring --------------------------------------------------------------------------
    def _build(self, node_ids: tuple[int, ...]) -> None:
        if node_ids == self._ring_nodes and self._hashes:
            return
        points = sorted(
            (stable_hash(f"node-{node}#{i}".encode()), node)
            for node in node_ids
            for i in range(self.vnodes)
        )
        self._hashes = [h for h, _ in points]
        self._owners = [n for _, n in points]
        self._ring_nodes = node_ids

    def preference(self, topic: str, partition: int, nodes: Mapping[int, str | None]) -> list[int]:
        """Every node, in the order the ring walk from ``hash(topic/partition)`` meets them."""
        self._build(tuple(sorted(nodes)))
        if not self._hashes:
            return []
        start = bisect.bisect_left(self._hashes, stable_hash(_partition_key(topic, partition)))
        seen: set[int] = set()
        order: list[int] = []
        size = len(self._owners)
        wanted = len(nodes)
        for step in range(size):
            node = self._owners[(start + step) % size]
            if node not in seen:
                seen.add(node)
                order.append(node)
                if len(order) == wanted:
                    break
        return order

    # -- placement -------------------------------------------------------------------------
    def place_partition(
        self, topic: str, partition: int, replication_factor: int,
        nodes: Mapping[int, str | None],
    ) -> list[int]:
        """The replicas of one partition on the bare ring (no load bound), leader first."""
        _check_rf(replication_factor, nodes)
        return _Loads(None, None).choose(
            self.preference(topic, partition, nodes), replication_factor, nodes
        )

    def place(
        self, topic: str, partitions: int, replication_factor: int,
        nodes: Mapping[int, str | None],
    ) -> list[list[int]]:
        """Replicas for partitions ``0..partitions-1`` of ``topic`` over ``nodes``
        (node id -> rack or None: the live nodes), preferred leader first."""
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                f"Number of partitions must be between 1 and {MAX_PARTITIONS}, "
                f"got {partitions}."
            )
        return self._place_range(topic, [], partitions, replication_factor, nodes)

    def reassign_for_new_partitions(
        self, existing: Sequence[Sequence[int]], topic: str, total_partitions: int,
        nodes: Mapping[int, str | None], replication_factor: int | None = None,
    ) -> list[list[int]]:
        """CreatePartitions: the assignments of partitions ``len(existing)..total-1`` only
        (the existing ones are left untouched, and count towards the load bound). The
        replication factor defaults to that of the existing partitions."""
        current = len(existing)
        if total_partitions <= current:
            raise InvalidPartitions(
                f"Topic currently has {current} partitions, which is higher than or equal to "
                f"the requested {total_partitions}."
            )
        if total_partitions > MAX_PARTITIONS:
            raise InvalidPartitions(
                f"Number of partitions must be at most {MAX_PARTITIONS}, got {total_partitions}."
            )
        rf = replication_factor
        if rf is None:
            rf = len(existing[0]) if existing else 1
        return self._place_range(topic, existing, total_partitions, rf, nodes)

    def _place_range(
        self, topic: str, existing: Sequence[Sequence[int]], total: int, rf: int,
        nodes: Mapping[int, str | None],
    ) -> list[list[int]]:
        _check_rf(rf, nodes)
        if self.load_slack is None:
            loads = _Loads(None, None)
        else:
            factor = 1.0 + self.load_slack
            loads = _Loads(
                math.ceil(total * rf * factor / len(nodes)),
                math.ceil(total * factor / len(nodes)),
            )
        for replicas in existing:
            loads.count(replicas)
        out: list[list[int]] = []
        for p in range(len(existing), total):
            chosen = loads.choose(self.preference(topic, p, nodes), rf, nodes)
            loads.count(chosen)
            out.append(chosen)
        return out


class _Loads:
    """Replicas and leaders per node so far, and the caps (None: unbounded)."""

    def __init__(self, replica_cap: int | None, leader_cap: int | None) -> None:
        self.replica_cap = replica_cap
        self.leader_cap = leader_cap
        self.replicas: dict[int, int] = {}
        self.leaders: dict[int, int] = {}

    def count(self, replicas: Sequence[int]) -> None:
        for node in replicas:
            self.replicas[node] = self.replicas.get(node, 0) + 1
        if replicas:
            self.leaders[replicas[0]] = self.leaders.get(replicas[0], 0) + 1

    def _full(self, node: int, as_leader: bool) -> tuple[bool, bool]:
        """(leader cap reached, replica cap reached); the leader cap counts only when
        ``node`` would lead."""
        replicas_full = (
            self.replica_cap is not None and self.replicas.get(node, 0) >= self.replica_cap
        )
        leaders_full = (
            as_leader and self.leader_cap is not None
            and self.leaders.get(node, 0) >= self.leader_cap
        )
        return leaders_full, replicas_full

    def choose(
        self, order: list[int], rf: int, nodes: Mapping[int, str | None]
    ) -> list[int]:
        """Take ``rf`` nodes from the preference ``order``: each time the first of those
        whose rack holds the fewest replicas of this partition, skipping full nodes while
        a node that is not full ties on the rack count."""
        used: dict[object, int] = {}
        chosen: list[int] = []
        remaining = list(order)
        while len(chosen) < rf:
            best_index = 0
            best_key: tuple[int, tuple[bool, bool]] | None = None
            for index, node in enumerate(remaining):
                key = (used.get(_rack_key(node, nodes), 0), self._full(node, not chosen))
                if best_key is None or key < best_key:
                    best_index, best_key = index, key
                    if key == (0, (False, False)):
                        break
            node = remaining.pop(best_index)
            rack = _rack_key(node, nodes)
            used[rack] = used.get(rack, 0) + 1
            chosen.append(node)
        return chosen


def _rack_key(node: int, nodes: Mapping[int, str | None]) -> object:
    rack = nodes[node]
    return ("node", node) if rack is None else ("rack", rack)


def _check_rf(replication_factor: int, nodes: Mapping[int, str | None]) -> None:
    if replication_factor < 1:
        raise InvalidReplicationFactor(
            f"Replication factor must be larger than 0, got {replication_factor}."
        )
    if replication_factor > len(nodes):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(nodes)}."
        )
