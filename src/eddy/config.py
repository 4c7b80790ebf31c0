"""Eddy's one typed config: defaults < config file < EDDY_* env < flags (later wins)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from eddy.log.config import LONG_MAX, TOPIC_CONFIGS, InvalidConfig
from eddy.observe.settings import ADMIN_PORT, ObservabilitySettings
from eddy.security.config_fields import SecuritySettings
from eddy.security.listeners import ListenerSpec, resolve_listeners

ENV_PREFIX = "EDDY_"
#: the usual port of the schema registry (Confluent's), used on the Kafka listener's host
#: unless set (the admin listener's, ADMIN_PORT, is in eddy.observe.settings)
REGISTRY_PORT = 8081


class ConfigError(ValueError):
    """A config problem, worded for a person: which source, which field, what is wrong."""


def parse_host_port(value: str, field: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{field}: expected HOST:PORT, got {value!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


#: the roles a node can have (seed 000's broker, gateway and registry, seed 004's controller:
#: a voter of the metadata quorum); connect is a command (`eddy connect run`), not a role
ROLES = frozenset({"broker", "controller", "gateway", "registry"})


def parse_quorum_voters(value: str) -> dict[int, str]:
    """Kafka's controller.quorum.voters, ``id@host:port,...`` (here the hosts are mesh
    addresses), as node id -> ``host:port``."""
    voters: dict[int, str] = {}
    for item in split_list(value):
        node, sep, addr = item.partition("@")
        if not sep or not node.strip().isdigit() or int(node) <= 0:
            raise ValueError(f"expected ID@HOST:PORT items (ids from 1), got {item!r}")
        parse_host_port(addr.strip(), f"controller.quorum.voters ({node})")
        if int(node) in voters:
            raise ValueError(f"node {int(node)} is named twice")
        voters[int(node)] = addr.strip()
    return voters


def split_list(value: str) -> list[str]:
    """A comma-separated setting as its non-empty, stripped items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_connection_overrides(value: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: 'host:count,host:count' (IPv6 hosts
    in brackets or bare; the count is after the last colon)."""
    out: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected HOST:COUNT items separated by commas, got {item!r}")
        out[host.strip().strip("[]")] = int(count)
    return out


class BrokerConfig(SecuritySettings, ObservabilitySettings):
    """Every setting a user can set. Kafka's dotted names are accepted as aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    node_id: int = Field(1, ge=0, description="this node's id (Kafka's node.id)")
    listen: str = Field("127.0.0.1:9092", description="Kafka listener HOST:PORT")
    advertised: str | None = Field(
        None, description="HOST:PORT clients are told to connect to (default: listen)"
    )
    data_dir: str = Field("./eddy-data", description="where logs and metadata live")
    auto_create_topics_enable: bool = Field(
        True, alias="auto.create.topics.enable", description="create topics on Metadata"
    )
    num_partitions: int = Field(
        1, ge=1, alias="num.partitions", description="partitions of auto-created topics"
    )
    default_replication_factor: int = Field(1, ge=1, alias="default.replication.factor")
    socket_request_max_bytes: int = Field(
        104857600, ge=1024, alias="socket.request.max.bytes",
        description="largest request frame accepted",
    )
    queued_max_request_bytes: int = Field(
        268435456, ge=-1, alias="queued.max.request.bytes",
        description="request bytes all connections together may hold in memory before "
        "reading pauses (-1: no bound, Kafka's default). Eddy bounds it by default so no "
        "client can make it allocate without limit: 256 MiB, room for two requests of "
        "socket.request.max.bytes besides many small ones; must be at least that size",
    )
    max_connections: int = Field(
        2147483647, ge=0, alias="max.connections",
        description="connections the listener accepts; more are closed at once",
    )
    max_connections_per_ip: int = Field(
        2147483647, ge=0, alias="max.connections.per.ip",
        description="connections accepted from one client address; more are closed at once",
    )
    max_connections_per_ip_overrides: str = Field(
        "", alias="max.connections.per.ip.overrides",
        description="per-address limits, e.g. 'hostA:100,127.0.0.1:200'",
    )
    connections_max_idle_ms: int = Field(
        600000, ge=1, alias="connections.max.idle.ms",
        description="close connections with no traffic for this long",
    )
    socket_request_read_timeout_ms: int = Field(
        30000, ge=1, alias="socket.request.read.timeout.ms",
        description="close a connection whose request is still incomplete this long after "
        "its first bytes came (Eddy's; 30 s, as a Java client's request.timeout.ms, after "
        "which the client has given up on the request anyway)",
    )
    log_flush_interval_messages: int = Field(
        LONG_MAX, ge=1, alias="log.flush.interval.messages",
        description="fsync after this many messages (default: leave it to the OS)",
    )
    log_flush_interval_ms: int = Field(
        LONG_MAX, ge=0, alias="log.flush.interval.ms", description="fsync at least this often"
    )
    log_write_caching: bool = Field(
        False, alias="log.write.caching",
        description="acks=all is acknowledged once every in-sync replica has the bytes in "
        "memory, as Kafka does, instead of after each has fsynced them (Eddy's default: an "
        "acknowledged record survives a power cut); topic config write.caching",
    )
    group_commit_window_us: int = Field(
        200, ge=0, le=1_000_000, alias="group.commit.window.us",
        description="an fsync about to start waits this long for more appends to join it "
        "(seed 001's group commit window; 0: at once)",
    )
    group_commit_max_bytes: int = Field(
        4 << 20, ge=0, alias="group.commit.max.bytes",
        description="...unless this many bytes are already waiting for it",
    )
    group_commit_max_writes: int = Field(
        1000, ge=0, alias="group.commit.max.writes",
        description="...or this many records",
    )
    min_insync_replicas: int = Field(
        1, ge=1, alias="min.insync.replicas",
        description="in-sync replicas an acks=all produce needs (topic default)",
    )
    replica_lag_time_max_ms: int = Field(
        10000, ge=1, alias="replica.lag.time.max.ms",
        description="a follower not caught up for this long leaves the ISR",
    )
    replica_lag_max_messages: int = Field(
        0, ge=0, alias="replica.lag.max.messages",
        description="a follower this many offsets behind leaves the ISR (0: off, as Kafka "
        "since KIP-16: a burst of produce would make every follower flap out and in)",
    )
    replica_fetch_max_bytes: int = Field(
        1048576, ge=1, alias="replica.fetch.max.bytes",
        description="bytes a follower asks per partition in one fetch",
    )
    replica_fetch_response_max_bytes: int = Field(
        10485760, ge=1, alias="replica.fetch.response.max.bytes",
        description="bytes a follower asks in one fetch over every partition",
    )
    replica_fetch_wait_max_ms: int = Field(
        500, ge=0, alias="replica.fetch.wait.max.ms",
        description="how long a leader holds a follower's fetch that finds nothing new",
    )
    log_segment_bytes: int = Field(1073741824, ge=14, alias="log.segment.bytes")
    log_roll_ms: int = Field(604800000, ge=1, alias="log.roll.ms")
    log_retention_ms: int = Field(604800000, ge=-1, alias="log.retention.ms")
    log_retention_bytes: int = Field(-1, alias="log.retention.bytes")
    log_retention_check_interval_ms: int = Field(
        300000, ge=1, alias="log.retention.check.interval.ms"
    )
    message_max_bytes: int = Field(1048588, ge=0, alias="message.max.bytes")
    log_index_interval_bytes: int = Field(4096, ge=0, alias="log.index.interval.bytes")
    log_message_timestamp_type: str = Field("CreateTime", alias="log.message.timestamp.type")
    log_cleanup_policy: str = Field("delete", alias="log.cleanup.policy")
    offsets_topic_num_partitions: int = Field(
        50, ge=1, alias="offsets.topic.num.partitions",
        description="partitions of __consumer_offsets (fixed once created)",
    )
    offsets_topic_segment_bytes: int = Field(
        104857600, ge=1024, alias="offsets.topic.segment.bytes"
    )
    offsets_retention_minutes: int = Field(10080, ge=1, alias="offsets.retention.minutes")
    offset_metadata_max_bytes: int = Field(4096, ge=0, alias="offset.metadata.max.bytes")
    group_initial_rebalance_delay_ms: int = Field(
        0, ge=0, alias="group.initial.rebalance.delay.ms",
        description="wait this long for more members before a new group's first rebalance",
    )
    group_min_session_timeout_ms: int = Field(6000, ge=1, alias="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(
        1800000, ge=1, alias="group.max.session.timeout.ms"
    )
    producer_id_expiration_ms: int = Field(
        86400000, ge=1, alias="producer.id.expiration.ms",
        description="forget an idempotent producer idle this long",
    )
    transaction_max_timeout_ms: int = Field(
        900000, ge=1, alias="transaction.max.timeout.ms",
        description="the largest transaction.timeout.ms a producer may ask for",
    )
    transactional_id_expiration_ms: int = Field(
        604800000, ge=1, alias="transactional.id.expiration.ms"
    )
    transaction_state_num_partitions: int = Field(
        50, ge=1, alias="transaction.state.log.num.partitions"
    )
    log_cleaner_backoff_ms: int = Field(
        15000, ge=1, alias="log.cleaner.backoff.ms",
        description="how often compacted topics are checked for cleaning",
    )
    sendfile: bool = Field(True, description="send fetched log ranges with os.sendfile")
    storage_max_open_files: int = Field(
        0, ge=0, alias="storage.max.open.files",
        description="Eddy's own: segment and index files kept open at once, the least "
        "recently used closed beyond it (0: half the open-files limit, RLIMIT_NOFILE)",
    )
    process_roles: str | None = Field(
        None, alias="process.roles",
        description="comma-separated roles: broker (holds partitions and groups), controller "
        "(a voter of the metadata quorum), gateway (holds nothing: clients bootstrap to it and "
        "it forwards every operation to the owning node over the mesh; with broker too, "
        "local operations run in-process), registry (the schema registry's REST API on "
        "registry.listener; needs broker on the same node; implied when registry.listener "
        "is set). Unset: broker,controller,registry (a cluster of one, or a voter of "
        "controller.quorum.voters), except broker,registry for a node named in no voter "
        "list or one on a mesh without voters (mesh.listener, mesh.seeds, mDNS); "
        "process.roles=broker alone with no voters is a node outside any cluster",
    )
    broker_rack: str | None = Field(None, alias="broker.rack", description="rack of this node")
    mesh_listener: str | None = Field(
        None, alias="mesh.listener",
        description="HOST:PORT (UDP) of the node mesh (QUIC); unset: no mesh unless "
        "mesh.seeds is set or the node is a gateway, then 127.0.0.1:0",
    )
    mesh_advertised: str | None = Field(
        None, alias="mesh.advertised.listener",
        description="HOST:PORT other nodes dial for the mesh (default: mesh.listener)",
    )
    mesh_seeds: str = Field(
        "", alias="mesh.seeds", description="HOST:PORT list of mesh addresses to join through"
    )
    mesh_allowed_nodes: str = Field(
        "", alias="mesh.allowed.nodes",
        description="comma-separated NodeIds (hex or base32) allowed on the mesh; empty: any "
        "(unless mesh.cluster.public.key is set)",
    )
    mesh_cluster_public_key: str = Field(
        "", alias="mesh.cluster.public.key",
        description="the cluster's Ed25519 public key (64 hex digits, base64, or a PEM file "
        "path; `eddy mesh keygen`): when set, a peer is admitted if it is on "
        "mesh.allowed.nodes or presents a membership token for its NodeId signed by this key "
        "(`eddy mesh sign`) and not expired; empty: the allow-list alone decides",
    )
    mesh_membership_file: str | None = Field(
        None, alias="mesh.membership.file",
        description="this node's membership token (`eddy mesh sign`), shown to peers in its "
        "mesh certificate; default <data_dir>/node.membership when that file exists",
    )
    mesh_mdns_enable: bool = Field(
        False, alias="mesh.mdns.enable",
        description="find peers on the LAN by mDNS (zeroconf) besides mesh.seeds",
    )
    mesh_mdns_cluster: str = Field(
        "", alias="mesh.mdns.cluster",
        description="with mDNS, join only nodes that announce the same name",
    )
    mesh_ping_interval_ms: int = Field(
        500, ge=10, alias="mesh.ping.interval.ms",
        description="how often every known peer is PINGed (seed 002)",
    )
    mesh_ping_max_unacked: int = Field(
        4, ge=1, alias="mesh.ping.max.unacked",
        description="a peer that leaves this many PINGs in a row unanswered is dead (seed "
        "002's MAX_PING_UNACKED): with the interval, 2 s by default",
    )
    mesh_request_timeout_ms: int = Field(
        30000, ge=1, alias="mesh.request.timeout.ms",
        description="default timeout of a forwarded operation over the mesh",
    )
    registry_listener: str | None = Field(
        None, alias="registry.listener",
        description="HOST:PORT of the schema registry's HTTP API (Confluent's REST API, "
        "state in the topic _schemas), served by a node with the registry role; unset: the "
        f"Kafka listener's host, port {REGISTRY_PORT} (left out with a warning when that "
        "port is taken, as by another node on the same host); port 0: any free port; "
        "empty: no registry",
    )
    registry_kafkastore_timeout_ms: int = Field(
        10000, ge=1, le=3_600_000, alias="registry.kafkastore.timeout.ms",
        description="how long a registry write waits for _schemas to take it (Confluent's "
        "kafkastore.timeout.ms); then the request answers 50002 (operation timed out)",
    )
    registry_ssl_enabled: bool = Field(
        False, alias="registry.ssl.enabled",
        description="the schema registry serves HTTPS with the Kafka listeners' PEM material "
        "(ssl.keystore.*; ssl.client.auth and ssl.truststore.* for client certificates)",
    )
    registry_authentication_method: str = Field(
        "NONE", alias="registry.authentication.method",
        description="NONE or BASIC (Confluent's authentication.method): HTTP basic auth "
        "against the users' SCRAM credentials in the cluster metadata; the principal is "
        "User:<name>, checked against the ACLs when authorizer.class.name is set",
    )
    controller_quorum_voters: str = Field(
        "", alias="controller.quorum.voters",
        description="ID@HOST:PORT list of the metadata quorum's voters (HOST:PORT: their mesh "
        "addresses); set: the node is part of a cluster whose metadata lives in Raft",
    )
    broker_heartbeat_interval_ms: int = Field(
        250, ge=10, alias="broker.heartbeat.interval.ms",
        description="how often a broker heartbeats to the controller (seed 004's 250 ms)",
    )
    broker_session_timeout_ms: int = Field(
        1500, ge=50, alias="broker.session.timeout.ms",
        description="a broker silent this long is fenced and loses its leaderships (6 "
        "heartbeats: failover within 2 s, see cluster/controller/config.py)",
    )
    broker_liveness_probe_ms: int = Field(
        300, ge=0, alias="broker.liveness.probe.ms",
        description="a broker this long without a heartbeat has its Kafka listener probed by "
        "the controller; a refused connection (the process is gone) fences it at once "
        "instead of after broker.session.timeout.ms; 0: off",
    )

    @field_validator("listen", "advertised")
    @classmethod
    def _host_port(cls, v: str | None, info: Any) -> str | None:
        if v is not None:
            parse_host_port(v, info.field_name)
        return v

    @field_validator("mesh_listener", "mesh_advertised")
    @classmethod
    def _mesh_host_port(cls, v: str | None, info: Any) -> str | None:
        if v is not None:
            parse_host_port(v, info.field_name)
        return v

    @field_validator("registry_listener", "admin_listener")
    @classmethod
    def _http_host_port(cls, v: str | None, info: Any) -> str | None:
        if v is None:
            return None
        if v.strip():
            parse_host_port(v.strip(), str(info.field_name).replace("_", "."))
        return v.strip()

    @field_validator("mesh_seeds")
    @classmethod
    def _seeds(cls, v: str) -> str:
        for item in split_list(v):
            parse_host_port(item, "mesh.seeds")
        return v

    @field_validator("mesh_allowed_nodes")
    @classmethod
    def _allowed(cls, v: str) -> str:
        from eddy.mesh.identity import IdentityError, parse_node_id

        for item in split_list(v):
            try:
                parse_node_id(item)
            except IdentityError as exc:
                raise ValueError(f"{item!r}: {exc}") from None
        return v

    @field_validator("mesh_cluster_public_key")
    @classmethod
    def _cluster_key(cls, v: str) -> str:
        from eddy.mesh.membership import MembershipError, parse_public_key

        if v.strip():
            try:
                parse_public_key(v)
            except MembershipError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("mesh_membership_file")
    @classmethod
    def _membership_file(cls, v: str | None) -> str | None:
        from eddy.mesh.membership import MembershipError, read_token_file

        if v is not None and v.strip():
            try:
                read_token_file(Path(v.strip()))
            except MembershipError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("process_roles")
    @classmethod
    def _roles(cls, v: str | None) -> str | None:
        if v is None:
            return None  # decided with the voters and the mesh settings (_default_roles)
        roles = split_list(v)
        unknown = sorted(set(roles) - ROLES)
        if unknown or not roles:
            raise ValueError(f"roles must be a comma-separated subset of {sorted(ROLES)}, "
                             f"got {v!r}")
        return ",".join(roles)

    @field_validator("controller_quorum_voters")
    @classmethod
    def _voters(cls, v: str) -> str:
        parse_quorum_voters(v)
        return v

    @model_validator(mode="after")
    def _controller_role_matches_voters(self) -> BrokerConfig:
        if self.process_roles is None:
            # a validator may settle a frozen model's field before anyone reads it
            object.__setattr__(self, "process_roles", self._default_roles())
        voters = self.quorum_voters
        if "controller" in self.roles and self.node_id not in voters:  # named, not it
            raise ValueError(f"process.roles has controller but node.id {self.node_id} is not "
                             f"in controller.quorum.voters ({self.controller_quorum_voters!r})")
        if self.node_id in voters and "controller" not in self.roles:
            raise ValueError(f"node.id {self.node_id} is in controller.quorum.voters: add "
                             "controller to process.roles")
        if voters and "gateway" in self.roles:
            raise ValueError("process.roles gateway with controller.quorum.voters: gateways "
                             "route by the mesh's announcements and do not follow a "
                             "cluster's metadata yet; clients can bootstrap to any broker")
        if not self.roles & {"broker", "gateway"}:
            raise ValueError("process.roles needs broker or gateway (every node serves Kafka "
                             "clients; a controller-only node is not built yet)")
        if self.registry_listener and "registry" not in self.roles and "broker" in self.roles:
            # a registry.listener set asks for the registry: the role follows
            object.__setattr__(self, "process_roles", f"{self.process_roles},registry")
        if "registry" in self.roles and "broker" not in self.roles:
            raise ValueError("process.roles registry needs broker on the same node (the "
                             "registry reads and writes _schemas through its broker)")
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms:
            raise ValueError("broker.session.timeout.ms must be above "
                             "broker.heartbeat.interval.ms")
        return self

    @field_validator("max_connections_per_ip_overrides")
    @classmethod
    def _overrides(cls, v: str) -> str:
        parse_connection_overrides(v)
        return v

    @model_validator(mode="after")
    def _security_settings(self) -> BrokerConfig:
        from eddy.security.settings import check_security

        check_security(self)  # ValueErrors name the setting
        return self

    @model_validator(mode="after")
    def _request_pool_holds_a_request(self) -> BrokerConfig:
        queued, largest = self.queued_max_request_bytes, self.socket_request_max_bytes
        if queued != -1 and queued < largest:
            raise ValueError(
                f"queued.max.request.bytes={queued} must be -1 or at least "
                f"socket.request.max.bytes={largest}, or a request of that size never fits"
            )
        return self

    @model_validator(mode="after")
    def _topic_defaults_valid(self) -> BrokerConfig:
        self.topic_defaults()  # raises InvalidConfig (a ValueError) naming the setting
        return self

    @property
    def connection_overrides(self) -> dict[str, int]:
        """max.connections.per.ip.overrides as host -> limit."""
        return parse_connection_overrides(self.max_connections_per_ip_overrides)

    def _default_roles(self) -> str:
        """process.roles when unset: every role a lone node needs (a cluster of one), a
        voter's if this node is one, a broker's on a cluster or mesh that others run."""
        named = parse_quorum_voters(self.controller_quorum_voters)
        if named:
            return "broker,controller,registry" if self.node_id in named else "broker,registry"
        if self.mesh_listener or self.mesh_seeds or self.mesh_mdns_enable:
            return "broker,registry"  # a mesh of nodes of their own (a gateway routes)
        return "broker,controller,registry"

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(split_list(self.process_roles or self._default_roles()))

    @property
    def quorum_voters(self) -> dict[int, str]:
        """controller.quorum.voters as node id -> mesh HOST:PORT (empty: no cluster); the
        controller role with no voters named is a cluster of one, this node."""
        voters = parse_quorum_voters(self.controller_quorum_voters)
        if not voters and "controller" in self.roles:
            return {self.node_id: self.mesh_listener or "127.0.0.1:0"}
        return voters

    @property
    def clustered(self) -> bool:
        """Metadata in Raft (a quorum of voters, maybe this node alone)."""
        return bool(self.quorum_voters)

    @property
    def mesh_enabled(self) -> bool:
        return bool(self.mesh_listener or self.mesh_seeds or "gateway" in self.roles
                    or self.clustered)

    @property
    def mesh_address(self) -> tuple[str, int]:
        """Where the mesh listens: mesh.listener, else a voter's address in
        controller.quorum.voters, else any free port on loopback."""
        own = self.quorum_voters.get(self.node_id) if self.clustered else None
        return parse_host_port(self.mesh_listener or own or "127.0.0.1:0", "mesh.listener")

    @property
    def mesh_seed_addresses(self) -> list[tuple[str, int]]:
        """mesh.seeds, then the other voters of controller.quorum.voters (a cluster's nodes
        find each other through its quorum without a seed list)."""
        seeds = [parse_host_port(s, "mesh.seeds") for s in split_list(self.mesh_seeds)]
        for node, addr in sorted(self.quorum_voters.items()):
            voter = parse_host_port(addr, "controller.quorum.voters")
            if node != self.node_id and voter not in seeds:
                seeds.append(voter)
        return seeds

    @property
    def registry_address(self) -> tuple[str, int] | None:
        """Where the schema registry listens (None: not served)."""
        if "registry" not in self.roles:
            return None
        return self._http_address(self.registry_listener, REGISTRY_PORT, "registry.listener")

    @property
    def admin_address(self) -> tuple[str, int] | None:
        """Where the HTTP admin listener listens (None: off)."""
        return self._http_address(self.admin_listener, ADMIN_PORT, "admin.listener")

    def _http_address(self, value: str | None, default_port: int, field: str
                      ) -> tuple[str, int] | None:
        if value is None:  # unset: next to the Kafka listener, on the usual port
            return self.listen_address[0], default_port
        return parse_host_port(value, field) if value else None

    @property
    def listen_address(self) -> tuple[str, int]:
        """Where the (inter-broker) Kafka listener binds."""
        if self.listeners is not None:
            first = self.listener_specs[0]
            return first.host or "0.0.0.0", first.port
        return parse_host_port(self.listen, "listen")

    @property
    def advertised_address(self) -> tuple[str, int]:
        """What the (inter-broker) listener tells clients and other nodes."""
        if self.listeners is not None:
            first = self.listener_specs[0]
            return first.advertised_host, (first.advertised_port if first.advertised_port
                                           is not None else first.port)
        if self.advertised:
            return parse_host_port(self.advertised, "advertised")
        host, port = self.listen_address
        return ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host), port

    @property
    def listener_specs(self) -> list[ListenerSpec]:
        """The Kafka listeners, the inter-broker one first (unset listeners: one
        PLAINTEXT listener on listen, telling clients advertised)."""
        if self.listeners is None:
            host, port = parse_host_port(self.listen, "listen")
            adv_host, adv_port = self.advertised_address
            fixed = self.advertised is not None or port != 0
            return [ListenerSpec("PLAINTEXT", host, port, "PLAINTEXT", adv_host,
                                 adv_port if fixed else None)]
        return resolve_listeners(self.listeners, self.advertised_listeners,
                                 self.listener_security_protocol_map,
                                 self.inter_broker_listener_name)

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for topic configs, under the topic configs' names."""
        out: dict[str, str] = {}
        for topic_name, field in TOPIC_DEFAULT_FIELDS.items():
            value = getattr(self, field)
            raw = str(value).lower() if isinstance(value, bool) else str(value)
            try:
                TOPIC_CONFIGS[topic_name].parse(raw)
            except InvalidConfig as exc:
                alias = type(self).model_fields[field].alias or field
                raise InvalidConfig(f"{alias}: {exc}") from None
            out[topic_name] = raw
        return out


#: topic config name -> the BrokerConfig field holding its broker-wide default
TOPIC_DEFAULT_FIELDS: dict[str, str] = {
    "flush.messages": "log_flush_interval_messages",
    "flush.ms": "log_flush_interval_ms",
    "segment.bytes": "log_segment_bytes",
    "segment.ms": "log_roll_ms",
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "max.message.bytes": "message_max_bytes",
    "index.interval.bytes": "log_index_interval_bytes",
    "message.timestamp.type": "log_message_timestamp_type",
    "cleanup.policy": "log_cleanup_policy",
    "write.caching": "log_write_caching",
    "min.insync.replicas": "min_insync_replicas",
}


def kafka_name(field: str) -> str:
    """The name a Kafka user knows a broker setting by (its alias, else dotted)."""
    alias = BrokerConfig.model_fields[field].alias
    return alias or field.replace("_", ".")


def _field_names() -> dict[str, str]:
    """Every accepted spelling (snake, dotted alias, dashed) -> field name."""
    names: dict[str, str] = {}
    for name, f in BrokerConfig.model_fields.items():
        names[name] = name
        names[name.replace("_", "-")] = name
        names[name.replace("_", ".")] = name
        if f.alias:
            names[f.alias] = name
    return names


def _normalise(source: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    names = _field_names()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        field = names.get(str(key).lower())
        if field is None:
            raise ConfigError(f"{source}: unknown setting {key!r}")
        out[field] = value
    return out


def load_config(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> BrokerConfig:
    """Merge the layers and validate once; errors name the source and the field."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if config_file:
        path = Path(config_file)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {config_file} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{config_file}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{config_file}: expected a mapping of settings")
        layers.append((config_file, _normalise(config_file, data)))
    env = os.environ if env is None else env
    env_values = {
        k[len(ENV_PREFIX):].lower(): v
        for k, v in env.items()
        if k.startswith(ENV_PREFIX) and k not in ("EDDY_BOOTSTRAP",)
    }
    if env_values:
        layers.append(("environment (EDDY_*)", _normalise("environment (EDDY_*)", env_values)))
    if overrides:
        layers.append(("command line", _normalise("command line", overrides)))
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        merged.update(values)
        origin.update(dict.fromkeys(values, source))
    try:
        return BrokerConfig(**merged)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if err["loc"]:
                field = str(err["loc"][0])
                info = BrokerConfig.model_fields.get(field)
                name = info.alias if info is not None and info.alias else field
                problems.append(f"{origin.get(field, 'config')}: {name}: {err['msg']}")
            else:
                problems.append(str(err["msg"]).removeprefix("Value error, "))
        raise ConfigError("; ".join(problems)) from None
