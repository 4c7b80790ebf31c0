"""Where a clustered node's registry writes go: the node leading ``_schemas`` partition 0 in
the cluster's metadata (``ClusterRoute``, the ``WriteRoute`` of ``forwarding``), asked over
the mesh under ``TAG_REGISTRY``; and the handler a clustered broker registers for that tag,
its registry's or, when it runs none, one that says so."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from eddy.config_parse import parse_host_port
from eddy.mesh.frames import TAG_REGISTRY
from eddy.registry.forwarding import (
    BROKERS_WAIT_S,
    CALL_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    SCHEMAS_TOPIC,
    SETTLE_S,
    LeaderUnreachable,
    WriteHandler,
    forwarding_error,
    unknown_leader,
)

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.mesh.rpc import TagHandler
    from eddy.mesh.service import MeshService
    from eddy.registry.role import RegistryRole

log = logging.getLogger("eddy.registry")


class ClusterRoute:
    """Writes on a cluster: the leader of ``_schemas`` partition 0 in the metadata, asked
    over the mesh."""

    def __init__(self, broker: Broker, mesh: MeshService) -> None:
        assert broker.cluster is not None
        self.cluster = broker.cluster
        self.broker = broker
        self.mesh = mesh
        #: the leader epoch this node last settled in, and the offset it waited for
        self._settled: tuple[int, int] | None = None

    @property
    def me(self) -> int:
        return self.cluster.node_id

    def leader(self) -> int | None:
        state = self.cluster.state
        part = state.partition(SCHEMAS_TOPIC, 0)
        if part is None or part.leader < 0:
            return None
        if part.leader != self.me and not state.is_live(part.leader):
            return None  # fenced: the controller moves its leaderships
        return part.leader

    def is_member(self, peer: bytes) -> bool:
        return self.cluster.state.key_owner(peer) is not None

    async def await_brokers(self, timeout_s: float = BROKERS_WAIT_S) -> None:
        """Before the registry reads (and, when missing, creates) ``_schemas``: while the
        topic does not exist, wait up to ``timeout_s`` until as many brokers as it should
        have replicas (3, or fewer voters) are registered. The topic is created with the
        brokers of the moment (as Confluent does): on a cluster still forming it would
        otherwise stay on the first node alone and never fail over."""
        state = self.cluster.state
        wanted = min(3, len(self.cluster.voters))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while state.topic(SCHEMAS_TOPIC) is None and len(state.live_brokers()) < wanted:
            if loop.time() >= deadline:
                log.warning("registry: %d of %d brokers registered after %.0f s: %s may be "
                            "created with fewer replicas", len(state.live_brokers()), wanted,
                            timeout_s, SCHEMAS_TOPIC)
                return
            await asyncio.sleep(0.2)

    async def settle(self) -> None:
        """As a new leader, wait until the local replica's high watermark covers what it
        held when it took over: a record the old leader committed may still be above the
        new leader's high watermark, where the reader (and ``sync``) cannot see it yet."""
        part = self.cluster.state.partition(SCHEMAS_TOPIC, 0)
        plog = self.broker.logs.partition(SCHEMAS_TOPIC, 0)
        if part is None or plog is None:
            return
        loop = asyncio.get_running_loop()
        if self._settled is None or self._settled[0] != part.leader_epoch:
            self._settled = (part.leader_epoch, plog.log_end_offset)
        target = self._settled[1]
        deadline = loop.time() + SETTLE_S
        while plog.high_watermark < target:
            if loop.time() >= deadline:
                raise unknown_leader(f"Unknown leader: {SCHEMAS_TOPIC} has not committed up "
                                     f"to offset {target} on its new leader yet")
            await asyncio.sleep(0.05)

    async def call(self, leader: int, payload: bytes) -> bytes:
        record = self.cluster.state.broker(leader)
        transport = self.mesh.transport
        if record is None or transport is None:
            raise LeaderUnreachable(f"node {leader} is not known on the mesh")
        try:
            key = await transport.connect(parse_host_port(record.mesh_addr, "mesh address"),
                                          record.node_key, timeout_s=CONNECT_TIMEOUT_S)
        except Exception as exc:  # the network, the address, the peer's identity
            raise LeaderUnreachable(str(exc) or type(exc).__name__) from None
        try:
            return await self.mesh.rpc.call(key, TAG_REGISTRY, payload, CALL_TIMEOUT_S)
        except Exception as exc:  # sent: it may have run; the client decides
            raise forwarding_error(f"Error while forwarding the request to the leader (node "
                                   f"{leader}): {exc or type(exc).__name__}") from None


def cluster_route(broker: Broker | None, mesh: MeshService | None) -> ClusterRoute | None:
    """Where a broker's registry writes go on a cluster; None outside one."""
    if broker is None or broker.cluster is None or mesh is None:
        return None
    return ClusterRoute(broker, mesh)


def write_handler(broker: Broker, mesh: MeshService, registry: RegistryRole | None
                  ) -> TagHandler:
    """The ``TAG_REGISTRY`` handler of a clustered broker: its registry's, or, when it runs
    none, one answering 50004 (writes cannot run on this node while it leads _schemas)."""
    handler = registry.write_handler() if registry is not None else None
    if handler is None:
        handler = WriteHandler(ClusterRoute(broker, mesh), None, lambda: False)
    return handler.handle
