"""Who is on the mesh and what each node hosts: the table a gateway routes by (sans-IO).

Filled from three sources: Hello frames (a node's Kafka id, roles, addresses, rack), the
gossip layer's liveness view (alive / suspect / dead), and routing-table updates each broker
node broadcasts (seed 000's "routing-table updates": the topics and groups it hosts). Until a
metadata service exists this is how a gateway knows where to forward.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace

log = logging.getLogger(__name__)

ALIVE, SUSPECT, DEAD = "alive", "suspect", "dead"
#: nodes remembered at most (announcements of further ones are ignored until dead ones go)
MAX_MEMBERS = 1024
#: topics deleted through this node remembered at most (the oldest is forgotten first)
MAX_DELETED = 4096


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a node says about itself in its Hello."""

    key: bytes
    kafka_node_id: int
    roles: tuple[str, ...]
    mesh_addr: str
    kafka_addr: str
    rack: str | None
    version: str


@dataclass(slots=True)
class Member:
    info: NodeInfo
    state: str = ALIVE
    last_seen_ms: int = 0
    rtt_ms: float | None = None
    #: routing table: topic -> partition count, hosted groups, and the update's version
    topics: dict[str, int] = field(default_factory=dict)
    groups: frozenset[str] = frozenset()
    routes_version: int = -1


@dataclass(frozen=True, slots=True)
class Route:
    """Where a topic lives before replication: every partition on one node. A topic of a
    dead node stays where it is, unavailable (as Kafka lists a topic whose leader is down),
    and is never made again elsewhere under the same name."""

    node_id: int
    partitions: int
    available: bool = True


def rendezvous(name: str, nodes: list[int]) -> int | None:
    """Highest-random-weight choice of a node for a name: stable while the node set is, and
    moving only the names of a node that leaves."""
    best: tuple[bytes, int] | None = None
    for node in nodes:
        weight = hashlib.blake2b(f"{node}\0{name}".encode(), digest_size=8).digest()
        if best is None or weight > best[0]:
            best = (weight, node)
    return None if best is None else best[1]


class Directory:
    """The members this node knows, keyed by NodeId (their Ed25519 public key)."""

    def __init__(self, local: NodeInfo) -> None:
        self.local = local
        self.members: dict[bytes, Member] = {local.key: Member(local)}
        #: topics created through this node, known before the owner's update arrives
        self._noted: dict[str, Route] = {}
        #: topics deleted through this node -> the node that held them: hidden until that
        #: node announces a table without them (its older tables still list them)
        self._deleted: dict[str, int] = {}

    # ---- membership ---------------------------------------------------------------------

    def hello(self, info: NodeInfo, now_ms: int) -> bool:
        """Record a node's Hello; False (and nothing recorded) if another live key already
        claims its Kafka node id: two nodes with one node.id would split every route."""
        for key, m in self.members.items():
            if (key != info.key and m.info.kafka_node_id == info.kafka_node_id
                    and m.state != DEAD):
                log.warning("node %s claims node.id %d, already used by %s: ignored",
                            info.key.hex()[:12], info.kafka_node_id, key.hex()[:12])
                return False
        member = self.members.get(info.key)
        if member is None:
            if len(self.members) >= MAX_MEMBERS and not self._forget_one_dead():
                log.warning("%d nodes known already: ignoring node %s", MAX_MEMBERS,
                            info.key.hex()[:12])
                return False
            self.members[info.key] = Member(info, last_seen_ms=now_ms)
        else:
            member.info, member.state, member.last_seen_ms = info, ALIVE, now_ms
        return True

    def _forget_one_dead(self) -> bool:
        dead = [(m.last_seen_ms, k) for k, m in self.members.items() if m.state == DEAD]
        if not dead:
            return False
        del self.members[min(dead)[1]]
        return True

    def set_state(self, key: bytes, state: str, now_ms: int | None = None) -> None:
        member = self.members.get(key)
        if member is None or key == self.local.key:
            return
        member.state = state
        if now_ms is not None and state == ALIVE:
            member.last_seen_ms = now_ms

    def seen(self, key: bytes, now_ms: int, rtt_ms: float | None = None) -> None:
        member = self.members.get(key)
        if member is not None:
            member.last_seen_ms = now_ms
            if rtt_ms is not None:
                member.rtt_ms = rtt_ms

    def key_of(self, kafka_node_id: int) -> bytes | None:
        for key, m in self.members.items():
            if m.info.kafka_node_id == kafka_node_id and m.state != DEAD:
                return key
        return None

    def alive(self) -> list[Member]:
        return [m for m in self.members.values() if m.state != DEAD]

    # ---- routing tables -----------------------------------------------------------------

    def routes_update(self, key: bytes, version: int, topics: dict[str, int],
                      groups: frozenset[str]) -> bool:
        """Apply a node's routing table if newer than the one held; True if applied."""
        member = self.members.get(key)
        if member is None or version <= member.routes_version:
            return False
        member.topics, member.groups, member.routes_version = topics, groups, version
        for name in topics:
            self._noted.pop(name, None)
        node = member.info.kafka_node_id
        for name in [n for n, o in self._deleted.items() if o == node and n not in topics]:
            del self._deleted[name]
        return True

    def broker_nodes(self) -> list[int]:
        return sorted(m.info.kafka_node_id for m in self.alive() if "broker" in m.info.roles)

    def topics(self) -> dict[str, Route]:
        """Every topic a broker announced, on live nodes and dead ones. A name announced by
        two nodes (created on each directly) routes to the lower node id, deterministically
        on every gateway whatever it thinks of their liveness."""
        out: dict[str, Route] = dict(self._noted)
        for m in sorted(self.members.values(), key=lambda m: m.info.kafka_node_id,
                        reverse=True):
            if "broker" not in m.info.roles:
                continue
            available = m.state != DEAD
            for name, partitions in m.topics.items():
                if self._deleted.get(name) != m.info.kafka_node_id:
                    out[name] = Route(m.info.kafka_node_id, partitions, available)
        out.update(self._noted)  # newer than any announcement still holding the name
        return out

    def topic(self, name: str) -> Route | None:
        return self.topics().get(name)

    def note_topic(self, name: str, route: Route) -> None:
        self._noted[name] = route
        self._deleted.pop(name, None)

    def forget_topic(self, name: str) -> None:
        """The topic was deleted through this node: not routed any more, even though its
        node's last announcement lists it, until that node announces a table without it."""
        route = self.topic(name)
        self._noted.pop(name, None)
        self._deleted.pop(name, None)
        if route is None:
            return
        self._deleted[name] = route.node_id
        while len(self._deleted) > MAX_DELETED:
            del self._deleted[next(iter(self._deleted))]

    def group_owner(self, group_id: str) -> int | None:
        """The node that announces the group (alive or not: a group stays with its offsets
        on its node), else the rendezvous choice among live brokers."""
        owners = sorted(m.info.kafka_node_id for m in self.members.values()
                        if "broker" in m.info.roles and group_id in m.groups)
        if owners:
            return owners[0]
        return rendezvous(group_id, self.broker_nodes())

    def replace_local(self, **changes: object) -> None:
        self.local = replace(self.local, **changes)  # type: ignore[arg-type]
        self.members[self.local.key].info = self.local
