"""The parts a node runs for its roles: a Broker (broker role), the Kafka listener serving
either the broker's handlers or the gateway's (gateway role), the mesh when configured, and
the metadata service (controller.quorum.voters: a voter of the metadata quorum, the
controller when it leads it, and a broker whose logs follow the cluster's metadata).

A gateway that is also a broker runs its own partitions' ops in-process (the forwarder's
local path) and everyone else's over the mesh.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eddy.broker.broker import Broker, load_cluster_id
from eddy.broker.cluster_sync import ReplicaSync
from eddy.broker.server import KafkaServer
from eddy.clock import Clock
from eddy.cluster.replication.manager import ReplicaManager
from eddy.cluster.service import ClusterService
from eddy.config import BrokerConfig
from eddy.gateway.executor import OpExecutor
from eddy.gateway.handlers.table import GATEWAY_HANDLERS, GATEWAY_VERSIONS
from eddy.gateway.mesh_link import DirectoryRoutes, KafkaOpServer, MeshForwarder
from eddy.gateway.node import Gateway
from eddy.groups.raft_store import RaftGroupStore
from eddy.mesh.frames import (
    TAG_AUTHORIZE,
    TAG_CREDENTIALS,
    TAG_KAFKA_OP,
    TAG_KAFKA_OP_AS,
    TAG_REGISTRY,
    TAG_TXN_MARKERS,
)
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.quic.transport import MeshError, MeshTimeout, PeerUnavailable
from eddy.mesh.service import MeshService
from eddy.metadata.endpoints import encode_endpoints
from eddy.node.kafka_listeners import ensure_bootstrap_user, make_servers
from eddy.security.checks import cluster_authorizer
from eddy.security.inter_broker import InterBrokerSecurity, warn_principal
from eddy.security.remote_authorizer import (
    AuthorizationServer,
    LocalDecisions,
    MeshAuthorizationSource,
    RemoteAuthorizer,
)
from eddy.security.remote_credentials import (
    CredentialCache,
    CredentialServer,
    MeshCredentialSource,
)
from eddy.security.sasl import cluster_lookup
from eddy.security.settings import authorizer_enabled
from eddy.security.tls import TlsError
from eddy.telemetry import otel_setup
from eddy.txn.markers import MarkerService
from eddy.txn.raft_store import TxnRaftLog

if TYPE_CHECKING:
    from eddy.observe.admin_http import AdminServer
    from eddy.registry.role import RegistryRole

log = logging.getLogger("eddy")
#: how long a cluster of one waits for its registration and its own topics' import before
#: it says it is ready
ALONE_READY_S = 10.0
#: the longest a stopping broker waits for the controller to move its leaderships
CONTROLLED_SHUTDOWN_S = 5.0
#: a stop's stages that took at least this long are named in its log line
STAGE_SHOWN_S = 0.005


def hosted_by(broker: Broker) -> tuple[dict[str, int], frozenset[str]]:
    """What a broker announces on the mesh: its topics (not the internal ones, which every
    broker has its own of) with partition counts, and the groups it coordinates."""
    topics = {t.name: len(t.partitions) for t in broker.logs.topics.values()
              if not t.is_internal}
    groups = frozenset(g.group_id for g in broker.groups.coordinator.list_groups().groups)
    return topics, groups


@dataclass
class Node:
    config: BrokerConfig
    broker: Broker | None
    server: KafkaServer
    mesh: MeshService | None
    gateway: Gateway | None
    cluster: ClusterService | None = None
    sync: ReplicaSync | None = None
    registry: RegistryRole | None = None
    admin: AdminServer | None = None
    #: the Kafka listeners after the first (``server``, the inter-broker one)
    more_servers: list[KafkaServer] = field(default_factory=list)


async def start_node(config: BrokerConfig, clock: Clock) -> Node:
    otel_setup.start(config.node_id)  # traces, when the OTEL_* environment asks for them
    roles = config.roles
    broker: Broker | None = None
    if "broker" in roles:
        broker = Broker(config, clock)
        broker.load()
        warn_principal(config)  # replication's principal without the rights it needs
    mesh: MeshService | None = None
    if config.mesh_enabled:
        identity = NodeIdentity.load_or_create(config.data_dir)
        mesh = MeshService(config, identity, clock, config.advertised_address)
    gateway: Gateway | None = None
    if "gateway" in roles:
        assert mesh is not None  # a gateway always has the mesh (config.mesh_enabled)
        executor = OpExecutor(broker) if broker is not None else None
        forwarder = MeshForwarder(mesh.rpc, mesh.directory, executor,
                                  timeout_errors=(MeshTimeout, TimeoutError),
                                  unavailable_errors=(PeerUnavailable, MeshError, OSError))
        cluster_id = broker.cluster_id if broker is not None else load_cluster_id(
            config.data_dir, config.node_id)
        gateway = Gateway(config, DirectoryRoutes(mesh.directory), forwarder, cluster_id)
        # its own answers follow the cluster's ACLs (a broker's decisions, cached 1 s)
        gateway.authorizer = (LocalDecisions(broker) if broker is not None else
                              RemoteAuthorizer(MeshAuthorizationSource(mesh.rpc,
                                                                       mesh.directory).ask))
        # a gateway alone asks a broker for its SASL users' credentials (cached 1 s)
        lookup = cluster_lookup(broker) if broker is not None else CredentialCache(
            MeshCredentialSource(mesh.rpc, mesh.directory).fetch)
        servers = make_servers(config, gateway, lookup,
                               handlers=GATEWAY_HANDLERS, versions=GATEWAY_VERSIONS)
    else:
        assert broker is not None
        servers = make_servers(config, broker, cluster_lookup(broker))
    server, more_servers = servers[0], servers[1:]
    cluster: ClusterService | None = None
    sync: ReplicaSync | None = None
    if config.clustered:
        assert mesh is not None  # config.mesh_enabled holds for a cluster
        cluster, sync = _make_cluster(config, clock, mesh, broker)
    for one in servers:
        await one.start()
    if mesh is not None:
        node = gateway if gateway is not None else broker
        assert node is not None
        mesh.set_kafka_address((node.host, node.port))
        ops_server = KafkaOpServer(OpExecutor(broker) if broker is not None else None,
                                   mesh.directory)
        mesh.rpc.handle(TAG_KAFKA_OP, ops_server.handle)
        mesh.rpc.handle(TAG_KAFKA_OP_AS, ops_server.handle_as)  # ops as a gateway's client
        if broker is not None:
            b = broker
            mesh.hosted = lambda: hosted_by(b)
            mesh.rpc.handle(TAG_CREDENTIALS, CredentialServer(broker, mesh.directory).handle)
            # ACL decisions for gateways, which answer some requests themselves
            mesh.rpc.handle(TAG_AUTHORIZE,
                            AuthorizationServer(broker, ops_server.is_gateway).handle)
        await mesh.start()
        # DescribeConfigs then tells tools (`eddy cluster status`) where the mesh is
        config = config.model_copy(update={"mesh_advertised": mesh.mesh_addr})
        for holder in (broker, gateway):
            if holder is not None:
                holder.config = config
    if cluster is not None:
        cluster.config = config
        await _start_cluster(cluster, broker, sync, registered_endpoints(servers))
        if config.sasl_bootstrap_user is not None:
            if set(cluster.voters) == {config.node_id}:  # alone: the user is there when ready
                await ensure_bootstrap_user(config, cluster, ALONE_READY_S)
            else:
                cluster.spawn(ensure_bootstrap_user(config, cluster, ALONE_READY_S),
                              "bootstrap-user")
    if broker is not None:
        broker.start_maintenance()
    registry = await _start_registry(config, broker, gateway, mesh)
    if broker is not None and broker.cluster is not None and mesh is not None:
        from eddy.registry.cluster_route import write_handler  # writes forwarded here

        mesh.rpc.handle(TAG_REGISTRY, write_handler(broker, mesh, registry))
    started = Node(config, broker, server, mesh, gateway, cluster, sync, registry,
                   more_servers=more_servers)
    started.admin = await _start_admin(started)
    return started


async def _start_admin(node: Node) -> AdminServer | None:
    """The HTTP admin listener (admin.listener, on a node with the broker role): /metrics
    and the health checks. A listener set that cannot start stops the node; the default
    one, on a port already taken, is left out with a warning."""
    address = node.config.admin_address
    if address is None or node.broker is None:
        return None
    from eddy.observe.admin_http import AdminServer  # aiohttp, only when the listener runs

    try:
        admin = AdminServer(address[0], address[1], node)
        await admin.start()
    except TlsError:
        await stop_node(node)
        raise
    except OSError as exc:
        if node.config.admin_listener is None:
            _left_out("admin listener", "admin.listener", address, exc)
            return None
        await stop_node(node)
        raise
    except BaseException:
        await stop_node(node)
        raise
    return admin


def _left_out(what: str, setting: str, address: tuple[str, int], exc: OSError) -> None:
    log.warning("%s not started: %s:%d: %s (another node on this host has it? set %s to "
                "HOST:PORT, or to nothing to turn it off)", what, address[0], address[1],
                exc.strerror or exc, setting)


async def _start_registry(config: BrokerConfig, broker: Broker | None,
                          gateway: Gateway | None, mesh: MeshService | None
                          ) -> RegistryRole | None:
    """The schema registry (registry.listener, on a node with the broker role): a Kafka
    client of this node's inter-broker listener, secured (TLS, SASL login) as the nodes
    connect to each other (``InterBrokerSecurity``). A node alone (or alone in its quorum)
    waits until the registry has read _schemas before it says it is ready; on a cluster
    still forming the registry goes on reading in the background. When registry.listener
    is not set and its default port is taken, the node goes on without a registry (a
    warning says so)."""
    address = config.registry_address
    if address is None or broker is None:
        return None
    from eddy.registry.cluster_route import cluster_route
    from eddy.registry.role import start_registry  # aiohttp, only when the registry runs

    served = gateway if gateway is not None else broker
    try:  # a client of the inter-broker listener, logged in as the nodes are
        client_config = InterBrokerSecurity.from_config(config).librdkafka_config()
        registry = await start_registry(address[0], address[1],
                                        f"{served.host}:{served.port}",
                                        route=cluster_route(broker, mesh), broker=broker,
                                        client_config=client_config,
                                        write_timeout_s=config.registry_kafkastore_timeout_ms
                                        / 1000, settings=config)
    except TlsError:
        raise
    except OSError as exc:
        if config.registry_listener is not None:
            raise
        _left_out("schema registry", "registry.listener", address, exc)
        return None
    if len(config.quorum_voters) <= 1 and not await registry.wait_ready(ALONE_READY_S):
        log.warning("schema registry not ready within %.0f s: going on", ALONE_READY_S)
    return registry


def _make_cluster(config: BrokerConfig, clock: Clock, mesh: MeshService,
                  broker: Broker | None) -> tuple[ClusterService, ReplicaSync | None]:
    """The node's cluster service, wired into the broker before it takes a client: from the
    first request on, the broker answers as part of the cluster (never as a node of its
    own), and what needs the controller waits for this broker's registration."""
    cluster_id = broker.cluster_id if broker is not None else load_cluster_id(
        config.data_dir, config.node_id)
    cluster = ClusterService(config, mesh, clock, cluster_id)
    if broker is None:
        return cluster, None
    markers = MarkerService(broker, mesh)  # a leader writes a coordinator's markers
    mesh.rpc.handle(TAG_TXN_MARKERS, markers.handle)
    broker.transactions.markers = markers
    broker.replication = ReplicaManager(broker, cluster)
    # nothing is led or followed until this process registered and the metadata replica
    # caught up with the controller (a restart replays the local, maybe stale, log first)
    sync = ReplicaSync(broker, cluster.state, ready=cluster.caught_up)
    cluster.machine.on_change(sync.schedule)
    cluster.on_registered.append(sync.schedule)
    broker.cluster, broker.led = cluster, set()
    if authorizer_enabled(config):
        broker.authorizer = cluster_authorizer(config, cluster)
    broker.producer_ids.use_blocks_from(cluster.allocate_producer_ids)
    return cluster, sync


