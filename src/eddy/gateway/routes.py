"""What the gateway needs from the cluster: where topics and groups live (Routes) and a way
to run an op on a node (Forwarder). Both are implemented elsewhere (gossip, the mesh); the
gateway codes against these Protocols."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from eddy.gateway.ops import OpFailed, OpTimeout, OpUnavailable
from eddy.mesh.directory import rendezvous

__all__ = ["Forwarder", "OpFailed", "OpTimeout", "OpUnavailable", "Routes", "TopicRoute",
           "pick_node"]


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Until a metadata service exists, a topic lives entirely on one broker node."""

    node_id: int
    partitions: int
    #: False while the owning node is dead: listed, with no leader, never created again
    available: bool = True


class Routes(Protocol):
    def topic(self, name: str) -> TopicRoute | None: ...

    def topics(self) -> dict[str, TopicRoute]: ...

    def group_owner(self, group_id: str) -> int | None:
        """The node coordinating the group; None when no broker node is alive."""
        ...

    def broker_nodes(self) -> list[int]:
        """Alive nodes with the broker role."""
        ...

    def note_topic(self, name: str, route: TopicRoute) -> None:
        """A topic was created (or grew partitions) through this gateway, before gossip
        tells."""
        ...

    def forget_topic(self, name: str) -> None:
        """A topic was deleted through this gateway: stop routing it at once, though the
        owner's last announcement still lists it."""
        ...


class Forwarder(Protocol):
    async def call(self, node_id: int, op: int, body: bytes, timeout_ms: int) -> bytes:
        """The op's answer payload. Raises OpUnavailable (node unknown or unreachable),
        OpTimeout, or OpFailed(message) (the owner could not run it)."""
        ...


def pick_node(name: str, nodes: list[int]) -> int | None:
    """Rendezvous (highest random weight) hashing of a topic name over broker nodes: the same
    answer on every gateway for the same node set, and removing a node moves only the
    topics it had. None when there is no node."""
    return rendezvous(name, nodes)