def registered_endpoints(servers: list[KafkaServer]) -> str:
    """The Kafka endpoints this node registers: the inter-broker listener's address, and
    each listener's by name when there are several."""
    first = servers[0].node
    return encode_endpoints((first.host, first.port),
                            [(s.listener.name, s.node.host, s.node.port) for s in servers])


async def _start_cluster(cluster: ClusterService, broker: Broker | None,
                         sync: ReplicaSync | None, kafka_addr: str) -> None:
    if broker is None or sync is None:
        await cluster.start("")
        return
    await cluster.start(kafka_addr, hosted=sync.hosted,
                        on_delete=sync.delete_ids)
    if cluster.offsets is not None:  # a voter: it may lead the offsets group
        # the transaction coordinator keeps its state there too, and serves with the groups
        broker.transactions.raft = TxnRaftLog(cluster.offsets)
        store = RaftGroupStore(broker.groups, cluster.offsets, cluster.offsets_machine)
        store.on_activate = broker.transactions.activate
        broker.groups.store = store

        def imported(records: list[tuple[bytes, bytes | None]]) -> None:
            broker.groups.replay_records(records)  # a joining node's groups...
            broker.transactions.absorb(records)  # ...and its transactions

        cluster.on_offsets_imported = imported
    # topics held before joining the cluster become the cluster's (never deleted)
    importing = cluster.spawn(sync.import_local(cluster), "import-local-topics")
    if set(cluster.voters) == {broker.node_id}:
        # a cluster of one needs nobody else: it is registered, has its own topics
        # imported and leads its partitions before the ready line (a client's first
        # request finds them); past the wait the import goes on in the background
        _, waiting = await asyncio.wait({importing}, timeout=ALONE_READY_S)
        if waiting:
            log.warning("not registered and imported within %.0f s: going on",
                        ALONE_READY_S)
        sync.sync()


class _Stages:
    """How long each stage of a node's stop took, for one log line at the end."""

    def __init__(self) -> None:
        self.started = self._last = time.perf_counter()
        self.spent: list[tuple[str, float]] = []

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent.append((stage, now - self._last))
        self._last = now

    def summary(self) -> str:
        total = (self._last - self.started) * 1000
        parts = ", ".join(f"{stage} {s * 1000:.0f}" for stage, s in self.spent
                          if s >= STAGE_SHOWN_S)
        return f"{total:.0f} ms" + (f" ({parts} ms)" if parts else "")


async def stop_node(node: Node) -> None:
    stages = _Stages()
    if node.cluster is not None and node.broker is not None:
        # leaderships move to other in-sync replicas while this node still serves
        await node.cluster.controlled_shutdown(CONTROLLED_SHUTDOWN_S)
        stages.done("controlled shutdown")
    if node.admin is not None:  # scrapes and probes end first
        await node.admin.stop()
        stages.done("admin")
    if node.registry is not None:  # a client of this node: stops before its listener
        await node.registry.stop()
        stages.done("registry")
    for more in node.more_servers:
        await more.stop()
    await node.server.stop()
    stages.done("listeners")
    if node.broker is not None and node.broker.groups.store is not None:
        await node.broker.groups.store.stop()
    if node.broker is not None:
        await node.broker.transactions.stop()
    stages.done("coordinators")
    if node.sync is not None:
        node.sync.stop()
    if node.broker is not None and node.broker.replication is not None:
        await node.broker.replication.stop()
        stages.done("replication")
    if node.cluster is not None:
        await node.cluster.stop()
        stages.done("raft")
    if node.mesh is not None:
        await node.mesh.stop()
        stages.done("mesh")
    if node.broker is not None:
        await node.broker.stop()
        stages.done("logs")
    await otel_setup.stop()  # the spans of the shutdown too
    stages.done("traces")
    log.info("node stopped in %s", stages.summary())
